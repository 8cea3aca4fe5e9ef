"""PDF extraction (:mod:`daemon.document.extract.pdf`): real PDFs from Debian packages give their
text, pages and headings; hostile PDFs are refused with their reason or read within bounds; and the
clean-up (running headers, page numbers, hyphenation, paragraphs, headings) on made-up pages.

The files are in tests/fixtures/documents/pdf/ (manifest.jsonl says where each came from and what
it must give); the generated ones are rewritten by make_hostile.py there."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from daemon.document.extract import pdf as extractor
from daemon.document.extract.pdf import (
    HeadingSearch,
    LineBox,
    OutlineEntry,
    Vocabulary,
    assemble,
    drop_running_lines,
    extract_pdf,
    find_heading_lines,
    hyphen_is_hyphenation,
    is_page_number,
    join_lines,
    paragraph_starts,
    split_lines,
    squash,
)
from daemon.document.types import Extracted, ExtractLimits, Format
from daemon.errors import DocumentError
from tests.expanding_inputs import pdf_shared_stream

REPO = Path(__file__).resolve().parents[3]
FIXTURES = REPO / "tests" / "fixtures" / "documents" / "pdf"
MANIFEST = [json.loads(line) for line in (FIXTURES / "manifest.jsonl").read_text().splitlines() if line]
REAL = [entry for entry in MANIFEST if entry["origin"] == "debian"]
REFUSED = [entry for entry in MANIFEST if entry["origin"] == "generated" and "reason" in entry["expect"]]
READ = [entry for entry in MANIFEST if entry["origin"] == "generated" and "reason" not in entry["expect"]]
LIMITS = ExtractLimits()


def extract(name: str, limits: ExtractLimits = LIMITS) -> Extracted:
    return extract_pdf((FIXTURES / name).read_bytes(), limits)


def check_layout(result: Extracted, pages: int) -> None:
    """Pages as the text's form feeds say, headings ascending and inside the text."""
    assert result.format is Format.PDF
    assert result.layout.pages == pages == result.details["pages"]
    assert result.text.count("\f") == pages - 1
    starts = [0] + [match.end() for match in re.finditer("\f", result.text)]
    assert list(result.layout.page_starts) == starts
    offsets = [heading.start for heading in result.layout.headings]
    assert offsets == sorted(offsets)
    assert all(0 <= offset <= len(result.text) for offset in offsets)
    assert "\n\n\n" not in result.text  # two blank lines would read as a section break


# -- real PDFs -------------------------------------------------------------------------------------


@pytest.mark.parametrize("entry", REAL, ids=[entry["file"] for entry in REAL])
def test_a_real_pdf_gives_its_pages_and_phrases(entry: dict[str, Any]) -> None:
    expect = entry["expect"]
    result = extract(entry["file"])

    check_layout(result, expect["pages"])
    for phrase in expect["phrases"]:
        assert phrase in result.text
    lines = set(result.text.replace("\f", "\n").split("\n"))
    for line in expect.get("heading_lines", []) + expect.get("code_lines", []):
        assert line in lines
    heading_lines = [line for line in lines if re.match(r"#{1,6} ", line)]
    assert len(heading_lines) >= expect.get("min_heading_lines", 0)
    assert result.details["extractor"].startswith("pypdfium2 ")


def test_every_heading_line_written_is_a_heading_of_the_layout_at_its_offset() -> None:
    result = extract("XACE-Spec.pdf")

    written = {match.start(): match.group(2) for match in re.finditer(r"(?m)^(#{1,6}) (.+)$", result.text)}
    recorded = {heading.start: heading.title for heading in result.layout.headings}
    assert written
    assert all(recorded[start] == title for start, title in written.items())
    levels = {heading.title: heading.level for heading in result.layout.headings}
    assert (levels["Purpose"], levels["Security Extension"]) == (2, 3)


def test_running_headers_and_footers_of_a_real_standard_are_gone() -> None:
    raw = (FIXTURES / "fhs-3.0.pdf").read_bytes()
    result = extract_pdf(raw, LIMITS)

    pages = result.text.split("\f")
    with_header = [page for page in pages if "Filesystem Hierarchy Standard" in page[:200] + page[-200:]]
    assert len(with_header) <= 1  # the title page's title; PDFium's raw text has it on 45 pages
    assert not any(is_page_number(line) for page in pages for line in page.split("\n")[:1])


