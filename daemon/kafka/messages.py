"""Kafka messages in and out: what an input message holds, and the outputs written for it.

* :func:`parse_message` reads a message's value as a JSON document record or as plain text (the
  format is described in :mod:`daemon.kafka`), after checking what every message must be:
  a key of at most ``max_key_bytes``, headers of at most ``max_header_bytes`` and none without a
  value; :func:`read_message` does so for a consumed message, off the event loop when it is large.
  It never raises: whatever the bytes, the answer is a document or a refusal with a reason.
* :func:`message_metadata`: the work item's metadata (coordinates, timestamp, key, headers), which
  reaches the result record; a bounded copy whatever the message (:class:`MessageLimits`).
* :func:`result_output` / :func:`dead_letter_output`: the output message of a finished document,
  built to fit ``max_request_bytes``: keys and headers are carried only up to their limits, a dead
  letter sheds its payload and then everything but its coordinates (:func:`~daemon.records.
  reduced_dead_letter`) until it fits, and every output carries the smaller one to write instead if
  the broker refuses it anyway (:attr:`~daemon.kafka.sink.Output.fallback`).
  The records, the dead-letter envelope and the headers are shaped in :mod:`daemon.records`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from aiokafka import ConsumerRecord

from daemon.config import KafkaSourceConfig
from daemon.errors import DocumentError, Reason
from daemon.kafka.sink import Output
from daemon.ops.tracing import with_trace_context
from daemon.records import (
    Headers,
    Record,
    carried_bytes,
    clip_text,
    dead_letter,
    dead_letter_headers,
    encode_record,
    failure_record,
    reduced_dead_letter,
    result_headers,
)

_JSON_FIELDS: Final = frozenset({"id", "text", "options"})
_PARSE_IN_THREAD_BYTES: Final = 256 * 1024
_HEADER_OVERHEAD: Final = 4
"""Each header counts this many bytes besides its name and value, so that many empty headers count."""
_QUOTED_BYTES: Final = 64
"""How much of a header name or a field name a refusal message quotes."""


DEFAULT_MAX_KEY_BYTES: Final[int] = KafkaSourceConfig.model_fields["max_key_bytes"].default
DEFAULT_MAX_HEADER_BYTES: Final[int] = KafkaSourceConfig.model_fields["max_header_bytes"].default


@dataclass(frozen=True, slots=True)
class MessageLimits:
    """What an input message may hold, and so what its outputs may copy of it."""

    max_message_bytes: int
    max_key_bytes: int = DEFAULT_MAX_KEY_BYTES
    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES

    @classmethod
    def of(cls, config: KafkaSourceConfig) -> MessageLimits:
        """The limits of a configured source."""
        return cls(config.max_message_bytes, config.max_key_bytes, config.max_header_bytes)


@dataclass(frozen=True, slots=True)
class ParsedMessage:
    """What a message holds: its document id and text and options, or why it is refused."""

    id: str
    text: bytes | None = None
    options: Any = None
    error: DocumentError | None = None


def header_value(headers: Sequence[tuple[str, bytes | None]], name: str) -> str | None:
    """The first header called ``name`` (any case) with a value, decoded, stripped and lower-cased;
    None if there is none."""
    for key, value in headers:
        if key.lower() == name and value is not None:
            return value.decode("utf-8", "replace").strip().lower()
    return None


def headers_size(headers: Sequence[tuple[str, bytes | None]]) -> int:
    """The size :attr:`MessageLimits.max_header_bytes` bounds: names and values, plus a few bytes a
    header."""
    return sum(len(key.encode("utf-8")) + len(value or b"") + _HEADER_OVERHEAD for key, value in headers)


def carried_headers(headers: Sequence[tuple[str, bytes | None]], limit: int) -> Headers:
    """The headers an output carries: the input's, in order, as many as fit in ``limit`` (all of them
    for a message that was taken in; fewer only for one refused for its headers)."""
    carried: Headers = []
    used = 0
    for key, value in headers:
        used += len(key.encode("utf-8")) + len(value or b"") + _HEADER_OVERHEAD
        if used > limit:
            break
        carried.append((key, value))
    return carried


def message_bytes(message: ConsumerRecord[bytes, bytes]) -> int:
    """What a consumed message weighs in memory, near enough: its key, value and headers."""
    return len(message.key or b"") + len(message.value or b"") + headers_size(list(message.headers))


def message_coordinates(message: ConsumerRecord[bytes, bytes]) -> str:
    """``TOPIC-PARTITION-OFFSET``: where a message is, and the id of a document without one."""
    return f"{message.topic}-{message.partition}-{message.offset}"


def parse_message(
    value: bytes | None,
    key: bytes | None,
    headers: Sequence[tuple[str, bytes | None]],
    *,
    coordinates: str,
    max_message_bytes: int,
    max_key_bytes: int = DEFAULT_MAX_KEY_BYTES,
    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES,
) -> ParsedMessage:
    """Read a message's value as a JSON document record or as plain text (see the package's doc).
    Never raises: a message that is not a document is a :class:`ParsedMessage` with its ``error``."""
    key_fits = key is not None and len(key) <= max_key_bytes
    fallback_id = key.decode("utf-8", "replace") if key and key_fits else coordinates

    def refuse(reason: Reason, message: str) -> ParsedMessage:
        return ParsedMessage(fallback_id, error=DocumentError(reason, message))

    if key is not None and not key_fits:
        return refuse(
            "too_large", f"the key is {len(key)} bytes, over sources.kafka.max_key_bytes ({max_key_bytes})"
        )
    if (size := headers_size(headers)) > max_header_bytes:
        return refuse(
            "too_large",
            f"the headers are {size} bytes ({len(headers)} headers), over sources.kafka.max_header_bytes "
            f"({max_header_bytes})",
        )
    for name, header in headers:
        if header is None:
            return refuse("invalid_message", f"header {_quoted(name)} has no value (null)")
    if value is None:
        return refuse("invalid_message", "the message has no value")
    if len(value) > max_message_bytes:
        return refuse(
            "too_large", f"the message is {len(value)} bytes, over the limit of {max_message_bytes}"
        )
    if not _is_json(value, headers):
        return ParsedMessage(fallback_id, text=value)
    return _parse_json(value, fallback_id, max_key_bytes)


def _quoted(name: str) -> str:
    """A name from the input, quoted for a refusal message, and cut: it may be huge."""
    return json.dumps(clip_text(name, _QUOTED_BYTES), ensure_ascii=False)


def _is_json(value: bytes, headers: Sequence[tuple[str, bytes | None]]) -> bool:
    # The content-type header wins; without one, a value that looks like an object is one.
    content_type = (header_value(headers, "content-type") or "").strip().lower()
    if content_type.startswith("application/json"):
        return True
    if content_type:  # text/..., application/pdf and the like: the document itself
        return False
    return value.lstrip()[:1] == b"{"


def _parse_json(value: bytes, fallback_id: str, max_key_bytes: int) -> ParsedMessage:
    def refuse(message: str, reason: Reason = "invalid_message") -> ParsedMessage:
        return ParsedMessage(fallback_id, error=DocumentError(reason, message))

    try:
        record = json.loads(value)
    except RecursionError:
        # Python's parser gives up past about a thousand levels; nothing docsumd reads nests like that.
        return refuse("the message's JSON is nested too deeply to be read")
    except ValueError as exc:
        return refuse(f"the message is not valid JSON: {exc}")
    if not isinstance(record, dict):
        return refuse(f"the message must be a JSON object, got {type(record).__name__}")
    unknown = sorted(set(record) - _JSON_FIELDS)
    if unknown:
        names = ", ".join(_quoted(name) for name in unknown[:5]) + (", ..." if len(unknown) > 5 else "")
        return refuse(f"unknown fields [{names}]: a message has id, text and options")
    doc_id = record.get("id")
    if doc_id is not None:
        if isinstance(doc_id, bool) or not isinstance(doc_id, str | int) or str(doc_id) == "":
            return refuse("id must be a non-empty string or an integer")
        encoded = str(doc_id).encode("utf-8", "surrogatepass")
        if len(encoded) > max_key_bytes:
            return refuse(
                f"the id is {len(encoded)} bytes, over sources.kafka.max_key_bytes ({max_key_bytes})",
                "too_large",
            )
        if not _is_unicode(str(doc_id)):
            return refuse("id is not valid Unicode (it holds a lone surrogate)")
        fallback_id = str(doc_id)
    text = record.get("text")
    if not isinstance(text, str):
        return refuse("the message has no text: it needs a string field 'text'")
    if not _is_unicode(text):
        return refuse("text is not valid Unicode (it holds a lone surrogate)")
    return ParsedMessage(fallback_id, text=text.encode("utf-8"), options=record.get("options"))


def _is_unicode(text: str) -> bool:
    """Whether ``text`` can be written as UTF-8 (JSON's ``\\ud800`` escapes make lone surrogates)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


async def read_message(message: ConsumerRecord[bytes, bytes], limits: MessageLimits) -> ParsedMessage:
    """:func:`parse_message` of a consumed message. A large value is parsed in a thread, so that
    decoding megabytes of JSON does not stall the loop (heartbeats, other documents' requests)."""
    args = (message.value, message.key, list(message.headers))
    kwargs: dict[str, Any] = {
        "coordinates": message_coordinates(message),
        "max_message_bytes": limits.max_message_bytes,
        "max_key_bytes": limits.max_key_bytes,
        "max_header_bytes": limits.max_header_bytes,
    }
    size = len(message.value or b"")
    if _PARSE_IN_THREAD_BYTES < size <= limits.max_message_bytes:
        return await asyncio.to_thread(parse_message, *args, **kwargs)
    return parse_message(*args, **kwargs)


def message_metadata(message: ConsumerRecord[bytes, bytes], limits: MessageLimits) -> dict[str, Any]:
    """The work item's metadata: where the message is, its timestamp, key and headers (as text; a
    header without a value as null). A bounded copy: at most ``max_key_bytes`` of the key and
    ``max_header_bytes`` of headers, with the key's size and SHA-256 (``key_bytes``, ``key_sha256``)
    when cut, and the headers' size and count (``headers_bytes``, ``headers_count``) when some were
    left out (only a message refused for its key or headers has either)."""
    headers = list(message.headers)
    carried = carried_headers(headers, limits.max_header_bytes)
    metadata: dict[str, Any] = {
        "topic": message.topic,
        "partition": message.partition,
        "offset": message.offset,
        "timestamp_ms": message.timestamp,
        **carried_bytes("key", message.key, limits.max_key_bytes),
        "headers": {
            key: None if value is None else value.decode("utf-8", "replace") for key, value in carried
        },
    }
    if len(carried) < len(headers):
        metadata["headers_bytes"] = headers_size(headers)
        metadata["headers_count"] = len(headers)
    return metadata


@dataclass(frozen=True, slots=True)
class OutputTopics:
    """Where outputs go and how large they may be: what building them needs of the config."""

    output_topic: str
    dead_letter_topic: str
    payload_bytes: int
    max_request_bytes: int
    limits: MessageLimits

    @classmethod
    def of(cls, config: KafkaSourceConfig) -> OutputTopics:
        """The output side of a configured source."""
        return cls(
            config.output_topic,
            config.dead_letter_topic,
            config.dead_letter_payload_bytes,
            config.max_request_bytes,
            MessageLimits.of(config),
        )


def result_output(
    message: ConsumerRecord[bytes, bytes], doc_id: str, result: Record, topics: OutputTopics
) -> Output:
    """The output message of a summarized document: the result record, keyed by the document id, with
    its reduced ``too_large`` dead letter as the fallback. :class:`~daemon.errors.DocumentError`
    ``too_large`` if it does not fit ``max_request_bytes`` (the document then fails: a dead letter)."""
    headers = with_trace_context(
        result_headers(carried_headers(list(message.headers), topics.limits.max_header_bytes), result)
    )
    refused = DocumentError(
        "too_large", "the broker refused the result as too large (the output topic's max.message.bytes)"
    )
    failure = failure_record(
        doc_id=doc_id,
        source=str(result.get("source", "")),
        error=refused,
        metadata=result.get("metadata") or {},
        sha256=result.get("sha256"),
        input_bytes=result.get("input_bytes"),
    )
    fallback = _reduced_letter(message, failure, topics, _sha256(message.value))
    output = Output(topics.output_topic, doc_id, encode_record(result), headers, fallback)
    if output.size > topics.max_request_bytes:
        raise DocumentError(
            "too_large",
            f"the result is {output.size} bytes, over sources.kafka.max_request_bytes "
            f"({topics.max_request_bytes})",
        )
    return output


def dead_letter_output(
    message: ConsumerRecord[bytes, bytes], doc_id: str, failure: Record, topics: OutputTopics
) -> Output:
    """The dead letter of a refused or failed document: the failure record with the input message,
    fitted to ``max_request_bytes``. The payload is cut further, then left out, and at last the dead
    letter is reduced (:func:`~daemon.records.reduced_dead_letter`), until it fits; the reduced form
    is also its fallback."""
    headers = with_trace_context(
        dead_letter_headers(carried_headers(list(message.headers), topics.limits.max_header_bytes), failure)
    )
    digest = _sha256(message.value)
    reduced = _reduced_letter(message, failure, topics, digest)
    for payload_bytes in _shrinking(topics.payload_bytes):
        letter = dead_letter(
            failure,
            topic=message.topic,
            partition=message.partition,
            offset=message.offset,
            value=message.value,
            payload_bytes=payload_bytes,
            value_sha256=digest,
        )
        output = Output(topics.dead_letter_topic, doc_id, encode_record(letter), headers, reduced)
        if output.size <= topics.max_request_bytes:
            return output
    return reduced


def _sha256(value: bytes | None) -> str | None:
    return None if value is None else hashlib.sha256(value).hexdigest()


def _shrinking(payload_bytes: int) -> list[int]:
    """The payload sizes tried, largest first: as configured, an eighth, a sixty-fourth, none."""
    return sorted({payload_bytes, payload_bytes // 8, payload_bytes // 64, 0}, reverse=True)


def _reduced_letter(
    message: ConsumerRecord[bytes, bytes], failure: Record, topics: OutputTopics, digest: str | None
) -> Output:
    """The reduced dead letter of ``failure``: small whatever the input, so it always fits (the config
    keeps ``max_request_bytes`` above its largest size); keyed by its (cut) id; its only header is
    ``reason``."""
    letter = dead_letter(
        failure,
        topic=message.topic,
        partition=message.partition,
        offset=message.offset,
        value=message.value,
        payload_bytes=0,
        value_sha256=digest,
    )
    reduced = reduced_dead_letter(letter)
    return Output(
        topics.dead_letter_topic, reduced["id"], encode_record(reduced), dead_letter_headers([], reduced)
    )
