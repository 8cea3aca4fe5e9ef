"""The extractive selection: central sentences first, within the budget, in document order."""

from __future__ import annotations

import pytest

from daemon.summary.extractive import centrality, extract, select_sentences
from daemon.summary.sentences import split_sentences

TEXT = (
    "The licence grants every user the right to copy the software. "
    "Users may copy and modify the software under the licence. "
    "The weather in Lisbon was mild that spring. "
    "Modified copies of the software must carry the licence. "
    "Anyone who copies the software keeps the licence notice. "
    "Breakfast was served at eight."
)


def words(text: str) -> int:
    return len(text.split())


def test_central_sentences_rank_above_the_outliers() -> None:
    scores = centrality([sentence.text for sentence in split_sentences(TEXT)])
    assert sum(scores) == pytest.approx(1.0)
    outliers = {2, 5}
    assert min(s for i, s in enumerate(scores) if i not in outliers) > max(scores[i] for i in outliers)


def test_the_selection_fits_the_budget_and_keeps_document_order() -> None:
    sentences = split_sentences(TEXT)
    chosen = select_sentences(sentences, words, 25)
    assert sum(words(sentence.text) for sentence in chosen) <= 25
    assert [s.index for s in chosen] == sorted(s.index for s in chosen)
    assert all("weather" not in s.text and "Breakfast" not in s.text for s in chosen)
    assert len(chosen) >= 2


def test_a_sentence_too_long_for_what_is_left_is_skipped_for_a_shorter_one() -> None:
    text = "Short licence line about copying software. " + "Copying software under the licence " * 10 + "."
    chosen = select_sentences(split_sentences(text), words, 8)
    assert [s.text for s in chosen] == ["Short licence line about copying software."]


def test_exact_repeats_are_taken_once() -> None:
    text = "Keep the licence notice with the software. " * 5 + "Copies of the software keep the notice."
    chosen = [s.text for s in select_sentences(split_sentences(text), words, 100)]
    assert chosen.count("Keep the licence notice with the software.") == 1


def test_extract_joins_the_selection() -> None:
    assert extract(TEXT, words, 0) == ""
    assert extract(TEXT, words, 1000).count("\n") == 5


def test_degenerate_inputs() -> None:
    assert centrality([]) == []
    assert centrality(["the of and", "a an"]) == [0.5, 0.5]
    assert centrality(["unique words here", "completely different text"]) == pytest.approx([0.5, 0.5])


def test_a_large_document_is_ranked_without_a_square_matrix() -> None:
    # 30,000 sentences: a dense similarity matrix would need 7 GB; the walk needs a few MB.
    sentences = [f"Clause {i} covers topic{i % 97} and term{i % 13} of the licence." for i in range(30_000)]
    scores = centrality(sentences)
    assert len(scores) == 30_000
    assert sum(scores) == pytest.approx(1.0)
