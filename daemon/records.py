"""The records docsumd writes, in one place: their fields, their encoding, their Kafka headers.

* :class:`Summary`: what summarizing one document produced (typed; metrics and records read it).
* :func:`result_record`: the JSON object of a summarized document (result file, output message).
* :func:`failure_record`: the JSON object of a refused or failed document (error file, dead letter).
* :func:`dead_letter`: a failure record wrapped with the Kafka message it came from;
  :func:`reduced_dead_letter`: its smallest form, for when the whole one cannot be written.
* :func:`clip_text` / :func:`carried_bytes`: bounded copies of what a record carries from its input
  (a message, a key), with the original size and a hash where cut.
* :func:`result_headers` / :func:`dead_letter_headers`: the headers of output messages.
* :func:`request_id` / :func:`parse_request_id`: the id of one engine request, ``DOC:KINDN:HEX``.
* :func:`encode_record`: how a record becomes bytes (pretty for files, compact for Kafka); it
  always gives valid UTF-8 JSON.
* :func:`fallback_failure_record`: the failure record of last resort, when a document's own record
  cannot be encoded.

How an OS file name becomes text and JSON fields (ids, ``metadata.file_name``) is
:mod:`daemon.fs.names`' job (:func:`~daemon.fs.names.display_name`, :func:`~daemon.fs.names.name_fields`).

Changing a field of a record means changing it here, and the README's "Results and failure records".
"""

from __future__ import annotations

import base64
import hashlib
import json
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

from daemon import __version__
from daemon.fs.names import is_utf8

if TYPE_CHECKING:
    from daemon.document.decode import Document
    from daemon.errors import DocumentError

Record = dict[str, Any]
"""A record as a JSON object."""
Headers = list[tuple[str, bytes | None]]
"""Kafka message headers: (name, value) pairs, in order (a value may be null in Kafka's format)."""

MESSAGE_BYTES: Final = 4096
"""A failure record's ``message`` is cut to this many bytes: it may quote the input (a field name)."""
OUTPUT_BYTES: Final = 16384
"""An ``invalid_output`` failure record keeps at most this much of the model's last output, in bytes."""
REDUCED_TEXT_BYTES: Final = 256
"""What a reduced dead letter keeps of its id and message, in bytes."""

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
    """The version of that profile's wording and sampling (see
    :func:`~daemon.summary.profiles.profile_version`)."""
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
    structured: dict[str, Any] | None = None
    """The summary as an object valid against its profile's JSON schema (profiles with
    ``json_schema_file``; ``text`` is then the JSON as generated), else None."""
    sources: tuple[dict[str, Any], ...] = ()
    """Where in the document each request's text came from, in order: for a staged summary one entry
    per part, else the one span (two for ``head_tail``) that was read. Each has ``part``, ``chars``
    (``[start, end)`` in the document's text) and, for documents with a layout, ``pages`` and/or
    ``section``/``headings`` (:meth:`~daemon.document.layout.Layout.source_of`)."""

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
        "structured": summary.structured,
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
        "format": document.format.value,
        "extraction": document.extraction,
        "sources": list(summary.sources),
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
    """The JSON object written for a refused or failed document (error file, dead letter); an
    ``invalid_output`` failure also has ``output``, the model's last output (cut to
    :data:`OUTPUT_BYTES`)."""
    record: Record = {
        "id": doc_id,
        "source": source,
        "reason": error.reason,
        "message": clip_text(error.message, MESSAGE_BYTES),
        "sha256": sha256,
        "input_bytes": input_bytes,
        "metadata": metadata,
        "failed_at": utc_now_iso(),
        "docsumd_version": __version__,
    }
    if error.output is not None:
        record["output"] = clip_text(error.output, OUTPUT_BYTES)
    return record


def fallback_failure_record(failure: Record, problem: str) -> Record:
    """A failure record that encodes whatever ``failure`` held: its id made ASCII-safe, its reason
    kept, its message telling why the full record could not be written, and no metadata."""
    doc_id = failure.get("id")
    return {
        "id": doc_id if isinstance(doc_id, str) and is_utf8(doc_id) else ascii(doc_id),
        "source": str(failure.get("source", "")),
        "reason": str(failure.get("reason", "internal_error")),
        "message": f"{failure.get('message', '')} (its full failure record could not be written: {problem})",
        "sha256": failure.get("sha256") if isinstance(failure.get("sha256"), str) else None,
        "input_bytes": failure.get("input_bytes") if isinstance(failure.get("input_bytes"), int) else None,
        "metadata": {},
        "failed_at": utc_now_iso(),
        "docsumd_version": __version__,
    }


def dead_letter(
    failure: Record,
    *,
    topic: str,
    partition: int,
    offset: int,
    value: bytes | None,
    payload_bytes: int,
    value_sha256: str | None = None,
) -> Record:
    """``failure`` with the Kafka message it came from: coordinates and the first ``payload_bytes`` of
    its value (UTF-8 text, or base64 when not text), with the value's full size and SHA-256 (pass
    ``value_sha256`` when it is known, to hash a large value once)."""
    whole = value or b""
    if value is not None and value_sha256 is None:
        value_sha256 = hashlib.sha256(whole).hexdigest()
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
        "payload_sha256": value_sha256,
        "reduced": False,
    }


