"""The document stage's types: a format, what extraction gives back (a document's text with its
layout: pages, headings), the limits it runs under, and the checked :class:`Document`.

Extractors (:mod:`daemon.document.extract`) write text in one convention that the chunker already
reads as its strongest breaks (:mod:`daemon.summary.chunking`, level ``section``):

* pages are separated by a form feed (``\\f``);
* a heading is its own line, ``#`` repeated by its level then a space then the title, with a blank
  line before and after (``\\n\\n## 2.1 Scope\\n\\n``), as in Markdown;
* paragraphs are separated by a blank line; lines inside a paragraph are joined with spaces.

:class:`Layout` records where each page and heading starts, as character offsets into that text,
so that any span of it (a chunk) can be told its pages and its heading path: the provenance that a
staged summary's parts carry into the result (``sources``).
"""

from __future__ import annotations

import bisect
import enum
import math
from dataclasses import dataclass, field
from typing import Any, Final

from daemon.errors import DocumentError


class Format(enum.StrEnum):
    """A document's format, detected from its bytes (:func:`daemon.document.formats.detect_format`).
    The values are written into results (``format``): keep them stable."""

    TEXT = "text"
    MARKDOWN = "markdown"
    RST = "rst"
    HTML = "html"
    PDF = "pdf"
    DOCX = "docx"
    ODT = "odt"


EXTRACTED_FORMATS: Final = frozenset({Format.HTML, Format.PDF, Format.DOCX, Format.ODT})
"""Formats whose text comes out of an extractor (in a sandboxed worker); the others are text already
and are decoded, with their headings found in the text."""


@dataclass(frozen=True, slots=True)
class Heading:
    """A heading: its level (1 is the top), its title as one line, where it starts in the text."""

    level: int
    title: str
    start: int


MAX_TITLE_CHARS: Final = 300
"""A "heading" longer than this is not one (a whole paragraph styled as a heading, or hostile input):
an extractor writes it as a paragraph and no layout records it, since every result's ``sources`` may
repeat a title. The pool refuses a worker's reply with a longer title."""
MAX_HEADINGS: Final = 10_000
"""Headings recorded in a layout at most; later ones stay in the text but not in the layout, whose
look-ups (:meth:`Layout.heading_path`) are linear in the number of headings. The pool refuses a
worker's reply with more."""


@dataclass(frozen=True, slots=True)
class Layout:
    """Where pages and headings start in a document's text (character offsets, ascending).

    ``page_starts[i]`` is where page ``i + 1`` starts (``page_starts[0] == 0``); empty for documents
    without pages (everything but PDF)."""

    page_starts: tuple[int, ...] = ()
    headings: tuple[Heading, ...] = ()

    @property
    def pages(self) -> int:
        """How many pages the document has (0: not a paged format)."""
        return len(self.page_starts)

    def page_range(self, start: int, end: int) -> tuple[int, int] | None:
        """The first and last page (1-based) that the text span ``[start, end)`` touches."""
        if not self.page_starts:
            return None
        first = bisect.bisect_right(self.page_starts, start)
        last = bisect.bisect_right(self.page_starts, max(start, end - 1))
        return first, last

    def heading_path(self, offset: int) -> tuple[str, ...]:
        """The titles of the headings in force at ``offset``, outermost first."""
        path: list[Heading] = []
        for heading in self.headings:
            if heading.start > offset:
                break
            while path and path[-1].level >= heading.level:
                path.pop()
            path.append(heading)
        return tuple(heading.title for heading in path)

    def headings_in(self, start: int, end: int) -> tuple[str, ...]:
        """The titles of the headings that start inside ``[start, end)``, in order."""
        starts = [heading.start for heading in self.headings]
        low = bisect.bisect_left(starts, start)
        high = bisect.bisect_left(starts, end)
        return tuple(heading.title for heading in self.headings[low:high])

    def source_of(self, start: int, end: int) -> dict[str, Any]:
        """Where the span ``[start, end)`` came from, as a result's ``sources`` entry holds it:
        ``pages`` ``[first, last]`` for a paged document, ``section`` (the heading path at its start)
        and ``headings`` (those that start inside it) when the document has headings."""
        source: dict[str, Any] = {}
        pages = self.page_range(start, end)
        if pages is not None:
            source["pages"] = list(pages)
        if self.headings:
            source["section"] = list(self.heading_path(start))
            source["headings"] = list(self.headings_in(start, end))
        return source


NO_LAYOUT: Final = Layout()


@dataclass(frozen=True, slots=True)
class Extracted:
    """An extractor's answer: the text in the convention above, its layout, and the format read."""

    text: str
    format: Format
    layout: Layout = NO_LAYOUT
    details: dict[str, Any] = field(default_factory=dict)
    """What the result records of the extraction besides the format (e.g. ``pages``, ``extractor``)."""


EXPANSION_REASON: Final = "too_expanded"
"""The reason of a document whose extracted text is over its expansion cap
(:meth:`ExtractLimits.text_cap`)."""


