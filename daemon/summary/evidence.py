"""Evidence: for each sentence of a summary, the parts of the document it draws on.

A pure function of texts (:func:`link_evidence`): the summary's sentences
(:func:`~daemon.summary.sentences.split_sentences`), the document's parts (:class:`Part`: its text, its
character range in the extracted text, pages and section), and, for a staged summary, the tree of its
steps (:class:`Step`: which part summaries fed which combine step).

How a part is scored against a sentence: the sentence's **content words** (not the small words of
:data:`STOPWORDS`; folded, light stems) each weigh their rarity among the parts (BM25's inverse
document frequency), numbers and capitalised words twice; a word in no part is left out (it cannot tell
where the sentence comes from: whether the document holds it is the grounding check's question). A
text's score for the sentence is the share of that weight it contains, from 0 (none of its content) to 1
(all of it); it reads as "this part holds 70% of what the sentence is made of, rare words counting
most".

A part's score is the best of two:

* **direct**: its own text's score;
* **through the steps** (staged summaries): from the final step down, at each step its inputs are
  scored by their text (a part summary's or a combine step's output) and the walk goes on into the
  inputs within :data:`FOLLOW_RATIO` of the best; a part read by a step reached this way (its part
  summary) scores the lowest step score met on the way to it (the chain is as strong as its weakest
  step), whatever words its own text uses.

A sentence's evidence is its parts of score at least :data:`MIN_SCORE` and within :data:`KEEP_RATIO` of
its best part, :data:`MAX_PARTS` at most, best first. A sentence with no evidence (an empty list) says
that nothing in the document carries its words: a reason to read it twice.

This is lexical evidence: it points to where the words are, not to what entails the sentence.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from daemon.document.types import NO_LAYOUT, Layout
from daemon.summary.chunking import SEPARATOR_LEVELS
from daemon.summary.sentences import Sentence, split_sentences

MIN_SCORE: Final = 0.3
KEEP_RATIO: Final = 0.75
MAX_PARTS: Final = 3
FOLLOW_RATIO: Final = 0.5
_EMPHASIS: Final = 2.0  # numbers and capitalised words
PART_CHARS: Final = 2000
"""How long a part of :func:`parts_of_text` is at most, in characters (a page of text is some 3,000)."""

# fmt: off
STOPWORDS: Final = frozenset(
    [
        "a", "an", "the", "this", "that", "these", "those", "there", "their", "they", "them", "its",
        "it", "his", "her", "our", "your", "my", "we", "you", "he", "she", "i", "in", "on", "at",
        "by", "for", "of", "to", "from", "with", "without", "into", "onto", "upon", "over", "under",
        "about", "after", "before", "between", "and", "or", "but", "nor", "so", "yet", "if", "then",
        "than", "as", "when", "while", "where", "which", "who", "whom", "whose", "what", "why",
        "how", "is", "are", "was", "were", "be", "been", "being", "has", "have", "had", "do",
        "does", "did", "will", "would", "shall", "should", "can", "could", "may", "might", "must",
        "not", "no", "all", "any", "each", "every", "some", "such", "both", "either", "neither",
        "other", "another", "one", "also", "only", "just", "even", "however", "thus", "therefore",
        "hence", "moreover", "furthermore", "although", "though", "because", "since", "unless",
        "until", "whereas", "here", "overall", "more", "most", "much", "many", "few", "several",
        "very", "well", "same", "own", "document", "text", "paper", "article", "summary", "section",
        "part",
    ]
)
# fmt: on
_WORD: Final = re.compile(r"\d+(?:[.,]\d+)*|[^\W\d_][\w'’-]*")


@dataclass(frozen=True, slots=True)
class Part:
    """A part of a document: the unit evidence points to."""

    id: int
    """As the result numbers it (``sources[].part``, from 1); the final step's opening, when a staged
    summary reads one, may be a part of its own."""
    text: str
    chars: tuple[int, int]
    """Its character range ``[start, end)`` in the document's extracted text."""
    pages: tuple[int, int] | None = None
    """First and last page (PDF)."""
    section: tuple[str, ...] = ()
    """The heading path in force where it starts, outermost first."""
    source: int | None = None
    """The number a record gives it (``part``), when not its id: a passage of a document read in one
    request is numbered by the ``sources[]`` entry it lies in."""


@dataclass(frozen=True, slots=True)
class Step:
    """A step of a staged summary: what it wrote, and what it read (parts by id, or earlier steps).

    A part summary is ``Step(text=its summary, inputs=(part_id,))``; a combine step reads steps (and,
    for the final step, maybe the opening, as a part); the final step's ``text`` is the summary."""

    text: str
    inputs: tuple[int | Step, ...]


