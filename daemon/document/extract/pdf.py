"""PDF text with PDFium (pypdfium2), made to read as prose: pages, paragraphs, headings.

Why PDFium: ``bench/extract.py`` measured it against pdfminer.six and pypdf on real PDFs from
Debian documentation packages: many times faster than both, no failure, and the same text
(``bench/RESULTS.md``, the PDF extraction section).
Its licence (pypdfium2: Apache-2.0 or BSD-3-Clause; PDFium: BSD-3-Clause) suits the project's.

:func:`extract_pdf` goes in four steps, each bounded on hostile input:

1. **Screening** (:func:`~daemon.document.extract.pdf_screen.screen`) the raw bytes before any
   parser sees them: a ``%PDF-`` header, an ``%%EOF`` near the end (a truncated download has none),
   and no stream that decodes to text beyond the limits, whatever filters it declares and however
   (a decompression bomb: PDFium would parse every operator of it and abort on memory).
2. **Opening** with PDFium: a password-protected file is ``encrypted``, an unreadable one
   ``malformed``, one of more than ``limits.max_pages`` pages ``too_large`` before a page is read.
3. **Reading** each page: PDFium's text in content order, with each line's position and type size,
   from which paragraph breaks are found (:func:`paragraph_starts`: a vertical gap, a change of
   type size, a first-line indent, a short line that ends a sentence).
4. **Cleaning** (:func:`assemble`), with no PDF library: lines repeated at the top or bottom of
   many pages (running headers and footers, whose page numbers change) and bare page numbers
   dropped, the lines of a paragraph joined, words hyphenated at a line end rejoined, and the
   outline (bookmarks) turned into headings where their titles are found as lines of their page.

The text follows :mod:`daemon.document.types`: pages separated by a form feed, paragraphs by a
blank line, headings as ``## Title`` lines. PDFium is not thread-safe: calls are serialised by a
lock. pypdfium2 is imported on first use, so importing this module initialises nothing (a process
that forks workers after importing it has no PDFium state to share).
"""

from __future__ import annotations

import ctypes
import importlib
import itertools
import math
import re
import statistics
import threading
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from daemon.document.extract.markup import MAX_HEADING_LEVEL
from daemon.document.extract.pdf_screen import screen
from daemon.document.text import line_pieces, one_line
from daemon.document.types import (
    MAX_HEADINGS,
    MAX_TITLE_CHARS,
    Extracted,
    ExtractLimits,
    Format,
    Heading,
    Layout,
    TextCap,
    utf8_size,
)
from daemon.errors import DocumentError

# -- characters and lines --------------------------------------------------------------------------

_LIGATURES: Final = {
    0xFB00: "ff", 0xFB01: "fi", 0xFB02: "fl", 0xFB03: "ffi", 0xFB04: "ffl", 0xFB05: "st", 0xFB06: "st",
}  # fmt: skip
_SPACES: Final = [0x09, 0x0B, 0x0C, 0xA0, 0x1680, *range(0x2000, 0x200B), 0x202F, 0x205F, 0x3000]
# Controls (C0 but line feed, DEL, C1), invisible formatting and direction marks (which can make
# text read other than it shows), the byte-order mark, private-use glyphs (unmapped: meaningless),
# noncharacters and lone surrogates (not encodable as UTF-8).
_DROPPED: Final = [
    *(code for code in range(0x20) if code not in (0x09, 0x0A, 0x0B, 0x0C, 0x0D)),
    *range(0x7F, 0xA0), *range(0x200B, 0x2010), *range(0x202A, 0x202F), *range(0x2060, 0x2070),
    0xFEFF, *range(0xFFF9, 0xFFFC), 0xFFFF, *range(0xE000, 0xF900), *range(0xFDD0, 0xFDF0),
    *range(0xD800, 0xE000),
]  # fmt: skip
_CHARACTERS: Final[dict[int, str | None]] = {
    **dict.fromkeys(_DROPPED),
    **dict.fromkeys(_SPACES, " "),
    **_LIGATURES,
    0x0D: "\n",
    0x85: "\n",
    0x2028: "\n",
    0x2029: "\n\n",
    # PDFium writes U+FFFE for a hyphen it found at a line end, and joins the two lines: give the
    # line break back, so that the rejoining rules below decide (a real compound keeps its hyphen).
    0xFFFE: "-\n",
}
_SOFT_HYPHEN_AT_LINE_END: Final = re.compile("\xad[ \t]*\r?\n")


