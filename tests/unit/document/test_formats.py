"""Unit tests for daemon.document.formats: what format bytes are in, by content first, the hint
(a file name or MIME type) only breaking ties and choosing among text formats.

Every fixture under tests/fixtures/documents (see the manifests) and every document of the shared
corpus is detected; the corpus's plain texts must stay plain text (or be reST, for those that are
reStructuredText sources), with their text unchanged.
"""

from __future__ import annotations

import hashlib
import io
import json
import time
import zipfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daemon.document.decode import decode_text
from daemon.document.formats import detect_format, hint_format
from daemon.document.headings import text_layout
from daemon.document.types import Format
from tests.corpus import BAD_CORPUS_DECODABLE, BAD_CORPUS_REASONS, CORPUS_DIR

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "documents"

EXPECTED: dict[str, Format | None] = {
    "docx/photo-jpeg.docx": None,
    "docx/contract.docx": Format.DOCX,
    "docx/handmade.docx": Format.DOCX,
    "docx/strict.docx": Format.DOCX,
    "docx/empty.docx": Format.DOCX,
    "docx/bomb.docx": Format.DOCX,
    "docx/billion-laughs.docx": Format.DOCX,
    "docx/xxe.docx": Format.DOCX,
    "docx/deep.docx": Format.DOCX,
    "docx/lying-small.docx": Format.DOCX,
    "docx/lying-large.docx": Format.DOCX,
    "docx/encrypted-entry.docx": Format.DOCX,
    "docx/encrypted.docx": Format.DOCX,  # OLE2 + EncryptedPackage: the extractor says "encrypted"
    "docx/truncated.docx": Format.DOCX,  # no central directory: its local headers tell
    "docx/spreadsheet.xlsx": None,
    "odt/report.odt": Format.ODT,
    "odt/encrypted.odt": Format.ODT,
    "odt/laughs.odt": Format.ODT,
    "odt/spreadsheet.ods": None,
    "html/python-tutorial-appetite.html": Format.HTML,
    "html/python-tutorial-controlflow.html": Format.HTML,
    "html/debian-policy-ch-binary.html": Format.HTML,
    "html/debian-reference-apa.en.html": Format.HTML,
    "html/debian-faq-basic-defs.en.html": Format.HTML,
    "html/debian-handbook-sect.apt-get.html": Format.HTML,
    "html/developers-reference-l10n.html": Format.HTML,
    "html/furniture.html": Format.HTML,
    "html/deep-divs.html": Format.HTML,
    "html/scripts-only.html": Format.HTML,
    "html/attributes.html": Format.HTML,
    "html/latin1-meta.html": Format.HTML,
    "html/utf16-bom.html": Format.HTML,
    "html/bad-utf8.html": Format.HTML,
    "html/dtd-entities.html": Format.HTML,
    "markdown/tricky.md": Format.MARKDOWN,
    "markdown/fzf-changelog-head.md": Format.MARKDOWN,
    "markdown/ripgrep-changelog-head.md": Format.MARKDOWN,
    "markdown/tricky.rst": Format.RST,
    "markdown/python-tutorial-controlflow.rst.txt": Format.RST,
    "markdown/python-tutorial-appetite.rst.txt": Format.RST,
    "markdown/rotate-logs.sh.txt": Format.TEXT,
    "markdown/sample-config.txt": Format.TEXT,
    "markdown/widget-licence.txt": Format.TEXT,
}

# shared/corpus/docs: the reStructuredText sources (Python docs, Debian Policy); all else is plain text.
CORPUS_RST = {
    "tech-pydoc-howto-descriptor.txt",
    "tech-pydoc-library-asyncio-task.txt",
    "tech-pydoc-library-stdtypes.txt",
    "tech-pydoc-reference-datamodel.txt",
    "tech-pydoc-tutorial-controlflow.txt",
    "tech-pydoc-whatsnew-3_11.txt",
    "reg-debian-policy-ch-controlfields.txt",
    "reg-debian-policy-upgrading-checklist.txt",
}


def test_every_fixture_is_listed_here() -> None:
    on_disk = {
        f"{path.parent.name}/{path.name}"
        for folder in ("docx", "odt", "html", "markdown")
        for path in (FIXTURES / folder).iterdir()
        if path.name != "manifest.jsonl"
    }
    assert on_disk == set(EXPECTED)


