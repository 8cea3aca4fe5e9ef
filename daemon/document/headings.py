"""The headings of the text formats that have them (Markdown, reStructuredText), found in the
daemon's own process.

* :func:`scan_markdown` and :func:`scan_rst` find the headings of a decoded Markdown or reST text
  without changing it (offsets into it), and count the marks that format detection
  (:mod:`daemon.document.formats`) weighs;
* :func:`text_layout` (:func:`markup_layout`) makes them a document's layout, looking at the first
  :data:`MAX_SCAN_LINES` lines.

Headings keep the bounds every layout keeps (:data:`~daemon.document.types.MAX_HEADINGS`,
:data:`~daemon.document.types.MAX_TITLE_CHARS`). Everything here is linear in the text, in time and
in memory, and uses the standard library only: the text formats are read in the daemon's own
process, not in an extraction worker, so nothing here may be slow or large on hostile input. No
regular expression here repeats a group greedily (the engine keeps an entry per repetition it could
backtrack into: a long line of repetitions cost many times its size) or searches for a run whose
failure it would retry from each of its characters.
"""

from __future__ import annotations

import itertools
import re
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Final

from daemon.document.text import short_line
from daemon.document.types import MAX_HEADINGS, MAX_TITLE_CHARS, NO_LAYOUT, Format, Heading, Layout

MAX_SCAN_LINES: Final = 400_000
"""Lines of a Markdown or reST text that :func:`markup_layout` looks at for headings, at most. The
scan is Python and runs in the daemon's own process (a thread of it): 16 MiB
(``limits.max_input_bytes``) of 2-byte lines is 8 M lines, seconds of the daemon's CPU
(``bench/RESULTS.md#heading-scan``). An input within 16 MiB whose lines average 42 bytes or more is
scanned whole; past this many lines, headings stay in the text (the chunker still breaks at them) but
not in the layout, as past :data:`~daemon.document.types.MAX_HEADINGS`."""


@dataclass(frozen=True, slots=True)
class MarkdownScan:
    """What :func:`scan_markdown` found: the headings, and counts that format detection weighs."""

    headings: tuple[Heading, ...] = ()
    atx: int = 0
    """ATX headings (``## Title``) outside code."""
    atx_isolated: int = 0
    """ATX headings with a blank line (or the start) before and a blank line (or the end) after, whose
    title reads as one (not a sentence ending in a full stop, not code): what a Markdown document
    has and a script's or config file's ``# comment`` lines rarely do."""
    setext: int = 0
    """Setext headings (a line underlined with ``===`` or ``---``)."""
    hash_lines: int = 0
    """Lines outside code that start with ``#`` (headings or not)."""
    fences: int = 0
    """Fenced code blocks (```` ``` ```` or ``~~~``) that were closed."""
    links: int = 0
    """Inline links and images (``[text](target)``)."""
    lines: int = 0
    """Non-blank lines outside code."""
    assignments: int = 0
    """Lines outside code that read as a script's or config file's assignment (``name = value``,
    ``export NAME=value``)."""


@dataclass(frozen=True, slots=True)
class RstScan:
    """What :func:`scan_rst` found: the section titles, and counts that format detection weighs."""

    headings: tuple[Heading, ...] = ()
    overlined: int = 0
    """Titles with an overline as well as an underline."""
    directives: int = 0
    """Explicit markup that only reST has: directives (``.. note::``) and targets (``.. _name:``)."""
    roles: int = 0
    """Interpreted text with a role (``:ref:`name```) and field-list lines (``:Author: x``)."""


def _lines(text: str) -> Iterator[tuple[int, str]]:
    """Each line of ``text`` with the offset where it starts, without its line break (``\\n``,
    ``\\r\\n``; a lone ``\\r`` is not one: the daemon's texts come from files that use ``\\n``)."""
    start = 0
    length = len(text)
    while start < length:
        end = text.find("\n", start)
        if end < 0:
            end = length
        line = text[start:end]
        yield start, line[:-1] if line.endswith("\r") else line
        start = end + 1