def split_lines(page_text: str) -> list[str]:
    """A page's text as clean lines: odd characters out (:data:`_CHARACTERS`), each line's whitespace
    made single spaces, a blank line (``""``) kept where a paragraph breaks, runs of them one."""
    lines: list[str] = []
    carried = ""  # the start of a line that goes on in the next piece
    for piece in line_pieces(page_text):  # a piece at a time: memory follows a piece's lines
        text = _SOFT_HYPHEN_AT_LINE_END.sub("", piece.replace("\r\n", "\n")).replace("\xad", "")
        raws = (carried + text.translate(_CHARACTERS)).split("\n")
        carried = raws.pop()
        for raw in raws:
            _add_line(lines, raw)
    _add_line(lines, carried)
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _add_line(lines: list[str], raw: str) -> None:
    # The characters are clean already (no controls): one_line only makes whitespace runs one space.
    if raw and not raw.isspace():
        lines.append(one_line(raw))
    elif lines and lines[-1]:
        lines.append("")


# -- running headers, footers and page numbers -----------------------------------------------------

EDGE_LINES: Final = 2
"""Lines at the top and at the bottom of a page where running headers, footers and page numbers are
looked for (in text order: some writers draw the footer first)."""
MIN_REPEATS: Final = 3
"""A line is a running header or footer when it is at the edge of at least this many pages..."""
REPEAT_SHARE: Final = 1 / 50
"""... and of at least this share of them (a long book's chapter headers repeat for a chapter), and
densely (:data:`RUN_DENSITY`)."""
_PAGE_NUMBER: Final = re.compile(
    r"(?:page|p\.|pg\.?|seite|página|pagina)?\s*[-–—(\[]?\s*(?:\d{1,5}|[ivxlcdm]{1,8})\s*[-–—)\]]?"
    r"(?:\s*(?:/|of|de|von|sur)\s*\d{1,5})?\.?",
    re.IGNORECASE,
)
_DIGITS: Final = re.compile(r"\d+")
_EDGE_ROMAN: Final = re.compile(r"^[ivxlcdm]{1,8}\b|\b[ivxlcdm]{1,8}$")


def is_page_number(line: str) -> bool:
    """Whether ``line`` is nothing but a page number: ``12``, ``- 12 -``, ``xiv``, ``Page 3 of 10``."""
    return bool(line) and _PAGE_NUMBER.fullmatch(line) is not None


def running_key(line: str) -> str | None:
    """What a running header or footer line has in common from page to page: lowercased, its numbers
    (page numbers, also roman ones at either end) as ``#``. None for a line too short to tell (fewer
    than three letters: code's ``}``, a lone page number, which is judged by itself) or too long to
    be one (over :data:`_MAX_RUNNING_LINE` characters: text)."""
    if len(line) > _MAX_RUNNING_LINE:
        return None
    key = _DIGITS.sub("#", line.lower())
    key = _EDGE_ROMAN.sub("#", key)
    if sum(character.isalpha() for character in key) < 3:
        return None
    return key


def _edges(lines: Sequence[str], depth: int) -> list[int]:
    """The indices of the first and last ``depth`` non-blank lines (top and bottom apart)."""
    filled = [index for index, line in enumerate(lines) if line]
    if len(filled) <= 2 * depth:
        return filled
    return filled[:depth] + filled[-depth:]


