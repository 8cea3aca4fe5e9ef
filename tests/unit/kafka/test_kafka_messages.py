"""Unit tests of daemon.kafka.messages: hostile messages in, outputs that always fit out.

Property tests (hypothesis): whatever a message holds (any key, any headers, null header values, any
value, JSON or not), parsing never raises, its metadata and every output built for it encode, and
every output fits ``max_request_bytes`` (the reduced dead letter fits the smallest one allowed).
The real broker path is tests/e2e/test_kafka_hostile.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from aiokafka import ConsumerRecord
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daemon import __version__
from daemon.config import KafkaSourceConfig
from daemon.errors import DocumentError
from daemon.kafka.messages import (
    MessageLimits,
    OutputTopics,
    dead_letter_output,
    message_metadata,
    parse_message,
    result_output,
)
from daemon.kafka.sink import Output
from daemon.records import failure_record

HYPOTHESIS = settings(
    max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
SMALLEST_REQUEST = KafkaSourceConfig.model_fields["max_request_bytes"].metadata[0].ge
LIMITS = MessageLimits(max_message_bytes=64 * 1024, max_key_bytes=256, max_header_bytes=1024)


def _topics(max_request_bytes: int = 1 << 20, payload_bytes: int = 4096) -> OutputTopics:
    return OutputTopics("out", "dead", payload_bytes, max_request_bytes, LIMITS)


def _message(
    value: bytes | None, key: bytes | None = None, headers: list[tuple[str, bytes | None]] | None = None
) -> ConsumerRecord[bytes, bytes]:
    return ConsumerRecord(
        "docs", 3, 17, 1_700_000_000_000, 0, key, value, None, len(key or b""), len(value or b""),
        tuple(headers or ()),
    )  # fmt: skip


def _parse(message: ConsumerRecord[bytes, bytes]) -> Any:
    return parse_message(
        message.value,
        message.key,
        list(message.headers),
        coordinates="docs-3-17",
        max_message_bytes=LIMITS.max_message_bytes,
        max_key_bytes=LIMITS.max_key_bytes,
        max_header_bytes=LIMITS.max_header_bytes,
    )


def _failure(doc_id: str, error: DocumentError, metadata: dict[str, Any]) -> dict[str, Any]:
    return failure_record(
        doc_id=doc_id, source="kafka", error=error, metadata=metadata, sha256=None, input_bytes=None
    )


def _result(doc_id: str, metadata: dict[str, Any], summary: str = "A summary.") -> dict[str, Any]:
    """A result record as the pipeline writes it (only what outputs read matters here)."""
    return {
        "id": doc_id,
        "source": "kafka",
        "summary": summary,
        "model": "tiny",
        "prompt_version": "v",
        "profile": "brief",
        "profile_version": "0123456789ab",
        "sha256": "0" * 64,
        "input_bytes": 10,
        "metadata": metadata,
        "docsumd_version": __version__,
    }


def _letter(message: ConsumerRecord[bytes, bytes], topics: OutputTopics) -> tuple[Output, dict[str, Any]]:
    parsed = _parse(message)
    assert parsed.error is not None
    metadata = message_metadata(message, topics.limits)
    output = dead_letter_output(message, parsed.id, _failure(parsed.id, parsed.error, metadata), topics)
    return output, json.loads(output.value)


# -- the hostile messages of issue 10 ----------------------------------------------------------------


def test_a_header_without_a_value_is_refused_not_a_crash() -> None:
    message = _message(b"some text", b"k", [("trace", b"1"), ("empty", None)])
    parsed = _parse(message)
    assert parsed.error is not None
    assert (parsed.id, parsed.error.reason) == ("k", "invalid_message")
    assert '"empty"' in parsed.error.message
    output, letter = _letter(message, _topics())
    assert letter["metadata"]["headers"] == {"trace": "1", "empty": None}
    assert output.headers == [("trace", b"1"), ("empty", None), ("reason", b"invalid_message")]


def test_a_key_over_the_limit_is_refused_and_copied_once_bounded_with_its_size_and_hash() -> None:
    key = b"K" * 400 * 1024
    message = _message(b"some text", key)
    parsed = _parse(message)
    assert parsed.error is not None
    assert parsed.error.reason == "too_large"
    assert parsed.id == "docs-3-17"  # not the key: the id is the output's key and is copied
    output, letter = _letter(message, _topics())
    assert output.key == "docs-3-17"
    assert letter["id"] == "docs-3-17"
    assert letter["metadata"]["key"] == "K" * LIMITS.max_key_bytes
    assert letter["metadata"]["key_bytes"] == len(key)
    assert len(letter["metadata"]["key_sha256"]) == 64
    assert output.size < 16 * 1024


def test_headers_over_the_limit_are_refused_and_carried_only_up_to_it() -> None:
    headers: list[tuple[str, bytes | None]] = [(f"h{i}", b"v" * 100) for i in range(6000)]  # ~600 KiB
    message = _message(b"text", b"k", headers)
    parsed = _parse(message)
    assert parsed.error is not None
    assert parsed.error.reason == "too_large"
    assert "max_header_bytes" in parsed.error.message
    output, letter = _letter(message, _topics())
    carried = letter["metadata"]["headers"]
    assert 0 < len(carried) < 10
    assert letter["metadata"]["headers_count"] == 6000
    assert letter["metadata"]["headers_bytes"] > 600_000
    assert len(output.headers) == len(carried) + 1  # the same few, and the reason
    assert output.size < 16 * 1024


def test_an_id_field_over_the_key_limit_is_refused() -> None:
    value = json.dumps({"id": "i" * 5000, "text": "body"}).encode()
    parsed = _parse(_message(value, b"k"))
    assert parsed.error is not None
    assert (parsed.id, parsed.error.reason) == ("k", "too_large")


@pytest.mark.parametrize(
    "value",
    [
        b'{"text": "a", "options": ' + b"[" * 50_000 + b"]" * 50_000 + b"}",
        b'{"text": "a", "options": ' + b'{"a":' * 50_000 + b"1" + b"}" * 50_000 + b"}",
    ],
    ids=["arrays", "objects"],
)
def test_json_nested_fifty_thousand_levels_deep_is_an_invalid_message(value: bytes) -> None:
    parsed = parse_message(value, None, [], coordinates="c", max_message_bytes=len(value))
    assert parsed.error is not None
    assert parsed.error.reason == "invalid_message"
    assert "nested too deeply" in parsed.error.message


@pytest.mark.parametrize(
    ("value", "what"),
    [
        (b'{"id": "\\ud800", "text": "a"}', "id is not valid Unicode"),
        (b'{"text": "a\\udfff"}', "text is not valid Unicode"),
        (json.dumps({"text": "a", "x" * 100_000: 1}).encode(), "unknown fields"),
    ],
)
def test_json_the_output_could_not_encode_is_refused(value: bytes, what: str) -> None:
    parsed = parse_message(value, None, [], coordinates="c", max_message_bytes=1 << 20)
    assert parsed.error is not None
    assert parsed.error.reason == "invalid_message"
    assert what in parsed.error.message
    assert len(parsed.error.message) < 500  # a huge field name is quoted cut short


def test_a_result_that_would_not_fit_fails_its_document_with_too_large() -> None:
    message = _message(b"text", b"k")
    metadata = message_metadata(message, LIMITS)
    with pytest.raises(DocumentError, match="max_request_bytes") as refused:
        result_output(message, "k", _result("k", metadata, "s" * 20_000), _topics(max_request_bytes=16_384))
    assert refused.value.reason == "too_large"


def test_a_result_carries_the_reduced_too_large_dead_letter_as_its_fallback() -> None:
    message = _message(b"text", b"k", [("trace", b"1")])
    metadata = message_metadata(message, LIMITS)
    output = result_output(message, "k", _result("k", metadata), _topics())
    assert output.topic == "out"
    assert output.headers == [
        ("trace", b"1"),
        ("model", b"tiny"),
        ("prompt_version", b"v"),
        ("profile", b"brief"),
        ("profile_version", b"0123456789ab"),
    ]
    assert output.fallback is not None
    fallback = json.loads(output.fallback.value)
    assert (output.fallback.topic, fallback["reason"], fallback["reduced"]) == ("dead", "too_large", True)
    assert fallback["payload"] is None
    assert fallback["payload_bytes"] == 4


def test_a_dead_letter_sheds_its_payload_then_is_reduced_to_fit() -> None:
    value = b"\x01" * 60_000  # escaped six times over in JSON
    message = _message(value, b"k")
    failure = _failure("k", DocumentError("binary", "not text"), message_metadata(message, LIMITS))
    roomy = dead_letter_output(message, "k", failure, _topics(payload_bytes=60_000))
    assert json.loads(roomy.value)["payload_truncated"] is False
    tight = dead_letter_output(message, "k", failure, _topics(max_request_bytes=20_000, payload_bytes=60_000))
    letter = json.loads(tight.value)
    assert tight.size <= 20_000
    assert letter["payload_truncated"] is True
    assert letter["reduced"] is False
    assert letter["payload_bytes"] == 60_000
    assert len(letter["payload_sha256"]) == 64


# -- property tests -----------------------------------------------------------------------------------

BYTES = st.one_of(st.none(), st.binary(max_size=600), st.binary(min_size=200, max_size=3000))
HEADERS = st.lists(
    st.tuples(st.text(max_size=300), st.one_of(st.none(), st.binary(max_size=400))), max_size=12
)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=50),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=20), inner, max_size=4),
    max_leaves=20,
)
DOCUMENTS = st.fixed_dictionaries(
    {},
    optional={
        "id": st.one_of(st.text(max_size=400), st.integers(), JSON_VALUES),
        "text": st.one_of(st.text(max_size=300), JSON_VALUES),
        "options": JSON_VALUES,
        "extra": JSON_VALUES,
    },
).map(lambda record: json.dumps(record).encode())
VALUES = st.one_of(BYTES, DOCUMENTS, st.text(max_size=500).map(str.encode))


@HYPOTHESIS
@given(
    value=VALUES, key=BYTES, headers=HEADERS, max_request_bytes=st.sampled_from([SMALLEST_REQUEST, 1 << 20])
)
def test_any_message_parses_without_raising_and_every_output_fits(
    value: bytes | None, key: bytes | None, headers: list[tuple[str, bytes | None]], max_request_bytes: int
) -> None:
    message = _message(value, key, headers)
    topics = _topics(max_request_bytes=max_request_bytes)
    parsed = _parse(message)
    assert parsed.id
    assert (parsed.error is None) == (parsed.text is not None)
    metadata = message_metadata(message, LIMITS)
    json.dumps(metadata, ensure_ascii=False).encode("utf-8")  # always encodes
    failure = _failure(parsed.id, parsed.error or DocumentError("engine_error", "x"), metadata)
    letter = dead_letter_output(message, parsed.id, failure, topics)
    assert letter.size <= max_request_bytes
    assert letter.fallback is None or letter.fallback.size <= SMALLEST_REQUEST
    json.loads(letter.value)
    if parsed.error is None:
        result = _result_or_refusal(message, parsed.id, _result(parsed.id, metadata), topics)
        if isinstance(result, DocumentError):
            assert result.reason == "too_large"
        else:
            assert result.size <= max_request_bytes
            assert result.fallback is not None
            assert result.fallback.size <= SMALLEST_REQUEST


def _result_or_refusal(
    message: ConsumerRecord[bytes, bytes], doc_id: str, result: dict[str, Any], topics: OutputTopics
) -> Output | DocumentError:
    try:
        return result_output(message, doc_id, result, topics)
    except DocumentError as error:
        return error


@pytest.mark.parametrize(
    ("value", "content_type"),
    [
        (b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj", None),  # a PDF: its bytes are the document
        (b"PK\x03\x04docx bytes", "application/vnd.openxmlformats-officedocument.wordprocessingml.document"),
        (b'{"looks": "like JSON"}', "application/octet-stream"),  # a type that is not JSON's: raw
        (b"{not json but text}", "text/plain"),
    ],
)
def test_a_value_that_is_not_a_json_record_is_the_documents_raw_bytes(
    value: bytes, content_type: str | None
) -> None:
    headers = [] if content_type is None else [("content-type", content_type.encode())]
    parsed = parse_message(value, b"doc-1", headers, coordinates="c", max_message_bytes=1 << 20)
    assert parsed.error is None
    assert (parsed.id, parsed.text, parsed.options) == ("doc-1", value, None)


def test_a_json_content_type_still_forces_a_json_record() -> None:
    value = b'  {"id": "a", "text": "hello"}'
    headers = [("content-type", b"Application/JSON; charset=utf-8")]
    parsed = parse_message(value, None, headers, coordinates="c", max_message_bytes=1 << 20)
    assert (parsed.error, parsed.id, parsed.text) == (None, "a", b"hello")
