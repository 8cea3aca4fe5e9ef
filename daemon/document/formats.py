"""What format a document's bytes are in: :func:`detect_format`.

By content first, looking only at a bounded prefix (and, for a ZIP, at its central directory):

* ``%PDF-`` at the start, or within the first 1024 bytes when the file also ends like a PDF (PDF
  readers accept leading junk; a text that merely quotes ``%PDF-1.7`` early on is still text);
* a ZIP with ``[Content_Types].xml`` and ``word/`` parts is DOCX; one whose ``mimetype`` entry names
  an OpenDocument text is ODT; any other ZIP (XLSX, PPTX, ODS, a plain archive) is not a format
  docsumd reads (None). A ZIP without a readable central directory (truncated) is judged by the
  local headers at its start, then by the hint, so that its extraction can say ``malformed``;
* an OLE2 compound file with an ``EncryptedPackage`` stream is a password-protected Office file: it
  is given as DOCX, whose extractor refuses it as ``encrypted`` (it cannot be told from an encrypted
  XLSX without the password, and "encrypted" is the right answer for both); other OLE2 files
  (legacy ``.doc``) are not read (None);
* other known binary signatures, or too many control bytes, are not text (None: decoding then
  refuses them as ``binary``);
* text is HTML when, after a byte-order mark, whitespace, comments and an XML declaration, it opens
  with a document type or a tag the WHATWG MIME-sniffing rules list; Markdown or reStructuredText
  when it has those formats' headings and marks (:mod:`daemon.document.headings`), counted
  conservatively: a plain text stays plain text unless it really is one of them;
* anything else is plain text.

Then the hint (a file name or suffix, or a MIME type) breaks ties and chooses among text formats:
``.md`` makes a text Markdown, ``.rst`` reST, ``.html`` HTML if it has tags at all. A hint never makes
bytes be read as a binary format they are not, nor plain text be read as HTML without a tag.
"""

from __future__ import annotations

import codecs
import enum
import re
from typing import Final

from daemon.document.containers import (
    OLE2_MAGIC,
    is_encrypted_ooxml,
    is_odt_mimetype,
    local_entries,
    stored_prefix,
    zip_entries,
)
from daemon.document.decode import too_many_control_bytes
from daemon.document.headings import MarkdownScan, RstScan, scan_markdown, scan_rst
from daemon.document.types import Format

_SNIFF_BYTES: Final = 64 * 1024
_PDF_LEAD: Final = 1024
_ZIP_MAGIC: Final = (b"PK\x03\x04", b"PK\x05\x06")
_OFFICE: Final = (Format.DOCX, Format.ODT)
_ZIP_SCAN_ENTRIES: Final = 20_000
"""Central-directory entries looked at to tell a DOCX from an ODT or another ZIP."""

# Binary signatures (those decode.py names, and a few more): never text, whatever the hint says.
_BINARY_MAGIC: Final = (
    b"\x1f\x8b",  # gzip
    b"\xfd7zXZ\x00",  # xz
    b"(\xb5/\xfd",  # zstd
    b"7z\xbc\xaf\x27\x1c",  # 7-Zip
    b"Rar!\x1a\x07",  # RAR
    b"\x89PNG\r\n\x1a\n",
    b"\xff\xd8\xff",  # JPEG
    b"GIF87a",
    b"GIF89a",
    b"\x7fELF",
    b"MZ\x90\x00",  # a Windows executable
)

_BOMS: Final = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)

_SUFFIXES: Final = {
    **dict.fromkeys((".md", ".markdown", ".mdown", ".mkd", ".mkdn", ".mdwn", ".mdtxt"), Format.MARKDOWN),
    **dict.fromkeys((".rst", ".rest"), Format.RST),
    **dict.fromkeys((".html", ".htm", ".xhtml", ".xht", ".shtml"), Format.HTML),
    ".pdf": Format.PDF,
    **dict.fromkeys((".docx", ".docm", ".dotx", ".dotm"), Format.DOCX),
    **dict.fromkeys((".odt", ".ott"), Format.ODT),
    **dict.fromkeys((".txt", ".text"), Format.TEXT),
}
_MIME_TYPES: Final = {
    **dict.fromkeys(("text/markdown", "text/x-markdown"), Format.MARKDOWN),
    **dict.fromkeys(("text/x-rst", "text/prs.fallenstein.rst"), Format.RST),
    **dict.fromkeys(("text/html", "application/xhtml+xml"), Format.HTML),
    **dict.fromkeys(("application/pdf", "application/x-pdf"), Format.PDF),
    **dict.fromkeys(
        (
            "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
            "application/vnd.ms-word.document.macroenabled.12",
        ),
        Format.DOCX,
    ),
    "application/vnd.oasis.opendocument.text": Format.ODT,
    "text/plain": Format.TEXT,
}
_MIME: Final = re.compile(r"[a-z0-9][a-z0-9!#$&^_.+-]*/[a-z0-9][a-z0-9!#$&^_.+-]*")