def utf8_size(text: str) -> int:
    """The size of ``text`` as UTF-8 (a lone surrogate, which extractors may return and the daemon
    replaces, counts its three bytes)."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


@dataclass(frozen=True, slots=True)
class TextCap:
    """How much text one document's extraction may give: characters, and bytes as UTF-8 (the lower
    of ``limits.max_input_bytes`` and the expansion cap for the input's size)."""

    max_chars: int
    max_bytes: int
    input_bytes: int = 0
    ratio: float | None = None
    """The expansion ratio when :attr:`max_bytes` is the expansion cap; None when it is the text's
    absolute limit (or there is none)."""

    def check(self, chars: int, utf8_bytes: int, what: str) -> None:
        """Raise :class:`DocumentError` when ``chars`` characters of ``utf8_bytes`` bytes are over
        the cap: ``too_large`` over an absolute limit, :data:`EXPANSION_REASON` over the expansion
        cap. ``what`` names the text ("the text extracted from this DOCX")."""
        if chars > self.max_chars:
            raise DocumentError(
                "too_large",
                f"{what} is over the limit of {self.max_chars} characters (extract.max_output_chars)",
            )
        if utf8_bytes <= self.max_bytes:
            return
        if self.ratio is None:
            raise DocumentError(
                "too_large",
                f"{what} is over the limit of {self.max_bytes} bytes as UTF-8 (limits.max_input_bytes)",
            )
        raise DocumentError(
            EXPANSION_REASON,
            f"{what} is over {self.max_bytes} bytes as UTF-8, more than {self.ratio:g} times the "
            f"input's {self.input_bytes} bytes (extract.max_expansion_ratio; text up to "
            "extract.expansion_floor_bytes is allowed whatever the input's size)",
        )


NO_TEXT_CAP: Final = TextCap(max_chars=2**62, max_bytes=2**62)


@dataclass(frozen=True, slots=True)
class ExtractLimits:
    """What one extraction may cost; over any of them the document fails with a reason.

    Set from the ``[extract]`` config section; the defaults are its defaults."""

    max_pages: int = 2000
    """PDF pages (``too_large`` over it; the page count is read before any page is)."""
    max_output_chars: int = 20_000_000
    """Characters of extracted text (``too_large``): extraction can multiply a compressed input."""
    max_text_bytes: int = 16 * 1024 * 1024
    """Extracted text as UTF-8 (``too_large``): ``limits.max_input_bytes``, which the text must fit
    like any input (the reader sets it from there)."""
    max_expansion_ratio: float = 20.0
    """Extracted text as UTF-8 over the input's bytes (:data:`EXPANSION_REASON` over it), for text
    past :attr:`expansion_floor_bytes`: a small input must not hold the daemon's memory and engine
    time of a large one."""
    expansion_floor_bytes: int = 1024 * 1024
    """Extracted text up to this many bytes is never refused for its ratio (a tiny input's ratio
    says nothing)."""
    max_unpacked_bytes: int = 200 * 1024 * 1024
    """DOCX/ODT: the sum of the uncompressed sizes of the ZIP entries read; PDF: of its Flate streams'
    text-like output, screened before PDFium reads the file (``too_large``)."""
    max_compression_ratio: float = 200.0
    """DOCX/ODT: uncompressed / compressed size of any entry read; PDF: of a stream past 8 MiB
    (``too_large``: a zip or Flate bomb)."""
    max_zip_entries: int = 10_000
    """DOCX/ODT: entries in the archive (``malformed`` over it)."""
    max_xml_depth: int = 256
    """DOCX/ODT/HTML: element nesting (``malformed`` over it)."""

    def text_cap(self, input_bytes: int) -> TextCap:
        """What the text extracted from an input of ``input_bytes`` bytes may reach: the lower of
        :attr:`max_text_bytes` and the expansion cap, ``max(expansion_floor_bytes,
        max_expansion_ratio * input_bytes)``."""
        expansion = max(self.expansion_floor_bytes, math.floor(self.max_expansion_ratio * input_bytes))
        if expansion < self.max_text_bytes:
            return TextCap(self.max_output_chars, expansion, input_bytes, self.max_expansion_ratio)
        return TextCap(self.max_output_chars, self.max_text_bytes, input_bytes)


@dataclass(frozen=True, slots=True)
class Document:
    """A checked document: text ready to summarize, with where it came from."""

    id: str
    text: str
    source: str
    sha256: str
    size_bytes: int
    encoding: str
    metadata: dict[str, Any] = field(default_factory=dict)
    format: Format = Format.TEXT
    """The format its bytes were read as (detected from them: :mod:`daemon.document.formats`)."""
    layout: Layout = NO_LAYOUT
    """Where its pages and headings start in ``text`` (the provenance of a staged summary's parts)."""
    extraction: dict[str, Any] = field(default_factory=dict)
    """What extraction recorded (pages, extractor); empty for text formats."""
