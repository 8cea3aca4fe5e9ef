"""The records' published JSON Schemas hold for the records the code really builds, and refuse drift.

Records come from the code's own builders: the per-document pipeline (with a fake engine: its records
are the pipeline's), the Kafka outputs (results, dead letters, reduced dead letters), the failure
record of last resort. The end-to-end tests check the records of a real daemon the same way
(``tests/e2e/harness.py``).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from aiokafka import ConsumerRecord

from daemon.config import Config, EngineConfig, ProfileConfig, SummaryConfig
from daemon.document.decode import decode_document
from daemon.document.reader import DocumentReader
from daemon.engine.admission import Admission, AdmissionLimits
from daemon.errors import REASONS, DocumentError
from daemon.fs.names import name_fields
from daemon.kafka.messages import (
    MessageLimits,
    OutputTopics,
    dead_letter_output,
    message_metadata,
    result_output,
)
from daemon.pipeline import OK, DocumentPipeline
from daemon.records import (
    RECORD_TYPES,
    Summary,
    failure_record,
    fallback_failure_record,
    json_schemas,
    result_record,
)
from daemon.summary.profiles import build_profiles
from daemon.summary.summarizer import Summarizer
from tests.doubles.engine import FakeEngine
from tests.doubles.work import Acks
from tests.record_schemas import assert_valid, schema_problems

LIMITS = MessageLimits(max_message_bytes=64 * 1024, max_key_bytes=256, max_header_bytes=1024)
SHORT = b"A short notice about the delivery of goods. " * 10
LONG = b"\n\n".join(
    b"Section %d. The supplier delivers the goods by the agreed date. " % n * 12 for n in range(40)
)


@pytest.fixture
def pipeline(tokenizer: Any) -> DocumentPipeline:
    config = Config(
        engine=EngineConfig(model="unused", max_model_len=1024), summary=SummaryConfig(max_summary_tokens=16)
    )
    admission = Admission(AdmissionLimits(max_requests=8, max_tokens=10**6))
    profiles = build_profiles(config, tokenizer)
    summarizer = Summarizer(FakeEngine(), tokenizer, config.summary, profiles=profiles, admission=admission)
    return DocumentPipeline(summarizer, model_name="tiny", reader=DocumentReader(max_input_bytes=1 << 20))


def _summary(**changes: Any) -> Summary:
    """A summary as the summarizer makes one: one request unless ``changes`` say otherwise."""
    base = Summary(
        text="A summary.",
        strategy="single",
        style="prose",
        max_summary_tokens=64,
        prompt_version="summary-v4",
        profile="default",
        profile_version="0123456789ab",
        parts=1,
        depth=1,
        requests=1,
        prompt_tokens=100,
        generated_tokens=10,
        summary_tokens=10,
        document_tokens=90,
        dropped_tokens=0,
        cached_prompt_tokens=0,
        finish_reason="stop",
        first_token_s=0.5,
        engine_s=0.2,
        sources=({"part": 1, "chars": [0, 440]},),
    )
    return dataclasses.replace(base, **changes)


def _message(
    value: bytes | None, key: bytes | None = None, headers: list[tuple[str, bytes | None]] | None = None
) -> ConsumerRecord[bytes, bytes]:
    return ConsumerRecord(
        "docs", 3, 17, 1_700_000_000_000, 0, key, value, None, len(key or b""), len(value or b""),
        tuple(headers or ()),
    )  # fmt: skip


def test_every_record_has_a_published_schema() -> None:
    assert set(json_schemas()) == set(RECORD_TYPES) == {"result", "failure", "dead-letter"}
    for schema in json_schemas().values():
        assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        assert schema["additionalProperties"] is False


async def test_the_pipelines_records_follow_their_schemas(pipeline: DocumentPipeline) -> None:
    acks = Acks()
    items = {
        "short.txt": acks.item("short.txt", SHORT),
        "long.txt": acks.item("long.txt", LONG),
        "bad-\udcff.txt": acks.item("bad-\udcff.txt", SHORT),  # a name that is not UTF-8
        "empty.txt": acks.item("empty.txt", b""),
        "options.txt": acks.item("options.txt", SHORT, {"style": "haiku"}),
        "unreadable.txt": acks.item("unreadable.txt", DocumentError("unreadable", "gone")),
    }
    for name, item in items.items():
        item.metadata = name_fields(name)
    outcomes = [await pipeline.process(item) for item in items.values()]
    assert outcomes == [OK, OK, OK, "empty", "invalid_options", "unreadable"]
    assert acks.completed["long.txt"]["strategy"] == "map_reduce"  # several parts, their sources
    assert "file_name_b64" in acks.completed["bad-\udcff.txt"]["metadata"]
    for record in acks.completed.values():
        assert_valid(record, "result")
    for record in acks.failed.values():
        assert_valid(record, "failure")


def test_a_structured_result_with_its_sources_follows_the_schema() -> None:
    document = decode_document(
        SHORT, doc_id="c.pdf", source="folder", max_input_bytes=1 << 20, metadata={"file_name": "c.pdf"}
    )
    summary = _summary(
        text='{"parties": []}',
        strategy="map_reduce",
        style="json",
        profile="contract",
        parts=2,
        depth=2,
        requests=3,
        structured={"parties": []},
        sources=(
            {"part": 1, "chars": [0, 200], "pages": [1, 2], "section": ["Terms"], "headings": ["Terms"]},
            {"part": 2, "chars": [180, 440], "pages": [2, 3]},
        ),
    )
    assert_valid(result_record(document, summary, model="m", queued_s=0.1, total_s=2.5), "result")


def test_kafka_results_and_dead_letters_follow_their_schemas() -> None:
    topics = OutputTopics("out", "dead", 4096, 1 << 20, LIMITS)
    big_key = b"k" * 400  # over max_key_bytes: cut, with its size and hash
    headers: list[tuple[str, bytes | None]] = [("trace", b"t-1"), ("empty", None), ("huge", b"h" * 2000)]
    message = _message(b'{"text": "..."}', big_key, headers)
    metadata = message_metadata(message, LIMITS)
    assert {"key_bytes", "key_sha256", "headers_bytes", "headers_count"} <= set(metadata)
    document = decode_document(
        SHORT, doc_id="docs-3-17", source="kafka", max_input_bytes=1 << 20, metadata=metadata
    )
    summary = _summary(first_token_s=None, finish_reason="length")
    result = result_record(document, summary, model="m", queued_s=0.0, total_s=0.3)
    output = result_output(message, "docs-3-17", result, topics)
    assert_valid(json.loads(output.value), "result")
    assert output.fallback is not None
    assert_valid(json.loads(output.fallback.value), "dead-letter")  # reduced, too_large

    failure = failure_record(
        doc_id="docs-3-17", source="kafka", error=DocumentError("invalid_message", "not JSON " * 500),
        metadata=metadata, sha256=None, input_bytes=15,
    )  # fmt: skip
    letter = dead_letter_output(_message(b"\xff" * 10, b"k", headers), "docs-3-17", failure, topics)
    assert_valid(json.loads(letter.value), "dead-letter")  # base64 payload
    tiny = OutputTopics("out", "dead", 4096, 3000, LIMITS)  # only the reduced form fits
    reduced = json.loads(
        dead_letter_output(_message(b"x" * 60000, big_key, headers), "d", failure, tiny).value
    )
    assert reduced["reduced"] is True
    assert_valid(reduced, "dead-letter")


def test_an_invalid_output_and_the_record_of_last_resort_follow_the_failure_schema() -> None:
    error = DocumentError("invalid_output", "cut off twice", output='{"parties": [')
    failure = failure_record(
        doc_id="a.txt",
        source="folder",
        error=error,
        metadata={"file_name": "a.txt"},
        sha256="00",
        input_bytes=3,
    )
    assert_valid(failure, "failure")
    assert_valid(
        fallback_failure_record({"id": "a\udcff", "reason": "internal_error"}, "cannot encode"), "failure"
    )


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda r: r.update(novel_field=1), "Additional properties"),
        (lambda r: r.pop("message"), "'message' is a required property"),
        (lambda r: r.update(reason="no_such_reason"), "is not one of"),
        (lambda r: r["metadata"].update(smuggled=True), "is not valid under any of the given schemas"),
    ],
)
def test_the_schema_refuses_a_record_that_drifted(change: Any, problem: str) -> None:
    record = failure_record(
        doc_id="a.txt", source="folder", error=DocumentError("empty", "zero bytes"),
        metadata={"file_name": "a.txt"}, sha256=None, input_bytes=0,
    )  # fmt: skip
    change(record)
    assert any(problem in line for line in schema_problems(record, "failure")), schema_problems(
        record, "failure"
    )


def test_the_failure_schema_lists_every_reason() -> None:
    reason = json_schemas()["failure"]["properties"]["reason"]
    assert reason["enum"] == list(REASONS)


async def test_an_unsupported_claims_failure_keeps_the_summary_checks_and_evidence(tokenizer: Any) -> None:
    config = Config(
        engine=EngineConfig(model="unused", max_model_len=1024),
        summary=SummaryConfig(max_summary_tokens=16),
        profiles={"strict": ProfileConfig(on_unsupported="fail")},
    )
    profiles = build_profiles(config, tokenizer)
    engine = FakeEngine(text="The goods go to Globex in 1999.")
    admission = Admission(AdmissionLimits(max_requests=8, max_tokens=10**6))
    summarizer = Summarizer(engine, tokenizer, config.summary, profiles=profiles, admission=admission)
    pipeline = DocumentPipeline(summarizer, model_name="tiny", reader=DocumentReader(max_input_bytes=1 << 20))
    acks = Acks()
    strict = acks.item("strict.txt", SHORT, profile="strict")
    flagged = acks.item("flagged.txt", SHORT)
    for name, item in (("strict.txt", strict), ("flagged.txt", flagged)):
        item.metadata = name_fields(name)

    assert await pipeline.process(strict) == "unsupported_claims"
    assert await pipeline.process(flagged) == OK  # the default profile flags

    failure = acks.failed["strict.txt"]
    assert_valid(failure, "failure")
    assert failure["summary"] == "The goods go to Globex in 1999."
    assert [item["kind"] for item in failure["checks"]["unsupported"]] == ["name", "date"]
    assert failure["checks"]["on_unsupported"] == "fail"
    assert failure["evidence"][0]["text"] == failure["summary"]
    result = acks.completed["flagged.txt"]
    assert_valid(result, "result")
    assert result["checks"]["counts"]["unsupported"] == 2
    assert result["timings"]["check_s"] >= 0
