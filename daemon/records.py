"""The records docsumd writes, in one place: their fields, their encoding, their Kafka headers.

* :class:`Summary`: what summarizing one document produced (typed; metrics and records read it).
* :func:`result_record`: the JSON object of a summarized document (result file, output message).
* :func:`failure_record`: the JSON object of a refused or failed document (error file, dead letter).
* :func:`dead_letter`: a failure record wrapped with the Kafka message it came from.
* :func:`result_headers` / :func:`dead_letter_headers`: the headers of output messages.
* :func:`request_id` / :func:`parse_request_id`: the id of one engine request, ``DOC:KINDN:HEX``.
* :func:`encode_record`: how a record becomes bytes (pretty for files, compact for Kafka).

Changing a field of a record means changing it here, and the README's "Results and failure records".
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

from daemon import __version__

if TYPE_CHECKING:
    from daemon.documents import Document
    from daemon.errors import DocumentError

Record = dict[str, Any]
"""A record as a JSON object."""
Headers = list[tuple[str, bytes]]
"""Kafka message headers: (name, value) pairs, in order."""

RESULT_HEADERS: Final = ("model", "prompt_version", "profile", "profile_version")
"""Headers every output message carries, taken from its result record (input headers of these names
are replaced)."""


@dataclass(frozen=True, slots=True)
class Summary:
    """What summarizing one document produced."""

    text: str
    strategy: str
    style: str
    max_summary_tokens: int
    prompt_version: str
    profile: str
    """The profile it was summarized under (a name from the config)."""
    profile_version: str
    """The version of that profile's wording and sampling (:func:`daemon.profiles.profile_version`)."""
    parts: int
    depth: int
    requests: int
    prompt_tokens: int
    generated_tokens: int
    summary_tokens: int
    document_tokens: int
    dropped_tokens: int
    cached_prompt_tokens: int
    finish_reason: str | None
    first_token_s: float | None
    engine_s: float

    @property
    def truncated(self) -> bool:
        """Whether part of the document was not read by the model."""
        return self.dropped_tokens > 0


def utc_now_iso() -> str:
    """The current time as an ISO 8601 UTC string (records carry it)."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def result_record(
    document: Document, summary: Summary, *, model: str, queued_s: float, total_s: float
) -> Record:
    """The JSON object written for a summarized document (folder result file, Kafka message)."""
    return {
        "id": document.id,
        "source": document.source,
        "summary": summary.text,
        "model": model,
        "prompt_version": summary.prompt_version,
        "profile": summary.profile,
        "profile_version": summary.profile_version,
        "strategy": summary.strategy,
        "style": summary.style,
        "max_summary_tokens": summary.max_summary_tokens,
        "truncated": summary.truncated,
        "parts": summary.parts,
        "depth": summary.depth,
        "requests": summary.requests,
        "document_tokens": summary.document_tokens,
        "dropped_tokens": summary.dropped_tokens,
        "prompt_tokens": summary.prompt_tokens,
        "generated_tokens": summary.generated_tokens,
        "summary_tokens": summary.summary_tokens,
        "cached_prompt_tokens": summary.cached_prompt_tokens,
        "finish_reason": summary.finish_reason,
        "sha256": document.sha256,
        "input_bytes": document.size_bytes,
        "encoding": document.encoding,
        "metadata": document.metadata,
        "timings": {
            "queued_s": round(queued_s, 4),
            "first_token_s": None if summary.first_token_s is None else round(summary.first_token_s, 4),
            "engine_s": round(summary.engine_s, 4),
            "total_s": round(total_s, 4),
        },
        "created_at": utc_now_iso(),
        "docsumd_version": __version__,
    }


def failure_record(
    *,
    doc_id: str,
    source: str,
    error: DocumentError,
    metadata: dict[str, Any],
    sha256: str | None,
    input_bytes: int | None,
) -> Record:
    """The JSON object written for a refused or failed document (error file, dead letter)."""
    return {
        "id": doc_id,
        "source": source,
        "reason": error.reason,
        "message": error.message,
        "sha256": sha256,
        "input_bytes": input_bytes,
        "metadata": metadata,
        "failed_at": utc_now_iso(),
        "docsumd_version": __version__,
    }


def dead_letter(
    failure: Record, *, topic: str, partition: int, offset: int, value: bytes | None, payload_bytes: int
) -> Record:
    """``failure`` with the Kafka message it came from: coordinates and the first ``payload_bytes`` of
    its value (UTF-8 text, or base64 when not text), with the value's full size."""
    whole = value or b""
    kept = whole[:payload_bytes]
    try:
        payload, encoding = kept.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        payload, encoding = base64.b64encode(kept).decode("ascii"), "base64"
    return {
        **failure,
        "topic": topic,
        "partition": partition,
        "offset": offset,
        "payload": payload if value is not None else None,
        "payload_encoding": encoding,
        "payload_bytes": len(whole),
        "payload_truncated": len(kept) < len(whole),
    }


def result_headers(input_headers: Iterable[tuple[str, bytes]], result: Record) -> Headers:
    """An output message's headers: the input's, then those of :data:`RESULT_HEADERS` from the result."""
    headers: Headers = [(key, value) for key, value in input_headers if key not in RESULT_HEADERS]
    headers += [(name, str(result.get(name, "")).encode("utf-8")) for name in RESULT_HEADERS]
    return headers


def dead_letter_headers(input_headers: Iterable[tuple[str, bytes]], failure: Record) -> Headers:
    """A dead letter's headers: the input's, then ``reason``."""
    return [*input_headers, ("reason", str(failure.get("reason", "")).encode("utf-8"))]


def encode_record(record: Record, *, pretty: bool = False) -> bytes:
    """A record as UTF-8 JSON: indented with a final newline for files, compact for messages."""
    if pretty:
        return json.dumps(record, ensure_ascii=False, indent=2).encode("utf-8") + b"\n"
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


@dataclass(frozen=True, slots=True)
class RequestId:
    """The parts of an engine request id: the document, the request's kind, its number in the document."""

    doc_id: str
    kind: str
    number: int


def request_id(doc_id: str, kind: str, number: int) -> str:
    """The id of a document's ``number``-th engine request: ``DOC:KINDN:HEX`` (HEX keeps ids unique
    when a document is processed again while an earlier request of it is still being aborted)."""
    return f"{doc_id}:{kind}{number}:{uuid.uuid4().hex[:8]}"


def parse_request_id(value: str) -> RequestId:
    """The parts of an id made by :func:`request_id` (a document id may itself contain ``:``)."""
    doc_id, kind_number, _ = value.rsplit(":", 2)
    kind = kind_number.rstrip("0123456789")
    return RequestId(doc_id, kind, int(kind_number[len(kind) :]))