def test_a_paragraph_goes_on_from_one_column_to_the_next() -> None:
    result = extract("MVT_Rnews.pdf")

    assert "probabilities, both for arbitrary means" in result.text


# -- hostile and odd PDFs --------------------------------------------------------------------------


@pytest.mark.parametrize("entry", REFUSED, ids=[entry["file"] for entry in REFUSED])
def test_a_hostile_pdf_is_refused_with_its_reason(entry: dict[str, Any]) -> None:
    with pytest.raises(DocumentError) as caught:
        extract(entry["file"])

    assert caught.value.reason == entry["expect"]["reason"]
    assert len(caught.value.message) < 300


@pytest.mark.parametrize("entry", READ, ids=[entry["file"] for entry in READ])
def test_an_odd_but_readable_pdf_is_read(entry: dict[str, Any]) -> None:
    expect = entry["expect"]
    result = extract(entry["file"])

    check_layout(result, expect["pages"])
    for phrase in expect.get("phrases", []):
        assert phrase in result.text
    assert len(result.layout.headings) == expect.get("headings", len(result.layout.headings))


def test_the_structured_agreement_reads_as_written() -> None:
    result = extract("generated/structured.pdf")

    first = result.text.split("\f")[0]
    assert first == (
        "# 1 Delivery\n\n## 1.1 Place and time\n\n"
        "Under this clause the supplier shall deliver the machines described in the schedule to the "
        "buyer's premises within thirty days of the order. Delivery is complete when the buyer signs the "
        "delivery note. Risk passes to the buyer on delivery, and title passes on payment in full, as is "
        "well-known practice in this trade. The parties agree that any notice under this agreement is "
        "given in writing.\n\n"
        "A second paragraph starts here after a gap, and says that the prices of the machines in the "
        "schedule include packaging but not the carriage of the machines."
    )
    assert [(h.level, h.title) for h in result.layout.headings[:4]] == [
        (1, "1 Delivery"),
        (1 + 1, "1.1 Place and time"),
        (1, "2 Prices"),
        (1 + 1, "2.1 What the prices include"),
    ]
    assert all(
        result.text[h.start :].startswith("#" * h.level + " " + h.title) for h in result.layout.headings
    )
    assert "Confidential" not in result.text
    assert "Page 2 of 4" not in result.text


def test_an_outline_with_cycles_gives_each_heading_once() -> None:
    result = extract("generated/outline_loop.pdf")

    # The second title has a lone surrogate in it: replaced, then found as the page's "Terms" line.
    assert [(h.level, h.title) for h in result.layout.headings] == [(1, "Introduction"), (1, "Terms")]
    assert not re.search("[\ud800-\udfff\x00-\x08\x1b]", result.text)


def test_a_broken_file_after_an_encrypted_one_is_malformed_not_encrypted() -> None:
    # PDFium keeps its last error code across documents, and some failures do not set one.
    with pytest.raises(DocumentError, match="password"):
        extract("generated/encrypted.pdf")
    with pytest.raises(DocumentError) as caught:
        extract("generated/nested_catalog.pdf")

    assert caught.value.reason == "malformed"


def test_the_page_count_is_checked_before_any_page_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_page_read(pdf: Any, index: int) -> str:
        raise AssertionError("a page was read")

    monkeypatch.setattr(extractor, "read_page", no_page_read)

    with pytest.raises(DocumentError, match="19 pages") as caught:
        extract("XACE-Spec.pdf", ExtractLimits(max_pages=18))
    assert caught.value.reason == "too_large"


def test_a_small_pdf_whose_pages_share_one_stream_stops_at_its_expansion_cap() -> None:
    # 21 KB showing one 4 KB stream on 1,999 pages: 7.6 M characters if read to the end (50 s).
    data = pdf_shared_stream(1999)
    with pytest.raises(DocumentError) as caught:
        extract_pdf(data, ExtractLimits())
    assert caught.value.reason == "too_expanded"
    page = int(re.search(r"by page (\d+)", caught.value.message).group(1))  # type: ignore[union-attr]
    assert page < 300  # 1 MiB (the floor) of text is about 275 of its pages: read no further