def drop_running_lines(pages: Sequence[Sequence[str]]) -> list[list[str]]:
    """The pages without their running headers and footers and without bare page numbers at their
    edges. A running line is one at the edge of many pages, page numbers allowed to change
    (:func:`running_lines`), or one that carries the page's printed number at its end, or at its start
    once ends have shown the numbering (:func:`printed_page_offset`: ``Chapter 3: Objects 15``,
    ``70 CallExternal``, whatever its words). A body line that differs from page to page only by its
    numbers, at the edge of many pages in a row, goes too: the price of finding headers by text alone.

    A page's top and bottom edges never overlap, and on a page of few lines only the outermost line
    of each can go: a short page of lines that repeat (identical pages) keeps its middle."""
    edges = [_edges(lines, min(EDGE_LINES, max((_filled(lines) - 1) // 2, 0))) for lines in pages]
    edge_keys = [
        {index: key for index in indices if (key := running_key(lines[index]))}
        for lines, indices in zip(pages, edges, strict=True)
    ]
    repeated = running_lines(edge_keys)
    offset = printed_page_offset(pages, edges)
    cleaned: list[list[str]] = []
    for page, (lines, indices, keys) in enumerate(zip(pages, edges, edge_keys, strict=True)):
        dropped = {index for index, key in keys.items() if key in repeated}
        if offset is not None:
            printed = page + offset
            dropped.update(index for index in indices if printed in _edge_numbers(lines[index], leading=True))
        dropped.update(index for index in _edges(lines, EDGE_LINES) if is_page_number(lines[index]))
        kept = [line for index, line in enumerate(lines) if index not in dropped]
        cleaned.append(_tidy_blanks(kept))
    return cleaned


RUN_DENSITY: Final = 0.3
"""A running line is at the edge of at least this share of the pages from its first to its last
(every page of a chapter, or every other one for a left or right header); a label that often falls
at a page's edge by chance (``Details``, ``Examples`` in a reference manual) is scattered thinner."""


def running_lines(edge_keys: Sequence[dict[int, str]]) -> set[str]:
    """The keys (:func:`running_key`) of the running lines: at the edge of at least
    :data:`MIN_REPEATS` pages and :data:`REPEAT_SHARE` of them, and densely (:data:`RUN_DENSITY`)."""
    pages_of: dict[str, list[int]] = defaultdict(list)
    for page, keys in enumerate(edge_keys):
        for key in set(keys.values()):
            pages_of[key].append(page)
    needed = max(MIN_REPEATS, math.ceil(len(edge_keys) * REPEAT_SHARE))
    return {
        key
        for key, pages in pages_of.items()
        if len(pages) >= needed and len(pages) >= RUN_DENSITY * (pages[-1] - pages[0] + 1)
    }


PRINTED_NUMBER_SHARE: Final = 1 / 4
"""The share of pages whose edge lines must end with the same printed page number (less their index)
for that to be the document's page numbering."""
_TRAILING_NUMBER: Final = re.compile(r"(?<![\d.,])\b(\d{1,5})$")
_LEADING_NUMBER: Final = re.compile(r"^(\d{1,5})\b(?![.,]\d)")
_MAX_RUNNING_LINE: Final = 200  # characters: a longer line at a page's edge is text, not a header


def _filled(lines: Sequence[str]) -> int:
    return sum(1 for line in lines if line)


def _edge_numbers(line: str, *, leading: bool = False) -> set[int]:
    """The number at the end of a (short) line, where running headers print the page number, and with
    ``leading`` the one at its start. The start alone does not show a numbering: a numbered heading
    (``2 Prices``) often sits at the top of page 2."""
    if len(line) > _MAX_RUNNING_LINE:
        return set()
    found = [_TRAILING_NUMBER.search(line)] + ([_LEADING_NUMBER.search(line)] if leading else [])
    return {int(match.group(1)) for match in found if match}


def printed_page_offset(pages: Sequence[Sequence[str]], edges: Sequence[Sequence[int]]) -> int | None:
    """The document's printed page number less the page's index, when the edge lines of enough pages
    (:data:`PRINTED_NUMBER_SHARE`, and :data:`MIN_REPEATS`) end with numbers that agree on one."""
    votes: Counter[int] = Counter()
    for page, (lines, indices) in enumerate(zip(pages, edges, strict=True)):
        votes.update({number - page for index in indices for number in _edge_numbers(lines[index])})
    if not votes:
        return None
    offset, count = votes.most_common(1)[0]
    if count >= max(MIN_REPEATS, math.ceil(len(pages) * PRINTED_NUMBER_SHARE)):
        return offset
    return None


def _tidy_blanks(lines: Sequence[str]) -> list[str]:
    """``lines`` with no blank line at either end or after another."""
    tidy: list[str] = []
    for line in lines:
        if line or (tidy and tidy[-1]):
            tidy.append(line)
    while tidy and not tidy[-1]:
        tidy.pop()
    return tidy


# -- joining lines, rejoining hyphenated words -----------------------------------------------------

# Linear on any line: the repeated group is possessive (a greedy one keeps an entry per repetition
# to backtrack into), and the hyphenated word at a line end is looked for only from a word's start
# (searched from each of its letters, a line of letters not ending in a hyphen is quadratic).
_WORD: Final = re.compile(r"[^\W\d_]+(?:-[^\W\d_]+)*+")
_HEAD: Final = re.compile(r"(?<![^\W\d_])([^\W\d_]+)-$")
_TAIL: Final = re.compile(r"^[^\W\d_]+")


@dataclass(frozen=True, slots=True)
class Vocabulary:
    """The words a document uses inside its lines (lowercased), by which a hyphen at a line end is
    told to be a word's hyphenation (``exam-`` / ``ple``) or a compound's own (``well-`` / ``known``)."""

    words: frozenset[str]
    compounds: frozenset[str]
    """Words with a hyphen inside (``well-known``), as written inside a line."""
    compound_heads: frozenset[str] = frozenset()
    """What those compounds start with (``well``, ``non``): prefixes the document hyphenates."""

    @classmethod
    def of(cls, pages: Sequence[Sequence[str]]) -> Vocabulary:
        """The vocabulary of these pages' lines, leaving out the halves of words split at a line end
        (``exam`` and ``ple`` are not words of the document)."""
        words: set[str] = set()
        compounds: set[str] = set()
        for lines in pages:
            split_before = False
            for line in lines:
                split_here = line.endswith("-") and _HEAD.search(line) is not None
                # Each word as it is found (a line may hold millions); which is the last one is
                # known only at the end.
                tokens = (match.group() for match in _WORD.finditer(line.lower()))
                if split_before:
                    next(tokens, None)
                previous: str | None = None
                for token in tokens:
                    if previous is not None:
                        (compounds if "-" in previous else words).add(previous)
                    previous = token
                if previous is not None and not split_here:
                    (compounds if "-" in previous else words).add(previous)
                split_before = split_here
        heads = frozenset(compound.split("-", 1)[0] for compound in compounds)
        return cls(frozenset(words), frozenset(compounds), heads)


def hyphen_is_hyphenation(head: str, tail: str, vocabulary: Vocabulary) -> bool:
    """Whether ``head-`` at a line end and ``tail`` at the next line's start are one word that was
    hyphenated (join without the hyphen) rather than a compound (keep it). A compound the document
    writes elsewhere, or a capital after the hyphen (``Anglo-Saxon``; not in capitals throughout:
    ``EX-PRESS``), keeps it; a word the document writes elsewhere joins; a prefix the document
    hyphenates elsewhere (``non-`` in ``non-root``), or two words of three letters or more that it
    uses alone (``user-defined``), keep it; anything else (``exam-ple``) joins, as typesetters
    hyphenate far more often than compounds fall on a line end."""
    if tail[:1].isupper() and not head.isupper():
        return False  # a capital after the hyphen, not in capitals throughout (EX-PRESS)
    if f"{head}-{tail}".lower() in vocabulary.compounds:
        return False
    if (head + tail).lower() in vocabulary.words:
        return True
    if head.lower() in vocabulary.compound_heads:
        return False
    both_words = head.lower() in vocabulary.words and tail.lower() in vocabulary.words
    return not (both_words and len(head) >= 3 and len(tail) >= 3)


def join_lines(lines: Sequence[str], vocabulary: Vocabulary) -> str:
    """The lines of one paragraph as one line: joined with a space, or without one where a line ends
    in a hyphen after a letter (the hyphen dropped if :func:`hyphen_is_hyphenation`)."""
    parts: list[str] = []
    for line in lines:
        if not parts:
            parts.append(line)
            continue
        head = _HEAD.search(parts[-1])
        if head is None:
            parts.append(" " + line)
            continue
        tail = _TAIL.match(line)
        if tail is not None and hyphen_is_hyphenation(head.group(1), tail.group(0), vocabulary):
            parts[-1] = parts[-1][:-1]
        parts.append(line)
    return "".join(parts)


# -- headings from the outline ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OutlineEntry:
    """A bookmark of the PDF's outline: its level (1 is the top), title, and page (0-based)."""

    level: int
    title: str
    page: int


MAX_OUTLINE_ENTRIES: Final = 20_000
"""Bookmarks read at most (a hostile outline can be as long as the file allows)."""
MAX_ENTRIES_PER_PAGE: Final = 64
"""Bookmarks of one page looked for as its heading lines; more are given the page's start."""
MAX_LINES_FOR_HEADINGS: Final = 5_000
"""A page of more lines than this (no real one) is not searched for heading lines."""
MAX_HEADING_LINES: Final = 3
"""A heading found on its page may be wrapped over this many lines."""
_MAX_NUMBERING: Final = 24  # characters of a squashed numbering ("appendixb12")
_NUMBERING: Final = re.compile(
    r"(?:chapter|section|part|appendix|annex|article|art|§)?(?:[0-9]{1,8}|[ivxlcdm]{1,6}|[a-z])?[0-9]{0,8}"
)


def squash(text: str) -> str:
    """``text`` lowercased with only its letters and digits: how a title is compared with a line
    (spacing, punctuation and ligatures differ between an outline and the page)."""
    return "".join(character for character in text.lower() if character.isalnum())


def _matches_title(candidate: str, title: str) -> bool:
    """Whether a (squashed) line is the (squashed) title, give or take a numbering on either side
    (``3.2 Scope`` in the text, ``Scope`` in the outline, or the other way round)."""
    if candidate == title:
        return True
    if len(candidate) > len(title):
        longer, shorter = candidate, title
    else:
        longer, shorter = title, candidate
    return (
        len(shorter) >= 3
        and longer.endswith(shorter)
        and _NUMBERING.fullmatch(longer[: len(longer) - len(shorter)]) is not None
    )


@dataclass(slots=True)
class HeadingSearch:
    """What is left of the work that looking for outline titles in the text may do in one document:
    lines tried as a title's start, characters searched for a title inside paragraphs. A hostile
    outline (thousands of titles, each on a page of thousands of lines) would otherwise cost their
    product; once spent, titles are no longer looked for and get their page's start."""

    lines: int = 2_000_000
    characters: int = 200_000_000


def find_heading_lines(
    squashed: Sequence[str], title: str, start: int, search: HeadingSearch | None = None
) -> tuple[int, int] | None:
    """The lines ``[first, last)`` at or after ``start`` that are ``title``, wrapped over up to
    :data:`MAX_HEADING_LINES` lines, or None. ``squashed`` are the page's lines through
    :func:`squash` (a blank line is ``""``: a heading does not wrap over it)."""
    wanted = squash(title)
    if len(wanted) < 2:
        return None
    search = search or HeadingSearch()
    longest = len(wanted) + _MAX_NUMBERING
    for first in range(start, len(squashed)):
        search.lines -= 1
        if search.lines < 0:
            return None
        candidate = ""
        for last in range(first, min(first + MAX_HEADING_LINES, len(squashed))):
            if not squashed[last]:
                break
            candidate += squashed[last]
            if len(candidate) > longest:
                break
            if _matches_title(candidate, wanted):
                return first, last + 1
    return None


# -- assembling the text ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Block:
    """A paragraph (level 0) or a heading (its level) of a page, as one line of text."""

    level: int
    text: str


def page_blocks(
    lines: Sequence[str],
    entries: Sequence[OutlineEntry],
    vocabulary: Vocabulary,
    search: HeadingSearch | None = None,
) -> tuple[list[Block], list[OutlineEntry]]:
    """A page's paragraphs and heading lines, and the entries not found as lines of it."""
    search = search or HeadingSearch()
    spans: list[tuple[int, int, OutlineEntry]] = []
    missing: list[OutlineEntry] = []
    searchable = len(lines) <= MAX_LINES_FOR_HEADINGS
    squashed = [squash(line) for line in lines] if searchable and entries else []
    cursor = 0
    for position, entry in enumerate(entries):
        found = None
        if searchable and position < MAX_ENTRIES_PER_PAGE:
            found = find_heading_lines(squashed, entry.title, cursor, search)
        if found is None:
            missing.append(entry)
            continue
        spans.append((found[0], found[1], entry))
        cursor = found[1]
    blocks: list[Block] = []
    paragraph: list[str] = []
    index = 0
    span_at = {first: (last, entry) for first, last, entry in spans}
    while index < len(lines):
        if index in span_at:
            if paragraph:
                blocks.append(Block(0, join_lines(paragraph, vocabulary)))
                paragraph = []
            last, entry = span_at[index]
            blocks.append(Block(min(max(entry.level, 1), MAX_HEADING_LEVEL), " ".join(lines[index:last])))
            index = last
            continue
        if lines[index]:
            paragraph.append(lines[index])
        elif paragraph:
            blocks.append(Block(0, join_lines(paragraph, vocabulary)))
            paragraph = []
        index += 1
    if paragraph:
        blocks.append(Block(0, join_lines(paragraph, vocabulary)))
    return blocks, missing


def _title_offset(page_text: str, title: str, search: HeadingSearch) -> int | None:
    """Where ``title`` is written in ``page_text`` (whitespace and punctuation aside), or None."""
    words = re.findall(r"\w+", title)[:20]
    search.characters -= len(page_text)
    if not words or search.characters < 0:
        return None
    found = re.search(r"\W*".join(map(re.escape, words)), page_text, re.IGNORECASE)
    return found.start() if found else None


def assemble(pages: Sequence[str], outline: Sequence[OutlineEntry] = ()) -> tuple[str, Layout]:
    """The document's text and layout from its pages' raw text (lines; a blank line where a paragraph
    breaks) and its outline: see the module's doc. Works on any extractor's page texts."""
    page_lines = drop_running_lines([split_lines(text) for text in pages])
    vocabulary = Vocabulary.of(page_lines)
    by_page: dict[int, list[OutlineEntry]] = defaultdict(list)
    for entry in outline:
        if 0 <= entry.page < len(pages):
            by_page[entry.page].append(entry)
    texts: list[str] = []
    starts: list[int] = []
    headings: list[Heading] = []
    offset = 0
    search = HeadingSearch()
    for index, lines in enumerate(page_lines):
        starts.append(offset)
        blocks, missing = page_blocks(lines, by_page.get(index, ()), vocabulary, search)
        page_text, page_headings = _write_page(blocks)
        headings.extend(Heading(h.level, h.title, offset + h.start) for h in page_headings)
        for entry in missing:
            found = _title_offset(page_text, entry.title, search)
            headings.append(Heading(entry.level, entry.title, offset + (found or 0)))
        texts.append(page_text)
        offset += len(page_text) + 1  # the form feed
    headings.sort(key=lambda heading: heading.start)  # stable: outline order among equal starts
    layout = Layout(page_starts=tuple(starts), headings=tuple(headings[:MAX_HEADINGS]))
    return "\f".join(texts), layout


def _write_page(blocks: Sequence[Block]) -> tuple[str, list[Heading]]:
    """A page's text from its blocks, and its headings (offsets into the page's text)."""
    parts: list[str] = []
    headings: list[Heading] = []
    length = 0
    for block in blocks:
        if parts:
            parts.append("\n\n")
            length += 2
        if block.level:
            headings.append(Heading(block.level, block.text, length))
            written = "#" * block.level + " " + block.text
        else:
            written = block.text
        parts.append(written)
        length += len(written)
    return "".join(parts), headings


# -- paragraph breaks from the page's geometry -----------------------------------------------------


@dataclass(frozen=True, slots=True)
class LineBox:
    """Where a line of a page is: its first character's left edge and baseline, its last character's
    right edge (PDF units, y upwards), its type size, whether it ends a sentence, and whether it is
    set in a fixed-pitch font from end to end (code)."""

    left: float
    right: float
    baseline: float
    size: float
    ends_sentence: bool
    fixed_pitch: bool = False
    last_baseline: float | None = None
    """The last character's baseline, where it differs: PDFium joins the two lines of a word it found
    hyphenated at a line end into one."""
    starts_lower: bool = False
    """Whether the line starts with a lower-case letter (a sentence going on)."""

    @property
    def bottom(self) -> float:
        """The baseline of the line's last visual line."""
        return self.baseline if self.last_baseline is None else self.last_baseline


PARAGRAPH_GAP: Final = 1.3
"""A drop between baselines this many times the page's usual one breaks a paragraph."""
SIZE_CHANGE: Final = 0.15
"""A change of type size by this share breaks a paragraph (headings are set larger)."""
INDENT: Final = 0.8
"""A line starting this many type sizes right of the one before, which started at the margin, is a
paragraph's indented first line."""
SHORT_LINE: Final = 2.5
"""A line ending a sentence this many type sizes short of its column's right edge ends a paragraph."""
_COLUMN_BIN: Final = 24.0  # points: lines whose left edges fall in one bin share a column's edges


def paragraph_starts(boxes: Sequence[LineBox]) -> list[bool]:
    """For each line of a page, in text order, whether it starts a paragraph (the first one does)."""
    if not boxes:
        return []
    pitch = _usual_pitch(boxes)
    margins, rights = _column_edges(boxes)
    starts = [True]
    for before, line in itertools.pairwise(boxes):
        starts.append(_breaks(before, line, pitch, margins, rights))
    return starts


def _breaks(
    before: LineBox, line: LineBox, pitch: float, margins: dict[int, float], rights: dict[int, float]
) -> bool:
    size = max(before.size, line.size, 1.0)
    drop = before.bottom - line.baseline
    if drop < -0.5 * size:
        # Back up the page: a new column or a text box elsewhere; a sentence that goes on from the
        # foot of one column to the head of the next is still one paragraph.
        return before.ends_sentence or not line.starts_lower
    if abs(drop) <= 0.5 * size:
        return False  # the same baseline: one visual line PDFium split (a superscript, a table row)
    if before.fixed_pitch or line.fixed_pitch:
        return True  # code: each of its lines kept as one, and apart from the prose around it
    if drop > PARAGRAPH_GAP * pitch:
        return True
    if abs(before.size - line.size) > SIZE_CHANGE * size:
        return True
    column = _bin(before.left)
    if line.left - before.left > INDENT * size and before.left <= margins[column] + 0.5 * size:
        return True
    return before.ends_sentence and before.right < rights[column] - SHORT_LINE * size


def _usual_pitch(boxes: Sequence[LineBox]) -> float:
    """The page's usual drop from one baseline to the next (1.2 type sizes when none tells)."""
    drops = [
        before.bottom - line.baseline
        for before, line in itertools.pairwise(boxes)
        if 0.5 * line.size < before.bottom - line.baseline < 3 * line.size
    ]
    if drops:
        return statistics.median(drops)
    return 1.2 * statistics.median(box.size for box in boxes)


def _bin(left: float) -> int:
    return int(left // _COLUMN_BIN)


def _column_edges(boxes: Sequence[LineBox]) -> tuple[dict[int, float], dict[int, float]]:
    """Per column (lines whose left edges fall near each other): its left margin and right edge."""
    margins: dict[int, float] = {}
    rights: dict[int, float] = {}
    for box in boxes:
        column = _bin(box.left)
        for near in (column - 1, column, column + 1):
            margins[near] = min(margins.get(near, box.left), box.left)
            rights[near] = max(rights.get(near, box.right), box.right)
    return margins, rights


# -- PDFium ----------------------------------------------------------------------------------------

_PDFIUM_LOCK: Final = threading.Lock()
# A sentence's end, allowing closing quotes and brackets and a footnote mark ("examples.5").
_SENTENCE_END: Final = re.compile(r"[.!?:;][\"'”’)\]]*[0-9*†‡]{0,2}$")
_MAX_TITLE_BYTES: Final = 4 * (MAX_TITLE_CHARS + 1)  # UTF-16, with its terminator
_MAX_OUTLINE_DEPTH: Final = 16


def _pdfium() -> Any:
    """pypdfium2, imported on first use (it initialises PDFium on import); untyped, hence Any."""
    return importlib.import_module("pypdfium2")


def extractor_name() -> str:
    """What ``details["extractor"]`` says: the pypdfium2 and PDFium versions."""
    pdfium = _pdfium()
    return f"pypdfium2 {pdfium.PYPDFIUM_INFO} (pdfium {pdfium.PDFIUM_INFO})"


def extract_pdf(data: bytes, limits: ExtractLimits) -> Extracted:
    """The text and layout of the PDF ``data`` (see the module's doc), or :class:`DocumentError`:
    ``malformed``, ``encrypted``, ``too_large`` (pages, inflated streams, characters), ``no_text``."""
    screen(data, limits)
    cap = limits.text_cap(len(data))
    with _PDFIUM_LOCK:
        pdf = _open(data)
        try:
            pages = len(pdf)
            if pages > limits.max_pages:
                raise DocumentError(
                    "too_large",
                    f"this PDF has {pages} pages, over the limit of {limits.max_pages} (extract.max_pages)",
                )
            outline = read_outline(pdf, pages)
            page_texts = _read_pages(pdf, pages, cap)
        finally:
            pdf.close()
    if not any(text.strip() for text in page_texts):
        raise DocumentError(
            "no_text", f"this PDF's {pages} page(s) have no text layer (a scan? OCR is not done)"
        )
    text, layout = assemble(page_texts, outline)
    cap.check(len(text), utf8_size(text), "this PDF's text")
    if not text.strip():
        raise DocumentError("no_text", "this PDF has no text but page numbers and running headers")
    details = {"pages": pages, "extractor": extractor_name(), "outline_entries": len(outline)}
    return Extracted(text=text, format=Format.PDF, layout=layout, details=details)


def _open(data: bytes) -> Any:
    pdfium = _pdfium()
    try:
        return pdfium.PdfDocument(data)
    except pdfium.PdfiumError as error:
        code = getattr(error, "err_code", None)
        # PDFium's error code is global and some failures leave it as it was: after an encrypted
        # file, a broken one would read as encrypted too. Only a file with /Encrypt can be.
        password = code in (pdfium.raw.FPDF_ERR_PASSWORD, pdfium.raw.FPDF_ERR_SECURITY)
        if password and b"/Encrypt" in data:
            raise DocumentError("encrypted", "this PDF is password-protected: it cannot be read") from None
        raise DocumentError(
            "malformed", "this PDF cannot be read: its structure is broken (PDFium cannot load it)"
        ) from None


def _read_pages(pdf: Any, pages: int, cap: TextCap) -> list[str]:
    """Every page's text with blank lines where paragraphs break; ``too_large`` (or
    ``too_expanded``) as soon as the text read is over ``cap`` (a page at a time: never a whole
    oversized document in memory)."""
    pdfium = _pdfium()
    texts: list[str] = []
    chars = size = 0
    for index in range(pages):
        try:
            text = read_page(pdf, index)
        except pdfium.PdfiumError:
            raise DocumentError("malformed", f"page {index + 1} of this PDF cannot be read") from None
        chars += len(text)
        size += utf8_size(text)
        cap.check(chars, size, f"this PDF's text by page {index + 1}")
        texts.append(text)
    return texts


def read_page(pdf: Any, index: int) -> str:
    """Page ``index``'s text in PDFium's order, one line per line, a blank line where a paragraph
    starts (:func:`paragraph_starts` on the lines' geometry)."""
    page = pdf[index]
    try:
        textpage = page.get_textpage()
        try:
            text = str(textpage.get_text_range())
            lines, boxes = _lines_with_boxes(textpage, text)
        finally:
            textpage.close()
    finally:
        page.close()
    parts: list[str] = []
    for line, starts in zip(lines, paragraph_starts(boxes), strict=True):
        if parts:
            parts.append("\n\n" if starts else "\n")
        parts.append(line)
    return "".join(parts)


_LINE: Final = re.compile(r"[^\r\n]+")


def _lines_with_boxes(textpage: Any, text: str) -> tuple[list[str], list[LineBox]]:
    """The non-blank lines of a page's text, and where each is (its first and last characters')."""
    raw = _pdfium().raw
    left, right, bottom, top = (ctypes.c_double() for _ in range(4))
    x, y = ctypes.c_double(), ctypes.c_double()
    lines: list[str] = []
    boxes: list[LineBox] = []
    for match in _LINE.finditer(text):
        line = match.group(0)
        stripped = line.strip()
        if not stripped:
            continue
        first = match.start() + (len(line) - len(line.lstrip()))
        last = match.start() + len(line.rstrip()) - 1
        first_char = raw.FPDFText_GetCharIndexFromTextIndex(textpage, first)
        last_char = raw.FPDFText_GetCharIndexFromTextIndex(textpage, last)
        if first_char < 0 or last_char < 0:
            continue  # a character PDFium made up: not on the page
        raw.FPDFText_GetCharOrigin(textpage, last_char, x, y)
        last_baseline = y.value
        raw.FPDFText_GetCharOrigin(textpage, first_char, x, y)
        raw.FPDFText_GetCharBox(textpage, last_char, left, right, bottom, top)
        size = float(raw.FPDFText_GetFontSize(textpage, first_char))
        fixed = _is_fixed_pitch(raw, textpage, first_char) and _is_fixed_pitch(raw, textpage, last_char)
        lines.append(stripped)
        boxes.append(
            LineBox(
                left=x.value,
                right=right.value,
                baseline=y.value,
                size=size if size > 0 else 10.0,
                ends_sentence=_SENTENCE_END.search(stripped) is not None,
                fixed_pitch=fixed,
                last_baseline=last_baseline if abs(last_baseline - y.value) > 0.5 * size else None,
                starts_lower=stripped[:1].islower(),
            )
        )
    return lines, boxes


_FIXED_PITCH_FLAG: Final = 1  # PDF font descriptor flag 1: FixedPitch
# TeX's and other writers' typewriter fonts rarely set that flag: their names tell.
_MONOSPACED_NAME: Final = re.compile(
    rb"mono|courier|typewriter|consol|menlo|inconsolata|fixed|(?:cm|lm|sf|ec|tx|pc)tt|tt\d", re.IGNORECASE
)
_FONT_NAME_BYTES: Final = 128


def _is_fixed_pitch(raw: Any, textpage: Any, char: int) -> bool:
    """Whether the font of character ``char`` is monospaced (code): by its flags or its name."""
    flags = ctypes.c_int(0)
    name = ctypes.create_string_buffer(_FONT_NAME_BYTES)
    size = int(raw.FPDFText_GetFontInfo(textpage, char, name, _FONT_NAME_BYTES, ctypes.byref(flags)))
    if flags.value & _FIXED_PITCH_FLAG:
        return True
    # A longer name is not copied (the buffer is left empty): judged by its flags alone.
    return 0 < size <= _FONT_NAME_BYTES and _MONOSPACED_NAME.search(name.value) is not None


def read_outline(pdf: Any, pages: int) -> list[OutlineEntry]:
    """The outline's entries with a title and a page of this document, in outline order, at most
    :data:`MAX_OUTLINE_ENTRIES`; cycles are cut by pypdfium2 (each bookmark is visited once)."""
    entries: list[OutlineEntry] = []
    for bookmark in itertools.islice(pdf.get_toc(max_depth=_MAX_OUTLINE_DEPTH), MAX_OUTLINE_ENTRIES):
        title = " ".join(bookmark_title(bookmark).split())
        destination = bookmark.get_dest()
        page = destination.get_index() if destination is not None else None
        if title and isinstance(page, int) and 0 <= page < pages:
            entries.append(OutlineEntry(level=int(bookmark.level) + 1, title=title, page=page))
    return entries


def bookmark_title(bookmark: Any) -> str:
    """A bookmark's title, clean (controls out, lone surrogates replaced); empty when it is longer
    than a heading may be (read through the raw API: pypdfium2's own decoding is strict)."""
    raw = _pdfium().raw
    size = int(raw.FPDFBookmark_GetTitle(bookmark.raw, None, 0))
    if size <= 2 or size > _MAX_TITLE_BYTES:
        return ""
    buffer = ctypes.create_string_buffer(size)
    raw.FPDFBookmark_GetTitle(bookmark.raw, buffer, size)
    title = buffer.raw[: size - 2].decode("utf-16-le", errors="replace")
    return title.translate(_CHARACTERS).replace("\ufffd", "")
