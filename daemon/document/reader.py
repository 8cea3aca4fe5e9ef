"""Raw bytes in, a checked :class:`~daemon.document.decode.Document` out, whatever the format.

:class:`DocumentReader` detects the format from the bytes (:func:`~daemon.document.formats.
detect_format`; a file name or a Kafka ``content-type`` is a hint only), then:

* text formats (plain text, Markdown, reStructuredText) are decoded and checked as ever
  (:func:`~daemon.document.decode.decode_text`); Markdown and reST headings are found in the text,
  which is not changed;
* PDF, DOCX, ODT and HTML go to the sandboxed extraction workers
  (:class:`~daemon.document.sandbox.pool.ExtractionPool`), and the text they return passes the checks
  every text passes (size as UTF-8, NUL characters, whitespace only).

With ``extract.enabled = false`` the extractor is a :class:`NullExtractor`: no worker starts and
every input is decoded as text: PDF, DOCX and ODT fail as ``binary``, HTML is read with its tags.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import re
import time
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, Final, Protocol, Self

from daemon.document.decode import check_text, decode_document, max_text_bytes, sha256_hex
from daemon.document.formats import detect_format
from daemon.document.headings import text_layout
from daemon.document.sandbox.pool import ExtractionPool, SandboxLimits
from daemon.document.text import replace_each
from daemon.document.types import EXTRACTED_FORMATS, Document, Extracted, ExtractLimits, Format, utf8_size
from daemon.errors import DocumentError
from daemon.ops.logging import get_logger
from daemon.ops.metrics import DOCUMENT_FORMATS, EXTRACTED_PAGES, EXTRACTION_SECONDS, EXTRACTIONS

log = get_logger(__name__)


# C0 controls but tab, line feed, form feed (page breaks) and carriage return; DEL; lone surrogates.
_STRAY_CHARACTERS: Final = re.compile("[\x00-\x08\x0b\x0e-\x1f\x7f\ud800-\udfff]")


def clean_extracted(text: str) -> str:
    """Extracted text without the control characters and lone surrogates that broken PDFs and office
    files carry (a NUL from a font's encoding is the extractor's artefact, not a corrupt input), so
    the result can always be written as UTF-8. Offsets are kept: each is replaced by a space."""
    return replace_each(_STRAY_CHARACTERS, " ", text)


Room = Callable[[int], Awaitable[None]]
"""Told how many bytes a document being read holds from now on (:meth:`DocumentReader.read`), and
returns once there is room for them: the service's byte budget
(:meth:`daemon.intake.byte_budget.Holding.hold_text`)."""


class Extractor(Protocol):
    """What reads the formats that need extracting: the sandboxed
    :class:`~daemon.document.sandbox.pool.ExtractionPool`, or the :class:`NullExtractor`."""

    formats: frozenset[Format]
    """The formats it extracts; every other input is decoded as text."""

    async def start(self) -> None:
        """Make it ready (idempotent)."""

    async def stop(self) -> None:
        """Release what it holds (idempotent)."""

    async def extract(
        self, data: bytes, fmt: Format, *, before: Callable[[], Awaitable[None]] | None = None
    ) -> Extracted:
        """The text and layout of ``data`` read as ``fmt`` (one of :attr:`formats`)."""
        ...


class NullExtractor:
    """Extraction off (``extract.enabled = false``): it extracts no format and starts nothing, so
    every input is decoded as text: PDF, DOCX and ODT fail as ``binary`` by their signatures, HTML is
    read with its tags."""

    formats: frozenset[Format] = frozenset()

    async def start(self) -> None:
        """Nothing to start."""

    async def stop(self) -> None:
        """Nothing to stop."""

    async def extract(
        self, data: bytes, fmt: Format, *, before: Callable[[], Awaitable[None]] | None = None
    ) -> Extracted:
        """Never extracts (no format is in :attr:`formats`): ``fmt`` is refused as ``binary``."""
        raise DocumentError("binary", f"input is {fmt.value.upper()}, not text (extract.enabled is false)")


class DocumentReader:
    """Reads documents of every supported format; owns the extraction workers (``start``/``stop``)."""

    def __init__(
        self,
        *,
        max_input_bytes: int,
        sandbox: SandboxLimits | None = None,
        extract: ExtractLimits | None = None,
    ) -> None:
        """``max_input_bytes`` bounds the input and, as UTF-8, the text extracted from it; ``sandbox``
        None turns extraction off (a :class:`NullExtractor`: no worker, every input decoded as text)."""
        self.max_input_bytes = max_input_bytes
        self.extract_limits = dataclasses.replace(extract or ExtractLimits(), max_text_bytes=max_input_bytes)
        self.extractor: Extractor = (
            ExtractionPool(sandbox, self.extract_limits) if sandbox is not None else NullExtractor()
        )
        self._extractor_started = False
        self._extractor_lock = asyncio.Lock()

    async def start(self) -> None:
        """Nothing to do until a document needs extracting: the workers start then (a deployment that
        only ever reads text never pays for them). Idempotent."""

    async def _started_extractor(self) -> Extractor:
        async with self._extractor_lock:
            if not self._extractor_started:
                try:
                    await self.extractor.start()
                except (OSError, RuntimeError) as exc:
                    log.error("cannot start the extraction workers", error=str(exc))
                    await self.extractor.stop()
                    raise DocumentError(
                        "extract_failed", f"the extraction workers cannot start: {exc}"
                    ) from exc
                self._extractor_started = True
        return self.extractor

    async def stop(self) -> None:
        """Stop the workers and reap them. Idempotent."""
        await self.extractor.stop()
        self._extractor_started = False

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    def format_of(self, data: bytes, hint: str | None) -> Format | None:
        """The format ``data`` will be read as (None: not a format docsumd reads; decoding refuses it)."""
        detected = detect_format(data, hint)
        if detected in EXTRACTED_FORMATS and detected not in self.extractor.formats:
            return None  # decode_text refuses the binary ones, reads HTML as text
        return detected

    async def read(
        self,
        data: bytes,
        *,
        doc_id: str,
        source: str,
        metadata: dict[str, Any] | None = None,
        hint: str | None = None,
        room: Room | None = None,
    ) -> Document:
        """The checked document from ``data``, or :class:`DocumentError` with the reason.

        ``room`` is told how many bytes of text the document holds: before its text is built, the
        most that text can take (:meth:`text_room`; for an extracted format once a worker is free
        for it, so that documents waiting for a worker hold no room for text); once built, the
        larger of the input's bytes and the text's as UTF-8. Each call may wait (for room in the
        service's byte budget)."""
        # Off the event loop: sniffing a text's format scans up to 64 KiB of it in Python, some
        # milliseconds that, for a backlog of documents, held up everything else (bench/intake.py).
        fmt = await asyncio.to_thread(self.format_of, data, hint)
        DOCUMENT_FORMATS.labels(format=fmt.value if fmt is not None else "unknown").inc()
        before: Callable[[], Awaitable[None]] | None = None
        if room is not None:
            before = functools.partial(room, self.text_room(data, fmt))
        if fmt in self.extractor.formats:
            extracted = await self._extract(data, fmt, before)
            document, text_bytes = self._extracted_document(data, extracted, doc_id, source, metadata)
        else:
            if before is not None:
                await before()
            document, text_bytes = await asyncio.to_thread(
                self._text_document, data, fmt or Format.TEXT, doc_id, source, metadata
            )
        if room is not None:
            await room(max(len(data), text_bytes))
        return document

    def text_room(self, data: bytes, fmt: Format | None) -> int:
        """The most bytes the text read from ``data`` as ``fmt`` can take as UTF-8 (never fewer than
        ``data``'s): what it may hold in the main process, counted before it is built. Extracted
        text (PDF, DOCX, ODT, HTML) is capped per input by its size
        (:meth:`~daemon.document.types.ExtractLimits.text_cap`); decoded text by its encoding."""
        if fmt in self.extractor.formats:
            return max(len(data), self.extract_limits.text_cap(len(data)).max_bytes)
        return max(len(data), max_text_bytes(data))

    async def _extract(
        self, data: bytes, fmt: Format, before: Callable[[], Awaitable[None]] | None
    ) -> Extracted:
        started = time.monotonic()
        try:
            extractor = await self._started_extractor()
            extracted = await extractor.extract(data, fmt, before=before)
        except DocumentError as error:
            EXTRACTIONS.labels(format=fmt.value, outcome=error.reason).inc()
            raise
        finally:
            EXTRACTION_SECONDS.labels(format=fmt.value).observe(time.monotonic() - started)
        EXTRACTIONS.labels(format=fmt.value, outcome="ok").inc()
        if extracted.layout.pages:
            EXTRACTED_PAGES.inc(extracted.layout.pages)
        return extracted

    def _text_document(
        self, data: bytes, fmt: Format, doc_id: str, source: str, metadata: dict[str, Any] | None
    ) -> tuple[Document, int]:
        document = decode_document(
            data, doc_id=doc_id, source=source, max_input_bytes=self.max_input_bytes, metadata=metadata
        )
        document = dataclasses.replace(document, format=fmt, layout=text_layout(document.text, fmt))
        # UTF-8 input: its text is no larger than its bytes; only other encodings are measured.
        return document, len(data) if document.encoding == "utf-8" else utf8_size(document.text)

    def _extracted_document(
        self, data: bytes, extracted: Extracted, doc_id: str, source: str, metadata: dict[str, Any] | None
    ) -> tuple[Document, int]:
        what = f"the text extracted from this {extracted.format.value.upper()}"
        text = clean_extracted(extracted.text)
        if not text.strip():
            raise DocumentError("no_text", f"{what} is empty: no text layer (a scan?) or no text at all")
        # The worker stopped at this cap already; checked again here, since its reply is not trusted.
        text_bytes = utf8_size(text)
        self.extract_limits.text_cap(len(data)).check(len(text), text_bytes, what)
        check_text(text)
        return Document(
            id=doc_id,
            text=text,
            source=source,
            sha256=sha256_hex(data),
            size_bytes=len(data),
            encoding="utf-8",
            metadata=dict(metadata or {}),
            format=extracted.format,
            layout=extracted.layout,
            extraction=dict(extracted.details),
        ), text_bytes