def hint_format(hint: str | None) -> Format | None:
    """The format a hint names: a file name or path (``report.DOCX``), a bare suffix (``.md``) or a
    MIME type, parameters allowed (``text/markdown; charset=utf-8``); None for anything else."""
    if not hint:
        return None
    value = hint.strip().lower()
    media_type = value.split(";", 1)[0].strip()
    if _MIME.fullmatch(media_type) and media_type in _MIME_TYPES:
        return _MIME_TYPES[media_type]
    name = value.replace("\\", "/").rsplit("/", 1)[-1]
    suffix = name[name.rfind(".") :] if "." in name else f".{name}"
    return _SUFFIXES.get(suffix)


def detect_format(data: bytes, hint: str | None = None) -> Format | None:
    """The format of ``data`` (see the module's doc); None for bytes that are not a format docsumd
    reads (decoding then refuses them as ``binary``). Looks at a bounded prefix only (a ZIP's
    central directory and an OLE2 file's directory besides)."""
    hinted = hint_format(hint)
    if _is_pdf(data):
        return Format.PDF
    if data.startswith(_ZIP_MAGIC):
        return _zip_format(data, hinted)
    if data.startswith(OLE2_MAGIC):
        return Format.DOCX if is_encrypted_ooxml(data) else None
    text = _sniff_text(data)
    if text is None:
        return None
    return _text_format(text, hinted)


def _is_pdf(data: bytes) -> bool:
    if data.startswith(b"%PDF-"):
        return True
    lead = data.find(b"%PDF-", 0, _PDF_LEAD + 5)
    return lead > 0 and b"%%EOF" in data[-_PDF_LEAD:]


def _zip_format(data: bytes, hinted: Format | None) -> Format | None:
    entries = zip_entries(data, _ZIP_SCAN_ENTRIES)
    truncated = entries is None
    if entries is None:
        # No central directory (a truncated file): what its first entries and the hint say it was.
        entries = local_entries(data, 64)
    names = [entry.name for entry in entries]
    mimetype = next((entry for entry in entries if entry.name == "mimetype"), None)
    content = stored_prefix(data, mimetype, 128) if mimetype is not None else None
    found = _office_by_names(names, mimetype=content)
    if found is None and (_hinted_parts(names, hinted) or (truncated and names and hinted in _OFFICE)):
        return hinted  # the hint breaks a tie: a ZIP, with the parts or too damaged to tell
    return found


def _hinted_parts(names: list[str], hinted: Format | None) -> bool:
    if hinted is Format.DOCX:
        return "word/document.xml" in names
    return hinted is Format.ODT and "content.xml" in names


def _office_by_names(names: list[str], mimetype: bytes | None) -> Format | None:
    if is_odt_mimetype(mimetype):
        return Format.ODT
    if mimetype is None and names[:1] == ["mimetype"] and "content.xml" in names:
        return Format.ODT  # the mimetype entry's content could not be read: the extractor will say why
    if "[Content_Types].xml" in names:
        has_word = any(name.startswith("word/") for name in names)
        has_other = any(name.startswith(("xl/", "ppt/")) for name in names)
        if has_word and not has_other:
            return Format.DOCX
    return None


def _sniff_text(data: bytes) -> str | None:
    """The start of ``data`` decoded for sniffing (losslessly enough), or None if it is not text."""
    for bom, codec in _BOMS:
        if data.startswith(bom):
            head = data[len(bom) : len(bom) + _SNIFF_BYTES]
            return head.decode(codec, "replace")
    if data.startswith(_BINARY_MAGIC):
        return None
    head = data[:_SNIFF_BYTES]
    if too_many_control_bytes(head) is not None:  # decoding's rule
        return None
    text = head.decode("utf-8", "replace")
    if len(data) > _SNIFF_BYTES and "\n" in text:
        text = text[: text.rindex("\n") + 1]  # whole lines only
    return text


