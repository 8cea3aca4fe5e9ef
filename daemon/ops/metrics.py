"""Prometheus metrics and the HTTP endpoint: ``/metrics``, ``/healthz``, ``/readyz``.

Our metrics use the ``docsumd_`` prefix and bounded labels only (never a document id). They live in
prometheus_client's default registry, beside the ``vllm:*`` metrics the in-process engine registers
there, so one scrape returns both.

The endpoint caps its connections and times out slow clients (:mod:`daemon.ops.http_limits`): it is
reachable by anyone who can reach the port, and must not let them use up the daemon's descriptors.
At the cap a new connection evicts the stalest one without a request in progress, so clients holding
every slot with half-sent requests cannot starve ``/healthz`` and ``/readyz`` probes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol

import prometheus_client
from aiohttp import web
from prometheus_client import Counter, Gauge, Histogram

from daemon.lifecycle import Lifecycle
from daemon.ops.http_limits import ConnectionLimits, LimitedListener, ServerErrorLog, deadline_middleware
from daemon.ops.logging import get_logger

log = get_logger(__name__)

_LATENCY_BUCKETS = (0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800, 3600)

DOCUMENTS = Counter(
    "docsumd_documents",
    "Documents finished, by source and outcome (ok or a failure reason).",
    ["source", "outcome"],
)
DOCUMENT_LATENCY = Histogram(
    "docsumd_document_latency_seconds",
    "End-to-end time per summarized document, from intake to result written.",
    buckets=_LATENCY_BUCKETS,
)
INFLIGHT = Gauge("docsumd_inflight_documents", "Documents taken in and not yet finished.")
QUEUED = Gauge("docsumd_queued_documents", "Documents waiting at the sources (e.g. files in the inbox).")
PROMPT_TOKENS = Counter(
    "docsumd_prompt_tokens", "Prompt tokens of summarized documents, all their requests counted (at the end)."
)
SUMMARY_TOKENS = Counter(
    "docsumd_summary_tokens", "Tokens generated for summarized documents: part, combine and final summaries."
)
TRUNCATED = Counter("docsumd_truncated_documents", "Documents whose summary did not read the whole text.")
ENGINE_UP = Gauge("docsumd_engine_up", "1 while the vLLM engine is running, else 0 (read at each scrape).")
ENGINE_STARTING = Gauge(
    "docsumd_engine_starting", "1 while the vLLM engine is being built and warmed up (engine_up is 0 then)."
)
LAST_SUCCESS = Gauge("docsumd_last_success_timestamp_seconds", "Unix time of the last document summarized.")
ENGINE_REQUESTS = Counter(
    "docsumd_engine_requests",
    "Requests sent to the engine, by kind (document, part, combine).",
    ["kind"],
)
CHUNKS_PER_DOCUMENT = Histogram(
    "docsumd_chunks_per_document",
    "Parts a summarized document was cut into (1 when it fit in one request).",
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
)
SUMMARY_DEPTH = Histogram(
    "docsumd_summary_depth",
    "Summarization levels per document: 1 in one request, 2 parts then combined, 3+ combined in stages.",
    buckets=(1, 2, 3, 4, 5, 6),
)
ADMISSION_WAITING = Gauge("docsumd_admission_waiting_requests", "Engine requests waiting for admission.")
ADMISSION_WAIT = Histogram(
    "docsumd_admission_wait_seconds",
    "Time an engine request waited for admission.",
    buckets=(0.001, 0.01, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600),
)
ADMISSION_WAVES = Counter(
    "docsumd_admission_light_waves_total",
    "Light waves started: enough light requests in the engine that heavy prefill waits for them.",
)
ADMISSION_WAVE_SECONDS = Counter(
    "docsumd_admission_light_wave_seconds_total",
    "Seconds a light wave was in the engine (heavy requests waited unless aged); each ended wave adds "
    "its length.",
)
ENGINE_REJECTIONS = Counter(
    "docsumd_engine_rejections",
    "Engine requests refused for now and sent again, never a document's failure: vLLM's admission "
    "(in-process: its 503-type errors) or a remote endpoint's 503 or 429.",
)
ENGINE_INFLIGHT_REQUESTS = Gauge("docsumd_engine_inflight_requests", "Requests admitted to the engine.")
ENGINE_INFLIGHT_TOKENS = Gauge(
    "docsumd_engine_inflight_tokens",
    "Tokens (prompt plus output budget) of the requests admitted to the engine.",
)
PROMPT_TOKENS_PENDING = Gauge(
    "docsumd_prompt_tokens_pending",
    "Prompt tokens of the work taken in and not yet through the engine: documents in flight (by bytes / 4 "
    "until tokenized, then their requests not yet finished) and messages fetched and not yet taken in. "
    "What an autoscaler should scale on (daemon/ops/pending.py).",
)
# The remote engine (engine.mode = "remote"), per endpoint: the label's values are the configured
# endpoint URLs only (the config bounds them and refuses credentials in them).
ENDPOINT_UP = Gauge(
    "docsumd_endpoint_up",
    "1 while a remote endpoint passed its checks and answers; 0 while it is down, unchecked or "
    "misconfigured.",
    ["endpoint"],
)
ENDPOINT_BUSY = Gauge(
    "docsumd_endpoint_busy",
    "1 while an up endpoint takes no new documents if another can: its queue or KV cache is full, it "
    "refused a request lately, or its load reading is stale.",
    ["endpoint"],
)
ENDPOINT_INFLIGHT_REQUESTS = Gauge(
    "docsumd_endpoint_inflight_requests", "docsumd's requests in flight on a remote endpoint.", ["endpoint"]
)
ENDPOINT_INFLIGHT_TOKENS = Gauge(
    "docsumd_endpoint_inflight_tokens",
    "Tokens (prompt plus output budget) of docsumd's requests in flight on a remote endpoint.",
    ["endpoint"],
)
ENDPOINT_REQUESTS = Counter(
    "docsumd_endpoint_requests",
    "Requests sent to a remote endpoint, by outcome: ok, refused (429/503/502: sent again), lost (cut, "
    "timed out, server error: sent again up to max_lost_tries), moved (the endpoint went down: sent "
    "elsewhere), too_long, failed (another 4xx: the document fails).",
    ["endpoint", "outcome"],
)
ENDPOINT_RETRIES = Counter(
    "docsumd_endpoint_retries",
    "Requests sent again after they were refused, lost or moved on this endpoint, by reason.",
    ["endpoint", "reason"],
)
ENDPOINT_REJECTIONS = Counter(
    "docsumd_endpoint_rejections",
    "Requests a remote endpoint refused for now, by HTTP status (429, 502, 503; in-band 503s too).",
    ["endpoint", "status"],
)
ENDPOINT_PROMPT_TOKENS = Counter(
    "docsumd_endpoint_prompt_tokens",
    "Prompt tokens of the requests a remote endpoint completed.",
    ["endpoint"],
)
ENDPOINT_CACHED_TOKENS = Counter(
    "docsumd_endpoint_cached_prompt_tokens",
    "Prompt tokens a remote endpoint served from its prefix cache (reported by vLLM servers started with "
    "--enable-prompt-tokens-details; 0 otherwise).",
    ["endpoint"],
)
ENDPOINT_OUTPUT_TOKENS = Counter(
    "docsumd_endpoint_output_tokens",
    "Tokens generated by the requests a remote endpoint completed.",
    ["endpoint"],
)
ENDPOINT_REQUEST_SECONDS = Histogram(
    "docsumd_endpoint_request_seconds",
    "Time of one completed request on a remote endpoint, from sending to its last token.",
    ["endpoint"],
    buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600),
)
ENDPOINT_FIRST_OUTPUT_SECONDS = Histogram(
    "docsumd_endpoint_first_output_seconds",
    "Time from sending a request to a remote endpoint to its first output (queue and prefill).",
    ["endpoint"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120),
)
ENDPOINTS_USABLE = Gauge(
    "docsumd_endpoints_usable",
    "Remote endpoints that take work now; at 0 the daemon is unhealthy and takes no new input.",
)
KAFKA_LAG = Gauge(
    "docsumd_kafka_consumer_lag",
    "Messages of an owned input partition not yet finished: end offset minus committed offset.",
    ["topic", "partition"],
)
KAFKA_PAUSED_PARTITIONS = Gauge(
    "docsumd_kafka_paused_partitions", "Input partitions paused because the local buffer is full."
)
KAFKA_REBALANCES = Counter(
    "docsumd_kafka_rebalances",
    "Consumer group rebalances this daemon took part in: each partition assignment it received, its first "
    "join included. A static member that restarts within its session adds only its own join.",
)
KAFKA_ASSIGNED_PARTITIONS = Gauge(
    "docsumd_kafka_assigned_partitions", "Input partitions assigned to this daemon by its consumer group."
)
KAFKA_BUFFERED = Gauge("docsumd_kafka_buffered_messages", "Messages fetched and not yet taken in.")
KAFKA_COMMITS = Counter(
    "docsumd_kafka_commits",
    "Offset commits (transactions in exactly-once mode), by outcome (ok, failed).",
    ["outcome"],
)
KAFKA_PENDING_RESULTS = Gauge(
    "docsumd_kafka_pending_results",
    "Exactly-once mode: finished results held until every earlier message of their partition is finished.",
)
KAFKA_BUFFERED_BYTES = Gauge(
    "docsumd_kafka_buffered_bytes",
    "Bytes (keys, values, headers) of the messages fetched and not yet taken in.",
)
KAFKA_REFUSED_RECORDS = Counter(
    "docsumd_kafka_refused_records",
    "Results and dead letters the broker refused as too large, by what was written instead "
    "(reduced_dead_letter, or nothing: the message's offset was committed without an output).",
    ["written_instead"],
)
INFLIGHT_BYTES = Gauge(
    "docsumd_inflight_bytes",
    "Bytes the documents in progress hold against limits.max_inflight_bytes: each its input's until "
    "its text is counted, then the most its text may take (as UTF-8) while it is built, then its text's.",
)
WAITING_FOR_BYTES = Gauge(
    "docsumd_documents_waiting_for_bytes",
    "Documents waiting for room in limits.max_inflight_bytes: to be taken in, or in progress and "
    "waiting for room for their text.",
)
DOCUMENT_FORMATS = Counter(
    "docsumd_document_formats",
    "Inputs read, by the format detected from their bytes (text, markdown, rst, html, pdf, docx, odt, "
    "or unknown: refused as binary).",
    ["format"],
)
EXTRACTIONS = Counter(
    "docsumd_extractions",
    "Extractions in the sandboxed workers, by format and outcome (ok or a failure reason).",
    ["format", "outcome"],
)
EXTRACTION_SECONDS = Histogram(
    "docsumd_extraction_seconds",
    "Wall-clock time of one extraction, waiting for a free worker (and then for room for its text in "
    "limits.max_inflight_bytes) included.",
    ["format"],
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
)
EXTRACTED_PAGES = Counter("docsumd_extracted_pages", "PDF pages whose text was extracted.")
READY = Gauge("docsumd_ready", "1 once the engine is warm and the sources run, 0 while starting or draining.")
# By profile: separate families, so the series (and queries) of the metrics above keep their labels.
# The label's values are the config's profile names only (see daemon/summary/profiles.py, Profiles.label).
PROFILE_DOCUMENTS = Counter(
    "docsumd_profile_documents",
    "Documents finished, by profile and outcome (ok or a failure reason). A document that failed before "
    "its profile was known counts under its source's profile.",
    ["profile", "outcome"],
)
PROFILE_PROMPT_TOKENS = Counter(
    "docsumd_profile_prompt_tokens",
    "Prompt tokens of summarized documents, by profile (at the end).",
    ["profile"],
)
PROFILE_CACHED_PROMPT_TOKENS = Counter(
    "docsumd_profile_cached_prompt_tokens",
    "Prompt tokens of summarized documents that vLLM's prefix cache served, by profile; divided by "
    "docsumd_profile_prompt_tokens_total it is the profile's prefix-cache hit rate.",
    ["profile"],
)
PROFILE_SUMMARY_TOKENS = Counter(
    "docsumd_profile_summary_tokens",
    "Tokens generated for summarized documents, by profile: part, combine and final summaries.",
    ["profile"],
)

STRUCTURED_OUTPUTS = Counter(
    "docsumd_structured_outputs",
    "Final steps of profiles with a JSON schema, by profile and outcome: valid (the first try validated), "
    "retried (the retry did), invalid (neither: the document failed with invalid_output).",
    ["profile", "outcome"],
)
STRUCTURED_SECONDS = Counter(
    "docsumd_structured_seconds",
    "Seconds spent in the constrained final steps of profiles with a JSON schema (retries and waiting for "
    "admission included), by profile.",
    ["profile"],
)
STRUCTURED_TOKENS = Counter(
    "docsumd_structured_tokens",
    "Tokens generated by the constrained final steps of profiles with a JSON schema (retries included), "
    "by profile.",
    ["profile"],
)

# The grounding check of every summary (daemon/summary/grounding.py, checking.py). Kinds: its Kind values.
GROUNDING_KINDS = ("money", "percent", "date", "duration", "section", "number", "term", "name")
GROUNDING_SUMMARIES = Counter(
    "docsumd_grounding_checked_summaries",
    "Summaries whose grounding check ran, by profile (the summary kept, after a retry; those that failed "
    "with unsupported_claims included).",
    ["profile"],
)
GROUNDING_FLAGGED = Counter(
    "docsumd_grounding_flagged_summaries",
    "Checked summaries with at least one item their source does not hold, by profile; divided by "
    "docsumd_grounding_checked_summaries_total it is the share of summaries with unsupported items.",
    ["profile"],
)
GROUNDING_ITEMS = Counter(
    "docsumd_grounding_items",
    "Items of checked summaries (numbers, dates, names, ...), by kind and profile.",
    ["kind", "profile"],
)
GROUNDING_UNSUPPORTED = Counter(
    "docsumd_grounding_unsupported",
    "Items of checked summaries that their source does not hold, by kind and profile.",
    ["kind", "profile"],
)
GROUNDING_RETRIES = Counter(
    "docsumd_grounding_retries",
    'Second draws of a final step for unsupported items (on_unsupported = "retry"), by profile.',
    ["profile"],
)
GROUNDING_SECONDS = Counter(
    "docsumd_grounding_seconds",
    "Seconds spent on grounding checks and evidence beyond the engine's time (waiting for the source's "
    "index included), by profile.",
    ["profile"],
)

# The summary cache (daemon/cache). Kinds: part (a request over document text), combine (over other
# requests' outputs), document (the whole-document shortcut). Every series exists from the start.
CACHE_KINDS = ("part", "combine", "document")
CACHE_LOOKUPS = Counter(
    "docsumd_cache_lookups",
    "Summary cache lookups by kind (part, combine, document) and outcome: hit, miss, error (the store "
    "failed or timed out, or its entry was unreadable: a miss), skipped (the store is skipped for "
    "cache.retry_seconds after a failure: a miss at no cost).",
    ["kind", "outcome"],
)
CACHE_WRITES = Counter(
    "docsumd_cache_writes",
    "Summary cache writes by kind and outcome: ok, error, skipped (store skipped after a failure), "
    "too_large (over cache.max_value_bytes, not stored).",
    ["kind", "outcome"],
)
CACHE_EVICTIONS = Counter(
    "docsumd_cache_evictions",
    "Entries the embedded store evicted (least recently used) to stay within cache.max_bytes, by kind. "
    "A Redis server's own evictions are its evicted_keys.",
    ["kind"],
)
CACHE_REUSED_TOKENS = Counter(
    "docsumd_cache_reused_tokens",
    "Engine tokens (prompt and generated) that cache hits stood for, by kind: work the engine did not do.",
    ["kind"],
)
CACHE_STORE_BYTES = Gauge(
    "docsumd_cache_store_bytes",
    "Bytes the cache store uses: the SQLite file's pages in use; for Redis, the server's used_memory (all "
    "its keys). Read every few seconds.",
)
CACHE_UP = Gauge(
    "docsumd_cache_up",
    "1 while the summary cache's store answers; 0 while it is skipped after a failure, or the cache is off.",
)
CACHE_SECONDS = Histogram(
    "docsumd_cache_operation_seconds",
    "Time of one cache store call (lookups of a batch of keys, or writes), by operation (get, put).",
    ["operation"],
    buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
)
for _kind in CACHE_KINDS:
    for _outcome in ("hit", "miss", "error", "skipped"):
        CACHE_LOOKUPS.labels(kind=_kind, outcome=_outcome)
    for _outcome in ("ok", "error", "skipped", "too_large"):
        CACHE_WRITES.labels(kind=_kind, outcome=_outcome)
    CACHE_EVICTIONS.labels(kind=_kind)
    CACHE_REUSED_TOKENS.labels(kind=_kind)
for _operation in ("get", "put"):
    CACHE_SECONDS.labels(operation=_operation)


def observe_structured(profile: str, outcome: str, *, seconds: float, tokens: int) -> None:
    """Count one constrained final step of ``profile`` that ended ``outcome`` (valid, retried, invalid)
    after ``seconds`` and ``tokens`` generated over its tries."""
    STRUCTURED_OUTPUTS.labels(profile=profile, outcome=outcome).inc()
    STRUCTURED_SECONDS.labels(profile=profile).inc(seconds)
    STRUCTURED_TOKENS.labels(profile=profile).inc(tokens)


class CheckFigures(Protocol):
    """What the metrics read of a grounding check (:class:`daemon.summary.grounding.Checks` has it)."""

    def by_kind(self) -> dict[str, dict[str, int]]: ...


def observe_grounding(profile: str, checks: CheckFigures, *, seconds: float, retried: bool) -> None:
    """Count one checked summary of ``profile``: its items and unsupported items by kind, whether any
    was unsupported, whether its final step was drawn again, and the ``seconds`` its checks took."""
    flagged = False
    for kind, counts in checks.by_kind().items():
        GROUNDING_ITEMS.labels(kind=kind, profile=profile).inc(counts["supported"] + counts["unsupported"])
        if counts["unsupported"]:
            GROUNDING_UNSUPPORTED.labels(kind=kind, profile=profile).inc(counts["unsupported"])
            flagged = True
    GROUNDING_SUMMARIES.labels(profile=profile).inc()
    if flagged:
        GROUNDING_FLAGGED.labels(profile=profile).inc()
    if retried:
        GROUNDING_RETRIES.labels(profile=profile).inc()
    GROUNDING_SECONDS.labels(profile=profile).inc(seconds)


# Labelled series exist from their first use; the ones below are made at 0 at start, for the label
# values known then, so that every metric the dashboard and the alerts query is exported before the
# first document (a panel then shows 0, not "no data"; tests/e2e/test_dashboard_metrics.py checks it).


def observe_profiles(names: Iterable[str]) -> None:
    """Create every profile's series at 0, so rates and ratios exist before its first document. The
    structured series too, for every profile: one without a schema keeps them at 0; and the grounding
    series, of every kind."""
    for name in names:
        PROFILE_DOCUMENTS.labels(profile=name, outcome="ok")
        for family in (PROFILE_PROMPT_TOKENS, PROFILE_CACHED_PROMPT_TOKENS, PROFILE_SUMMARY_TOKENS):
            family.labels(profile=name)
        for outcome in ("valid", "retried", "invalid"):
            STRUCTURED_OUTPUTS.labels(profile=name, outcome=outcome)
        STRUCTURED_SECONDS.labels(profile=name)
        STRUCTURED_TOKENS.labels(profile=name)
        for family in (GROUNDING_SUMMARIES, GROUNDING_FLAGGED, GROUNDING_RETRIES, GROUNDING_SECONDS):
            family.labels(profile=name)
        for kind in GROUNDING_KINDS:
            GROUNDING_ITEMS.labels(kind=kind, profile=name)
            GROUNDING_UNSUPPORTED.labels(kind=kind, profile=name)


def observe_request_kinds(kinds: Iterable[str]) -> None:
    """Create the engine request counter of every kind of request at 0."""
    for kind in kinds:
        ENGINE_REQUESTS.labels(kind=kind)


def observe_source(source: str) -> None:
    """Create the documents counter of a started source at 0 (outcome ``ok``; failure reasons appear
    with their first document)."""
    DOCUMENTS.labels(source=source, outcome="ok")


def observe_kafka_commits() -> None:
    """Create the Kafka commit counter of both outcomes at 0."""
    for outcome in ("ok", "failed"):
        KAFKA_COMMITS.labels(outcome=outcome)


class SummaryFigures(Protocol):
    """What the metrics read of a summary (:class:`daemon.records.Summary` has it); a protocol, so
    that operations code does not depend on the records built above it."""

    @property
    def profile(self) -> str: ...
    @property
    def prompt_tokens(self) -> int: ...
    @property
    def cached_prompt_tokens(self) -> int: ...
    @property
    def generated_tokens(self) -> int: ...
    @property
    def truncated(self) -> bool: ...
    @property
    def parts(self) -> int: ...
    @property
    def depth(self) -> int: ...


def observe_summarized(source: str, summary: SummaryFigures, total_s: float) -> None:
    """Count a summarized document from ``source`` that took ``total_s`` from intake to result."""
    DOCUMENTS.labels(source=source, outcome="ok").inc()
    PROFILE_DOCUMENTS.labels(profile=summary.profile, outcome="ok").inc()
    PROFILE_PROMPT_TOKENS.labels(profile=summary.profile).inc(summary.prompt_tokens)
    PROFILE_CACHED_PROMPT_TOKENS.labels(profile=summary.profile).inc(summary.cached_prompt_tokens)
    PROFILE_SUMMARY_TOKENS.labels(profile=summary.profile).inc(summary.generated_tokens)
    DOCUMENT_LATENCY.observe(total_s)
    PROMPT_TOKENS.inc(summary.prompt_tokens)
    SUMMARY_TOKENS.inc(summary.generated_tokens)
    if summary.truncated:
        TRUNCATED.inc()
    CHUNKS_PER_DOCUMENT.observe(summary.parts)
    SUMMARY_DEPTH.observe(summary.depth)
    LAST_SUCCESS.set_to_current_time()


def observe_failed(source: str, reason: str, profile: str) -> None:
    """Count a document from ``source`` under ``profile`` that ended with a failure record for ``reason``."""
    DOCUMENTS.labels(source=source, outcome=reason).inc()
    PROFILE_DOCUMENTS.labels(profile=profile, outcome=reason).inc()


class MetricsServer(Lifecycle):
    """Serves the endpoints on ``host:port``. ``start()``/``stop()`` are idempotent."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        healthy: Callable[[], bool],
        ready: Callable[[], bool],
        limits: ConnectionLimits | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self._healthy = healthy
        self._ready = ready
        self.limits = limits or ConnectionLimits()
        self._runner: web.AppRunner | None = None
        self.listener: LimitedListener | None = None

    async def start(self) -> None:
        """Bind and serve. With port 0 a free port is chosen; :attr:`port` then holds it."""
        if self._runner is not None:
            return
        app = web.Application(middlewares=[deadline_middleware])
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        # aiohttp's own keep-alive (an hour by default) no longer than ours; shutdown_timeout: a stop
        # does not wait for a slow client. logger: malformed requests are logged once in a while,
        # without a traceback (aiohttp's own logger writes one with a traceback per request).
        runner = web.AppRunner(
            app,
            access_log=None,
            keepalive_timeout=self.limits.idle_seconds,
            shutdown_timeout=1.0,
            logger=ServerErrorLog(),
        )
        await runner.setup()
        listener = LimitedListener(runner, self.host, self.port, self.limits)
        try:
            await listener.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner, self.listener = runner, listener
        self.port = listener.port
        log.info("metrics endpoint listening", url=f"http://{self.host}:{self.port}/metrics")

    async def stop(self) -> None:
        """Stop serving."""
        if self._runner is None:
            return
        runner, self._runner = self._runner, None
        if self.listener is not None:
            await self.listener.stop()
            self.listener = None
        await runner.cleanup()

    async def _metrics(self, request: web.Request) -> web.Response:
        body = prometheus_client.generate_latest(prometheus_client.REGISTRY)
        return web.Response(body=body, headers={"Content-Type": prometheus_client.CONTENT_TYPE_LATEST})

    async def _healthz(self, request: web.Request) -> web.Response:
        ok = self._healthy()
        return web.json_response({"status": "ok" if ok else "unhealthy"}, status=200 if ok else 503)

    async def _readyz(self, request: web.Request) -> web.Response:
        ok = self._ready()
        return web.json_response({"status": "ready" if ok else "not ready"}, status=200 if ok else 503)
