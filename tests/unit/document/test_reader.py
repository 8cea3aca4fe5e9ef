"""daemon.document.reader: format by content, extraction in the real workers, the checks after it."""

from __future__ import annotations

from pathlib import Path

import pytest

from daemon.document.reader import DocumentReader, clean_extracted
from daemon.document.sandbox.pool import SandboxLimits
from daemon.document.types import Format
from daemon.errors import DocumentError

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


def test_stray_characters_of_extracted_text_become_spaces_keeping_offsets() -> None:
    text = "a\x00b\x07c\fd\ud800e\tf\n"
    cleaned = clean_extracted(text)
    assert cleaned == "a b c\fd e\tf\n"
    assert len(cleaned) == len(text)
