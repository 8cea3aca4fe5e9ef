"""The real service over a workload, timed: folder passes on one engine started once, a Kafka pass on
a local broker, each document's finishing time, outcome and result record, every engine request, the
peak RSS of the daemon, its engine processes and its extraction workers."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from bench.lib.counters import extraction_counters, spec_counters, spec_decoding_stats, wave_counters
from bench.lib.engine import RecordingEngine, Request
from daemon.config import RENAMED_KEYS, Config, FolderSourceConfig, MetricsConfig, SourcesConfig
from daemon.engine.vllm_engine import Engine


@dataclass
class DaemonRun:
    """What one pass of the daemon over the workload produced."""

    label: str
    start: float = 0.0
    finished_at: dict[str, float] = field(default_factory=dict)
    outcomes: dict[str, str] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    peak_rss: int = 0
    engine_start_s: float | None = None
    light_waves: float = 0.0
    light_wave_seconds: float = 0.0
    peak_daemon_rss: int = 0
    peak_workers_rss: int = 0
    peak_worker_rss: int = 0
    worker_cpu_s: float = 0.0
    extractions: float = 0.0
    extraction_seconds: float = 0.0
    extracted_pages: float = 0.0
    kv_cache_tokens: int | None = None
    spec_decoding: dict[str, Any] | None = None


@dataclass(frozen=True)
class Plan:
    """One daemon pass to run: its label and admission settings, and its own documents (else the
    workload's)."""

    label: str
    admission: bool
    overrides: dict[str, float | int] = field(default_factory=dict)
    docs: tuple[tuple[str, str | bytes], ...] | None = None


class Deadline:
    """Whether the next pass still fits before ``--deadline`` (estimated from the last pass)."""

    def __init__(self, seconds: float | None) -> None:
        self.end = None if seconds is None else _STARTED + seconds
        self.last_pass_s = 0.0

    def allows(self, needed_s: float) -> bool:
        """Whether ``needed_s`` more seconds end before the deadline."""
        return self.end is None or time.monotonic() + needed_s <= self.end

    def next_pass_s(self) -> float:
        """The next pass's estimated seconds."""
        return 1.15 * self.last_pass_s

    def raw_estimate(self, run: DaemonRun) -> float:
        """The raw-vLLM pass's estimated seconds."""
        # The raw run starts its own engine (about as long as the daemon's first start), then does
        # the same work as a daemon pass.
        return (run.engine_start_s or 60.0) + 1.1 * (max(run.finished_at.values()) - run.start)


_STARTED = time.monotonic()


def parse_variant(text: str) -> tuple[str, dict[str, float | int]]:
    """A ``--variant NAME:KEY=VALUE[,KEY=VALUE]``: its name and admission overrides."""
    name, _, settings = text.partition(":")
    overrides: dict[str, float | int] = {}
    for pair in filter(None, settings.split(",")):
        key, _, value = pair.partition("=")
        # Variants name admission keys; a renamed one (window_seconds) still works, as in a config file.
        key = RENAMED_KEYS.get(f"admission.{key}", f"admission.{key}").removeprefix("admission.")
        overrides[key] = float(value) if "." in value else int(value)
    return name, overrides


def folder_passes(
    config: Config,
    docs: Sequence[tuple[str, str | bytes]],
    work: Path,
    plans: list[Plan],
    *,
    warmup: Sequence[tuple[str, str | bytes]],
    deadline: Deadline,
    on_pass: Callable[[list[DaemonRun]], object] | None = None,
) -> list[DaemonRun]:
    """The daemon over the folder source, one pass per plan, all on one engine started once."""

    async def passes() -> list[DaemonRun]:
        engine = Engine(config.engine)
        runs: list[DaemonRun] = []
        try:
            if warmup:
                await folder_pass(config, warmup, work / "warmup", Plan("warmup", admission=True), engine)
            for plan in plans:
                if runs and not deadline.allows(deadline.next_pass_s()):
                    print(f"skipping pass {plan.label}: the deadline is too near", file=sys.stderr)
                    continue
                if engine.is_running:
                    await engine.reset_prefix_cache()  # no pass may reuse another's prompts
                started = time.monotonic()
                plan_docs = list(plan.docs) if plan.docs is not None else docs
                runs.append(await folder_pass(config, plan_docs, work / plan.label, plan, engine))
                deadline.last_pass_s = time.monotonic() - started
                if on_pass is not None:
                    on_pass(runs)
        finally:
            await engine.stop()
        return runs

    return asyncio.run(passes())


def folder_pass_config(config: Config, docs: Sequence[tuple[str, str | bytes]], folder: Path) -> Config:
    """``config`` for one pass over ``folder``: its inbox holds ``docs``, oldest first in the given
    order (their mtimes say so), read at once (no settling), metrics off."""
    inbox = folder / "inbox"
    inbox.mkdir(parents=True)
    now = time.time()
    for position, (name, content) in enumerate(docs):
        path = inbox / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
        os.utime(path, (now - len(docs) + position, now - len(docs) + position))  # arrival order
    sources = SourcesConfig(
        folder=FolderSourceConfig(
            inbox=inbox,
            outbox=folder / "outbox",
            done=folder / "done",
            failed=folder / "failed",
            settle_seconds=0.0,
        )
    )
    return config.model_copy(update={"sources": sources, "metrics": MetricsConfig(enabled=False)})


async def folder_pass(
    config: Config, docs: Sequence[tuple[str, str | bytes]], folder: Path, plan: Plan, engine: Engine
) -> DaemonRun:
    admission = config.admission.model_copy(update={"enabled": plan.admission, **plan.overrides})
    run_config = folder_pass_config(config, docs, folder).model_copy(update={"admission": admission})
    run = DaemonRun(label=plan.label)
    sampler = RssSampler()
    waves_before = wave_counters()
    extraction_before = extraction_counters()
    with sampler:
        await serve_async(
            run_config, len(docs), run, RecordingEngine(engine, shared=True, requests=run.requests)
        )
    run.peak_rss = sampler.peak
    run.peak_daemon_rss = sampler.peak_daemon
    run.peak_workers_rss = sampler.peak_workers
    run.peak_worker_rss = sampler.peak_worker
    run.worker_cpu_s = sampler.worker_cpu_s
    run.kv_cache_tokens = engine.kv_cache_tokens
    run.light_waves, run.light_wave_seconds = (
        after - before for after, before in zip(wave_counters(), waves_before, strict=True)
    )
    run.extractions, run.extraction_seconds, run.extracted_pages = (
        after - before for after, before in zip(extraction_counters(), extraction_before, strict=True)
    )
    for path in (folder / "outbox").glob("*.summary.json"):
        record = json.loads(path.read_text(encoding="utf-8"))
        run.results[record["id"]] = record
    print(f"daemon ({run.label}): {len(run.finished_at)} documents{pass_summary(run)}", file=sys.stderr)
    return run


def pass_summary(run: DaemonRun) -> str:
    """The pass's throughput and speculative figures, for the log (a run killed later keeps them)."""
    if not run.finished_at:
        return ""
    elapsed = max(run.finished_at.values()) - run.start
    text = f" in {elapsed:.1f} s, {len(run.finished_at) / elapsed:.3f} docs/s"
    spec = run.spec_decoding
    if spec is not None:
        text += (
            f", acceptance {spec['acceptance_rate']}, mean accepted length {spec['mean_accepted_length']}"
            f" ({spec['accepted_tokens']:.0f} of {spec['draft_tokens']:.0f} draft tokens)"
        )
    return text


def same_summaries(first: DaemonRun, second: DaemonRun) -> dict[str, int]:
    """How many documents both passes summarized, and for how many the summary texts are identical
    (greedy decoding with and without speculation should give the same text; GPU kernels that
    depend on the batch's shape may still differ in a token now and then)."""
    common = sorted(set(first.results) & set(second.results))
    identical = sum(first.results[doc].get("summary") == second.results[doc].get("summary") for doc in common)
    return {"compared": len(common), "identical": identical}


def run_kafka(config: Config, docs: list[tuple[str, str]], folder: Path, partitions: int) -> DaemonRun:
    """The daemon with only the Kafka source, over the same documents produced to a local broker."""
    from daemon.config import KafkaSourceConfig
    from tests.e2e.harness import free_port
    from tests.kafka_broker import KafkaBroker, create_topics, produce, read_all

    broker = KafkaBroker(port=free_port(), data_dir=folder / "broker")
    broker.up()
    try:
        topics = {"input": "bench-documents", "output": "bench-summaries", "dead": "bench-dead-letters"}
        asyncio.run(create_topics(broker.bootstrap, list(topics.values()), partitions=partitions))
        messages: list[tuple[bytes, bytes, list[tuple[str, bytes]]]] = [
            (name.encode(), json.dumps({"id": name, "text": text}).encode(), []) for name, text in docs
        ]
        asyncio.run(produce(broker.bootstrap, topics["input"], messages))
        kafka = KafkaSourceConfig(
            bootstrap_servers=broker.bootstrap,
            input_topics=[topics["input"]],
            group_id="docsumd-bench",
            output_topic=topics["output"],
            dead_letter_topic=topics["dead"],
        )
        run_config = config.model_copy(
            update={"sources": SourcesConfig(kafka=kafka), "metrics": MetricsConfig(enabled=False)}
        )
        run = DaemonRun(label="kafka")
        sampler = RssSampler()
        with sampler:
            asyncio.run(
                serve_async(
                    run_config, len(docs), run, RecordingEngine(run_config.engine, requests=run.requests)
                )
            )
        run.peak_rss = sampler.peak
        gc.collect()
        results = asyncio.run(read_all(broker.bootstrap, topics["output"], timeout=30.0))
        for message in results:
            record = json.loads(message.value)
            run.results[record["id"]] = record
    finally:
        broker.down()
    print(
        f"daemon (kafka): {len(run.finished_at)} documents, {len(run.results)} results read back",
        file=sys.stderr,
    )
    return run


async def serve_async(run_config: Config, expected: int, run: DaemonRun, engine: RecordingEngine) -> None:
    """Run the service until ``expected`` documents are finished, timing from ready; then stop it."""
    from daemon.service import Service

    all_done = asyncio.Event()

    def finished(item: Any, outcome: str) -> None:
        run.finished_at[item.id] = time.monotonic()
        run.outcomes[item.id] = outcome
        if len(run.finished_at) == expected:
            all_done.set()

    service = Service(run_config, engine=engine, on_finished=finished)
    task = asyncio.create_task(service.run())
    while not service.ready() and not task.done():  # noqa: ASYNC110 - no event for "ready"
        await asyncio.sleep(0.01)
    run.start = time.monotonic()
    run.engine_start_s = engine.start_seconds
    # vLLM's counters restart with each engine (its Prometheus logger registers them anew), so the
    # pass's share is read from the moment its engine is ready, warm-up request done.
    spec_before = spec_counters()
    waiter = asyncio.create_task(all_done.wait())
    await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    service.request_stop()
    await task
    waiter.cancel()
    run.spec_decoding = spec_decoding_stats(spec_before, spec_counters())


class RssSampler:
    """Peak RSS of this process and its children (EngineCore, workers), sampled every 0.2 s; apart,
    the extraction workers' (``daemon.document.sandbox.worker``): their peak together and the largest one's,
    and their CPU seconds (each worker's last reading; a worker replaced between two samples loses at
    most 0.2 s of its own)."""

    def __init__(self) -> None:
        self.peak = 0
        self.peak_daemon = 0
        self.peak_workers = 0
        self.peak_worker = 0
        self._worker_cpu: dict[int, float] = {}
        self._kinds: dict[int, bool] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    @property
    def worker_cpu_s(self) -> float:
        return sum(self._worker_cpu.values())

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _is_worker(self, process: psutil.Process) -> bool:
        if process.pid not in self._kinds:
            self._kinds[process.pid] = "daemon.document.sandbox.worker" in process.cmdline()
        return self._kinds[process.pid]

    def _sample(self) -> None:
        me = psutil.Process()
        while not self._stop.wait(0.2):
            daemon = workers = 0
            for process in [me, *me.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):
                    rss = process.memory_info().rss
                    if process is not me and self._is_worker(process):
                        workers += rss
                        self.peak_worker = max(self.peak_worker, rss)
                        times = process.cpu_times()
                        self._worker_cpu[process.pid] = times.user + times.system
                    else:
                        daemon += rss
            self.peak = max(self.peak, daemon + workers)
            self.peak_daemon = max(self.peak_daemon, daemon)
            self.peak_workers = max(self.peak_workers, workers)


# -- raw vLLM -------------------------------------------------------------------------------------
