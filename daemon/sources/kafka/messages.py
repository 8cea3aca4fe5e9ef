"""Kafka messages in and out: what an input message holds, and the outputs written for it.

* :func:`parse_message` reads a message's value as a JSON document record or as plain text (the
  format is described in :mod:`daemon.sources.kafka`); :func:`read_message` does so for a consumed
  message, off the event loop when the value is large.
* :func:`message_metadata`: the work item's metadata (coordinates, timestamp, key, headers), which
  reaches the result record.
* :func:`result_output` / :func:`dead_letter_output`: the output message of a finished document.
  The records, the dead-letter envelope and the headers are shaped in :mod:`daemon.records`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from aiokafka import ConsumerRecord

from daemon.errors import DocumentError
from daemon.records import Record, dead_letter, dead_letter_headers, encode_record, result_headers
from daemon.sinks.kafka import Output

_JSON_FIELDS: Final = frozenset({"id", "text", "options"})
_PARSE_IN_THREAD_BYTES: Final = 256 * 1024


@dataclass(frozen=True, slots=True)
class ParsedMessage:
    """What a message holds: its document id and text and options, or why it is refused."""

    id: str
    text: bytes | None = None
    options: Any = None
    error: DocumentError | None = None


def header_value(headers: Sequence[tuple[str, bytes]], name: str) -> str | None:
    """The first header called ``name`` (any case), decoded, stripped and lower-cased; None if absent."""
    for key, value in headers:
        if key.lower() == name:
            return value.decode("utf-8", "replace").strip().lower()
    return None


def message_coordinates(message: ConsumerRecord[bytes, bytes]) -> str:
    """``TOPIC-PARTITION-OFFSET``: where a message is, and the id of a document without one."""
    return f"{message.topic}-{message.partition}-{message.offset}"


def parse_message(
    value: bytes | None,
    key: bytes | None,
    headers: Sequence[tuple[str, bytes]],
    *,
    coordinates: str,
    max_message_bytes: int,
) -> ParsedMessage:
    """Read a message's value as a JSON document record or as plain text (see the package's doc)."""
    fallback_id = key.decode("utf-8", "replace") if key else coordinates
    if value is None:
        return ParsedMessage(fallback_id, error=DocumentError("invalid_message", "the message has no value"))
    if len(value) > max_message_bytes:
        return ParsedMessage(
            fallback_id,
            error=DocumentError(
                "too_large", f"the message is {len(value)} bytes, over the limit of {max_message_bytes}"
            ),
        )
    if not _is_json(value, headers):
        return ParsedMessage(fallback_id, text=value)
    return _parse_json(value, fallback_id)


def _is_json(value: bytes, headers: Sequence[tuple[str, bytes]]) -> bool:
    # The content-type header wins; without one, a value that looks like an object is one.
    content_type = header_value(headers, "content-type") or ""
    if content_type.startswith("application/json"):
        return True
    if content_type.startswith("text/"):
        return False
    return value.lstrip()[:1] == b"{"


def _parse_json(value: bytes, fallback_id: str) -> ParsedMessage:
    def refuse(message: str) -> ParsedMessage:
        return ParsedMessage(fallback_id, error=DocumentError("invalid_message", message))

    try:
        record = json.loads(value)
    except (ValueError, RecursionError) as exc:
        return refuse(f"the message is not valid JSON: {exc}")
    if not isinstance(record, dict):
        return refuse(f"the message must be a JSON object, got {type(record).__name__}")
    unknown = sorted(set(record) - _JSON_FIELDS)
    if unknown:
        return refuse(f"unknown fields {unknown}: a message has id, text and options")
    doc_id = record.get("id")
    if doc_id is not None:
        if isinstance(doc_id, bool) or not isinstance(doc_id, str | int) or str(doc_id) == "":
            return refuse("id must be a non-empty string or an integer")
        fallback_id = str(doc_id)
    text = record.get("text")
    if not isinstance(text, str):
        return refuse("the message has no text: it needs a string field 'text'")
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return refuse(f"text is not valid Unicode: {exc}")
    return ParsedMessage(fallback_id, text=data, options=record.get("options"))


async def read_message(message: ConsumerRecord[bytes, bytes], *, max_message_bytes: int) -> ParsedMessage:
    """:func:`parse_message` of a consumed message. A large value is parsed in a thread, so that
    decoding megabytes of JSON does not stall the loop (heartbeats, other documents' requests)."""
    args = (message.value, message.key, list(message.headers))
    kwargs: dict[str, Any] = {
        "coordinates": message_coordinates(message),
        "max_message_bytes": max_message_bytes,
    }
    size = len(message.value or b"")
    if _PARSE_IN_THREAD_BYTES < size <= max_message_bytes:
        return await asyncio.to_thread(parse_message, *args, **kwargs)
    return parse_message(*args, **kwargs)


def message_metadata(message: ConsumerRecord[bytes, bytes]) -> dict[str, Any]:
    """The work item's metadata: where the message is, its timestamp, key and headers (as text)."""
    return {
        "topic": message.topic,
        "partition": message.partition,
        "offset": message.offset,
        "timestamp_ms": message.timestamp,
        "key": None if message.key is None else message.key.decode("utf-8", "replace"),
        "headers": {key: value.decode("utf-8", "replace") for key, value in message.headers},
    }


def result_output(
    message: ConsumerRecord[bytes, bytes], doc_id: str, result: Record, *, topic: str
) -> Output:
    """The output message of a summarized document: the result record, keyed by the document id."""
    return Output(topic, doc_id, encode_record(result), result_headers(message.headers, result))


def dead_letter_output(
    message: ConsumerRecord[bytes, bytes], doc_id: str, failure: Record, *, topic: str, payload_bytes: int
) -> Output:
    """The dead letter of a refused or failed document: the failure record with the input message."""
    letter = dead_letter(
        failure,
        topic=message.topic,
        partition=message.partition,
        offset=message.offset,
        value=message.value,
        payload_bytes=payload_bytes,
    )
    return Output(topic, doc_id, encode_record(letter), dead_letter_headers(message.headers, failure))
