"""Small inputs whose text is many times their size: what a hostile sender drops into the inbox or
onto the topic to make the daemon hold far more text than the bytes it counted (issue 36).

Each generator is deterministic (fixed ZIP timestamps, no randomness) and returns the file's bytes;
the tests (``tests/unit/test_expansion.py``, ``tests/e2e/test_expanding_inputs.py``) and the bench
(``bench/memory.py --flood``) build them in memory, so no large or hostile file is kept in git.

* :func:`docx_list_label`: a DOCX of about 1.6 KB whose one numbered paragraph has an
  ``upperLetter`` counter started so high that its label is ``letters`` times "A" (letters repeat
  once per 26: ``AA``, ``AAA``, ...);
* :func:`html_ordered_list`: ``<ol type="A">`` with ``items`` of ``<li value="999999">``, each label
  38,462 letters long;
* :func:`pdf_shared_stream`: a PDF whose ``pages`` pages all show one content stream of about
  ``stream_bytes`` of text (the stream is stored once, compressed; the text is extracted per page);
* :func:`expanding` picks one of these by format name, scaled to about ``text_bytes`` of text.

For comparison, the text formats cannot expand (their text is their bytes): :func:`text_input`
gives a plain-text or Markdown input of a given size in the shape with the most cut points, and
:func:`wide_letter_text` one in the shape that costs the most memory per byte.
"""

from __future__ import annotations

import io
import struct
import zipfile
import zlib
from typing import Final

FIXED_TIME: Final = (1980, 1, 1, 0, 0, 0)
W_NS: Final = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
_XML_HEAD: Final = '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
_MAIN: Final = "application/vnd.openxmlformats-officedocument.wordprocessingml."
_REL: Final = "http://schemas.openxmlformats.org/officeDocument/2006/relationships/"
_CONTENT_TYPES: Final = (
    _XML_HEAD + '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
    '<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
    '<Default Extension="xml" ContentType="application/xml"/>'
    f'<Override PartName="/word/document.xml" ContentType="{_MAIN}document.main+xml"/>'
    f'<Override PartName="/word/numbering.xml" ContentType="{_MAIN}numbering+xml"/>'
    "</Types>"
)
_PACKAGE_RELS: Final = (
    _XML_HEAD + '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
    '<Relationship Id="rId1" Target="word/document.xml" Type="http://schemas.openxmlformats.org/'
    'officeDocument/2006/relationships/officeDocument"/></Relationships>'
)
_DOCUMENT_RELS: Final = (
    _XML_HEAD + '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
    f'<Relationship Id="rId1" Target="numbering.xml" Type="{_REL}numbering"/></Relationships>'
)
HTML_LABEL_LETTERS: Final = 38_462
"""The letters of the label of ``<li value="999999">`` in ``<ol type="A">`` (the largest value the
HTML extractor reads: six digits)."""


