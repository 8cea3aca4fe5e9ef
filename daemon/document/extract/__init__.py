"""Text out of the formats that are not text already (PDF, DOCX, ODT, HTML): the sandboxed side of
the document stage.

:func:`extract` runs in a sandboxed extraction worker (:mod:`daemon.document.sandbox.worker`, which
imports it by name at start): it gets the raw bytes and the format
:func:`daemon.document.formats.detect_format` found, and gives back the text in the heading-line
convention of :mod:`daemon.document.types` with its layout, or raises
:class:`~daemon.errors.DocumentError` with a reason (``encrypted``, ``malformed``, ``too_large``,
``too_expanded``, ``no_text``, ``binary``).

No module of the daemon's own process imports this package (an import-linter contract and
``tests/unit/document/test_imports.py`` hold it): what that process needs of the text convention
(the headings of Markdown and reST, the bounds of a layout, the piecewise clean-up) is in
:mod:`daemon.document.headings`, :mod:`daemon.document.types` and :mod:`daemon.document.text`. The
extractors are imported when first needed: a worker pays for lxml (and the PDF library) only when it
extracts.
"""

from __future__ import annotations

from daemon.document.types import Extracted, ExtractLimits, Format


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