class _Html(enum.Enum):
    NONE = 0
    WEAK = 1
    """Opens with a tag that HTML pages open with, and so might a Markdown file (``<div>``, ``<p>``)."""
    STRONG = 2
    """Opens with ``<!DOCTYPE html``, ``<html``, ``<head`` or ``<body``: HTML whatever the name says."""


# WHATWG MIME sniffing (the "text/html" patterns), each followed by a space or ">".
_HTML_STRONG: Final = re.compile(
    r"<(?:!doctype[ \t\r\n\f]+html|html|head|body)(?=[ \t\r\n\f>])", re.IGNORECASE
)
_HTML_WEAK: Final = re.compile(
    r"<(?:script|iframe|h1|div|font|table|a|style|title|b|br|p|meta|link|section|article|main|nav|span)"
    r"(?=[ \t\r\n\f>/])",
    re.IGNORECASE,
)
# Possessive: a greedy group repeat keeps a backtracking entry per repetition.
_LEADING: Final = re.compile(r"(?:[ \t\r\n\f]+|<!--.*?-->|<\?xml[^>]*>)*+", re.DOTALL)
_XHTML: Final = re.compile(r"<[a-z]+[^>]*xmlns=[\"']http://www\.w3\.org/1999/xhtml[\"']", re.IGNORECASE)
_ANY_TAG: Final = re.compile(
    r"</?(?:html|head|body|p|div|span|a|br|h[1-6]|ul|ol|li|table|tr|td|th|b|i|em|strong|pre|code|img|"
    r"section|article|main|nav|title|meta|link|script|style|blockquote)(?=[\s>/])",
    re.IGNORECASE,
)


def _html_strength(text: str) -> _Html:
    skipped = _LEADING.match(text)
    rest = text[skipped.end() if skipped else 0 :][:1024]
    if _HTML_STRONG.match(rest) or _XHTML.match(rest):
        return _Html.STRONG
    if _HTML_WEAK.match(rest):
        return _Html.WEAK
    return _Html.NONE


def _is_markdown(scan: MarkdownScan, text: str) -> bool:
    """Markdown, really: ATX headings set apart by blank lines that are most of the ``#`` lines (not
    a script's or a config file's comments), or setext headings with Markdown's own marks."""
    if text.startswith("#!") or scan.assignments * 5 >= max(scan.lines, 1):
        return False  # a script or a configuration file
    marks = scan.fences + scan.links
    mostly_headings = scan.atx_isolated * 2 >= scan.hash_lines
    if scan.atx_isolated and mostly_headings and (scan.atx_isolated >= 2 or marks):
        return True
    return scan.setext >= 1 and marks >= 1


def _is_rst(scan: RstScan) -> bool:
    """reST, really: section titles with reST's explicit markup (directives, targets, roles, field
    lists), or directives enough on their own."""
    marks = scan.directives + scan.roles
    if scan.headings and (marks >= 2 or (scan.overlined and marks)):
        return True
    return scan.directives >= 3


def _text_format(text: str, hinted: Format | None) -> Format:
    html = _html_strength(text)
    if html is _Html.STRONG:
        return Format.HTML
    if hinted in (Format.MARKDOWN, Format.RST):
        return hinted
    if hinted is Format.HTML and _ANY_TAG.search(text):
        return Format.HTML
    markdown, rst = scan_markdown(text), scan_rst(text)
    is_markdown, is_rst = _is_markdown(markdown, text), _is_rst(rst)
    if html is _Html.WEAK and not is_markdown:
        return Format.HTML
    if is_markdown and is_rst:
        # Both (rare): whichever has more of its own marks; ATX headings are no reST at all.
        mine = markdown.atx_isolated + markdown.fences + markdown.links
        return Format.MARKDOWN if mine >= rst.directives + rst.roles else Format.RST
    if is_markdown:
        return Format.MARKDOWN
    if is_rst:
        return Format.RST
    return Format.TEXT
