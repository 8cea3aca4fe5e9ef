"""daemon.document.reader: format by content, extraction in the real workers, the checks after it."""

from __future__ import annotations

from pathlib import Path

import pytest

from daemon.document.reader import DocumentReader, NullExtractor, clean_extracted
from daemon.document.sandbox.pool import ExtractionPool, SandboxLimits
from daemon.document.types import ExtractLimits, Format
from daemon.errors import DocumentError
from tests.expanding_inputs import docx_list_label, html_ordered_list, pdf_shared_stream

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "documents"


async def test_an_extracted_document_carries_its_format_layout_and_details() -> None:
    async with DocumentReader(max_input_bytes=1 << 24, sandbox=SandboxLimits(workers=1)) as reader:
        data = (FIXTURES / "pdf" / "cnfsat.pdf").read_bytes()
        document = await reader.read(data, doc_id="a.txt", source="test", hint="a.txt")
        assert document.format is Format.PDF  # the name said text; the bytes say PDF
        assert document.layout.pages == document.extraction["pages"] >= 1
        assert document.text.count("\f") == document.layout.pages - 1
        assert (document.size_bytes, document.encoding) == (len(data), "utf-8")
        docx = await reader.read(
            (FIXTURES / "docx" / "contract.docx").read_bytes(), doc_id="c", source="test"
        )
        assert docx.format is Format.DOCX
        assert docx.layout.headings
        with pytest.raises(DocumentError) as refused:
            await reader.read((FIXTURES / "docx" / "xxe.docx").read_bytes(), doc_id="x", source="test")
        assert refused.value.reason == "malformed"