@dataclass(frozen=True, slots=True)
class PartScore:
    """One part a sentence draws on, and how strongly."""

    part: Part
    score: float

    def as_record(self) -> dict[str, Any]:
        """As the result's ``evidence[].parts`` lists it."""
        number = self.part.id if self.part.source is None else self.part.source
        record: dict[str, Any] = {"part": number, "chars": list(self.part.chars)}
        if self.part.pages is not None:
            record["pages"] = list(self.part.pages)
        if self.part.section:
            record["section"] = list(self.part.section)
        record["score"] = round(self.score, 3)
        return record


@dataclass(frozen=True, slots=True)
class SentenceEvidence:
    """A summary sentence and the parts it draws on, best first (empty: none found)."""

    sentence: Sentence
    parts: tuple[PartScore, ...]

    def as_record(self) -> dict[str, Any]:
        """One entry of the result's ``evidence``."""
        return {
            "sentence": self.sentence.index,
            "text": self.sentence.text,
            "chars": [self.sentence.start, self.sentence.end],
            "parts": [part.as_record() for part in self.parts],
        }


def evidence_record(evidence: Iterable[SentenceEvidence]) -> list[dict[str, Any]]:
    """The result's ``evidence`` field."""
    return [entry.as_record() for entry in evidence]


def link_evidence(
    summary: str | Sequence[Sentence],
    parts: Sequence[Part],
    tree: Step | None = None,
) -> list[SentenceEvidence]:
    """For each sentence of ``summary`` (its text, split here, or its sentences), the ``parts`` it draws
    on (see the module's doc). ``tree``: the final step of a staged summary; without it every part is
    scored directly."""
    sentences = split_sentences(summary) if isinstance(summary, str) else list(summary)
    scorer = _Scorer(parts)
    by_id = {part.id: part for part in parts}
    linked = []
    for sentence in sentences:
        weights = scorer.weights(sentence.text)
        scores = {part.id: scorer.score(weights, part.id) for part in parts}
        if tree is not None:
            for part_id, score in _walk(tree, weights, scorer, 1.0).items():
                if part_id in scores:
                    scores[part_id] = max(scores[part_id], score)
        linked.append(SentenceEvidence(sentence, _best(scores, by_id)))
    return linked


def _best(scores: Mapping[int, float], parts: Mapping[int, Part]) -> tuple[PartScore, ...]:
    if not scores:
        return ()
    top = max(scores.values())
    floor = max(MIN_SCORE, top * KEEP_RATIO)
    ranked = sorted(
        (item for item in scores.items() if item[1] >= floor), key=lambda item: (-item[1], item[0])
    )
    return tuple(PartScore(parts[part_id], score) for part_id, score in ranked[:MAX_PARTS])


def _walk(
    step: Step, weights: Mapping[str, float], scorer: _Scorer, carried: float, *, root: bool = True
) -> dict[int, float]:
    """Part scores reached through ``step``'s inputs: a part read by a step below the final one scores
    the weakest step score on its way down (its own text is scored directly elsewhere)."""
    scores = [
        scorer.score(weights, item) if isinstance(item, int) else scorer.score_text(weights, item.text)
        for item in step.inputs
    ]
    reached: dict[int, float] = {}
    best = max(scores, default=0.0)
    for item, score in zip(step.inputs, scores, strict=True):
        if isinstance(item, int):
            found = {item: score if root else carried}
        elif best > 0 and score >= best * FOLLOW_RATIO:
            found = _walk(item, weights, scorer, min(carried, score), root=False)
        else:
            continue
        for part_id, value in found.items():
            reached[part_id] = max(reached.get(part_id, 0.0), value)
    return reached


class _Scorer:
    """Content words and their weights over one document's parts."""

    def __init__(self, parts: Sequence[Part]) -> None:
        self._bags = {part.id: frozenset(content_words(part.text)) for part in parts}
        frequency = Counter(word for bag in self._bags.values() for word in bag)
        count = len(self._bags)
        self._idf = {
            word: math.log(1 + (count - seen + 0.5) / (seen + 0.5)) for word, seen in frequency.items()
        }

    def weights(self, sentence: str) -> dict[str, float]:
        """Each content word of ``sentence`` with its weight (rarity, emphasis)."""
        weights: dict[str, float] = {}
        for word, emphasised in content_words_of(sentence):
            idf = self._idf.get(word)
            if idf is None:  # in no part: it cannot tell where the sentence comes from
                continue
            weight = idf * (_EMPHASIS if emphasised else 1.0)
            weights[word] = max(weights.get(word, 0.0), weight)
        return weights

    def score(self, weights: Mapping[str, float], part_id: int) -> float:
        """The share of ``weights`` that part ``part_id`` holds (0 for a part it does not know)."""
        bag = self._bags.get(part_id)
        return _share(weights, bag) if bag is not None else 0.0

    def score_text(self, weights: Mapping[str, float], text: str) -> float:
        """The share of ``weights`` that ``text`` holds."""
        return _share(weights, frozenset(content_words(text)))


