"""Unit tests for daemon.document.extract.markup: the text convention's writer that the extractors
write with, and list labels. (The headings of text formats: test_headings.py.)"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daemon.document import text
from daemon.document.extract.markup import TextWriter, list_label
from daemon.document.types import MAX_HEADINGS, MAX_TITLE_CHARS, Format, Heading
from daemon.errors import DocumentError


def _titles(headings: tuple[Heading, ...]) -> list[tuple[int, str]]:
    return [(heading.level, heading.title) for heading in headings]


# -- the writer ------------------------------------------------------------------------------------


def test_writer_separates_blocks_by_a_blank_line_and_records_heading_offsets() -> None:
    writer = TextWriter(10_000)
    writer.heading(1, "Title")
    writer.paragraph("First   paragraph\nwith a line break.")
    writer.heading(2, " 1.1  Scope ")
    writer.lines(["a | b", "  ", "c | d"])
    extracted = writer.finish(Format.DOCX, "this file", {"extractor": "x"})
    assert extracted.text == "# Title\n\nFirst paragraph with a line break.\n\n## 1.1 Scope\n\na | b\nc | d"
    assert _titles(extracted.layout.headings) == [(1, "Title"), (2, "1.1 Scope")]
    for heading in extracted.layout.headings:
        assert extracted.text[heading.start :].startswith("#" * heading.level + " " + heading.title)
    assert extracted.details == {"extractor": "x"}
    assert extracted.format is Format.DOCX


def test_writer_clamps_levels_and_demotes_overlong_or_empty_headings() -> None:
    writer = TextWriter(10_000)
    writer.heading(9, "Deep")
    writer.heading(0, "Zero")
    writer.heading(1, "   ")
    writer.heading(2, "x" * (MAX_TITLE_CHARS + 1))
    extracted = writer.finish(Format.HTML, "this page")
    assert _titles(extracted.layout.headings) == [(6, "Deep"), (1, "Zero")]
    assert extracted.text.endswith("\n\n" + "x" * (MAX_TITLE_CHARS + 1))


def test_writer_removes_control_characters_and_form_feeds() -> None:
    writer = TextWriter(100)
    writer.paragraph("a\x00b\x0cc\x85d\u00a0e")
    writer.preformatted("  code\x0b line\n\n\tindented  \n")
    assert writer.finish(Format.HTML, "x").text == "a b c d e\n\n  code  line\n    indented"


def test_writer_refuses_output_over_the_limit_as_it_is_written() -> None:
    writer = TextWriter(12)
    writer.paragraph("0123456789")  # 10
    with pytest.raises(DocumentError) as caught:
        writer.paragraph("x")  # 10 + 2 + 1 = 13
    assert caught.value.reason == "too_large"
    exact = TextWriter(13)
    exact.paragraph("0123456789")
    exact.paragraph("x")
    assert exact.length == 13


def test_writer_with_nothing_written_is_no_text() -> None:
    writer = TextWriter(100)
    writer.paragraph(" \n\t ")
    writer.lines(["", " "])
    with pytest.raises(DocumentError) as caught:
        writer.finish(Format.ODT, "this ODT file")
    assert caught.value.reason == "no_text"
    assert "this ODT file" in caught.value.message


def test_writer_records_at_most_max_headings() -> None:
    writer = TextWriter(10_000_000)
    for number in range(MAX_HEADINGS + 5):
        writer.heading(1, f"H{number}")
    extracted = writer.finish(Format.HTML, "x")
    assert len(extracted.layout.headings) == MAX_HEADINGS
    assert extracted.details["headings_not_in_layout"] == 5
    assert extracted.text.endswith(f"# H{MAX_HEADINGS + 4}")


@pytest.mark.parametrize(
    ("number", "style", "label"),
    [
        (3, "decimal", "3"),
        (3, "1", "3"),
        (4, "decimalZero", "04"),
        (1, "lowerLetter", "a"),
        (28, "lowerLetter", "bb"),
        (2, "A", "B"),
        (4, "lowerRoman", "iv"),
        (1994, "upperRoman", "MCMXCIV"),
        (9, "I", "IX"),
        (5, "none", ""),
        (7, "ordinalText", "7"),
        (0, "lowerLetter", "0"),
    ],
)
def test_list_labels(number: int, style: str, label: str) -> None:
    assert list_label(number, style) == label


# -- a piece at a time ------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab \t\n\r\x00\x0c\x85\xa0\u2003\x1f")), max_size=80))
def test_preformatted_text_is_written_a_piece_at_a_time_as_whole(content: str) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(text, "_PIECE", 3)  # every text is long
        writer = TextWriter(1000)
        writer.preformatted(content)
    reference = TextWriter(1000)
    reference.preformatted(content)
    assert writer._parts == reference._parts
