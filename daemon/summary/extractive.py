"""A cheap extractive selection: the document's most central sentences, up to a budget, in order.

No model: each sentence (:func:`~daemon.summary.sentences.split_sentences`) is a TF-IDF vector of its
content words (:func:`~daemon.summary.evidence.content_words`: folded, light stems, small words
left out), and its centrality is its LexRank score (Erkan and Radev, 2004, the continuous variant):
the stationary distribution of a random walk over the sentences whose steps follow their cosine
similarity, with a damping of :data:`DAMPING`. A sentence similar to many others (the document's
recurring subject) ranks high; a one-off detail ranks low.

The walk never builds the sentence-by-sentence matrix: one step is two products with the sparse
TF-IDF matrix (``S p = X (Xᵀ p)``), so time and memory grow with the number of words, not with the
square of the number of sentences (a 5 MB text has some 50,000 sentences).

:func:`select_sentences` takes sentences by rank while they fit the budget (``cost`` of each, e.g. its
tokens), skipping exact repeats (licences repeat their boilerplate), and returns them in document order,
for one summary request of the selection.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Final

import numpy as np

from daemon.summary.evidence import content_words
from daemon.summary.sentences import Sentence, split_sentences

DAMPING: Final = 0.15
"""The walk's chance of jumping to any sentence at each step (LexRank's d)."""
MIN_CONTENT_WORDS: Final = 4
"""A sentence of fewer content words is taken only after every longer one (it rarely fits then)."""
_ITERATIONS: Final = 100
_TOLERANCE: Final = 1e-8


def centrality(sentences: Sequence[str]) -> list[float]:
    """The LexRank score of each of ``sentences`` (they sum to 1; a sentence without content words
    gets only the jump's share)."""
    count = len(sentences)
    if count == 0:
        return []
    rows, cols, values = _tfidf(sentences)
    if not len(values):
        return [1.0 / count] * count
    vocabulary = int(cols.max()) + 1

    self_similarity = _norms(rows, values, count)

    def similarity(vector: np.ndarray) -> np.ndarray:  # (X Xᵀ - I) v: cosine, without self-loops
        projected = np.bincount(cols, weights=values * vector[rows], minlength=vocabulary)
        walked: np.ndarray = np.bincount(rows, weights=values * projected[cols], minlength=count)
        result: np.ndarray = walked - vector * self_similarity
        return result

    degree = similarity(np.ones(count))
    has_edges = degree > 1e-12
    scores = np.full(count, 1.0 / count)
    for _ in range(_ITERATIONS):
        spread = np.where(has_edges, scores / np.where(has_edges, degree, 1.0), 0.0)
        walked = similarity(spread)
        # A sentence with no neighbour hands its share to everyone, as a jump would.
        stranded = scores[~has_edges].sum()
        updated = DAMPING / count + (1 - DAMPING) * (walked + stranded / count)
        if np.abs(updated - scores).sum() < _TOLERANCE:
            scores = updated
            break
        scores = updated
    return [float(score) for score in scores / scores.sum()]


def _norms(rows: np.ndarray, values: np.ndarray, count: int) -> np.ndarray:
    """Each row's squared norm (1 for rows with content, 0 for empty ones)."""
    return np.bincount(rows, weights=values * values, minlength=count)


def _tfidf(sentences: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The L2-normalised TF-IDF matrix of ``sentences`` in coordinates: rows, columns, values."""
    bags = [_counts(content_words(sentence)) for sentence in sentences]
    vocabulary: dict[str, int] = {}
    frequency: dict[str, int] = {}
    for bag in bags:
        for word in bag:
            frequency[word] = frequency.get(word, 0) + 1
            vocabulary.setdefault(word, len(vocabulary))
    count = len(sentences)
    rows: list[int] = []
    cols: list[int] = []
    values: list[float] = []
    for row, bag in enumerate(bags):
        weights = {word: tf * math.log(1 + count / frequency[word]) for word, tf in bag.items()}
        norm = math.sqrt(sum(weight * weight for weight in weights.values()))
        for word, weight in weights.items():
            rows.append(row)
            cols.append(vocabulary[word])
            values.append(weight / norm)
    return np.array(rows, dtype=np.int64), np.array(cols, dtype=np.int64), np.array(values, dtype=np.float64)


def _counts(words: list[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for word in words:
        counts[word] = counts.get(word, 0) + 1
    return counts


def select_sentences(
    sentences: Sequence[Sentence], cost: Callable[[str], int], budget: int
) -> list[Sentence]:
    """The most central of ``sentences`` whose ``cost`` adds up to at most ``budget``, in document
    order (a sentence that does not fit is skipped for a smaller one further down the ranking; an exact
    repeat of a chosen one is skipped; sentences of fewer than :data:`MIN_CONTENT_WORDS` content words
    come last)."""
    scores = centrality([sentence.text for sentence in sentences])
    # Headings and fragments ("Definitions.") are central by their few shared words, and say little.
    short = [len(content_words(sentence.text)) < MIN_CONTENT_WORDS for sentence in sentences]
    ranked = sorted(range(len(sentences)), key=lambda index: (short[index], -scores[index], index))
    chosen: list[int] = []
    seen: set[str] = set()
    spent = 0
    for index in ranked:
        text = sentences[index].text
        key = " ".join(text.lower().split())
        if key in seen:
            continue
        price = cost(text)
        if spent + price > budget:
            continue
        chosen.append(index)
        seen.add(key)
        spent += price
    return [sentences[index] for index in sorted(chosen)]


def extract(text: str, cost: Callable[[str], int], budget: int, *, separator: str = "\n") -> str:
    """``text``'s selection (:func:`select_sentences`) joined by ``separator``: what one request reads.
    ``cost`` should count the separator too when it is not free."""
    return separator.join(sentence.text for sentence in select_sentences(split_sentences(text), cost, budget))
