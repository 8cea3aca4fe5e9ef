"""One sentence splitter for summaries and documents: bullets and headings are sentences, wrapped lines
and abbreviations are not breaks, offsets point into the text as given."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from daemon.summary.sentences import sentence_per_line, split_sentences


def texts(text: str) -> list[str]:
    return [sentence.text for sentence in split_sentences(text)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("One. Two! Three? Four", ["One.", "Two!", "Three?", "Four"]),
        # Bullets and numbered items are sentences of their own, their markers left out.
        ("- first point\n- second point\n* third", ["first point", "second point", "third"]),
        ("1. Grant. It is broad.\n2) Notice", ["Grant.", "It is broad.", "Notice"]),
        ("(a) the Licensor\n(b) the Licensee", ["the Licensor", "the Licensee"]),
        # Headings too, without their hashes.
        ("## Scope\nThe licence applies.", ["Scope", "The licence applies."]),
        # Hard-wrapped paragraphs read as one sentence.
        (
            "The licence is\ngranted to you.\n\nNext paragraph.",
            ["The licence is granted to you.", "Next paragraph."],
        ),
        # Abbreviations, initials, decimals and section numbers are not sentence ends.
        ("See Sec. 4.2 of the Act, e.g. the notice.", ["See Sec. 4.2 of the Act, e.g. the notice."]),
        (
            "Written by J. Smith at Acme Inc. in 2004. Next.",
            ["Written by J. Smith at Acme Inc. in 2004.", "Next."],
        ),
        ("It rose 4.5 percent. It fell.", ["It rose 4.5 percent.", "It fell."]),
        # A lower-case word after a full stop does not open a sentence.
        ("The fee is 5 p.a. and due monthly.", ["The fee is 5 p.a. and due monthly."]),
        # Closing quotes stay with their sentence; rules and blank lines are no sentences.
        ('He said "stop." Then left.\n\n***\n\n---', ['He said "stop."', "Then left."]),
        ("Page one.\fPage two.", ["Page one.", "Page two."]),
        ("", []),
        ("   \n\n  ", []),
    ],
)
def test_sentences(text: str, expected: list[str]) -> None:
    assert texts(text) == expected


def test_offsets_point_into_the_text() -> None:
    text = "Intro line\n\n- The Licensor grants\n  a licence.\n- Notice: 30 days."
    sentences = split_sentences(text)
    assert [s.index for s in sentences] == [0, 1, 2]
    for sentence in sentences:
        assert " ".join(text[sentence.start : sentence.end].split()) == sentence.text
    assert text[sentences[1].start : sentences[1].end] == "The Licensor grants\n  a licence."


def test_sentence_per_line_is_what_rouge_lsum_reads() -> None:
    assert sentence_per_line("A b. C d\ne.\n\n- f") == "A b.\nC d e.\nf"


@given(st.text(alphabet=st.sampled_from(list("ab .!?\n-#*\f1(){}\"'")), max_size=200))
def test_any_text_splits_into_ordered_spans_without_line_breaks(text: str) -> None:
    sentences = split_sentences(text)
    previous_end = 0
    for index, sentence in enumerate(sentences):
        assert sentence.index == index
        assert previous_end <= sentence.start < sentence.end <= len(text)
        assert "\n" not in sentence.text
        assert sentence.text == sentence.text.strip()
        assert sentence.text == " ".join(text[sentence.start : sentence.end].split())
        previous_end = sentence.end


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "hostile",
    ["e.g. A " * 200_000, "." * 500_000 + " " * 500_000 + "a", "\n" * 1_000_000, "x\n" * 300_000],
    ids=["abbreviations", "marks-then-spaces", "newlines", "short-lines"],
)
def test_hostile_text_is_split_in_linear_time(hostile: str) -> None:
    # A quadratic rescan would take hours on these; linear, a few seconds.
    assert len(split_sentences(hostile)) <= len(hostile)