# Markdown (CommonMark's block structure, the parts that decide what is a heading).
_FENCE_OPEN: Final = re.compile(r" {0,3}(`{3,}|~{3,})(.*)")
_ATX: Final = re.compile(r" {0,3}(#{1,6})(?:[ \t]+(.*)|[ \t]*)")
_SETEXT: Final = re.compile(r" {0,3}(=+|-+)[ \t]*")
# Three or more of one of - * _, spaces and tabs between: each alternative spelt out, not one
# backreference repeated (see the module's doc).
_THEMATIC: Final = re.compile(
    r" {0,3}(?:-[ \t]*-[ \t]*-[- \t]*|\*[ \t]*\*[ \t]*\*[* \t]*|_[ \t]*_[ \t]*_[_ \t]*)"
)
_CONTAINER: Final = re.compile(r" {0,3}(?:>|[-+*](?:[ \t]|$)|\d{1,9}[.)](?:[ \t]|$)|<)")
# A link's text and target stop at a "[": the search from each "[" then ends at the next one.
_LINK: Final = re.compile(r"\[[^\[\]\n]{1,200}\]\([^)\[\s]{1,500}\)")
_ASSIGNMENT: Final = re.compile(
    r"[ \t]*(?:(?:export|set|local|declare|readonly)[ \t]+\S|[\w.\[\]$\"'-]+[ \t]*=[^=])"
)
_NOT_A_TITLE: Final = re.compile(r"[.;,=({\\]$|=")
"""A "title" ending in a full stop or holding code is a comment line (``# Set the port.``)."""


@dataclass(slots=True)
class _Paragraph:
    """The paragraph being read (a setext underline makes it a heading)."""

    start: int = -1
    lines: list[str] = field(default_factory=list)
    chars: int = 0

    def add(self, start: int, line: str) -> None:
        """Add a line (stripped of its indentation) to the paragraph."""
        if self.start < 0:
            self.start = start
        # Only a short paragraph can become a heading: keep no more of it than a title can hold.
        if self.chars <= MAX_TITLE_CHARS:
            self.lines.append(line)
            self.chars += len(line) + 1

    def clear(self) -> None:
        self.start = -1
        self.lines.clear()
        self.chars = 0


@dataclass(slots=True)
class _MarkdownState:
    counting: bool = True
    headings: list[Heading] = field(default_factory=list)
    atx: int = 0
    atx_isolated: int = 0
    setext: int = 0
    hash_lines: int = 0
    fences: int = 0
    links: int = 0
    lines: int = 0
    assignments: int = 0
    fence: str = ""
    """The open fence's characters (``"```"``), empty outside a fenced block."""
    paragraph: _Paragraph = field(default_factory=_Paragraph)
    pending_isolated: bool = False
    """The previous line was an ATX heading with a blank line before it."""
    previous_blank: bool = True

    def add_heading(self, level: int, title: str, start: int) -> None:
        if len(self.headings) < MAX_HEADINGS and (line := short_line(title)):
            self.headings.append(Heading(level=level, title=line, start=start))


def scan_markdown(text: str, *, counts: bool = True, max_lines: int | None = None) -> MarkdownScan:
    """The ATX and setext headings of a Markdown text (not those in fenced or indented code, nor in
    block quotes or list items), with their offsets, and (``counts``) the counts that detection
    weighs; without them it is faster (links and assignments are not looked for). ``max_lines``: look
    at the first that many lines only."""
    state = _MarkdownState(counting=counts)
    for start, line in itertools.islice(_lines(text), max_lines):
        _markdown_line(state, start, line)
        if not counts and len(state.headings) >= MAX_HEADINGS:
            break  # no later heading would be recorded
    if state.pending_isolated:
        state.atx_isolated += 1
    return MarkdownScan(
        headings=tuple(state.headings),
        atx=state.atx,
        atx_isolated=state.atx_isolated,
        setext=state.setext,
        hash_lines=state.hash_lines,
        fences=state.fences,
        links=state.links,
        lines=state.lines,
        assignments=state.assignments,
    )


# The characters a line (after at most three spaces) must start with to be anything but paragraph
# text: the fast path leaves every other line to a plain append.
_BLOCK_STARTS: Final = frozenset("#`~=-*_+><0123456789")