@pytest.mark.parametrize("folder", ["docx", "odt", "html", "markdown"])
def test_manifests_describe_the_files_exactly(folder: str) -> None:
    rows = [
        json.loads(line) for line in (FIXTURES / folder / "manifest.jsonl").read_text().splitlines() if line
    ]
    assert {row["file"] for row in rows} == {
        name.split("/")[1] for name in EXPECTED if name.startswith(folder + "/")
    }
    for row in rows:
        data = (FIXTURES / folder / row["file"]).read_bytes()
        assert (len(data), hashlib.sha256(data).hexdigest()) == (row["bytes"], row["sha256"]), row["file"]
        assert all(row[key] for key in ("origin", "licence", "expect")), row["file"]


@pytest.mark.parametrize(("name", "expected"), [(name, EXPECTED[name]) for name in sorted(EXPECTED)])
def test_fixture_formats_by_content_with_and_without_their_names(name: str, expected: Format | None) -> None:
    data = (FIXTURES / name).read_bytes()
    assert detect_format(data) is expected
    assert detect_format(data, Path(name).name) is expected


def _corpus_docs() -> list[Path]:
    if not (CORPUS_DIR / "docs").is_dir():
        pytest.skip(f"test corpus not found at {CORPUS_DIR}")
    return sorted((CORPUS_DIR / "docs").glob("*.txt"))


def test_corpus_texts_stay_plain_text_or_rst_with_their_text_unchanged() -> None:
    for path in _corpus_docs():
        data = path.read_bytes()
        fmt = detect_format(data, path.name)
        assert fmt is (Format.RST if path.name in CORPUS_RST else Format.TEXT), path.name
        text, _encoding = decode_text(data, 16 * 1024 * 1024)
        assert text == data.decode("utf-8")  # decoding is as before; detection changes nothing
        layout = text_layout(text, fmt)
        if fmt is Format.TEXT:
            assert not layout.headings
        else:
            assert layout.headings, path.name
            for heading in layout.headings:
                assert heading.start == 0 or text[heading.start - 1] == "\n"


def test_corpus_bad_inputs_leave_their_refusal_to_decoding() -> None:
    if not (CORPUS_DIR / "bad").is_dir():
        pytest.skip(f"test corpus not found at {CORPUS_DIR}")
    for name in sorted(BAD_CORPUS_REASONS) + sorted(BAD_CORPUS_DECODABLE):
        data = (CORPUS_DIR / "bad" / name).read_bytes()
        expected = None if BAD_CORPUS_REASONS.get(name) == "binary" else Format.TEXT
        assert detect_format(data, name) is expected, name


@pytest.mark.parametrize(
    ("hint", "expected"),
    [
        ("report.DOCX", Format.DOCX),
        ("/srv/in/contract.docm", Format.DOCX),
        ("C:\\Users\\x\\notes.ODT", Format.ODT),
        (".md", Format.MARKDOWN),
        ("md", Format.MARKDOWN),
        ("README.markdown", Format.MARKDOWN),
        ("guide.rst", Format.RST),
        ("page.htm", Format.HTML),
        ("paper.pdf", Format.PDF),
        ("notes.txt", Format.TEXT),
        ("text/markdown; charset=utf-8", Format.MARKDOWN),
        ("Text/HTML", Format.HTML),
        ("application/xhtml+xml", Format.HTML),
        ("application/pdf", Format.PDF),
        ("application/vnd.openxmlformats-officedocument.wordprocessingml.document", Format.DOCX),
        ("application/vnd.oasis.opendocument.text", Format.ODT),
        ("text/x-rst", Format.RST),
        ("text/plain", Format.TEXT),
        ("application/octet-stream", None),
        ("archive.tar.gz", None),
        ("", None),
        (None, None),
    ],
)
def test_hints(hint: str | None, expected: Format | None) -> None:
    assert hint_format(hint) is expected


# -- binary formats: by content only ------------------------------------------------------------------


