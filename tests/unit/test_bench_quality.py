"""bench/quality.py's scoring: ROUGE-Lsum reads newline-split sentences, the oracle picks the source
sentences closest to the reference, the LexRank baseline keeps document order."""

from __future__ import annotations

from bench.quality import Scorer, grounding_of, lexrank_baseline, oracle_summary

DOCUMENT = (
    "The licence lets anyone copy the work. It was written on a rainy day. "
    "Changes must be marked as changes. The author likes tea. "
    "Copies must keep the licence notice."
)
REFERENCE = "Anyone may copy the work. Copies keep the licence notice."


def test_rouge_lsum_reads_sentences_and_rouge_l_does_not() -> None:
    scorer = Scorer()
    # The same sentences in another order: ROUGE-L (one sequence) drops, ROUGE-Lsum (per sentence) does not.
    swapped = "Copies keep the licence notice. Anyone may copy the work."
    same, other = scorer.score(REFERENCE, REFERENCE), scorer.score(REFERENCE, swapped)
    assert same["rougeLsum"] == other["rougeLsum"] == 1.0
    assert other["rougeL"] < 1.0


def test_the_oracle_picks_the_sentences_of_the_reference() -> None:
    oracle = oracle_summary(DOCUMENT, REFERENCE, Scorer())
    assert oracle.splitlines() == [
        "The licence lets anyone copy the work.",
        "Copies must keep the licence notice.",
    ]


def test_the_lexrank_baseline_fits_the_reference_length_in_document_order() -> None:
    baseline = lexrank_baseline(DOCUMENT, REFERENCE)
    assert len(baseline.split()) <= len(REFERENCE.split())
    lines = baseline.splitlines()
    assert lines == sorted(lines, key=DOCUMENT.index)


def test_grounding_of_a_summary() -> None:
    grounding = grounding_of("The licence was written by Acme Corporation in 1999.", DOCUMENT)
    assert grounding["items"] == 2
    assert grounding["supported"] == 0
    assert grounding["unsupported"] == ["name: Acme Corporation", "date: 1999"]
