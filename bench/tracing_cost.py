"""What one trace per document costs: tracing off against ``[tracing]`` at a sampling ratio (10% by
default), exporting over OTLP/HTTP to a real receiver on loopback (tests/otlp_sink.py, in a process of
its own).

Three measurements, all interleaved round by round (off, then each ratio, then off again...) so that a
machine whose load drifts (the development machines are shared) weighs on every variant alike:

1. **engine** (``--rounds``): the real service in a fresh process per pass (``docsumd``'s own start-up:
   logging, tracing installed before the engine, the vLLM engine on ``--model``), the documents of
   ``--docs`` through a files source; timed from the moment the service is ready to its last result.
   Reports documents/s and the daemon process's CPU seconds per document (its threads included: the
   span exporter's; not the engine's own processes, whose work tracing does not change).
2. **pipeline** (``--micro-rounds``): ``--micro-docs`` short documents (the first ``--micro-bytes`` of
   each) through the real reader, tokenizer, summarizer and admission with an engine that answers at
   once, in this process: the daemon's own CPU per document, which tracing adds to, without the
   engine's time to hide it; ``added_cpu_ms_per_doc`` is what tracing adds, round by round.
3. **spans** (``--span-rounds``): only what tracing does around a document of ``--span-parts`` parts
   (the spans, attributes, events and context the pipeline, summarizer and engine create, in order,
   around no work), over ``--span-documents`` documents: its CPU per document in microseconds, the
   least noisy figure (no tokenizer, no threads but the exporter's).

Each variant's cost is its ratio to the off passes of the same round; the spread over rounds is the
noise. A fresh process per engine pass because tracing must be installed before the engine is built
and OpenTelemetry's global tracer provider can be set once per process.

    .venv/bin/python -m bench.tracing_cost --docs ../shared/corpus/docs --json FILE
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.lib import REPO
from bench.lib.results import write_result

OFF = "off"


class _Receiver:
    """tests/otlp_sink.py in a process of its own: its CPU (decoding every span) stays out of what this
    process measures."""

    def __init__(self) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self._process = subprocess.Popen(
            [sys.executable, "-m", "tests.otlp_sink"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=REPO,
        )
        assert self._process.stdout is not None
        self.endpoint = self._process.stdout.readline().strip()

    def stop(self) -> int:
        """Stop it; the number of spans it received."""
        out, _ = self._process.communicate("", timeout=60)
        return int(out.split()[-1])


def _documents(folder: Path, count: int, max_bytes: int) -> list[Path]:
    """The first ``count`` .txt documents of ``folder`` (by name) of at most ``max_bytes`` each."""
    docs = sorted(p for p in folder.glob("*.txt") if p.stat().st_size <= max_bytes)
    if not docs:
        raise SystemExit(f"no documents in {folder}")
    return [docs[i % len(docs)] for i in range(count)]


def _config(model: Path, endpoint: str | None, ratio: float | None, *, metrics: bool = False) -> Any:
    from daemon.config import (
        Config,
        EngineConfig,
        LoggingConfig,
        MetricsConfig,
        ServiceConfig,
        SummaryConfig,
        TracingConfig,
    )

    tracing = (
        TracingConfig() if ratio is None else TracingConfig(otlp_endpoint=endpoint, sampling_ratio=ratio)
    )
    return Config(
        engine=EngineConfig(
            model=str(model),
            max_model_len=4096,
            max_num_seqs=64,
            max_num_batched_tokens=4096,
            kv_cache_memory_bytes=1 << 30,
            enforce_eager=True,
        ),
        summary=SummaryConfig(max_summary_tokens=64),
        metrics=MetricsConfig(enabled=metrics),
        service=ServiceConfig(status_interval_seconds=3600, drain_seconds=0),
        logging=LoggingConfig(level="warning", format="json"),
        tracing=tracing,
    )


# -- one engine pass, in a child process ------------------------------------------------------------


async def _serve(config: Any, docs: list[Path], outbox: Path) -> dict[str, float]:
    from daemon.folder.files import FilesSource
    from daemon.folder.sink import FolderSink
    from daemon.service import Service

    copies = outbox.parent / "in"
    copies.mkdir()
    paths = []
    for index, doc in enumerate(docs):  # distinct names, so every copy gets its own result
        paths.append(copies / f"{index:04d}-{doc.name}")
        paths[-1].write_bytes(doc.read_bytes())
    source = FilesSource(paths, FolderSink(outbox, outbox), max_input_bytes=1 << 24)
    finished: list[float] = []
    cpu_at_end: list[Any] = []

    def on_finished(item: Any, outcome: str) -> None:
        finished.append(time.monotonic())
        if len(finished) == len(docs):  # the daemon's CPU up to its last result, not its shutdown
            cpu_at_end.append(resource.getrusage(resource.RUSAGE_SELF))

    service = Service(config, sources=[source], on_finished=on_finished)
    task = asyncio.create_task(service.run())
    while not service.ready() and not task.done():  # noqa: ASYNC110 - no event for "ready"
        await asyncio.sleep(0.005)
    start, cpu_start = time.monotonic(), resource.getrusage(resource.RUSAGE_SELF)
    await task  # a finite source: the service stops when its work is done
    if len(finished) != len(docs):
        raise SystemExit(f"{len(finished)} of {len(docs)} documents finished")
    wall = max(finished) - start
    cpu_end = cpu_at_end[0]
    cpu = (cpu_end.ru_utime - cpu_start.ru_utime) + (cpu_end.ru_stime - cpu_start.ru_stime)
    return {
        "docs_per_s": len(docs) / wall,
        "wall_s": wall,
        "cpu_s_per_doc": cpu / len(docs),
        # From the last result to the service's end: the engine's shutdown (its processes export their
        # spans as they exit when tracing is on).
        "stop_s": time.monotonic() - max(finished),
    }


def _child(args: argparse.Namespace) -> None:
    from daemon.cli import prepare_process
    from daemon.ops import tracing

    ratio = None if args.variant == OFF else float(args.variant)
    config = _config(args.model, args.endpoint, ratio)
    prepare_process(config)  # what `docsumd run` does: logging, then tracing before the engine
    docs = _documents(args.docs, args.count, args.max_bytes)
    with tempfile.TemporaryDirectory(prefix="docsumd-tracing-") as work:
        result = asyncio.run(_serve(config, docs, Path(work) / "out"))
    tracing.flush()
    result["tracing"] = tracing.enabled()
    print(json.dumps(result), flush=True)


def _engine_pass(args: argparse.Namespace, variant: str, endpoint: str) -> dict[str, Any]:
    command = [
        sys.executable,
        "-m",
        "bench.tracing_cost",
        "--child",
        "--variant",
        variant,
        "--endpoint",
        endpoint,
    ]
    command += ["--model", str(args.model), "--docs", str(args.docs)]
    command += ["--count", str(args.count), "--max-bytes", str(args.max_bytes)]
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env["TMPDIR"] = tempfile.mkdtemp(prefix="docsumd-b-")  # vLLM's sockets: a short path
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False, timeout=3600)
    if done.returncode != 0:
        raise SystemExit(f"the {variant} pass failed ({done.returncode}):\n{done.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["process_s"] = time.monotonic() - started
    return result


# -- the pipeline alone, in this process ------------------------------------------------------------


def _pipeline_pass(
    tokenizer: Any, model: Path, texts: list[bytes], variant: str, endpoint: str
) -> dict[str, float]:
    from daemon.contracts import Generation, Sampling
    from daemon.document.reader import DocumentReader
    from daemon.engine.admission import admission_for_engine
    from daemon.ops import tracing
    from daemon.pipeline import DocumentPipeline
    from daemon.summary.profiles import build_profiles
    from daemon.summary.summarizer import Summarizer
    from daemon.work import WorkItem

    class InstantEngine:
        is_running = True
        kv_cache_tokens: int | None = 1 << 20
        start_seconds: float | None = 0.0

        async def start(self) -> None: ...
        async def stop(self) -> None: ...

        async def generate(
            self,
            prompt_token_ids: list[int],
            sampling: Sampling,
            request_id: str,
            *,
            on_prefilled: Callable[[], None] | None = None,
            priority: int = 0,
        ) -> Generation:
            await asyncio.sleep(0)
            return Generation("A short summary of this part.", len(prompt_token_ids), 8, 0, "stop", 0.0, 0.0)

    ratio = None if variant == OFF else float(variant)
    config = _config(model, endpoint, ratio)
    if ratio is not None:
        tracing.install(config.tracing, set_global=False)
    try:
        admission = admission_for_engine(config.admission, config.engine, kv_cache_tokens=1 << 20)
        summarizer = Summarizer(
            InstantEngine(),
            tokenizer,
            config.summary,
            profiles=build_profiles(config, tokenizer),
            admission=admission,
        )
        pipeline = DocumentPipeline(
            summarizer, model_name="tiny", reader=DocumentReader(max_input_bytes=1 << 24)
        )

        async def run() -> None:
            async def one(index: int, data: bytes) -> None:
                async def load() -> bytes:
                    return data

                async def settle(record: Any) -> None:
                    return None

                item = WorkItem(
                    id=f"doc-{index}", source="bench", load=load, on_complete=settle, on_fail=settle
                )
                await pipeline.process(item)

            await asyncio.gather(*(one(i, data) for i, data in enumerate(texts)))

        cpu, wall = time.process_time(), time.monotonic()
        asyncio.run(run())
        tracing.flush()
        cpu, wall = time.process_time() - cpu, time.monotonic() - wall
    finally:
        tracing.reset_for_tests()
    return {"cpu_ms_per_doc": 1000 * cpu / len(texts), "wall_ms_per_doc": 1000 * wall / len(texts)}


# -- the spans alone, in this process ---------------------------------------------------------------


def _spans_pass(variant: str, endpoint: str, documents: int, parts: int) -> float:
    """Microseconds of this process's CPU per document for what tracing does around one document of
    ``parts`` parts (the calls the pipeline, the summarizer and the engine make, in their order,
    without the work they wrap), over ``documents`` documents; the span exporter's thread included."""
    from daemon.config import TracingConfig
    from daemon.ops import tracing

    ratio = None if variant == OFF else float(variant)
    if ratio is not None:
        tracing.install(TracingConfig(otlp_endpoint=endpoint, sampling_ratio=ratio), set_global=False)
    headers: list[tuple[str, bytes | None]] = [("model", b"m")]

    def one(index: int) -> None:
        metadata = {"topic": "documents", "partition": 0, "offset": index}
        received = time.monotonic()
        with tracing.document_span(
            f"doc-{index}", "kafka", parent=None, received_at=received, metadata=metadata
        ):
            with tracing.receive_span(received):
                pass
            for step in ("extract", "tokenize", "split"):
                with tracing.span(step):
                    pass
            for kind in ["part"] * parts + ["combine"]:
                with tracing.span(f"request {kind}"):
                    if tracing.enabled():
                        tracing.annotate(
                            {"docsumd.request.kind": kind, "docsumd.request.prompt_tokens": 3000}
                        )
                        tracing.annotate({"docsumd.admission.class": "heavy", "docsumd.priority": 1})
                        tracing.event("admitted")
                    tracing.current_headers()  # what the engine passes to vLLM
                    if tracing.enabled():
                        tracing.annotate(
                            {"gen_ai.usage.input_tokens": 3000, "gen_ai.usage.output_tokens": 256}
                        )
            with tracing.span("validate"):
                tracing.annotate({"docsumd.attempt": 0})
            tracing.annotate({"docsumd.outcome": "ok", "docsumd.parts": parts})
            with tracing.span("publish"):
                tracing.with_trace_context(headers)

    try:
        cpu = time.process_time()
        for index in range(documents):
            one(index)
        tracing.flush()
        cpu = time.process_time() - cpu
    finally:
        tracing.reset_for_tests()
    return 1e6 * cpu / documents