def test_text_over_the_character_limit_is_too_large() -> None:
    with pytest.raises(DocumentError) as caught:
        extract("fhs-3.0.pdf", ExtractLimits(max_output_chars=20_000))

    assert caught.value.reason == "too_large"
    assert "max_output_chars" in caught.value.message


def test_a_page_limit_exactly_met_is_not_too_large() -> None:
    assert extract("XACE-Spec.pdf", ExtractLimits(max_pages=19)).layout.pages == 19


BOUNDED = textwrap.dedent(
    """
    import json, resource, sys, time
    sys.path.insert(0, sys.argv[1])
    from daemon.document.extract.pdf import extract_pdf
    from daemon.document.types import ExtractLimits
    from daemon.errors import DocumentError
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))  # a runaway fails here, not the host
    data = open(sys.argv[2], "rb").read()
    extract_pdf(open(sys.argv[3], "rb").read(), ExtractLimits())  # warm: libraries loaded
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.process_time()
    try:
        outcome = str(len(extract_pdf(data, ExtractLimits()).text))
    except DocumentError as error:
        outcome = error.reason
    cpu = time.process_time() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"outcome": outcome, "cpu_s": cpu, "peak_growth_mib": (peak - before) / 1024,
                      "peak_mib": peak / 1024}))
    """
)


