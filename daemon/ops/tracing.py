"""One OpenTelemetry trace per document (``[tracing]``, off by default).

**Shape.** A document's span (``document``) is the child of its Kafka message's W3C trace context
(the ``traceparent`` and ``tracestate`` headers, :attr:`daemon.work.WorkItem.trace_context`), or
the root of a new trace (folder inputs, messages without one). It starts when the source handed the
document out and holds, in order: ``receive`` (waiting for the byte budget, reading the bytes),
``extract`` (format detection, sandboxed extraction, decoding, the input checks), ``tokenize``,
``split`` (cutting a long document into parts), one ``request KIND`` span per engine request
(``document``, ``part``, ``combine``: admission's wait and class, the tokens), ``validate`` (the
final output accepted, or checked against the profile's schema) and ``publish`` (the result or
failure record written and acknowledged). vLLM's own ``llm_request`` span (its queue, prefill and
decode times) is the child of the request span: the engine passes the request span's context to
vLLM as ``trace_headers`` (:func:`current_headers`). The output message carries a ``traceparent``
naming the ``publish`` span, whose parent is the document span (:func:`with_trace_context`), so a
consumer's span continues the same trace. The document's log lines carry ``trace_id`` and
``trace_sampled``.

**Sampling.** Parent-based: a message's ``traceparent`` decides for its document (its sampled flag);
a new trace is recorded with probability ``sampling_ratio``. An unsampled document gets its document
span only (no children: they would be unsampled too), which exports nothing; its context still
travels (to vLLM, and in the output's ``traceparent``, which keeps the producer's trace id).

**Order of start-up.** :func:`install` makes docsumd's tracer provider the process's global one and
must run before the vLLM engine is built: vLLM then finds it in place (its own attempt to set one is
refused) and emits ``llm_request`` through it, in this process. The engine is given the endpoint
(:func:`vllm_arguments`), without which vLLM drops ``trace_headers``; its own processes (EngineCore,
workers) export their start-up spans there themselves, over OTLP/HTTP as set here, as separate traces.

**Remote engines** (a vLLM server): the client sends :func:`current_headers` as HTTP headers of the
request; the server (started with ``--otlp-traces-endpoint``) makes its ``llm_request`` span their
child, exported by the server.

Nothing of OpenTelemetry is imported unless :func:`install` runs: with tracing off every function
here returns at once (a shared null context, None, its argument unchanged).
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Protocol

import structlog

from daemon import __version__

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Span, Tracer

TRACE_HEADERS: Final = ("traceparent", "tracestate")
"""The W3C trace-context headers read from input messages and written to outputs."""
_NULL: Final[contextlib.nullcontext[None]] = contextlib.nullcontext()


class TracingSettings(Protocol):
    """What :func:`install` reads of ``[tracing]`` (:class:`daemon.config.TracingConfig` has it; a
    protocol, so that operations code does not depend on the config)."""

    @property
    def traces_url(self) -> str | None: ...
    @property
    def sampling_ratio(self) -> float: ...
    @property
    def service_name(self) -> str: ...


class _Tracing:
    """The installed tracer and what goes with it."""

    def __init__(self, provider: TracerProvider, tracer: Tracer, traces_url: str | None) -> None:
        from opentelemetry.trace import SpanKind, Status, StatusCode, get_current_span, use_span
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self.provider = provider
        self.tracer = tracer
        self.traces_url = traces_url
        self.propagator = TraceContextTextMapPropagator()
        self.kinds = {"consumer": SpanKind.CONSUMER, "producer": SpanKind.PRODUCER, None: SpanKind.INTERNAL}
        self.status = Status
        self.error_code = StatusCode.ERROR
        self.current_span = get_current_span
        self.use_span = use_span

    def recording_span(self) -> Span | None:
        """The current span if it records (a sampled one), else None."""
        current = self.current_span()
        return current if current.is_recording() else None


class _Installed:
    """Holds the tracing :func:`install` set up (one per process; None: tracing off)."""

    tracing: _Tracing | None = None


_INSTALLED: Final = _Installed()


def install(
    config: TracingSettings, *, exporter: SpanExporter | None = None, set_global: bool = True
) -> bool:
    """Make docsumd's tracer provider the process's global one (``set_global``; vLLM's
    ``llm_request`` spans need that), exporting to ``config``'s endpoint in batches, or to
    ``exporter`` as each span ends (tests' in-memory exporter; the endpoint still goes to vLLM).
    Does nothing, and returns False, when ``config`` has no endpoint and no ``exporter`` is given.
    Call once, before the engine is built; RuntimeError if another global provider was set first."""
    if config.traces_url is None and exporter is None:
        return False
    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    resource = Resource.create(
        {
            "service.name": config.service_name,
            "service.version": __version__,
            "host.name": socket.gethostname(),
            "process.pid": os.getpid(),
        }
    )
    sampler = ParentBased(TraceIdRatioBased(config.sampling_ratio))
    provider = TracerProvider(resource=resource, sampler=sampler)
    if exporter is not None:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        # The endpoint is passed, never read from OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: vLLM sets that
        # variable process-wide when its engine is built.
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=config.traces_url)))
    if config.traces_url is not None:
        # vLLM's engine processes build their own exporters from the environment they inherit: over
        # OTLP/HTTP too (their default is gRPC), unless the user chose otherwise.
        os.environ.setdefault("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf")
    if set_global:
        trace.set_tracer_provider(provider)
        if trace.get_tracer_provider() is not provider:
            provider.shutdown()
            raise RuntimeError("another OpenTelemetry tracer provider was installed first")
    tracer = provider.get_tracer("docsumd", __version__)
    _INSTALLED.tracing = _Tracing(provider, tracer, config.traces_url)
    return True


def enabled() -> bool:
    """Whether :func:`install` has run (tracing is on)."""
    return _INSTALLED.tracing is not None


def flush(timeout_s: float = 5.0) -> None:
    """Export the spans ended so far (at the end of a run; the provider also does so at exit)."""
    state = _INSTALLED.tracing
    if state is not None:
        state.provider.force_flush(int(timeout_s * 1000))


def vllm_arguments() -> dict[str, Any]:
    """The vLLM engine arguments tracing needs: the OTLP endpoint (without it vLLM drops
    ``trace_headers`` and emits no ``llm_request`` span). Empty with tracing off."""
    state = _INSTALLED.tracing
    if state is None or state.traces_url is None:
        return {}
    return {"otlp_traces_endpoint": state.traces_url}


def span(name: str, *, kind: str | None = None) -> contextlib.AbstractContextManager[Span | None]:
    """A child span of the current one, current inside the block (None with tracing off, and outside
    a recorded span: the children of an unsampled document would be unsampled too, and cost tens of
    microseconds each for nothing). ``kind``: ``"consumer"``, ``"producer"`` or None (internal). An
    exception leaving the block is recorded on it."""
    state = _INSTALLED.tracing
    if state is None or not state.current_span().is_recording():
        return _NULL
    return state.tracer.start_as_current_span(name, kind=state.kinds[kind])


def annotate(attributes: Mapping[str, Any]) -> None:
    """Set ``attributes`` on the current span (nothing with tracing off or no span recording)."""
    state = _INSTALLED.tracing
    current = None if state is None else state.recording_span()
    if current is not None:
        current.set_attributes(attributes)


def event(name: str, attributes: Mapping[str, Any] | None = None) -> None:
    """Add an event to the current span (nothing with tracing off or no span recording)."""
    state = _INSTALLED.tracing
    current = None if state is None else state.recording_span()
    if current is not None:
        current.add_event(name, attributes)


def failed(reason: str, message: str) -> None:
    """Mark the current span as failed for ``reason`` (a document's failure reason)."""
    state = _INSTALLED.tracing
    current = None if state is None else state.recording_span()
    if state is not None and current is not None:
        current.set_attribute("docsumd.outcome", reason)
        current.set_status(state.status(state.error_code, f"{reason}: {message}"))


def on_this_span(callback: Callable[[], None], name: str) -> Callable[[], None]:
    """``callback``, adding event ``name`` to the span current now when it is called (it may be
    called from elsewhere); ``callback`` itself with tracing off or no span recording."""
    state = _INSTALLED.tracing
    current = None if state is None else state.recording_span()
    if current is None:
        return callback
    marked = current

    def called() -> None:
        marked.add_event(name)
        callback()

    return called


def current_headers() -> dict[str, str] | None:
    """The current span's W3C trace context as headers (``traceparent``, and ``tracestate`` when it
    has one): what an engine passes on with its request (vLLM's ``trace_headers``; HTTP headers to a
    vLLM server). None with tracing off or outside a span."""
    state = _INSTALLED.tracing
    if state is None or not state.current_span().get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    state.propagator.inject(carrier)
    return carrier or None


def with_trace_context(headers: list[tuple[str, bytes | None]]) -> list[tuple[str, bytes | None]]:
    """An output message's ``headers`` with the current span's trace context in place of the
    input's; unchanged with tracing off or outside a span."""
    carrier = current_headers()
    if carrier is None:
        return headers
    kept = [(key, value) for key, value in headers if key.lower() not in TRACE_HEADERS]
    return kept + [(key, value.encode("ascii")) for key, value in carrier.items()]


def trace_context_of(headers: Sequence[tuple[str, bytes | None]]) -> dict[str, str] | None:
    """The W3C trace-context headers of an input message (the first of each name, any case, that is
    ASCII), or None. Their format is checked when a span is made from them: a malformed
    ``traceparent`` starts a new trace."""
    found: dict[str, str] = {}
    for key, value in headers:
        name = key.lower()
        if name in TRACE_HEADERS and name not in found and value is not None:
            try:
                found[name] = value.decode("ascii")
            except UnicodeDecodeError:
                continue
    return found or None


@contextlib.contextmanager
def document_span(
    doc_id: str,
    source: str,
    *,
    parent: Mapping[str, str] | None,
    received_at: float,
    metadata: Mapping[str, Any],
) -> Iterator[None]:
    """The span of one document, current inside the block: the child of ``parent`` (W3C headers) or
    a new trace's root, started at ``received_at`` (``time.monotonic()``) when the source handed the
    document out, with its id, source and where it came from (a Kafka message's topic, partition and
    offset). The block's log lines carry its ``trace_id`` and ``trace_sampled``. Nothing with tracing
    off."""
    state = _INSTALLED.tracing
    if state is None:
        yield
        return
    context = state.propagator.extract(parent) if parent else None
    document = state.tracer.start_span(
        "document",
        context=context,
        kind=state.kinds["consumer" if parent else None],
        start_time=_wall_ns(received_at),
        attributes={"docsumd.document.id": doc_id, "docsumd.source": source, **_origin(metadata)},
    )
    with (
        state.use_span(document, end_on_exit=True),
        structlog.contextvars.bound_contextvars(**_log_fields(document)),
    ):
        yield


def receive_span(received_at: float) -> contextlib.AbstractContextManager[Span | None]:
    """The ``receive`` span: from ``received_at`` (``time.monotonic()``), when the source handed the
    document out, to the end of the block (its bytes read)."""
    state = _INSTALLED.tracing
    if state is None or not state.current_span().is_recording():
        return _NULL
    return state.tracer.start_as_current_span("receive", start_time=_wall_ns(received_at))


def _origin(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """Span attributes of where a document came from: a Kafka message's coordinates (OpenTelemetry's
    messaging conventions), a file's name."""
    if "topic" in metadata:
        return {
            "messaging.system": "kafka",
            "messaging.destination.name": str(metadata["topic"]),
            "messaging.destination.partition.id": str(metadata.get("partition")),
            "messaging.kafka.offset": int(metadata.get("offset") or 0),
        }
    name = metadata.get("file_name")
    return {"docsumd.file_name": name} if isinstance(name, str) else {}


def _wall_ns(monotonic_s: float) -> int:
    """A ``time.monotonic()`` moment as wall-clock nanoseconds (a span's start)."""
    return time.time_ns() - int((time.monotonic() - monotonic_s) * 1e9)


def _log_fields(document: Span) -> dict[str, Any]:
    context = document.get_span_context()
    if not context.is_valid:
        return {}
    return {"trace_id": f"{context.trace_id:032x}", "trace_sampled": context.trace_flags.sampled}


def reset_for_tests() -> None:
    """Forget the installed tracing, shutting its provider down (OpenTelemetry's global provider, once
    set, stays for the process: only one test per process may install with ``set_global``)."""
    state, _INSTALLED.tracing = _INSTALLED.tracing, None
    if state is not None:
        state.provider.shutdown()