# -- the report -------------------------------------------------------------------------------------


def _summary(rounds: list[dict[str, dict[str, float]]], key: str, higher_is_better: bool) -> dict[str, Any]:
    """Per variant: each round's ratio to that round's off pass (cost = 1 - ratio for a rate, ratio - 1
    for a time), and their median, min and max."""
    out: dict[str, Any] = {}
    for variant in rounds[0]:
        if variant == OFF:
            continue
        ratios = [r[variant][key] / r[OFF][key] for r in rounds]
        costs = [(1 - x) if higher_is_better else (x - 1) for x in ratios]
        out[variant] = {
            "ratios": [round(x, 4) for x in ratios],
            "cost_median": round(statistics.median(costs), 4),
            "cost_min": round(min(costs), 4),
            "cost_max": round(max(costs), 4),
        }
    off = [r[OFF][key] for r in rounds]
    out["off_spread"] = round((max(off) - min(off)) / statistics.median(off), 4)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--docs", type=Path, default=REPO.parent / "shared" / "corpus" / "docs")
    parser.add_argument("--model", type=Path, default=None, help="default: the tiny model, built once")
    parser.add_argument("--count", type=int, default=40, help="documents per pass")
    parser.add_argument("--max-bytes", type=int, default=60_000, help="only documents of at most this size")
    parser.add_argument(
        "--ratios", default="0.1", help="sampling ratios to compare with off, comma-separated"
    )
    parser.add_argument("--rounds", type=int, default=3, help="engine passes per variant (0: none)")
    parser.add_argument("--micro-rounds", type=int, default=7, help="pipeline passes per variant (0: none)")
    parser.add_argument("--micro-docs", type=int, default=300, help="documents per pipeline pass")
    parser.add_argument("--micro-bytes", type=int, default=2000, help="each pipeline document's bytes")
    parser.add_argument("--span-rounds", type=int, default=5, help="span-only passes per variant (0: none)")
    parser.add_argument("--span-documents", type=int, default=2000, help="documents per span-only pass")
    parser.add_argument("--span-parts", type=int, default=4, help="parts of each span-only document")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--variant", default=OFF, help=argparse.SUPPRESS)
    parser.add_argument("--endpoint", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.model is None:
        from daemon.models.tiny import build_tiny_model

        args.model = build_tiny_model(Path(tempfile.gettempdir()) / "docsumd-bench-tiny-model")
    if args.child:
        _child(args)
        return
    variants = [OFF, *(f"{float(r):g}" for r in args.ratios.split(","))]
    docs = _documents(args.docs, args.count, args.max_bytes)
    sink = _Receiver()
    result: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load": os.getloadavg()},
        "documents": len(docs),
        "document_bytes": sum(doc.stat().st_size for doc in docs),
        "variants": variants,
    }
    try:
        if args.micro_rounds:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(str(args.model))
            # Short documents (one request each): the per-document overhead tracing adds to is the
            # larger share of their cost. A first round warms caches and is not counted.
            texts = [doc.read_bytes()[: args.micro_bytes] for doc in docs]
            texts = [texts[i % len(texts)] for i in range(args.micro_docs)]
            for variant in variants:
                _pipeline_pass(tokenizer, args.model, texts, variant, sink.endpoint)
            micro = []
            for round_ in range(args.micro_rounds):
                order = variants if round_ % 2 == 0 else list(reversed(variants))
                micro.append(
                    {v: _pipeline_pass(tokenizer, args.model, texts, v, sink.endpoint) for v in order}
                )
                print(f"pipeline round {round_ + 1}: {json.dumps(micro[-1])}", file=sys.stderr)
            added = {
                v: [round(r[v]["cpu_ms_per_doc"] - r[OFF]["cpu_ms_per_doc"], 4) for r in micro]
                for v in variants
                if v != OFF
            }
            result["pipeline"] = {
                "documents": len(texts),
                "document_bytes": args.micro_bytes,
                "rounds": micro,
                "cpu": _summary(micro, "cpu_ms_per_doc", higher_is_better=False),
                "added_cpu_ms_per_doc": added,
            }
        if args.span_rounds:
            spans: dict[str, list[float]] = {v: [] for v in variants}
            for round_ in range(args.span_rounds + 1):  # the first round warms up, not counted
                for variant in variants if round_ % 2 == 0 else list(reversed(variants)):
                    cost = _spans_pass(variant, sink.endpoint, args.span_documents, args.span_parts)
                    if round_:
                        spans[variant].append(round(cost, 1))
            result["spans"] = {
                "documents": args.span_documents,
                "parts": args.span_parts,
                "cpu_us_per_doc": spans,
                "added_cpu_us_per_doc_median": {
                    v: round(statistics.median(spans[v]) - statistics.median(spans[OFF]), 1)
                    for v in variants
                    if v != OFF
                },
            }
            print(f"spans: {json.dumps(result['spans'])}", file=sys.stderr)
        engine = []
        for round_ in range(args.rounds):
            order = variants if round_ % 2 == 0 else list(reversed(variants))
            engine.append({v: _engine_pass(args, v, sink.endpoint) for v in order})
            print(f"engine round {round_ + 1}: {json.dumps(engine[-1])}", file=sys.stderr)
            if args.json is not None:  # kept after every round: a stopped run keeps what it measured
                write_result(args.json, {**result, "engine": {"rounds": engine}})
        if engine:
            result["engine"] = {
                "rounds": engine,
                "docs_per_s": _summary(engine, "docs_per_s", higher_is_better=True),
                "cpu_s_per_doc": _summary(engine, "cpu_s_per_doc", higher_is_better=False),
            }
        result["load_after"] = os.getloadavg()
    finally:
        result["spans_received"] = sink.stop()
    print(json.dumps({k: v for k, v in result.items() if k not in ("spans", "pipeline", "engine")}, indent=2))
    for part in ("spans", "pipeline", "engine"):
        if part in result:
            print(part, json.dumps({k: v for k, v in result[part].items() if k != "rounds"}, indent=2))
    if args.json is not None:
        write_result(args.json, result)


if __name__ == "__main__":
    main()