def _markdown_line(state: _MarkdownState, start: int, line: str) -> None:
    stripped = line.lstrip()
    if state.pending_isolated:
        state.atx_isolated += not stripped
        state.pending_isolated = False
    if state.fence:
        _markdown_fenced_line(state, line)
        return
    if not stripped:
        state.paragraph.clear()
        state.previous_blank = True
        return
    previous_blank, state.previous_blank = state.previous_blank, False
    state.lines += 1
    in_paragraph = bool(state.paragraph.lines)
    leading = len(line) - len(stripped)
    indent = leading if line.find("\t", 0, leading) < 0 else _indent(line)
    if indent >= 4:
        if in_paragraph:
            state.paragraph.add(start, stripped)  # a lazy continuation line
        return  # else indented code
    block = stripped[0] in _BLOCK_STARTS
    if block and _markdown_block_line(state, start, line, previous_blank, in_paragraph):
        return
    if state.counting:
        state.links += len(_LINK.findall(line))
        state.assignments += bool(_ASSIGNMENT.match(line))
    state.paragraph.add(start, stripped)


def _markdown_block_line(
    state: _MarkdownState, start: int, line: str, previous_blank: bool, in_paragraph: bool
) -> bool:
    """Handle a line that may open a block (fence, heading, rule, container), by its first
    character; False if it is paragraph text after all."""
    first = line.lstrip()[0]
    if first == "#":
        state.hash_lines += 1
        atx = _ATX.fullmatch(line)
        if atx is None:
            return False
        state.atx += 1
        title = _without_closing_sequence(atx.group(2)).strip() if atx.group(2) else ""
        state.pending_isolated = previous_blank and bool(title) and not _NOT_A_TITLE.search(title)
        if title:
            state.add_heading(len(atx.group(1)), title, start)
        state.paragraph.clear()
        return True
    if first in "`~":
        fence = _FENCE_OPEN.fullmatch(line)
        if fence is None or (fence.group(1)[0] == "`" and "`" in fence.group(2)):
            return False
        state.fence = fence.group(1)
        state.paragraph.clear()
        return True
    underline = _SETEXT.fullmatch(line) if in_paragraph and first in "=-" else None
    if underline:
        state.setext += 1
        level = 1 if underline.group(1)[0] == "=" else 2
        state.add_heading(level, " ".join(state.paragraph.lines), state.paragraph.start)
        state.paragraph.clear()
        return True
    if _THEMATIC.fullmatch(line) or (not in_paragraph and _CONTAINER.match(line)):
        state.paragraph.clear()  # a rule, or a quote/list/HTML block: no heading under it
        return True
    return False


def _without_closing_sequence(title: str) -> str:
    """An ATX title without its closing sequence: ``#`` characters at its end (spaces and tabs after
    them) preceded by a space or a tab, or making up all of it."""
    body = title.rstrip(" \t")
    opening = body.rstrip("#")
    if len(opening) < len(body) and (not opening or opening[-1] in " \t"):
        return opening
    return title


def _markdown_fenced_line(state: _MarkdownState, line: str) -> None:
    stripped = line.strip()
    char = state.fence[0]
    if _indent(line) < 4 and stripped.startswith(state.fence) and stripped.count(char) == len(stripped):
        state.fence = ""
        state.fences += 1
        state.previous_blank = True  # what follows a code block starts a new block


def _indent(line: str) -> int:
    """The width of the line's indentation, tabs to the next multiple of four, counted up to 4 (code)."""
    width = 0
    for char in line:
        if char == " ":
            width += 1
        elif char == "\t":
            width += 4 - width % 4
        else:
            break
        if width >= 4:
            break
    return width


# reStructuredText: a section title is a line with an underline (and maybe an overline) of one
# punctuation character repeated; levels follow the order in which the adornment styles appear.
_DIRECTIVE: Final = re.compile(r"\.\. (?:[A-Za-z][\w.+-]*::|_[^:\n]{1,200}:|\|[^|\n]{1,200}\| [\w-]+::)")
_ROLE: Final = re.compile(r":[A-Za-z][\w.+-]*:`[^`\n]")
_FIELD: Final = re.compile(r":[A-Za-z][\w -]{0,40}: \S")