def test_pdf_by_its_header_even_after_leading_junk() -> None:
    assert detect_format(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj") is Format.PDF
    junk = b"From: scanner@example.com\r\n\r\n" + b"%PDF-1.4\n" + b"x" * 2000 + b"\n%%EOF\n"
    assert detect_format(junk) is Format.PDF
    too_late = b"x" * 1100 + b"%PDF-1.4\n" + b"%%EOF\n"
    assert detect_format(too_late) is Format.TEXT


def test_a_text_that_quotes_a_pdf_header_is_text() -> None:
    text = b"The file starts with the header %PDF-1.7 followed by a binary comment.\n" * 3
    assert detect_format(text) is Format.TEXT
    assert detect_format(text, "spec.pdf") is Format.TEXT  # a hint never makes text binary


def test_a_hint_never_makes_bytes_a_binary_format_they_are_not() -> None:
    assert detect_format(b"plain words\n", "x.docx") is Format.TEXT
    assert detect_format(b"plain words\n", "application/pdf") is Format.TEXT
    jpeg = (FIXTURES / "docx" / "photo-jpeg.docx").read_bytes()
    assert detect_format(jpeg, "photo.docx") is None
    assert detect_format(b"\x1f\x8b\x08\x00rest", "x.odt") is None


def _zip(entries: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, content in entries.items():
            archive.writestr(name, content)
    return buffer.getvalue()


def test_zip_archives() -> None:
    plain = _zip({"a.txt": b"hello", "b.txt": b"world"})
    assert detect_format(plain) is None
    assert detect_format(plain, "a.docx") is None  # no word/ parts: the hint cannot make it a DOCX
    pptx = _zip({"[Content_Types].xml": b"<Types/>", "ppt/presentation.xml": b"<p/>", "word/x.xml": b"<w/>"})
    assert detect_format(pptx) is None
    bare_word = _zip({"word/document.xml": b"<w:document/>"})
    assert detect_format(bare_word) is None
    assert detect_format(bare_word, "x.docx") is Format.DOCX  # the parts are there: the hint decides
    deflated_mimetype = _zip({"mimetype": b"application/vnd.oasis.opendocument.text", "content.xml": b"<x/>"})
    assert detect_format(deflated_mimetype) is Format.ODT
    template = _zip({"mimetype": b"application/vnd.oasis.opendocument.text-template", "content.xml": b"<x/>"})
    assert detect_format(template) is Format.ODT


def test_a_truncated_zip_is_judged_by_its_first_entries_and_the_hint() -> None:
    contract = (FIXTURES / "docx" / "contract.docx").read_bytes()
    assert detect_format(contract[:3000]) is Format.DOCX  # [Content_Types].xml comes first
    odt = (FIXTURES / "odt" / "report.odt").read_bytes()
    assert detect_format(odt[:200]) is Format.ODT  # mimetype, then content.xml's header
    plain = _zip({"a.txt": b"hello" * 100, "b.txt": b"world"})[:60]
    assert detect_format(plain) is None
    assert detect_format(plain, "x.docx") is Format.DOCX  # a damaged ZIP named .docx: "malformed" later


def test_ole2_files_other_than_encrypted_ooxml_are_not_read() -> None:
    encrypted = (FIXTURES / "docx" / "encrypted.docx").read_bytes()
    legacy = encrypted.replace(
        "EncryptedPackage".encode("utf-16-le"), "WordDocument\0\0\0\0".encode("utf-16-le")
    )
    assert detect_format(legacy) is None
    assert detect_format(legacy, "old.docx") is None
    # The name must be a directory entry's, not bytes anywhere: a stream that merely holds it is no sign.
    header_only = encrypted[:512] + b"\xff" * 512 + b"E\0n\0c\0r\0y\0p\0t\0e\0d\0P\0a\0c\0k\0a\0g\0e\0"
    assert detect_format(header_only) is None
    assert detect_format(encrypted[:600]) is None  # a cut-off compound file: no directory to read


# -- text formats --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        b"<!DOCTYPE html><html><body><p>x</p></body></html>",
        b"\n\n  <!-- saved from url=(0014)about:internet -->\n<HTML>\n<BODY>x</BODY></HTML>",
        b'<?xml version="1.0"?>\n<html xmlns="http://www.w3.org/1999/xhtml"><body/></html>',
        b"\xef\xbb\xbf<html><body>BOM</body></html>",
        "\ufeff<html><body>UTF-16</body></html>".encode("utf-16-be"),
        b"<head><title>t</title></head>",
        b"<p>A fragment.</p>",
        b"<table><tr><td>1</td></tr></table>",
    ],
)
def test_html_by_sniffing(data: bytes) -> None:
    assert detect_format(data) is Format.HTML