def _share(weights: Mapping[str, float], bag: frozenset[str]) -> float:
    total = sum(weights.values())
    if total <= 0:
        return 0.0
    return sum(weight for word, weight in weights.items() if word in bag) / total


def content_words(text: str) -> list[str]:
    """The folded content words of ``text`` (see the module's doc)."""
    return [word for word, _ in content_words_of(text)]


def content_words_of(text: str) -> list[tuple[str, bool]]:
    """Each content word of ``text``, folded, with whether it is emphasised (a number or capitalised
    inside a sentence)."""
    words = []
    for match in _WORD.finditer(text):
        written = match.group()
        folded = _fold_word(written)
        if not folded or folded in STOPWORDS or (len(folded) < 2 and not folded.isdigit()):
            continue
        emphasised = written[0].isdigit() or (written[0].isupper() and match.start() > 0)
        words.append((folded, emphasised))
    return words


def _fold_word(word: str) -> str:
    if not word.isascii():
        word = "".join(c for c in unicodedata.normalize("NFKD", word) if not unicodedata.combining(c))
    word = word.casefold().replace("’", "'")
    if word[:1].isdigit():
        return word.replace(",", "")
    word = word.removesuffix("'s").strip("'-")
    return _stem(word)


def _stem(word: str) -> str:
    """A light stem, the same on both sides: ``grants``, ``granted``, ``granting`` → ``grant``."""
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 5 and word.endswith("ing"):
        return word[:-3]
    if len(word) > 4 and word.endswith("ed"):
        return word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


# -- parts of a document that no summarizer cut ----------------------------------------------------


def parts_of_text(text: str, layout: Layout = NO_LAYOUT, *, target_chars: int = PART_CHARS) -> list[Part]:
    """``text`` cut into parts a reader recognises, for evidence when no summarizer cut it
    (``docsumd check-summary``): at its sections first (a heading, two blank lines, a page break, a
    numbered clause after a blank line: :data:`~daemon.summary.chunking.SEPARATOR_LEVELS`), then its
    paragraphs, about ``target_chars`` characters a part at most; a paragraph longer than that is cut
    at its sentences. Pages and section from ``layout``."""
    units = _units(text)
    spans: list[tuple[int, int]] = []
    current: tuple[int, int] | None = None
    for start, end, opens_section in units:
        if end - start > target_chars:
            if current is not None:
                spans.append(current)
                current = None
            spans += _cut_long(text, start, end, target_chars)
            continue
        if current is not None and (
            (opens_section and current[1] - current[0] >= target_chars // 4)
            or end - current[0] > target_chars
        ):
            spans.append(current)
            current = None
        current = (start, end) if current is None else (current[0], end)
    if current is not None:
        spans.append(current)
    return [part_at(text, layout, number, span) for number, span in enumerate(spans, 1)]


def _units(text: str) -> list[tuple[int, int, bool]]:
    """Paragraphs of ``text``: their ranges, and whether each opens a section."""
    section, paragraph = SEPARATOR_LEVELS[0], SEPARATOR_LEVELS[1]
    breaks = sorted(
        {(m.start(), m.end(), True) for m in section.finditer(text)}
        | {(m.start(), m.end(), False) for m in paragraph.finditer(text)},
        key=lambda cut: (cut[0], not cut[2]),
    )
    units = []
    position, opens = 0, True
    for start, end, is_section in breaks:
        if start < position:
            continue
        if text[position:start].strip():
            units.append((position, start, opens))
        position, opens = end, is_section
    if text[position:].strip():
        units.append((position, len(text), opens))
    return units


def _cut_long(text: str, start: int, end: int, target_chars: int) -> list[tuple[int, int]]:
    """A long paragraph in pieces of at most ``target_chars`` characters, on sentence ends where it has
    them, else on whitespace, else anywhere."""
    spans = []
    while end - start > target_chars:
        window = text[start : start + target_chars]
        cut = max(window.rfind(". "), window.rfind("? "), window.rfind("! "))
        cut = cut + 1 if cut >= target_chars // 2 else window.rfind(" ")
        if cut < target_chars // 2:
            cut = target_chars
        spans.append((start, start + cut))
        start += cut
        while start < end and text[start].isspace():
            start += 1
    if start < end:
        spans.append((start, end))
    return spans


def part_at(text: str, layout: Layout, number: int, span: tuple[int, int], source: int | None = None) -> Part:
    """Part ``number`` of ``text``: the characters of ``span``, with the pages and section ``layout``
    gives them; ``source``: the ``sources[]`` entry it lies in, where that is another numbering."""
    start, end = span
    where = layout.source_of(start, end)
    pages = where.get("pages")
    return Part(
        id=number,
        text=text[start:end],
        chars=(start, end),
        pages=(pages[0], pages[1]) if pages else None,
        section=tuple(where.get("section") or ()),
        source=source,
    )
