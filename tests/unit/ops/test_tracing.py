"""One trace per document (daemon/ops/tracing.py) through the real pipeline and summarizer, with a fake
engine and the OpenTelemetry SDK's in-memory exporter. vLLM's own ``llm_request`` span under each
request span is tested with the real engine (tests/e2e/test_tracing.py)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from aiokafka import ConsumerRecord
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from daemon.config import Config, EngineConfig, SummaryConfig, TracingConfig
from daemon.document.reader import DocumentReader
from daemon.engine.admission import Admission, AdmissionLimits
from daemon.kafka.messages import MessageLimits, OutputTopics, dead_letter_output, result_output
from daemon.ops import tracing
from daemon.pipeline import OK, DocumentPipeline
from daemon.records import Record
from daemon.summary.profiles import build_profiles
from daemon.summary.summarizer import Summarizer
from tests.doubles.engine import FakeEngine
from tests.doubles.work import Acks
from tests.otlp_sink import OtlpSink

SHORT = b"A short notice about the delivery of goods. " * 10
LONG = b"".join(
    f"Clause {i}. The supplier delivers item {i} within {i} days. ".encode() * 3 for i in range(300)
)
PARENT_TRACE = "0af7651916cd43dd8448eb211c80319c"
PARENT_SPAN = "b7ad6b7169203331"
TRACEPARENT = f"00-{PARENT_TRACE}-{PARENT_SPAN}-01"


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """Tracing on (every new trace sampled), into an in-memory exporter; off again afterwards."""
    exporter = InMemorySpanExporter()
    assert tracing.install(TracingConfig(), exporter=exporter, set_global=False)
    try:
        yield exporter
    finally:
        tracing.reset_for_tests()


@pytest.fixture
def engine() -> FakeEngine:
    return FakeEngine(delay=0.01)


@pytest.fixture
def pipeline(engine: FakeEngine, tokenizer: Any) -> DocumentPipeline:
    config = Config(
        engine=EngineConfig(model="unused", max_model_len=1024),
        summary=SummaryConfig(max_summary_tokens=16),
    )
    admission = Admission(AdmissionLimits(max_requests=8, max_tokens=10**6, light_prompt_tokens=256))
    summarizer = Summarizer(
        engine, tokenizer, config.summary, profiles=build_profiles(config, tokenizer), admission=admission
    )
    return DocumentPipeline(summarizer, model_name="tiny", reader=DocumentReader(max_input_bytes=1 << 22))


def _by_trace(exported: tuple[ReadableSpan, ...]) -> dict[int, list[ReadableSpan]]:
    traces: dict[int, list[ReadableSpan]] = defaultdict(list)
    for span in exported:
        assert span.context is not None
        traces[span.context.trace_id].append(span)
    return traces


def _named(trace: list[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [span for span in trace if span.name == name]


def _parent_id(span: ReadableSpan) -> int | None:
    return None if span.parent is None else span.parent.span_id


def _span_id(span: ReadableSpan) -> int:
    assert span.context is not None
    return int(span.context.span_id)


async def test_every_document_is_one_trace_with_its_steps_and_requests(
    pipeline: DocumentPipeline, engine: FakeEngine, spans: InMemorySpanExporter
) -> None:
    acks = Acks()
    outcomes = await asyncio.gather(
        pipeline.process(acks.item("short", SHORT)), pipeline.process(acks.item("long", LONG))
    )
    assert list(outcomes) == [OK, OK]
    traces = _by_trace(spans.get_finished_spans())
    assert len(traces) == 2
    for trace in traces.values():
        (document,) = _named(trace, "document")
        doc_id = document.attributes["docsumd.document.id"] if document.attributes else None
        parts = acks.completed[str(doc_id)]["parts"]
        assert document.parent is None  # a new trace: no parent came with the document
        assert document.kind is SpanKind.INTERNAL
        assert len(trace) >= parts + 3, sorted(span.name for span in trace)
        # The steps, each a child of the document, in order.
        steps = ["receive", "extract", "tokenize", "validate", "publish"]
        for name in steps:
            (step,) = _named(trace, name)
            assert _parent_id(step) == _span_id(document), name
        starts = [_named(trace, name)[0].start_time or 0 for name in steps]
        assert starts == sorted(starts)
        # The plan is made while the document is received, before its bytes are read.
        (plan,) = _named(trace, "plan")
        assert _parent_id(plan) == _span_id(_named(trace, "receive")[0])
        requests = [span for span in trace if span.name.startswith("request ")]
        assert all(_parent_id(span) == _span_id(document) for span in requests)
        calls = [call for call in engine.calls if call.doc_id == doc_id]
        assert len(requests) == len(calls)
        attributes = document.attributes or {}
        assert attributes["docsumd.outcome"] == OK
        assert attributes["docsumd.parts"] == parts
        assert attributes["gen_ai.usage.input_tokens"] == acks.completed[str(doc_id)]["prompt_tokens"]
        for request in requests:
            request_attributes = request.attributes or {}
            assert request_attributes["docsumd.admission.class"] in ("light", "heavy")
            assert isinstance(request_attributes["gen_ai.usage.input_tokens"], int)
            assert request_attributes["gen_ai.usage.input_tokens"] > 0
            assert "docsumd.cached_prompt_tokens" in request_attributes
            assert [event.name for event in request.events][:1] == ["admitted"]
        if parts > 1:
            assert len(_named(trace, "request part")) == parts
            assert _named(trace, "request combine")
            (split,) = _named(trace, "split")
            assert _parent_id(split) == _span_id(document)
        else:
            assert len(_named(trace, "request document")) == 1
    assert acks.completed["short"]["parts"] == 1
    assert acks.completed["long"]["parts"] > 1


async def test_a_kafka_trace_context_is_the_documents_parent(
    pipeline: DocumentPipeline, spans: InMemorySpanExporter
) -> None:
    acks = Acks()
    item = acks.item("k", SHORT)
    item.trace_context = tracing.trace_context_of([("traceparent", TRACEPARENT.encode()), ("x", b"y")])
    assert await pipeline.process(item) == OK
    (trace,) = _by_trace(spans.get_finished_spans()).values()
    (document,) = _named(trace, "document")
    assert document.context is not None
    assert f"{document.context.trace_id:032x}" == PARENT_TRACE
    assert document.parent is not None
    assert f"{document.parent.span_id:016x}" == PARENT_SPAN
    assert document.parent.is_remote
    assert document.kind is SpanKind.CONSUMER


async def test_a_malformed_traceparent_starts_a_new_trace(
    pipeline: DocumentPipeline, spans: InMemorySpanExporter
) -> None:
    acks = Acks()
    item = acks.item("bad", SHORT)
    item.trace_context = {"traceparent": "00-zz-not-a-context", "tracestate": "=" * 600}
    assert await pipeline.process(item) == OK
    (trace,) = _by_trace(spans.get_finished_spans()).values()
    (document,) = _named(trace, "document")
    assert document.parent is None


async def test_the_documents_log_lines_carry_its_trace_id(
    pipeline: DocumentPipeline, spans: InMemorySpanExporter
) -> None:
    acks = Acks()
    item = acks.item("logged", SHORT)
    seen: dict[str, Any] = {}
    publish = item.on_complete

    async def complete(record: Record) -> None:
        seen.update(structlog.contextvars.get_contextvars())
        seen["headers"] = tracing.current_headers()
        await publish(record)

    item.on_complete = complete
    assert await pipeline.process(item) == OK
    (trace,) = _by_trace(spans.get_finished_spans()).values()
    (document,) = _named(trace, "document")
    (publish_span,) = _named(trace, "publish")
    assert document.context is not None
    assert seen["trace_id"] == f"{document.context.trace_id:032x}"
    assert seen["trace_sampled"] is True
    assert seen["doc_id"] == "logged"
    # What an output written from here carries: the publish span, a child of the document's.
    trace_id, span_id = seen["headers"]["traceparent"].split("-")[1:3]
    assert (trace_id, int(span_id, 16)) == (seen["trace_id"], _span_id(publish_span))
    assert "trace_id" not in structlog.contextvars.get_contextvars()


async def test_a_failed_document_is_an_error_span_with_its_reason(
    pipeline: DocumentPipeline, spans: InMemorySpanExporter
) -> None:
    acks = Acks()
    assert await pipeline.process(acks.item("empty", b"")) == "empty"
    (trace,) = _by_trace(spans.get_finished_spans()).values()
    (document,) = _named(trace, "document")
    assert document.status.status_code is StatusCode.ERROR
    assert (document.attributes or {})["docsumd.outcome"] == "empty"
    assert _named(trace, "publish")  # the failure record's write


async def test_unsampled_documents_export_nothing_and_keep_their_context(
    pipeline: DocumentPipeline, tokenizer: Any
) -> None:
    exporter = InMemorySpanExporter()
    tracing.install(TracingConfig(sampling_ratio=0.0), exporter=exporter, set_global=False)
    try:
        acks = Acks()
        item = acks.item("quiet", SHORT)
        seen: dict[str, Any] = {}
        publish = item.on_complete

        async def complete(record: Record) -> None:
            seen.update(structlog.contextvars.get_contextvars())
            await publish(record)

        item.on_complete = complete
        assert await pipeline.process(item) == OK
        assert exporter.get_finished_spans() == ()
        assert seen["trace_sampled"] is False
        # A producer's sampled context still decides for its document (parent-based sampling).
        sampled = acks.item("sampled", SHORT)
        sampled.trace_context = {"traceparent": TRACEPARENT}
        assert await pipeline.process(sampled) == OK
        assert len(_by_trace(exporter.get_finished_spans())) == 1
    finally:
        tracing.reset_for_tests()


async def test_tracing_off_leaves_everything_as_it_was(pipeline: DocumentPipeline) -> None:
    assert not tracing.enabled()
    headers: list[tuple[str, bytes | None]] = [("traceparent", TRACEPARENT.encode())]
    assert tracing.with_trace_context(headers) is headers
    assert tracing.current_headers() is None
    assert tracing.vllm_arguments() == {}
    with tracing.span("anything") as span:
        assert span is None
    acks = Acks()
    assert await pipeline.process(acks.item("plain", SHORT)) == OK
    assert "trace_id" not in structlog.contextvars.get_contextvars()


def _message(headers: list[tuple[str, bytes]]) -> ConsumerRecord[bytes, bytes]:
    return ConsumerRecord(
        topic="in",
        partition=0,
        offset=7,
        timestamp=0,
        timestamp_type=0,
        key=b"k",
        value=b"text",
        checksum=None,
        serialized_key_size=1,
        serialized_value_size=4,
        headers=headers,
    )


def _topics() -> OutputTopics:
    return OutputTopics("out", "dead", 1024, 1 << 20, MessageLimits(1 << 20))


def test_outputs_carry_the_current_spans_context_in_place_of_the_inputs(
    spans: InMemorySpanExporter,
) -> None:
    message = _message([("traceparent", TRACEPARENT.encode()), ("tracestate", b"a=1"), ("other", b"x")])
    record: Record = {"id": "k", "source": "kafka", "model": "m"}
    with (
        tracing.document_span("k", "kafka", parent=None, received_at=time.monotonic(), metadata={}),
        tracing.span("publish") as span,
    ):
        assert span is not None
        result = result_output(message, "k", record, _topics())
        failure = dead_letter_output(message, "k", {**record, "reason": "empty"}, _topics())
    with tracing.span("outside a document") as nothing:
        assert nothing is None  # no recorded span to be the child of: no span at all
    for output in (result, failure):
        headers = dict(output.headers)
        assert headers["other"] == b"x"
        assert [name for name, _ in output.headers].count("traceparent") == 1
        version, trace_id, span_id, flags = (headers["traceparent"] or b"").decode().split("-")
        assert version == "00"
        assert int(flags, 16) & 1  # sampled (the SDK also sets W3C's "random trace id" bit)
        assert int(trace_id, 16) == span.get_span_context().trace_id
        assert int(span_id, 16) == span.get_span_context().span_id
        assert "tracestate" not in headers  # the new span's own state (none), not the input's


def test_outputs_copy_the_inputs_context_with_tracing_off() -> None:
    message = _message([("traceparent", TRACEPARENT.encode())])
    output = result_output(message, "k", {"id": "k", "source": "kafka"}, _topics())
    assert dict(output.headers)["traceparent"] == TRACEPARENT.encode()


def test_the_trace_context_of_a_message_takes_the_first_ascii_header_of_each_name() -> None:
    assert tracing.trace_context_of([("x", b"1")]) is None
    headers: list[tuple[str, bytes | None]] = [
        ("TraceParent", "é".encode()),
        ("traceparent", TRACEPARENT.encode()),
        ("traceparent", b"00-second"),
        ("tracestate", None),
        ("tracestate", b"a=1"),
    ]
    assert tracing.trace_context_of(headers) == {"traceparent": TRACEPARENT, "tracestate": "a=1"}


def test_the_otlp_endpoint_gets_the_traces_path_unless_it_has_a_path() -> None:
    assert TracingConfig().traces_url is None
    assert (
        TracingConfig(otlp_endpoint="http://collector:4318").traces_url == "http://collector:4318/v1/traces"
    )
    assert TracingConfig(otlp_endpoint="https://c:4318/").traces_url == "https://c:4318/v1/traces"
    assert TracingConfig(otlp_endpoint="https://c/otlp/v1/traces").traces_url == "https://c/otlp/v1/traces"
    for bad in ("collector:4318", "grpc://c:4317", "http://"):
        with pytest.raises(ValueError, match="otlp_endpoint"):
            TracingConfig(otlp_endpoint=bad)


async def test_spans_reach_an_otlp_http_collector(
    pipeline: DocumentPipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The daemon's own export path (batches, OTLP/HTTP protobuf to ENDPOINT/v1/traces), against a real
    # receiver; and the protocol vLLM's engine processes are told to use.
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", raising=False)
    sink = OtlpSink()
    try:
        assert tracing.install(TracingConfig(otlp_endpoint=sink.endpoint), set_global=False)
        assert tracing.vllm_arguments() == {"otlp_traces_endpoint": f"{sink.endpoint}/v1/traces"}
        assert os.environ["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] == "http/protobuf"
        acks = Acks()
        assert await pipeline.process(acks.item("exported", SHORT)) == OK
        tracing.flush()
        names = {span.name for span in sink.spans}
        assert {"document", "receive", "extract", "tokenize", "request document", "publish"} <= names
        assert len({span.trace_id for span in sink.spans}) == 1
        assert {span.resource["service.name"] for span in sink.spans} == {"docsumd"}
    finally:
        tracing.reset_for_tests()
        sink.stop()


def test_with_tracing_off_nothing_of_opentelemetry_is_loaded() -> None:
    # vLLM imports OpenTelemetry itself when it is installed; docsumd's own modules do not.
    code = (
        "import sys, daemon.pipeline, daemon.service, daemon.kafka.source, daemon.ops.tracing\n"
        "print(sorted({m.split('.')[0] for m in sys.modules if m.startswith(('opentelemetry', 'vllm'))}))"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert done.stdout.strip() == "[]", done.stdout