def _zip(entries: list[tuple[str, bytes]]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, content in entries:
            info = zipfile.ZipInfo(name, FIXED_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, content, compresslevel=9)
    return buffer.getvalue()


def docx_list_label(letters: int = 12_000_000, paragraphs: int = 1) -> bytes:
    """A DOCX whose ``paragraphs`` numbered paragraphs each carry a label of ``letters`` letters "A"
    (an ``upperLetter`` counter started at ``26 * (letters - 1) + 1``, minus one per paragraph)."""
    start = 26 * (letters - 1) + 1 - (paragraphs - 1)
    if start < 1 or len(str(start)) > 9:
        raise ValueError(f"{letters} letters cannot be written as a nine-digit counter")
    numbering = (
        _XML_HEAD + f'<w:numbering xmlns:w="{W_NS}"><w:abstractNum w:abstractNumId="1">'
        f'<w:lvl w:ilvl="0"><w:start w:val="{start}"/><w:numFmt w:val="upperLetter"/>'
        '<w:lvlText w:val="%1."/></w:lvl></w:abstractNum>'
        '<w:num w:numId="1"><w:abstractNumId w:val="1"/></w:num></w:numbering>'
    )
    item = (
        '<w:p><w:pPr><w:numPr><w:ilvl w:val="0"/><w:numId w:val="1"/></w:numPr></w:pPr>'
        "<w:r><w:t>Item.</w:t></w:r></w:p>"
    )
    document = (
        _XML_HEAD + f'<w:document xmlns:w="{W_NS}"><w:body>' + item * paragraphs + "</w:body></w:document>"
    )
    return _zip(
        [
            ("[Content_Types].xml", _CONTENT_TYPES.encode()),
            ("_rels/.rels", _PACKAGE_RELS.encode()),
            ("word/document.xml", document.encode()),
            ("word/_rels/document.xml.rels", _DOCUMENT_RELS.encode()),
            ("word/numbering.xml", numbering.encode()),
        ]
    )


def html_ordered_list(items: int = 400) -> bytes:
    """An HTML page with ``<ol type="A">`` of ``items`` items, each ``value="999999"``: a label of
    :data:`HTML_LABEL_LETTERS` letters per item from 20 bytes of markup."""
    body = '<li value="999999">x</li>' * items
    page = (
        f'<!DOCTYPE html><html><head><title>List</title></head><body><ol type="A">{body}</ol></body></html>'
    )
    return page.encode()


def _flate_stream(entries: bytes, data: bytes) -> bytes:
    packed = zlib.compress(data, 9)
    return (
        b"<< "
        + entries
        + b" /Filter /FlateDecode /Length %d >>\nstream\n" % len(packed)
        + packed
        + b"\nendstream"
    )


def pdf_shared_stream(pages: int = 1999, stream_bytes: int = 4096) -> bytes:
    """A PDF of ``pages`` pages that all show one content stream: lines of Helvetica text adding up
    to about ``stream_bytes`` of text. The page objects sit in one compressed object stream and the
    content is stored once, so the file stays small however many pages show it."""
    line = "The quick brown fox jumps over the lazy dog and every page repeats it. "
    ops = [b"BT /F1 9 Tf 10 TL 36 760 Td"]
    written = 0
    while written < stream_bytes:
        ops.append(b"(" + line.encode("ascii") + b") '")
        written += len(line)
    ops.append(b"ET")
    content = b"\n".join(ops)
    font = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>"
    kids = b" ".join(b"%d 0 R" % (4 + n) for n in range(pages))
    objects: dict[int, bytes] = {
        1: b"<< /Type /Catalog /Pages 2 0 R >>",
        2: b"<< /Type /Pages /Kids ["
        + kids
        + b"] /Count %d /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> >>" % pages,
        3: font,
    }
    content_number = 4 + pages
    for n in range(pages):
        objects[4 + n] = b"<< /Type /Page /Parent 2 0 R /Contents %d 0 R >>" % content_number
    return _pdf_with_object_stream(objects, _flate_stream(b"", content), content_number)


def _pdf_with_object_stream(objects: dict[int, bytes], content: bytes, content_number: int) -> bytes:
    """A PDF 1.5 file: ``objects`` in one object stream, the stream object ``content`` (a stream
    cannot sit in an object stream) on its own, and a cross-reference stream; the root is object 1."""
    numbers = sorted(objects)
    bodies = b""
    pairs: list[bytes] = []
    for number in numbers:
        pairs.append(b"%d %d" % (number, len(bodies)))
        bodies += objects[number] + b"\n"
    head = b" ".join(pairs) + b"\n"
    objstm_number = content_number + 1
    xref_number = objstm_number + 1
    out = bytearray(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n")
    content_at = len(out)
    out += b"%d 0 obj\n" % content_number + content + b"\nendobj\n"
    objstm_at = len(out)
    objstm = _flate_stream(b"/Type /ObjStm /N %d /First %d" % (len(numbers), len(head)), head + bodies)
    out += b"%d 0 obj\n" % objstm_number + objstm + b"\nendobj\n"
    xref_at = len(out)
    index_of = {number: index for index, number in enumerate(numbers)}
    rows = [struct.pack(">BIH", 0, 0, 65535)]
    for number in range(1, xref_number + 1):
        if number in index_of:
            rows.append(struct.pack(">BIH", 2, objstm_number, index_of[number]))
        elif number == content_number:
            rows.append(struct.pack(">BIH", 1, content_at, 0))
        elif number == objstm_number:
            rows.append(struct.pack(">BIH", 1, objstm_at, 0))
        elif number == xref_number:
            rows.append(struct.pack(">BIH", 1, xref_at, 0))
        else:
            rows.append(struct.pack(">BIH", 0, 0, 0))
    entries = b"/Type /XRef /Size %d /W [1 4 2] /Root 1 0 R" % (xref_number + 1)
    out += b"%d 0 obj\n" % xref_number + _flate_stream(entries, b"".join(rows)) + b"\nendobj\n"
    out += b"startxref\n%d\n%%%%EOF\n" % xref_at
    return bytes(out)


def text_input(size: int, *, markdown: bool = False) -> bytes:
    """``size`` bytes of plain text (or Markdown: a heading every 64 lines) in ``ab`` lines, the
    shape with the most tokens and cut points per byte measured (``bench/memory.py``)."""
    unit = b"ab\n" * 64
    if markdown:
        unit = b"# Part\n\n" + unit + b"\n"
    return (unit * (size // len(unit) + 1))[:size]


def wide_letter_text(size: int) -> bytes:
    """``size`` bytes of text that cost the most measured per byte: one character outside the BMP
    (Python then holds the whole text at four bytes a character), then one letter repeated (one token
    a byte with a byte-level BPE tokenizer)."""
    head = "\U0001f600\n".encode()
    return head + b"A" * max(0, size - len(head))


FORMATS: Final = ("docx", "html", "pdf", "text", "markdown", "wide_text")
"""What :func:`expanding` makes."""


def expanding(fmt: str, text_bytes: int) -> bytes:
    """A small input of format ``fmt`` (one of :data:`FORMATS`) whose text is about ``text_bytes``
    bytes: the expanding shape of that format, or for text and Markdown that many bytes of text."""
    if fmt == "docx":
        return docx_list_label(max(2, text_bytes))
    if fmt == "html":
        return html_ordered_list(max(1, text_bytes // (HTML_LABEL_LETTERS + 4)))
    if fmt == "pdf":
        # About 3,900 characters of text per page from a 4 KB stream (its lines and breaks).
        return pdf_shared_stream(min(1999, max(1, text_bytes // 4096)))
    if fmt in ("text", "markdown"):
        return text_input(text_bytes, markdown=fmt == "markdown")
    if fmt == "wide_text":
        return wide_letter_text(text_bytes)
    raise ValueError(f"unknown format {fmt!r}")
