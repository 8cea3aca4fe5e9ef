"""Unit tests for daemon.document.headings: the Markdown and reST heading finders that format
detection and :func:`~daemon.document.headings.text_layout` use on text formats, in the daemon's
own process.

The finders are checked against hand-made tricky inputs, real files from Debian packages
(tests/fixtures/documents/markdown, see its manifest), markdown-it-py as an oracle for CommonMark
headings, and hostile inputs for time (every scan on 16 MiB of each hostile shape:
tests/unit/document/test_hostile_text_scans.py).
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daemon.config import LimitsConfig
from daemon.document import headings as scans
from daemon.document.headings import scan_markdown, scan_rst, text_layout
from daemon.document.text import one_line
from daemon.document.types import MAX_HEADINGS, MAX_TITLE_CHARS, NO_LAYOUT, Format, Heading

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "documents" / "markdown"
README = Path(__file__).resolve().parents[3] / "README.md"


def _titles(headings: tuple[Heading, ...]) -> list[tuple[int, str]]:
    return [(heading.level, heading.title) for heading in headings]


def _assert_offsets(text: str, headings: tuple[Heading, ...]) -> None:
    """Each heading starts at a line start, in order, and its line (or the next) holds its title."""
    starts = [heading.start for heading in headings]
    assert starts == sorted(starts)
    for heading in headings:
        assert heading.start == 0 or text[heading.start - 1] == "\n"
        window = one_line(text[heading.start : heading.start + 3 * len(heading.title) + 200])
        assert heading.title.split()[0] in window


# -- Markdown --------------------------------------------------------------------------------------


def test_tricky_markdown_headings_outside_code_quotes_and_lists() -> None:
    text = (FIXTURES / "tricky.md").read_text(encoding="utf-8")
    scan = scan_markdown(text)
    assert _titles(scan.headings) == [
        (1, "Guide"),
        (2, "Install"),
        (1, "Setext title over two lines"),
        (2, "Sub title"),
    ]
    assert text[scan.headings[2].start :].startswith("Setext title\nover two lines\n===")
    assert scan.fences == 2
    assert scan.links == 1
    _assert_offsets(text, scan.headings)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("# A #\n", [(1, "A")]),
        ("### B ###   \n", [(3, "B")]),
        ("## C#\n", [(2, "C#")]),
        ("#\n# \n", []),
        ("   # indented three\n", [(1, "indented three")]),
        ("    # indented four\n", []),
        ("para\n    # lazy continuation\n", []),
        ("Title\r\n=====\r\n", [(1, "Title")]),
        ("- item\n---\n", []),
        ("\n---\n", []),
        ("Para\n\n===\n", []),
        ("```\n# in fence\n", []),
        ("````\n```\n# still fenced\n````\n# out\n", [(1, "out")]),
        ("``` a`b\n# not a fence, a heading\n", [(1, "not a fence, a heading")]),
        ("  ```\n# fenced\n  ```\n", []),
        ("# One\n## Two\n", [(1, "One"), (2, "Two")]),
    ],
)
def test_markdown_edge_cases(text: str, expected: list[tuple[int, str]]) -> None:
    assert _titles(scan_markdown(text).headings) == expected


def _markdown_it_headings(text: str) -> list[tuple[int, str]]:
    markdown_it = pytest.importorskip("markdown_it")
    tokens = markdown_it.MarkdownIt("commonmark").parse(text)
    return [
        (int(token.tag[1]), " ".join(tokens[index + 1].content.split()))
        for index, token in enumerate(tokens)
        if token.type == "heading_open" and token.level == 0
    ]


@pytest.mark.parametrize(
    "name", ["tricky.md", "fzf-changelog-head.md", "ripgrep-changelog-head.md", "README"]
)
def test_markdown_headings_agree_with_markdown_it(name: str) -> None:
    path = README if name == "README" else FIXTURES / name
    text = path.read_text(encoding="utf-8")
    scan = scan_markdown(text)
    assert _titles(scan.headings) == _markdown_it_headings(text)
    assert scan.headings
    _assert_offsets(text, scan.headings)


def test_real_changelogs_headings() -> None:
    fzf = (FIXTURES / "fzf-changelog-head.md").read_text(encoding="utf-8")
    assert _titles(scan_markdown(fzf).headings) == [
        (1, "CHANGELOG"),
        (2, "0.38.0"),
        (2, "0.37.0"),
        (2, "0.36.0"),
    ]
    ripgrep = (FIXTURES / "ripgrep-changelog-head.md").read_text(encoding="utf-8")
    assert _titles(scan_markdown(ripgrep).headings) == [
        (1, "13.0.0 (2021-06-12)"),
        (1, "12.1.1 (2020-05-29)"),
    ]


# -- reST -------------------------------------------------------------------------------------------


def test_tricky_rst_titles_and_levels_by_first_appearance() -> None:
    text = (FIXTURES / "tricky.rst").read_text(encoding="utf-8")
    scan = scan_rst(text)
    assert _titles(scan.headings) == [
        (1, "Guide"),
        (2, "Section one"),
        (3, "Subsection"),
        (2, "A"),
        (3, "xy"),
        (2, "Section two"),
        (4, "Deep"),
    ]
    assert text[scan.headings[0].start :].startswith("=======\n Guide\n=======")
    assert scan.overlined == 1
    assert scan.directives == 2  # the target and the note
    assert scan.roles >= 2  # :Author: and :ref:
    _assert_offsets(text, scan.headings)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Title\n=====\n", [(1, "Title")]),
        ("Title\n===\n", []),  # shorter than the title and under four characters
        ("Long title\n====\n", [(1, "Long title")]),  # shorter, but four: docutils warns, still a title
        ("  Indented\n  ========\n", []),
        ("para\nTitle\n=====\n", []),  # not after a blank line: part of a paragraph
        ("====\nover\n----\n", []),  # overline and underline differ
        ("=====\nTitle\n=====\nNext\n----\n", [(1, "Title"), (2, "Next")]),
        ("=====  =====\na      b\n=====  =====\n", []),  # a simple table
        ("+---+---+\n| a | b |\n+---+---+\n", []),  # a grid table
        (".. note::\n=========\n", []),
        ("A\r\n=\r\n", [(1, "A")]),
        ("----\n\n----\n", []),  # transitions
    ],
)
def test_rst_edge_cases(text: str, expected: list[tuple[int, str]]) -> None:
    assert _titles(scan_rst(text).headings) == expected


def test_real_rst_source_titles_match_its_html_page() -> None:
    text = (FIXTURES / "python-tutorial-controlflow.rst.txt").read_text(encoding="utf-8")
    headings = scan_rst(text).headings
    assert len(headings) == 23  # as many as the HTML page built from it has h1-h6 (test_extract_html)
    assert _titles(headings)[:2] == [(1, "More Control Flow Tools"), (2, ":keyword:`!if` Statements")]
    assert (4, "Recap") in _titles(headings)
    assert _titles(headings)[-1] == (2, "Intermezzo: Coding Style")
    _assert_offsets(text, headings)


# -- text_layout -------------------------------------------------------------------------------------


def test_text_layout_for_each_text_format() -> None:
    markdown = "# A\n\ntext\n\n## B\n"
    assert _titles(text_layout(markdown, Format.MARKDOWN).headings) == [(1, "A"), (2, "B")]
    rst = "A\n=\n\ntext\n"
    assert _titles(text_layout(rst, Format.RST).headings) == [(1, "A")]
    assert text_layout(markdown, Format.TEXT) is NO_LAYOUT
    assert text_layout(markdown, Format.HTML) is NO_LAYOUT
    assert text_layout(markdown, Format.MARKDOWN).pages == 0


def test_text_layout_looks_at_the_first_max_scan_lines_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scans, "MAX_SCAN_LINES", 7)
    markdown = "# A\n\ntext\n\n## B\n\n## C\n"  # C is the 7th line (index 6)
    assert _titles(text_layout(markdown, Format.MARKDOWN).headings) == [(1, "A"), (2, "B"), (2, "C")]
    assert _titles(text_layout("\n" + markdown, Format.MARKDOWN).headings) == [(1, "A"), (2, "B")]
    rst = "A\n=\n\ntext\n\nB\n-\n\nC\n-\n"  # B's underline is the 7th line, C's the 10th
    assert _titles(text_layout(rst, Format.RST).headings) == [(1, "A"), (2, "B")]
    # The detection's scans (on the first 64 KiB) and direct calls have no cap.
    assert _titles(scan_markdown("\n" + markdown).headings) == [(1, "A"), (2, "B"), (2, "C")]
    assert _titles(scan_rst(rst).headings) == [(1, "A"), (2, "B"), (2, "C")]


def test_max_scan_lines_covers_every_input_whose_lines_average_42_bytes() -> None:
    assert LimitsConfig().max_input_bytes <= scans.MAX_SCAN_LINES * 42


def test_a_heading_past_max_scan_lines_is_not_looked_for() -> None:
    lines = scans.MAX_SCAN_LINES
    text = "x\n" * (lines - 1) + "# Last looked at\n# Not looked at\n"
    assert _titles(text_layout(text, Format.MARKDOWN).headings) == [(1, "Last looked at")]
    assert _titles(text_layout(text, Format.RST).headings) == []


# -- hostile input ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "#\n" * 200_000,
        "# a\n\n" * 100_000,
        "x" * 4_000_000,
        ">" * 1_000_000 + " x\n",
        "```\n" + "# x\n" * 100_000,
        "a\n=\n" * 100_000,
        "====\n" * 200_000,
        "[" * 500_000 + "](" * 500_000,
    ],
    ids=["hash-lines", "atx", "one-line", "quotes", "open-fence", "setext", "adornments", "brackets"],
)
def test_hostile_text_is_scanned_in_linear_time(text: str) -> None:
    started = time.process_time()
    markdown = scan_markdown(text)
    rst = scan_rst(text)
    layout = text_layout(text, Format.MARKDOWN)
    elapsed = time.process_time() - started
    # CPU time (a loaded machine does not stretch it): about 1.5 us a line; 10 s would mean something
    # quadratic.
    assert elapsed < 10, elapsed
    assert len(markdown.headings) <= MAX_HEADINGS
    assert len(rst.headings) <= MAX_HEADINGS
    assert len(layout.headings) <= MAX_HEADINGS


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("#=-~`*> \n\tab.:_+1")), max_size=300))
def test_scans_never_fail_and_give_ordered_line_starts(text: str) -> None:
    for headings in (scan_markdown(text).headings, scan_rst(text).headings):
        starts = [heading.start for heading in headings]
        assert starts == sorted(set(starts))
        for heading in headings:
            assert heading.start == 0 or text[heading.start - 1] == "\n"
            assert heading.title
            assert heading.title == one_line(heading.title)
            assert len(heading.title) <= MAX_TITLE_CHARS


# -- the linear scans match what the backtracking patterns matched -------------------------------

_OLD_THEMATIC = re.compile(r" {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*")
_OLD_ADORNMENT = re.compile(r"([!-/:-@\[-`{-~])\1*[ \t]*")
_OLD_ATX_CLOSE = re.compile(r"(?:^|[ \t]+)#+[ \t]*$")
_MARKS = st.text(alphabet=st.sampled_from(list("-*_=#~ \t\xa0a.")), max_size=30)


@settings(max_examples=500, deadline=None)
@given(_MARKS)
def test_thematic_breaks_and_adornments_are_what_they_were(line: str) -> None:
    assert bool(scans._THEMATIC.fullmatch(line)) == bool(_OLD_THEMATIC.fullmatch(line))
    assert scans._is_adornment(line) == bool(_OLD_ADORNMENT.fullmatch(line))


@settings(max_examples=500, deadline=None)
@given(_MARKS)
def test_atx_closing_sequences_go_as_they_did(title: str) -> None:
    assert scans._without_closing_sequence(title).strip() == _OLD_ATX_CLOSE.sub("", title).strip()


def test_a_title_of_millions_of_words_is_dropped_in_bounded_memory() -> None:
    import tracemalloc

    text = "# " + "ab " * 2_000_000 + "\n\n" + "ab " * 2_000_000 + "\n===\n"
    tracemalloc.start()
    try:
        headings = scan_markdown(text, counts=False).headings
        rst = scan_rst(text, counts=False).headings
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert headings == rst == ()
    assert peak < 2 * len(text)  # a copy of a line or two; one_line made an object of each word