async def test_extracted_text_over_the_input_limit_is_too_large() -> None:
    data = (FIXTURES / "docx" / "contract.docx").read_bytes()
    async with DocumentReader(max_input_bytes=len(data) // 100, sandbox=SandboxLimits(workers=1)) as reader:
        with pytest.raises(DocumentError) as refused:
            await reader.read(data, doc_id="c", source="test")
    assert refused.value.reason == "too_large"
    assert "extracted" in refused.value.message


async def test_without_extraction_binary_formats_are_refused_as_before_and_markdown_is_text() -> None:
    reader = DocumentReader(max_input_bytes=1 << 24)
    async with reader:
        with pytest.raises(DocumentError) as refused:
            await reader.read((FIXTURES / "pdf" / "cnfsat.pdf").read_bytes(), doc_id="p", source="test")
        assert refused.value.reason == "binary"
        text = b"# Title\n\nSome words here.\n\n## Part two\n\nMore words.\n"
        document = await reader.read(text, doc_id="m.md", source="test", hint="m.md")
    assert document.text == text.decode()  # a text format's text is never changed
    assert document.format is Format.MARKDOWN
    assert [heading.title for heading in document.layout.headings] == ["Title", "Part two"]


async def test_without_extraction_the_null_extractor_reads_html_as_text_and_starts_nothing() -> None:
    reader = DocumentReader(max_input_bytes=1 << 24)
    assert isinstance(reader.extractor, NullExtractor)
    html = b"<!DOCTYPE html><html><body><h1>Title</h1><p>Some words.</p></body></html>\n"
    async with reader:
        assert reader.format_of(html, "page.html") is None  # not extracted: decoded as text
        document = await reader.read(html, doc_id="page.html", source="test", hint="page.html")
        for name in ("docx", "odt"):
            data = next((FIXTURES / name).iterdir()).read_bytes()
            with pytest.raises(DocumentError) as refused:
                await reader.read(data, doc_id=name, source="test")
            assert refused.value.reason == "binary"
    assert document.text == html.decode()  # tags and all
    assert document.format is Format.TEXT
    assert reader.text_room(html, Format.HTML) == len(html)  # no extraction cap: decoded text's room


def test_stray_characters_of_extracted_text_become_spaces_keeping_offsets() -> None:
    text = "a\x00b\x07c\fd\ud800e\tf\n"
    cleaned = clean_extracted(text)
    assert cleaned == "a b c\fd e\tf\n"
    assert len(cleaned) == len(text)


async def test_the_small_inputs_that_expand_are_refused_by_the_expansion_ratio() -> None:
    # Issue 36's files: 1.6 KB of DOCX for 12 M letters, 10 KB of HTML for 15 M, 21 KB of PDF for
    # 7.6 M. Each fits every absolute limit (characters, and limits.max_input_bytes as UTF-8).
    hostile = {
        "docx": docx_list_label(12_000_000),
        "html": html_ordered_list(400),
        "pdf": pdf_shared_stream(1999),
    }
    async with DocumentReader(max_input_bytes=16 << 20, sandbox=SandboxLimits(workers=1)) as reader:
        for name, data in hostile.items():
            with pytest.raises(DocumentError) as refused:
                await reader.read(data, doc_id=name, source="test")
            assert refused.value.reason == "too_expanded", name
            assert "max_expansion_ratio" in refused.value.message
            assert f"input's {len(data)} bytes" in refused.value.message


async def test_a_tiny_input_may_expand_up_to_the_floor_whatever_its_ratio() -> None:
    data = docx_list_label(500_000)  # 1.6 KB: a ratio of 300, under the 1 MiB floor
    async with DocumentReader(max_input_bytes=16 << 20, sandbox=SandboxLimits(workers=1)) as reader:
        document = await reader.read(data, doc_id="d", source="test")
    assert len(document.text) > 300 * len(data)


async def test_past_the_floor_the_ratio_decides() -> None:
    data = docx_list_label(40_000)  # 1.6 KB of DOCX, 40 KB of text: a ratio of about 25
    sandbox = SandboxLimits(workers=1)
    for ratio, refused in ((20.0, True), (30.0, False)):
        limits = ExtractLimits(max_expansion_ratio=ratio, expansion_floor_bytes=0)
        async with DocumentReader(max_input_bytes=16 << 20, sandbox=sandbox, extract=limits) as reader:
            if refused:
                with pytest.raises(DocumentError, match="more than 20 times") as caught:
                    await reader.read(data, doc_id="d", source="test")
                assert caught.value.reason == "too_expanded"
            else:
                assert len((await reader.read(data, doc_id="d", source="test")).text) > 40_000


async def test_a_text_past_the_cap_is_refused_by_the_daemon_even_when_the_worker_lets_it_through() -> None:
    limits = ExtractLimits(expansion_floor_bytes=1000)
    reader = DocumentReader(max_input_bytes=16 << 20, sandbox=SandboxLimits(workers=1), extract=limits)
    reader.extractor = ExtractionPool(
        SandboxLimits(workers=1), reader.extract_limits, target="tests.doubles.extract_targets:ignores_caps"
    )
    async with reader:
        pdf = b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n 5000"  # 20 bytes, and 5,000 letters back
        with pytest.raises(DocumentError) as refused:
            await reader.read(pdf, doc_id="p", source="test")
        assert refused.value.reason == "too_expanded"
        document = await reader.read(pdf.replace(b"5000", b"900"), doc_id="p", source="test")
        assert len(document.text) == 900


async def test_room_is_told_the_most_the_text_can_take_before_it_is_built_then_what_it_takes() -> None:
    told: list[int] = []

    async def room(size: int) -> None:
        told.append(size)

    limits = ExtractLimits(max_expansion_ratio=20.0, expansion_floor_bytes=1000)
    html = b'<html><body><ol type="A"><li value="26000">x</li></ol></body></html>'  # a label of 1,000
    async with DocumentReader(
        max_input_bytes=16 << 20, sandbox=SandboxLimits(workers=1), extract=limits
    ) as reader:
        document = await reader.read(html, doc_id="h", source="test", room=room)
        assert len(document.text) > 1000 > len(html)
        assert told == [20 * len(html), len(document.text.encode())]
        told.clear()
        text = b"Plain words, a few of them.\n" * 10
        await reader.read(text, doc_id="t", source="test", room=room)
        assert told == [len(text), len(text)]
        told.clear()
        utf16 = "\ufeff語の文".encode("utf-16-le") * 100  # two bytes a character, three as UTF-8
        await reader.read(utf16, doc_id="u", source="test", room=room)
        assert told == [len(utf16) * 3 // 2, len(utf16) * 3 // 2 - 3]  # the first BOM goes