@pytest.mark.parametrize(
    "data",
    [
        b"Use <html> tags to write pages.\n",
        b"<john@example.com> wrote:\n> hello\n",
        b'<?xml version="1.0"?>\n<svg xmlns="http://www.w3.org/2000/svg"/>\n',
        b"a < b and c > d\n",
    ],
)
def test_text_that_is_not_html(data: bytes) -> None:
    assert detect_format(data) is Format.TEXT


def test_hints_choose_among_text_formats() -> None:
    readme = (
        b'<div align="center"><img src="logo.png"></div>\n\n# Project\n\nIntro.\n\n## Install\n\nRun it.\n'
    )
    assert detect_format(readme) is Format.MARKDOWN  # headings outweigh the leading tag
    fragment = b"<div>Some words</div>\n"
    assert detect_format(fragment) is Format.HTML
    assert detect_format(fragment, "notes.md") is Format.MARKDOWN
    assert detect_format(b"Just words.\n", "page.html") is Format.TEXT  # no tag at all
    assert detect_format(b"Just <b>bold</b> words.\n", "page.html") is Format.HTML
    assert detect_format(b"Just words.\n", "notes.md") is Format.MARKDOWN
    assert detect_format(b"Just words.\n", "notes.rst") is Format.RST
    full_page = b"<!DOCTYPE html><html><body>x</body></html>"
    assert detect_format(full_page, "notes.txt") is Format.HTML  # content first
    assert detect_format(full_page, "notes.md") is Format.HTML


@pytest.mark.parametrize(
    "text",
    [
        "GNU GENERAL PUBLIC LICENSE\n   Version 3, 29 June 2007\n\nPREAMBLE\n\nThe GNU General Public...\n",
        "# Rotate the logs.\n\n# Settings\n\nLOGDIR=/var/log\n\n# Main\n\nrun\n",
        "#!/usr/bin/env python3\n\n# Setup\n\nimport os\n\n# Main\n\nmain()\n",
        "Notes\n=====\n\nSome text.\n\nMore\n----\n\nmore text.\n",
        "# x = 1\n\n# y = 2\n\nz\n",
        "#include <stdio.h>\n\n#define X 1\n\nint main(void) { return 0; }\n",
    ],
)
def test_plain_text_stays_plain_text(text: str) -> None:
    assert detect_format(text.encode()) is Format.TEXT
    assert detect_format(text.encode(), "notes.txt") is Format.TEXT


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("# Title\n\nIntro.\n\n## Usage\n\nRun it.\n", Format.MARKDOWN),
        ("# Title\n\nSee [the docs](https://example.com/).\n", Format.MARKDOWN),
        ("Title\n=====\n\n```sh\nmake\n```\n", Format.MARKDOWN),
        ("Title\n=====\n\nA :ref:`link <x>` and a :func:`f`.\n", Format.RST),
        (".. _top:\n\n=====\nTitle\n=====\n\n.. note::\n\n   Hi.\n", Format.RST),
        (".. note:: a\n\n.. warning:: b\n\n.. tip:: c\n", Format.RST),
    ],
)
def test_markup_by_its_marks(text: str, expected: Format) -> None:
    assert detect_format(text.encode()) is expected


def test_detection_reads_a_bounded_prefix() -> None:
    big = (b"The parties agree to the terms below. " * 30 + b"\n") * 14_000  # 16 MB
    # The bounds are on CPU time, which waiting for a core on a loaded machine does not stretch.
    started = time.process_time()
    assert detect_format(big) is Format.TEXT
    assert time.process_time() - started < 2
    parts = {f"word/part{index}.xml": b"" for index in range(25_000)}
    many = _zip({"[Content_Types].xml": b""} | parts)
    hidden = _zip(parts | {"[Content_Types].xml": b""})
    started = time.process_time()
    assert detect_format(many) is Format.DOCX  # its extraction will refuse the entry count
    assert detect_format(hidden) is None  # past the entries detection reads: not read at all
    assert time.process_time() - started < 2


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(
        [b"", b"PK\x03\x04", b"PK\x05\x06", b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", b"%PDF-", b"<html>"]
    ),
    st.binary(max_size=2048),
    st.sampled_from([None, "x.docx", "x.odt", "x.md", "text/html", "x.pdf"]),
)
def test_detection_never_fails_on_hostile_bytes(prefix: bytes, rest: bytes, hint: str | None) -> None:
    result = detect_format(prefix + rest, hint)
    assert result is None or isinstance(result, Format)
