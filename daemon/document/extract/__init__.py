"""Text out of the formats that are not text already (PDF, DOCX, ODT, HTML), and the headings of
those that are (Markdown, reStructuredText).

:func:`extract` runs in a sandboxed extraction worker (:mod:`daemon.document.sandbox.pool`): it gets the
raw bytes and the format :func:`daemon.document.formats.detect_format` found, and gives back the
text in the heading-line convention of :mod:`daemon.document.types` with its layout, or raises
:class:`~daemon.errors.DocumentError` with a reason (``encrypted``, ``malformed``, ``too_large``,
``too_expanded``, ``no_text``, ``binary``). :func:`text_layout` runs in the daemon itself, on decoded text.

The extractors are imported when first needed: a worker pays for lxml (and the PDF library) only
when it extracts, and the daemon's own process, which only finds headings, never does.
"""

from __future__ import annotations

from daemon.document.extract.markup import markup_layout
from daemon.document.types import NO_LAYOUT, Extracted, ExtractLimits, Format, Layout


def extract(data: bytes, fmt: Format, limits: ExtractLimits) -> Extracted:
    """The text and layout of ``data``, read as ``fmt`` (one of
    :data:`~daemon.document.types.EXTRACTED_FORMATS`) under ``limits``."""
    if fmt is Format.PDF:
        from daemon.document.extract.pdf import extract_pdf

        return extract_pdf(data, limits)
    if fmt is Format.DOCX:
        from daemon.document.extract.office import extract_docx

        return extract_docx(data, limits)
    if fmt is Format.ODT:
        from daemon.document.extract.office import extract_odt

        return extract_odt(data, limits)
    if fmt is Format.HTML:
        from daemon.document.extract.html import extract_html

        return extract_html(data, limits)
    raise ValueError(f"{fmt.value} is a text format: it is decoded, not extracted")


def text_layout(text: str, fmt: Format) -> Layout:
    """The layout of a decoded text-format document: for Markdown and reST the headings found in
    ``text`` (offsets into it; the text itself is not changed), for plain text (and any other
    format) none."""
    if fmt in (Format.MARKDOWN, Format.RST):
        return markup_layout(text, fmt)
    return NO_LAYOUT