def reduced_dead_letter(letter: Record) -> Record:
    """The smallest form of a dead letter made by :func:`dead_letter`, for when the whole one cannot be
    written (it does not fit ``max_request_bytes``, or the broker refused it as too large): id and
    message cut to :data:`REDUCED_TEXT_BYTES`, no payload (its size and hash stay), no key or headers
    in the metadata (their sizes and hashes stay when they were cut), and ``"reduced": true``. A few
    kilobytes at most, whatever the input."""
    metadata = letter.get("metadata")
    kept = metadata if isinstance(metadata, dict) else {}
    return {
        "id": clip_text(str(letter.get("id", "")), REDUCED_TEXT_BYTES),
        "source": letter.get("source"),
        "reason": letter.get("reason"),
        "message": clip_text(str(letter.get("message", "")), REDUCED_TEXT_BYTES),
        "sha256": letter.get("sha256"),
        "input_bytes": letter.get("input_bytes"),
        "metadata": {name: value for name, value in kept.items() if name in _REDUCED_METADATA},
        "failed_at": letter.get("failed_at"),
        "docsumd_version": letter.get("docsumd_version"),
        "topic": clip_text(str(letter.get("topic", "")), REDUCED_TEXT_BYTES),
        "partition": letter.get("partition"),
        "offset": letter.get("offset"),
        "payload": None,
        "payload_encoding": letter.get("payload_encoding"),
        "payload_bytes": letter.get("payload_bytes"),
        "payload_truncated": bool(letter.get("payload_bytes")),
        "payload_sha256": letter.get("payload_sha256"),
        "reduced": True,
    }


_REDUCED_METADATA: Final = frozenset(
    {"partition", "offset", "timestamp_ms", "key_bytes", "key_sha256", "headers_bytes", "headers_count"}
)
"""Metadata a reduced dead letter keeps: numbers and hashes only, whatever the input."""


def clip_text(text: str, max_bytes: int) -> str:
    """``text`` cut to at most ``max_bytes`` of UTF-8, on a character boundary, ending in "…" when cut.
    Lone surrogates (which UTF-8 cannot hold) become "?", so the result always encodes."""
    head = text[: max_bytes + 1]  # a character is at least one byte: this covers max_bytes and more
    data = head.encode("utf-8", "replace")
    if len(head) == len(text) and len(data) <= max_bytes:
        return data.decode("utf-8")
    return data[: max(0, max_bytes - 3)].decode("utf-8", "ignore") + "…"


def carried_bytes(name: str, data: bytes | None, limit: int) -> Record:
    """A bounded copy of ``data`` (a key) as record fields: ``{name: text}`` (UTF-8, undecodable bytes
    replaced; None for None) of its first ``limit`` bytes and, when that cut it, ``NAME_bytes`` (its
    whole size) and ``NAME_sha256``."""
    if data is None:
        return {name: None}
    fields: Record = {name: data[:limit].decode("utf-8", "replace")}
    if len(data) > limit:
        fields[f"{name}_bytes"] = len(data)
        fields[f"{name}_sha256"] = hashlib.sha256(data).hexdigest()
    return fields


def result_headers(input_headers: Iterable[tuple[str, bytes | None]], result: Record) -> Headers:
    """An output message's headers: the input's, then those of :data:`RESULT_HEADERS` from the result."""
    headers: Headers = [(key, value) for key, value in input_headers if key not in RESULT_HEADERS]
    headers += [(name, str(result.get(name, "")).encode("utf-8")) for name in RESULT_HEADERS]
    return headers


def dead_letter_headers(input_headers: Iterable[tuple[str, bytes | None]], failure: Record) -> Headers:
    """A dead letter's headers: the input's, then ``reason``."""
    return [*input_headers, ("reason", str(failure.get("reason", "")).encode("utf-8"))]


def encode_record(record: Record, *, pretty: bool = False) -> bytes:
    """A record as UTF-8 JSON: indented with a final newline for files, compact for messages.

    Always valid UTF-8: a string that still holds lone surrogates (an undecodable OS name that did
    not go through :func:`daemon.fs.names.name_fields`) is written with JSON ``\\u`` escapes instead
    of failing. A value JSON cannot hold (an object, a circular reference) raises :class:`TypeError`
    or :class:`ValueError`."""
    try:
        return _dumps(record, pretty=pretty, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return _dumps(record, pretty=pretty, ensure_ascii=True).encode("ascii")


def _dumps(record: Record, *, pretty: bool, ensure_ascii: bool) -> str:
    if pretty:
        return json.dumps(record, ensure_ascii=ensure_ascii, indent=2) + "\n"
    return json.dumps(record, ensure_ascii=ensure_ascii, separators=(",", ":"))


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