def run_bounded(name: str) -> dict[str, Any]:
    """Extracts a fixture in a fresh process under a 2 GiB address-space limit: the outcome (reason or
    text length), the CPU seconds and the growth of the peak resident memory it took."""
    done = subprocess.run(
        [sys.executable, "-c", BOUNDED, str(REPO), str(FIXTURES / name), str(FIXTURES / "zoo-design.pdf")],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_a_decompression_bomb_is_refused_in_bounded_time_and_memory() -> None:
    # 3 KiB on disk, 512 MiB of "(a) Tj" inflated: PDFium alone aborts on memory (seen: SIGABRT at a
    # 4 GiB address-space limit; the OOM killer without one). Screened, it stops after ~8 MiB
    # inflated: ~16 ms, and no peak above the warm process's (~31 MiB).
    measured = run_bounded("generated/flate_bomb.pdf")

    assert measured["outcome"] == "too_large"
    assert measured["cpu_s"] < 1.0
    assert measured["peak_growth_mib"] < 64


def test_nested_form_xobjects_are_read_in_bounded_time_and_memory() -> None:
    # 10,000 text objects from 1.8 KiB (form XObjects drawing each other 10 times, 4 deep): PDFium
    # takes ~0.1 s and ~20 MiB. Deeper nesting multiplies both: only the sandbox's limits bound it.
    measured = run_bounded("generated/form_fanout.pdf")

    assert measured["outcome"] == "4"  # "leaf": PDFium's text page has the leaf's text once
    assert measured["cpu_s"] < 2.0
    assert measured["peak_growth_mib"] < 200


# -- characters and lines --------------------------------------------------------------------------


def test_lines_are_cleaned_of_odd_characters_and_page_breaks() -> None:
    page = (
        "Ti\ufb01tle\x00 \x1b[31m\r\n\r\n\r\n  two\u00a0 spaces\fform\u202efeed \ue000x\r\nsoft\xad\nhyphen"
    )

    assert split_lines(page) == ["Tifitle [31m", "", "two spaces formfeed x", "softhyphen"]


def test_pdfiums_hyphen_mark_becomes_a_line_end_hyphen() -> None:
    assert split_lines("exam\ufffeple text") == ["exam-", "ple text"]


# -- hyphenation -----------------------------------------------------------------------------------

VOCABULARY = Vocabulary.of(
    [["a well-known example of", "a non-standard user manual and an", "example defined by the user"]]
)


@pytest.mark.parametrize(
    ("lines", "joined"),
    [
        (["an exam-", "ple of it"], "an example of it"),  # "example" is a word of the document
        (["an unheard-", "of thing"], "an unheardof thing"),  # neither part is used alone: joined
        (["it is well-", "known"], "it is well-known"),  # the document writes "well-known"
        (["a user-", "defined type"], "a user-defined type"),  # two words it uses alone
        (["a non-", "root user"], "a non-root user"),  # "non-" is a prefix it hyphenates
        (["the Anglo-", "Saxon way"], "the Anglo-Saxon way"),  # a capital after the hyphen
        (["WITHOUT WARRANTY, EX-", "PRESS OR IMPLIED"], "WITHOUT WARRANTY, EXPRESS OR IMPLIED"),
        (["ISO-", "8601 dates"], "ISO-8601 dates"),  # not letters: joined, hyphen kept
        (["a dash -", "then more"], "a dash - then more"),  # a dash, not a hyphen
        (["plain", "lines", "joined"], "plain lines joined"),
        (["a well-known", "thing"], "a well-known thing"),  # a hyphen inside a line is left alone
    ],
)
def test_hyphenated_words_are_rejoined_and_compounds_kept(lines: list[str], joined: str) -> None:
    assert join_lines(lines, VOCABULARY) == joined


def test_the_halves_of_a_split_word_are_not_words_of_the_vocabulary() -> None:
    vocabulary = Vocabulary.of([["the exam-", "ple goes on"]])

    assert "exam" not in vocabulary.words
    assert "ple" not in vocabulary.words
    assert {"the", "goes", "on"} <= vocabulary.words
    assert hyphen_is_hyphenation("exam", "ple", vocabulary)


# -- running headers, footers, page numbers --------------------------------------------------------


WORDS = (
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliet",
    "kilo",
    "lima",
)


def book_page(number: int, word: str) -> list[str]:
    header = f"The Book of Tests {number}"
    return [header, "", f"The {word} body line.", f"More {word} text.", f"Page {number} of 9", "ix"]


def test_running_headers_footers_and_page_numbers_are_dropped() -> None:
    pages = [book_page(n, word) for n, word in enumerate(WORDS[:5], 1)]

    cleaned = drop_running_lines(pages)

    assert cleaned == [[f"The {word} body line.", f"More {word} text."] for word in WORDS[:5]]


def test_a_header_carrying_the_printed_page_number_goes_whatever_its_words() -> None:
    # Chapter headers change every two pages: none repeats on three pages, but each ends with the
    # page's printed number (its index + 10), as texinfo and reference manuals print them.
    pages = [
        [f"Chapter {n // 2}: {WORDS[n // 2]} {n + 10}", f"The {word} text."] for n, word in enumerate(WORDS)
    ]

    cleaned = drop_running_lines(pages)

    assert cleaned == [[f"The {word} text."] for word in WORDS]


def test_lines_repeated_on_too_few_pages_or_inside_pages_are_kept() -> None:
    pages = [
        ["Repeated twice only", "first body line", "}", "middle line repeated", "ex", "last body line"],
        ["Repeated twice only", "second body line", "}", "middle line repeated", "why", "end"],
        ["Another header", "third body line", "}", "middle line repeated", "zed", "end"],
    ]

    assert drop_running_lines(pages) == pages


def test_identical_short_pages_keep_their_middle() -> None:
    page = ["Title", "line one of the page", "line two of the page", "last line"]

    cleaned = drop_running_lines([page, page, page])

    assert cleaned == [["line one of the page", "line two of the page"]] * 3


@pytest.mark.parametrize("line", ["12", "- 12 -", "xiv", "Page 3 of 10", "page 7", "(4)", "3/12", "IV."])
def test_page_numbers_are_recognized(line: str) -> None:
    assert is_page_number(line)


@pytest.mark.parametrize("line", ["12 apples", "Section 3", "mixed", "", "1.2.3"])
def test_other_lines_are_not_page_numbers(line: str) -> None:
    assert not is_page_number(line)


# -- paragraphs from geometry ----------------------------------------------------------------------


def box(left: float, baseline: float, right: float = 500.0, **rest: Any) -> LineBox:
    values: dict[str, Any] = {"size": 10.0, "ends_sentence": False, **rest}
    return LineBox(left=left, right=right, baseline=baseline, **values)


def test_paragraphs_break_at_gaps_indents_size_changes_and_short_lines() -> None:
    boxes = [
        box(72, 700, size=16),  # a heading
        box(72, 676),  # type size changes: a paragraph
        box(72, 664),
        box(72, 652, right=300, ends_sentence=True),  # ends short: the next one starts a paragraph
        box(72, 640),
        box(72, 628),
        box(72, 600),  # a gap of more than one line: a paragraph
        box(72, 588),
        box(90, 576),  # indented first line: a paragraph
        box(72, 564),
    ]

    assert paragraph_starts(boxes) == [True, True, False, False, True, False, True, False, True, False]


def test_a_sentence_going_on_into_the_next_column_is_one_paragraph() -> None:
    boxes = [
        box(72, 100),
        box(72, 88),  # the foot of the left column, mid-sentence
        box(320, 700, starts_lower=True),  # the head of the right column goes on
        box(320, 688, ends_sentence=True, right=400),
        box(320, 676),  # back up? no: ends short before it, so a new paragraph
        box(72, 690, starts_lower=False),  # up the page and a capital: a new paragraph
    ]

    assert paragraph_starts(boxes) == [True, False, False, False, True, True]


def test_code_lines_are_kept_apart_and_same_baseline_pieces_together() -> None:
    boxes = [
        box(72, 700),
        box(72, 688, fixed_pitch=True),
        box(72, 676, fixed_pitch=True),
        box(72, 664),
        box(300, 664),  # the same baseline (a table cell): the same line
    ]

    assert paragraph_starts(boxes) == [True, True, True, True, False]


def test_a_line_pdfium_joined_at_a_hyphen_is_measured_from_its_last_visual_line() -> None:
    boxes = [box(72, 700), box(72, 688, last_baseline=676), box(72, 664)]

    assert paragraph_starts(boxes) == [True, False, False]


# -- assembling text and headings ------------------------------------------------------------------


def test_pages_become_text_with_page_starts_and_outline_headings() -> None:
    pages = [
        "1 Scope\nThis agreement covers the\nsupply of goods.\n\nA second paragraph.",
        "Definitions of\nterms used\nIn this agreement words mean what they say.",
        "Nothing here but text that mentions Payment terms in passing.",
    ]
    outline = [
        OutlineEntry(1, "Scope", 0),  # the line has a number the outline lacks
        OutlineEntry(2, "Definitions of terms used", 1),  # wrapped over two lines
        OutlineEntry(1, "Payment terms", 2),  # only inside a paragraph: recorded, not written
        OutlineEntry(1, "Nowhere", 2),  # not on its page: the page's start
        OutlineEntry(1, "Out of range", 7),  # no such page: left out
    ]

    text, layout = assemble(pages, outline)

    assert text == (
        "# 1 Scope\n\nThis agreement covers the supply of goods.\n\nA second paragraph.\f"
        "## Definitions of terms used\n\nIn this agreement words mean what they say.\f"
        "Nothing here but text that mentions Payment terms in passing."
    )
    third = text.index("Nothing")
    assert layout.page_starts == (0, text.index("## Def"), third)
    assert [(h.level, h.title, h.start) for h in layout.headings] == [
        (1, "1 Scope", 0),
        (2, "Definitions of terms used", text.index("## Def")),
        (1, "Nowhere", third),
        (1, "Payment terms", text.index("Payment terms")),
    ]


def test_an_empty_page_keeps_its_place() -> None:
    text, layout = assemble(["one", "", "three"])

    assert text == "one\f\fthree"
    assert layout.page_starts == (0, 4, 5)


def test_looking_for_titles_stops_when_its_budget_is_spent() -> None:
    lines = ["a line", "another", "more", "Scope"]

    assert find_heading_lines([squash(line) for line in lines], "Scope", 0) == (3, 4)
    spent = HeadingSearch(lines=3)
    assert find_heading_lines([squash(line) for line in lines], "Scope", 0, spent) is None


def test_a_label_scattered_at_page_edges_is_not_a_running_header() -> None:
    # "Details" starts 6 of 60 pages of a reference manual, spread all over it: kept.
    pages = [
        [("Details" if n % 10 == 0 else f"The {WORDS[n % 12]} entry"), f"Text {WORDS[n % 12]}."]
        for n in range(60)
    ]

    assert drop_running_lines(pages) == pages


def test_left_and_right_headers_go_by_the_page_numbers_printed_at_either_end() -> None:
    # A book's even pages print the number first, odd pages last; the titles change by chapter.
    pages = [
        [f"{n + 1} {WORDS[n // 4]}" if n % 2 else f"{WORDS[n // 4]} {n + 1}", f"The {WORDS[n % 12]} body."]
        for n in range(12)
    ]

    assert drop_running_lines(pages) == [[f"The {word} body."] for word in WORDS]
