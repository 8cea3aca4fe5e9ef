"""The heading-line text convention (:mod:`daemon.document.types`) as the extractors write it.

:class:`TextWriter` is what the extractors (DOCX, ODT, HTML) write their text with: headings as
``## Title`` lines, paragraphs and blocks separated by a blank line, the heading offsets recorded as
they are written, and the output limit enforced as the text grows (never after the fact).
:func:`list_label` writes a list item's counter.

The headings of the text formats that already have them (Markdown, reST) are found in the daemon's
process, not here (:mod:`daemon.document.headings`); the piecewise text clean-up both use is in
:mod:`daemon.document.text`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, Final

from daemon.document.text import line_pieces, one_line, replace_each
from daemon.document.types import (
    MAX_HEADINGS,
    MAX_TITLE_CHARS,
    NO_TEXT_CAP,
    Extracted,
    Format,
    Heading,
    Layout,
    TextCap,
    utf8_size,
)
from daemon.errors import DocumentError

MAX_HEADING_LEVEL: Final = 6
"""Deeper headings are written and recorded at this level: the chunker reads ``#`` to ``######``."""


class TextWriter:
    """Builds an extractor's text in the heading-line convention, with its layout.

    Blocks (headings, paragraphs, line blocks such as a list or a table) are separated by one blank
    line. Over its cap (:class:`~daemon.document.types.TextCap`, or a number of characters) it
    raises :class:`DocumentError` at once (``too_large``, or ``too_expanded`` over the expansion
    cap), so a document that would extract to gigabytes fails before its text is built."""

    def __init__(self, cap: TextCap | int) -> None:
        self._cap = (
            cap if isinstance(cap, TextCap) else TextCap(max_chars=cap, max_bytes=NO_TEXT_CAP.max_bytes)
        )
        self._parts: list[str] = []
        self._length = 0
        self._bytes = 0
        self._headings: list[Heading] = []
        self._headings_over_limit = 0

    @property
    def length(self) -> int:
        """Characters written so far."""
        return self._length

    def heading(self, level: int, title: str) -> None:
        """A heading line (``level`` clamped to 1..6); an empty title writes nothing, one longer than
        :data:`MAX_TITLE_CHARS` is written as a paragraph."""
        title = one_line(title)
        if not title:
            return
        if len(title) > MAX_TITLE_CHARS:
            self._append(title)
            return
        level = min(max(level, 1), MAX_HEADING_LEVEL)
        start = self._append("#" * level + " " + title)
        if len(self._headings) < MAX_HEADINGS:
            self._headings.append(Heading(level=level, title=title, start=start))
        else:
            self._headings_over_limit += 1

    def paragraph(self, text: str) -> None:
        """A paragraph: its whitespace made single spaces; an empty one writes nothing."""
        line = one_line(text)
        if line:
            self._append(line)

    def lines(self, lines: Iterable[str]) -> None:
        """A block of lines (list items, table rows), one per line; empty lines are left out."""
        kept = [line for line in (one_line(line) for line in lines) if line]
        if kept:
            self._append("\n".join(kept))

    def preformatted(self, text: str) -> None:
        """Preformatted text (code): its lines kept, each without control characters or trailing
        space, blank ones left out (so no line inside it reads as a heading after a blank line)."""
        blocks = []
        for piece in line_pieces(text):
            clean = replace_each(_PREFORMATTED, " ", piece.replace("\r", ""))
            # Tabs are four spaces, made so in the lines kept (a line of tabs is blank).
            kept = (line.rstrip().replace("\t", "    ") for line in clean.split("\n") if line.strip())
            block = "\n".join(kept)
            if block:
                blocks.append(block)
        self.lines_verbatim(blocks)

    def lines_verbatim(self, lines: Iterable[str]) -> None:
        """A block of lines already clean (no line breaks or controls in them), kept as they are."""
        block = "\n".join(lines)
        if block:
            self._append(block)

    def finish(self, fmt: Format, what: str, details: dict[str, Any] | None = None) -> Extracted:
        """The text and layout written, or ``DocumentError("no_text")`` when nothing was.

        ``what`` names the document for that message ("this DOCX file")."""
        if not self._parts:
            raise DocumentError("no_text", f"{what} holds no text")
        recorded: dict[str, Any] = dict(details or {})
        if self._headings_over_limit:
            recorded["headings_not_in_layout"] = self._headings_over_limit
        return Extracted(
            text="".join(self._parts),
            format=fmt,
            layout=Layout(headings=tuple(self._headings)),
            details=recorded,
        )

    def _append(self, block: str) -> int:
        separator = "\n\n" if self._parts else ""
        start = self._length + len(separator)
        end = start + len(block)
        size = self._bytes + len(separator) + utf8_size(block)
        self._cap.check(end, size, "the extracted text")
        if separator:
            self._parts.append(separator)
        self._parts.append(block)
        self._length, self._bytes = end, size
        return start


# In preformatted text line breaks stay and a tab is four spaces; other controls become spaces.
_PREFORMATTED: Final = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")

_ROMAN: Final = (
    (1000, "m"), (900, "cm"), (500, "d"), (400, "cd"), (100, "c"), (90, "xc"),
    (50, "l"), (40, "xl"), (10, "x"), (9, "ix"), (5, "v"), (4, "iv"), (1, "i"),
)  # fmt: skip


def list_label(number: int, style: str) -> str:
    """``number`` as a list counter in ``style``: a WordprocessingML ``numFmt`` (``decimal``,
    ``decimalZero``, ``lowerLetter``, ``upperLetter``, ``lowerRoman``, ``upperRoman``, ``none``) or an
    HTML ``<ol type>`` (``1``, ``a``, ``A``, ``i``, ``I``); other styles count in decimal."""
    if style == "none":
        return ""
    if style in ("lowerLetter", "upperLetter", "a", "A") and number > 0:
        # a..z, then aa..zz, as word processors do
        letters = chr(ord("a") + (number - 1) % 26) * ((number - 1) // 26 + 1)
        return letters.upper() if style in ("upperLetter", "A") else letters
    if style in ("lowerRoman", "upperRoman", "i", "I") and 0 < number < 4000:
        roman = ""
        for value, digits in _ROMAN:
            count, number = divmod(number, value)
            roman += digits * count
        return roman.upper() if style in ("upperRoman", "I") else roman
    if style == "decimalZero" and 0 <= number < 10:
        return f"0{number}"
    return str(number)
