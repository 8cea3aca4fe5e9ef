"""daemon.summary.checking: what of a summary is checked (prose, or a structured summary's string
values), where its sentences and items are (``chars``, ``field``), and the parts evidence points to."""

from __future__ import annotations

from daemon.document.types import Layout
from daemon.summary.checking import (
    MAX_EVIDENCE_SENTENCES,
    MAX_STRING_VALUES,
    CheckedText,
    check_result,
    passages,
    read_text,
)
from daemon.summary.evidence import Part
from daemon.summary.grounding import SourceIndex

SOURCE = "Acme Holdings leases the premises for 12 months.\n\nRent is 500 euros, due on 1 March 2024.\n"


def test_a_prose_summary_is_checked_as_written() -> None:
    checked = CheckedText.of("Rent is 600 euros.")
    assert checked.text == "Rent is 600 euros."
    assert checked.locate(8, 18) == {"chars": [8, 18]}


def test_a_structured_summary_is_checked_by_its_string_values_each_located_by_pointer() -> None:
    structured = {
        "parties": ["Acme Holdings", "Globex"],
        "term": {"months": 12, "text": "Twelve months."},
        "a/b": "Rent is 600 euros.",
        "empty": " ",
        "flag": True,
    }
    checked = CheckedText.of("{...}", structured)
    assert checked.text == "Acme Holdings\n\nGlobex\n\nTwelve months.\n\nRent is 600 euros."
    assert checked.pointers == ("/parties/0", "/parties/1", "/term/text", "/a~1b")
    at = checked.text.index("600 euros")
    assert checked.locate(at, at + 9) == {"chars": [8, 17], "field": "/a~1b"}

    result = check_result("{...}", structured, SourceIndex.of(SOURCE), [Part(1, SOURCE, (0, len(SOURCE)))])
    unsupported = result.checks_record["unsupported"]
    assert [(item["text"], item["field"], item["chars"]) for item in unsupported] == [
        ("Globex", "/parties/1", [0, 6]),
        ("600 euros", "/a~1b", [8, 17]),
    ]
    # The number 12 of "months" is not checked (a JSON number), the string "Twelve months." is.
    assert [entry["field"] for entry in result.evidence] == [
        "/parties/0",
        "/parties/1",
        "/term/text",
        "/a~1b",
    ]
    assert result.evidence[3]["chars"] == [0, 18]


def test_a_structured_summarys_values_are_bounded() -> None:
    structured = {"items": [f"Item {n}." for n in range(MAX_STRING_VALUES + 50)]}
    checked = CheckedText.of("{}", structured)
    assert len(checked.pointers) == MAX_STRING_VALUES


def test_evidence_is_linked_for_a_bounded_number_of_sentences() -> None:
    summary = " ".join(f"Rent is {n} euros." for n in range(MAX_EVIDENCE_SENTENCES + 10))
    result = check_result(summary, None, SourceIndex.of(SOURCE), [Part(1, SOURCE, (0, len(SOURCE)))])
    assert len(result.evidence) == MAX_EVIDENCE_SENTENCES + 10
    assert result.evidence[0]["parts"]
    assert all(entry["parts"] == [] for entry in result.evidence[MAX_EVIDENCE_SENTENCES:])


def test_passages_lie_in_the_spans_read_and_are_numbered_by_their_span() -> None:
    text = (
        "A" * 10
        + "\n\n"
        + "First kept paragraph.\n\nSecond kept one.\n\n"
        + "Dropped middle.\n\n"
        + "Tail part."
    )
    head = (0, text.index("Dropped"))
    tail = (text.index("Tail"), len(text))
    found = passages(text, Layout(), [head, tail])
    assert [part.source for part in found] == [1, 2]
    assert [text[a:b] for a, b in (part.chars for part in found)] == [
        text[head[0] : head[1]].strip(),
        "Tail part.",
    ]
    assert read_text(text, [head, tail]) == text[: head[1]] + "\n\n" + "Tail part."
    assert read_text(text, [(0, len(text))]) is text