@dataclass(slots=True)
class _RstState:
    headings: list[Heading] = field(default_factory=list)
    styles: list[tuple[str, bool]] = field(default_factory=list)
    overlined: int = 0
    directives: int = 0
    roles: int = 0

    def add_heading(self, style: tuple[str, bool], title: str, start: int) -> None:
        if style not in self.styles:
            self.styles.append(style)
        if style[1]:
            self.overlined += 1
        if len(self.headings) < MAX_HEADINGS and (line := short_line(title)):
            level = self.styles.index(style) + 1
            self.headings.append(Heading(level=level, title=line, start=start))


def scan_rst(text: str, *, counts: bool = True, max_lines: int | None = None) -> RstScan:
    """The section titles of a reStructuredText text (underlined, or over- and underlined with the
    same character), levels by the order their styles first appear, and (``counts``) the counts
    that detection weighs. ``max_lines``: look at the first that many lines only."""
    state = _RstState()
    # A title takes three lines at most: the scan keeps those in view, not a list of every line.
    source = itertools.islice(_lines(text), max_lines)
    window: deque[tuple[int, str]] = deque(itertools.islice(source, 3))
    previous_blank = True
    while window:
        line = window[0][1]
        if counts:
            if line[:3] == ".. ":
                state.directives += bool(_DIRECTIVE.match(line))
            state.roles += len(_ROLE.findall(line)) + bool(_FIELD.match(line))
        taken = _rst_title(state, window) if previous_blank else 0
        if not counts and len(state.headings) >= MAX_HEADINGS:
            break  # no later title would be recorded
        previous_blank = True if taken else not line.strip()  # a title ends a block
        for _ in range(taken or 1):
            window.popleft()
            window.extend(itertools.islice(source, 1))
    return RstScan(
        headings=tuple(state.headings),
        overlined=state.overlined,
        directives=state.directives,
        roles=state.roles,
    )


_PUNCTUATION: Final = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")


def _is_adornment(line: str) -> bool:
    """Whether ``line`` is one punctuation character repeated, then maybe spaces and tabs."""
    body = line.rstrip(" \t")
    return bool(body) and body[0] in _PUNCTUATION and body.count(body[0]) == len(body)


def _rst_title(state: _RstState, window: deque[tuple[int, str]]) -> int:
    """Lines taken by a section title starting at ``window[0]`` (0: none starts there); ``window``
    holds that line and the two after it (fewer at the end of the text)."""
    start, line = window[0]
    following = window[1][1] if len(window) > 1 else ""
    if line[:1] not in _PUNCTUATION and following[:1] not in _PUNCTUATION:
        return 0  # the fast path: neither an overline nor an underline
    adornment = _is_adornment(line)
    if adornment and len(window) > 2:
        under = window[2][1].rstrip()
        overline = line.rstrip()
        if (
            under == overline
            and following.strip()
            and not _is_adornment(following)
            and len(following.strip()) <= len(overline)
        ):
            state.add_heading((overline[0], True), following, start)
            return 3
    if adornment or not following or not _is_title_text(line):
        return 0
    under = following.rstrip()
    if not _is_adornment(under):
        return 0
    # docutils: an underline shorter than its title is still one from four characters on.
    if len(under) < len(line.rstrip()) and len(under) < 4:
        return 0
    state.add_heading((under[0], False), line, start)
    return 2


def _is_title_text(line: str) -> bool:
    # A title starts in the first column (indented text is a quote, literal block or directive body)
    # and is not explicit markup (a comment or directive).
    return bool(line.strip()) and not line[0].isspace() and not line.startswith("..")


def markup_layout(text: str, fmt: Format) -> Layout:
    """The headings of a Markdown or reST text as a layout (text formats have no pages); no
    headings for other formats."""
    if fmt is Format.MARKDOWN:
        return Layout(headings=scan_markdown(text, counts=False, max_lines=MAX_SCAN_LINES).headings)
    if fmt is Format.RST:
        return Layout(headings=scan_rst(text, counts=False, max_lines=MAX_SCAN_LINES).headings)
    return Layout()


def text_layout(text: str, fmt: Format) -> Layout:
    """The layout of a decoded text-format document: for Markdown and reST the headings found in
    ``text`` (offsets into it; the text itself is not changed), for plain text (and any other
    format) none."""
    if fmt in (Format.MARKDOWN, Format.RST):
        return markup_layout(text, fmt)
    return NO_LAYOUT
