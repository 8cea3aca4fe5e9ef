"""One trace per document, end to end: the real service in this process (real vLLM engine, tiny model)
reading Kafka (the noida-db test broker), with tracing on into the OpenTelemetry SDK's in-memory
exporter, and vLLM's engine processes exporting to a real OTLP/HTTP receiver (tests/otlp_sink.py).

In one process because the in-memory exporter is in-process, and vLLM's ``llm_request`` span is
emitted in the daemon's own process through the global tracer provider, which can be set once per
process: this is the only test that sets it (daemon/ops/tracing.py, ``install``).
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import uuid
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from daemon.config import (
    Config,
    EngineConfig,
    KafkaSourceConfig,
    MetricsConfig,
    SourcesConfig,
    SummaryConfig,
    TracingConfig,
)
from daemon.ops import tracing
from daemon.service import Service
from tests.kafka_broker import KafkaBroker, create_topics, produce, read_all
from tests.otlp_sink import OtlpSink

pytestmark = [pytest.mark.engine, pytest.mark.kafka]

PRODUCER_TRACES = {
    "short-traced": "4bf92f3577b34da6a3ce929d0e0e4736",
    "long-traced": "5ca03e4688c45eb7b4df030e1f1f5847",
}
PRODUCER_SPAN = "00f067aa0ba902b7"
SAMPLES = Path(__file__).resolve().parents[2] / "daemon" / "samples"


@pytest.fixture
def otel_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """vLLM writes OTEL_EXPORTER_OTLP_TRACES_ENDPOINT into os.environ when its engine is built with an
    endpoint, and tracing sets the protocol: both are put back, so that daemons later tests start from
    this process do not inherit them."""
    names = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
    saved = {name: os.environ.get(name) for name in names}
    # vLLM's IPC sockets go to TMPDIR; a short one, as a socket path must fit 107 bytes.
    monkeypatch.setenv("TMPDIR", tempfile.mkdtemp(prefix="docsumd-e2e-"))
    monkeypatch.setenv("VLLM_HOST_IP", "127.0.0.1")
    try:
        yield
    finally:
        tracing.reset_for_tests()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _config(tiny_model: Path, broker: KafkaBroker, name: str) -> Config:
    return Config(
        engine=EngineConfig(
            model=str(tiny_model),
            max_model_len=2048,
            max_num_batched_tokens=2048,
            kv_cache_memory_bytes=512 << 20,
            enforce_eager=True,
        ),
        summary=SummaryConfig(max_summary_tokens=32, part_summary_tokens=32),
        sources=SourcesConfig(
            kafka=KafkaSourceConfig(
                bootstrap_servers=broker.bootstrap,
                input_topics=[f"in-{name}"],
                group_id=f"g-{name}",
                output_topic=f"out-{name}",
                dead_letter_topic=f"dead-{name}",
                commit_interval_seconds=0.2,
                group_instance_id=f"tracing-{name}",
            )
        ),
        metrics=MetricsConfig(enabled=False),
    )


async def _run_until_results(service: Service, broker: KafkaBroker, topic: str, count: int) -> list[Any]:
    run = asyncio.create_task(service.run())
    try:
        async with asyncio.timeout(600):
            while True:
                await asyncio.sleep(1.0)
                if run.done():
                    await run  # it stopped: raise what stopped it
                records = await read_all(broker.bootstrap, topic)
                if len(records) >= count:
                    return records
    finally:
        service.request_stop()
        await run


def _traces(exported: tuple[ReadableSpan, ...]) -> dict[str, list[ReadableSpan]]:
    traces: dict[str, list[ReadableSpan]] = defaultdict(list)
    for span in exported:
        assert span.context is not None
        traces[f"{span.context.trace_id:032x}"].append(span)
    return traces


def _id(span: ReadableSpan) -> str:
    assert span.context is not None
    return f"{span.context.span_id:016x}"


def _parent(span: ReadableSpan) -> str | None:
    return None if span.parent is None else f"{span.parent.span_id:016x}"


def test_every_document_is_one_trace_down_to_vllms_request_spans(
    tiny_model: Path, kafka_broker: KafkaBroker, otel_environment: None
) -> None:
    sink = OtlpSink()
    exporter = InMemorySpanExporter()
    assert tracing.install(TracingConfig(otlp_endpoint=sink.endpoint), exporter=exporter)
    name = uuid.uuid4().hex[:8]
    config = _config(tiny_model, kafka_broker, name)
    kafka = config.sources.kafka
    assert kafka is not None
    long_text = (SAMPLES / "paper-aclsum-2020.emnlp-main.505.txt").read_bytes()[:16_000]
    short_text = (SAMPLES / "legal-debian-social-contract.txt").read_bytes()[:3_000]

    def traceparent(key: str) -> bytes:
        return f"00-{PRODUCER_TRACES[key]}-{PRODUCER_SPAN}-01".encode()

    messages: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]] = [
        (b"short-traced", short_text, [("traceparent", traceparent("short-traced")), ("tracestate", b"v=1")]),
        (b"long-traced", long_text, [("traceparent", traceparent("long-traced"))]),
        (b"short-new", short_text, []),
    ]
    asyncio.run(create_topics(kafka_broker.bootstrap, kafka.input_topics))
    asyncio.run(create_topics(kafka_broker.bootstrap, [kafka.output_topic, kafka.dead_letter_topic]))
    asyncio.run(produce(kafka_broker.bootstrap, kafka.input_topics[0], messages))
    try:
        results = asyncio.run(_run_until_results(Service(config), kafka_broker, kafka.output_topic, 3))
    finally:
        sink.stop()
    by_key = {record.key.decode(): record for record in results}
    assert set(by_key) == {"short-traced", "long-traced", "short-new"}
    parts = {key: json.loads(record.value)["parts"] for key, record in by_key.items()}
    assert parts["long-traced"] > 1, parts  # summarized in parts, then combined
    spans = exporter.get_finished_spans()
    documents = [span for span in spans if span.name == "document"]
    assert len(documents) == 3
    traces = _traces(spans)
    for document in documents:
        key = str((document.attributes or {})["docsumd.document.id"])
        assert document.context is not None
        trace = traces[f"{document.context.trace_id:032x}"]
        # One trace per document: its own spans, nothing of another document's or of vLLM's start.
        assert [span.name for span in trace].count("document") == 1
        assert len(trace) >= parts[key] + 3, sorted(span.name for span in trace)
        requests = {_id(span): span for span in trace if span.name.startswith("request ")}
        vllm = [span for span in trace if span.name == "llm_request"]
        # vLLM's own span of each request, the child of docsumd's request span.
        assert len(vllm) == len(requests) >= parts[key]
        assert {_parent(span) for span in vllm} == set(requests)
        assert all(span.kind is SpanKind.SERVER for span in vllm)
        assert all(_parent(span) == _id(document) for span in requests.values())
        for request in requests.values():
            attributes = request.attributes or {}
            assert attributes["docsumd.admission.class"] in ("light", "heavy")
            assert "docsumd.cached_prompt_tokens" in attributes
            assert attributes["gen_ai.usage.input_tokens"] == next(
                (span.attributes or {})["gen_ai.usage.prompt_tokens"]
                for span in vllm
                if _parent(span) == _id(request)
            )
        # The result's traceparent names the publish span (the document's child) in the same trace.
        (publish,) = [span for span in trace if span.name == "publish"]
        assert _parent(publish) == _id(document)
        headers = {name: value for name, value in by_key[key].headers}
        _, trace_id, span_id, _ = headers["traceparent"].decode().split("-")
        assert (trace_id, span_id) == (f"{document.context.trace_id:032x}", _id(publish))
        if key in PRODUCER_TRACES:  # the producer's trace goes on
            assert trace_id == PRODUCER_TRACES[key]
            assert _parent(document) == PRODUCER_SPAN
            assert document.kind is SpanKind.CONSUMER
        else:
            assert trace_id not in PRODUCER_TRACES.values()
            assert document.parent is None
    # vLLM's engine processes exported their start-up spans over OTLP/HTTP themselves.
    kinds = {span.resource.get("vllm.process_kind") for span in sink.spans}
    print(f"spans: {len(spans)} in-process, {len(sink.spans)} received from vLLM's processes {kinds}")
    assert sink.spans, "vLLM's engine processes exported nothing"
