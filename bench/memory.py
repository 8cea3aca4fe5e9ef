"""The main process's memory per MiB of input, for the worst shapes of document.

What it measures: the daemon's own per-document path (a files source, reading, decoding, tokenizing
with the served model's tokenizer, cutting into parts, building every prompt, admission, result
files) in one process, with an engine that answers at once (the vLLM engine runs in its own processes
and holds no document; its front end holds one request's prompt at a time). Each case runs in a fresh
process: its resident memory (RSS) is sampled every few milliseconds, after a warm-up document, and
the peak above that baseline is divided by the input's size.

Shapes (``--shapes``), each ``--mib`` MiB of UTF-8:

* ``one_line``: English prose with no line break at all (the issue's 5 MiB single-line file);
* ``tiny_lines``: ``ab`` lines (three bytes each: the most tokens and cut points per byte);
* ``one_word``: letters with no space or punctuation (no break for a tokenizer or a cut);
* ``prose``: real documents (the bundled samples) repeated: paragraphs, sections, sentences;
* ``letter_run``: one letter repeated (a list label of a DOCX or HTML page that expands): one token
  a byte with the tiny model's tokenizer, the most a byte-level BPE tokenizer gives;
* ``wide_tiny_lines``, ``wide_letter_run``: ``tiny_lines`` and ``letter_run`` after one character
  outside the BMP, so that Python holds the text at four bytes a character.

``--concurrent N`` adds a case with N documents of the worst shape (``tiny_lines``) at once, with
the configured ``limits.max_inflight_bytes`` and with ``--budget-mib`` (where the code has the
setting), to show what the byte budget bounds.

    .venv/bin/python -m bench.memory [--model DIR] [--mib 5] [--json FILE]
    .venv/bin/python -m bench.memory --code /path/to/other/checkout --label before ...

``--code`` measures another checkout's daemon (e.g. before a change); the cases use only what both
have. Without ``--model`` the tiny model is built into a temporary folder (offline, about 30 s).

``--flood FORMATS`` (docx, html, pdf, text, markdown, wide_text) measures a flood instead: ``--flood-docs``
small inputs of each format at once, through the real sources (``--transports``: the folder source
on an inbox holding them all, and the Kafka source on a topic holding them all, on a noida-db broker
this script starts), with the configured extraction (sandboxed workers: not in the measured process)
and ``limits.max_inflight_bytes`` of ``--budget-mib``. ``--flood-shape`` picks the inputs
(``tests/expanding_inputs.py``):

* ``hostile``: issue 36's files: a 1.6 KB DOCX of 12 M letters, 10 KB of HTML of 15.4 M, a 21 KB PDF
  of 7.6 M; for text and Markdown, ``--flood-text-mib`` of ``ab`` lines (text cannot expand), and
  for ``wide_text`` of one letter repeated after a character outside the BMP (the most memory a
  byte of text costs);
* ``capped``: inputs of the same kinds whose text is ``--flood-text-mib`` (default just under 1 MiB,
  ``extract.expansion_floor_bytes``): accepted by the expansion cap, so only the byte budget bounds
  them.

    .venv/bin/python -m bench.memory --flood docx,html,pdf,text,markdown --flood-shape capped \
        --transports folder,kafka --flood-docs 32 --budget-mib 8 [--code /tmp/base --label before]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.lib import REPO
from bench.lib.results import write_result

MIB = 1024 * 1024
SHAPES = ("one_line", "tiny_lines", "one_word", "prose", "letter_run", "wide_tiny_lines", "wide_letter_run")


# -- inputs ------------------------------------------------------------------------------------------


def make_input(shape: str, size: int, samples: Path) -> bytes:
    """``size`` bytes of the ``shape`` (see the module's doc)."""
    texts = [path.read_text(encoding="utf-8") for path in sorted(samples.glob("*.txt"))]
    if shape == "one_line":
        unit = " ".join(" ".join(text.split()) for text in texts).encode() + b" "
    elif shape == "tiny_lines":
        unit = b"ab\n"
    elif shape == "one_word":
        unit = b"".join(word.encode() for text in texts for word in text.split() if word.isalpha())
    elif shape == "prose":
        unit = "\n\n\n".join(texts).encode() + b"\n\n\n"
    elif shape == "letter_run":
        unit = b"A"
    elif shape in ("wide_tiny_lines", "wide_letter_run"):
        body = b"ab\n" * (size // 3 + 1) if shape == "wide_tiny_lines" else b"A" * size
        data = "\U0001f600\n".encode() + body
        return data[:size].rstrip(b"\n ") + b"."
    else:
        raise ValueError(f"unknown shape {shape!r}")
    data = unit * (size // len(unit) + 1)
    return data[:size].rstrip(b"\n ") + b"."


# -- the measured process -------------------------------------------------------------------------


def rss_mib() -> float:
    """This process's resident memory now."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / MIB


def max_rss_mib() -> float:
    """This process's highest resident memory so far."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Sampler(threading.Thread):
    """Samples RSS every ``period`` seconds until stopped; the peak is kept."""

    def __init__(self, period: float = 0.005) -> None:
        super().__init__(daemon=True)
        self.period = period
        self.peak = rss_mib()
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.is_set():
            self.peak = max(self.peak, rss_mib())
            time.sleep(self.period)

    def stop(self) -> float:
        self._done.set()
        self.join()
        return self.peak


def tokenizer_loader() -> Any:
    """The measured checkout's ``load_tokenizer`` (it moved modules; ``--code`` may be older)."""
    try:
        from daemon.models.files import load_tokenizer
    except ImportError:
        from daemon.engine.vllm_engine import load_tokenizer  # type: ignore[attr-defined,no-redef]
    return load_tokenizer


def instant_engine_class() -> Any:
    """An engine that answers every request at once with a short summary (the engine's memory is
    not measured), made from the measured checkout's types."""
    from daemon.contracts import Generation, Sampling

    class InstantEngine:
        is_running = False
        kv_cache_tokens: int | None = None
        start_seconds: float | None = 0.0

        async def start(self) -> None:
            self.is_running = True

        async def stop(self) -> None:
            self.is_running = False

        async def generate(
            self,
            prompt_ids: list[int],
            sampling: Sampling,
            request_id: str,
            *,
            on_prefilled: Callable[[], None] | None = None,
            priority: int = 0,
        ) -> Generation:
            await asyncio.sleep(0)
            if on_prefilled is not None:
                on_prefilled()
            return Generation("A short summary of this part.", len(prompt_ids), 8, 0, "stop", 0.0, 0.0)

    return InstantEngine


def child(args: argparse.Namespace) -> None:
    """Run one case in this process and print its figures as one JSON line."""
    # A deliberate path edit: the case imports ``daemon`` from the checkout measured (``bench``
    # itself was imported from this one already).
    sys.path.insert(0, args.code)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from daemon.config import Config, EngineConfig, LimitsConfig, MetricsConfig, ServiceConfig, SummaryConfig
    from daemon.folder.files import FilesSource
    from daemon.folder.sink import FolderSink
    from daemon.ops.logging import configure_logging
    from daemon.service import Service

    configure_logging("warning", "json")
    InstantEngine = instant_engine_class()

    limits: dict[str, Any] = {"max_input_bytes": 64 * MIB}
    if args.budget_mib and "max_inflight_bytes" in LimitsConfig.model_fields:
        limits["max_inflight_bytes"] = int(args.budget_mib * MIB)
    config = Config(
        engine=EngineConfig(model=str(args.model), max_model_len=4096),
        summary=SummaryConfig(max_summary_tokens=64, max_parts=100_000),
        limits=LimitsConfig(**limits),
        metrics=MetricsConfig(enabled=False),
        service=ServiceConfig(max_inflight_documents=max(2, args.docs), status_interval_seconds=3600),
    )
    tokenizer = tokenizer_loader()(config.engine)
    work = Path(args.work)
    outbox = work / "out"

    async def run(paths: list[Path]) -> None:
        source = FilesSource(paths, FolderSink(outbox, outbox), max_input_bytes=64 * MIB)
        service = Service(config, engine=InstantEngine(), tokenizer=tokenizer, sources=[source])
        await service.run()

    warm = work / "warm-up.txt"
    warm.write_bytes(make_input("prose", 64 * 1024, Path(args.samples)))
    asyncio.run(run([warm]))
    data = make_input(args.shape, int(args.mib * MIB), Path(args.samples))
    paths = []
    for index in range(args.docs):
        path = work / f"{args.shape}-{index}.txt"
        path.write_bytes(data)
        paths.append(path)
    del data
    gc.collect()
    baseline, lifetime_peak = rss_mib(), max_rss_mib()
    sampler = Sampler()
    sampler.start()
    began = time.monotonic()
    asyncio.run(run(paths))
    seconds = time.monotonic() - began
    peak = sampler.stop()
    if max_rss_mib() > lifetime_peak:  # the run set a new lifetime peak: that one is exact
        peak = max(peak, max_rss_mib())
    records = [json.loads(path.read_text()) for path in sorted(outbox.glob(f"{args.shape}-*.json"))]
    outcomes = sorted(record.get("reason", "ok") for record in records)
    tokens = sum(record.get("document_tokens", 0) for record in records)
    input_mib = args.mib * args.docs
    print(
        json.dumps(
            {
                "shape": args.shape,
                "docs": args.docs,
                "input_mib": input_mib,
                "budget_mib": args.budget_mib if "max_inflight_bytes" in LimitsConfig.model_fields else None,
                "baseline_mib": round(baseline, 1),
                "peak_mib": round(peak, 1),
                "peak_over_baseline_mib": round(peak - baseline, 1),
                "mib_per_input_mib": round((peak - baseline) / input_mib, 1),
                "seconds": round(seconds, 1),
                "document_tokens": tokens,
                "outcomes": outcomes,
            }
        )
    )


# -- floods ---------------------------------------------------------------------------------------

FLOOD_FORMATS = ("docx", "html", "pdf", "text", "markdown", "wide_text")
SUFFIXES = {
    "docx": ".docx",
    "html": ".html",
    "pdf": ".pdf",
    "text": ".txt",
    "markdown": ".md",
    "wide_text": ".txt",
}


def flood_input(fmt: str, shape: str, text_bytes: int) -> bytes:
    """One input of the flood (see the module's doc), from ``tests/expanding_inputs.py``."""
    from tests import expanding_inputs as inputs

    if shape == "hostile" and fmt == "docx":
        return inputs.docx_list_label(12_000_000)
    if shape == "hostile" and fmt == "html":
        return inputs.html_ordered_list(400)
    if shape == "hostile" and fmt == "pdf":
        return inputs.pdf_shared_stream(1999)
    return inputs.expanding(fmt, text_bytes)


def flood_child(args: argparse.Namespace) -> None:
    """Run one flood in this process (a warm-up document first, through the same source) and print
    its figures as one JSON line."""
    # A deliberate path edit: the case imports ``daemon`` from the checkout measured (``bench``
    # itself was imported from this one already).
    sys.path.insert(0, args.code)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from daemon.config import Config
    from daemon.ops.logging import configure_logging
    from daemon.service import Service

    configure_logging("warning", "json")
    engine_class = instant_engine_class()
    work = Path(args.work)
    staged = sorted((work / "staged").iterdir())
    input_bytes = staged[0].stat().st_size if staged else 0
    data: dict[str, Any] = {
        "engine": {"model": str(args.model), "max_model_len": 4096},
        "summary": {"max_summary_tokens": 64, "max_parts": 100_000},
        "limits": {"max_inflight_bytes": int(args.budget_mib * MIB)},
        "metrics": {"enabled": False},
        "service": {"status_interval_seconds": 3600, "drain_seconds": 600},
    }
    if args.transport == "folder":
        folders = {name: str(work / name) for name in ("inbox", "outbox", "done", "failed")}
        data["sources"] = {"folder": {**folders, "settle_seconds": 0.1}}
    else:
        topics = json.loads(args.topics)
        data["sources"] = {
            "kafka": {
                "bootstrap_servers": args.bootstrap,
                "input_topics": [topics["input"]],
                "group_id": topics["group"],
                "output_topic": topics["output"],
                "dead_letter_topic": topics["dead"],
                "commit_interval_seconds": 0.2,
                "auto_offset_reset": "earliest",
            }
        }
    config = Config.model_validate(data)
    tokenizer = tokenizer_loader()(config.engine)
    outcomes: list[str] = []

    async def run(expected: int) -> None:
        service: Any = None

        def finished(item: Any, outcome: str) -> None:
            outcomes.append(outcome)
            if len(outcomes) >= expected:
                service.request_stop()

        service = Service(config, engine=engine_class(), tokenizer=tokenizer, on_finished=finished)
        await service.run()

    async def put(paths: list[Path]) -> None:
        if args.transport == "folder":
            for path in paths:
                path.rename(work / "inbox" / path.name)
            return
        from aiokafka import AIOKafkaProducer

        producer = AIOKafkaProducer(bootstrap_servers=args.bootstrap, acks="all", max_request_size=8 << 20)
        await producer.start()
        try:
            for path in paths:
                await producer.send_and_wait(topics["input"], value=path.read_bytes(), key=path.name.encode())
        finally:
            await producer.stop()

    (work / "inbox").mkdir(exist_ok=True)
    warm = work / "warm-up.txt"
    warm.write_bytes(make_input("prose", 64 * 1024, Path(args.samples)))
    asyncio.run(put([warm]))
    asyncio.run(run(1))
    outcomes.clear()
    asyncio.run(put(staged))
    gc.collect()
    baseline, lifetime_peak = rss_mib(), max_rss_mib()
    sampler = Sampler()
    sampler.start()
    began = time.monotonic()
    asyncio.run(run(len(staged)))
    seconds = time.monotonic() - began
    peak = sampler.stop()
    if max_rss_mib() > lifetime_peak:
        peak = max(peak, max_rss_mib())
    counts: dict[str, int] = {}
    for outcome in outcomes:
        counts[outcome] = counts.get(outcome, 0) + 1
    print(
        json.dumps(
            {
                "transport": args.transport,
                "format": args.format,
                "shape": args.flood_shape,
                "docs": len(staged),
                "input_bytes_each": input_bytes,
                "budget_mib": args.budget_mib,
                "baseline_mib": round(baseline, 1),
                "peak_mib": round(peak, 1),
                "peak_over_baseline_mib": round(peak - baseline, 1),
                "seconds": round(seconds, 1),
                "outcomes": counts,
            }
        )
    )


def run_flood(args: argparse.Namespace, model: Path, transport: str, fmt: str, broker: Any) -> Any:
    """One flood in a fresh process; its figures."""
    samples = Path(args.code) / "daemon" / "samples"
    data = flood_input(fmt, args.flood_shape, int(args.flood_text_mib * MIB))
    with tempfile.TemporaryDirectory(prefix="docsumd-flood-") as work:
        staged = Path(work) / "staged"
        staged.mkdir()
        for index in range(args.flood_docs):
            (staged / f"flood-{index:04d}{SUFFIXES[fmt]}").write_bytes(data)
        command = [
            sys.executable,
            "-m",
            "bench.memory",
            "--flood-child",
            "--transport",
            transport,
            "--format",
            fmt,
        ]
        command += ["--flood-shape", args.flood_shape, "--budget-mib", str(args.budget_mib)]
        command += ["--model", str(model), "--code", args.code, "--work", work, "--samples", str(samples)]
        if broker is not None:
            from tests.kafka_broker import Topics, create_topics

            topics = Topics()
            asyncio.run(create_topics(broker.bootstrap, [topics.input, topics.output, topics.dead]))
            command += ["--bootstrap", broker.bootstrap, "--topics", json.dumps(vars(topics))]
        done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=3600, cwd=REPO)
        if done.returncode != 0:
            raise RuntimeError(f"{transport} {fmt} failed ({done.returncode}):\n{done.stderr[-4000:]}")
        result = json.loads(done.stdout.strip().splitlines()[-1])
        print(json.dumps(result), flush=True)
        return result


def run_floods(args: argparse.Namespace, model: Path) -> list[Any]:
    """Every flood asked for, a Kafka broker started for the Kafka ones."""
    formats = [fmt for fmt in args.flood.split(",") if fmt]
    transports = [transport for transport in args.transports.split(",") if transport]
    results = []
    broker = None
    with tempfile.TemporaryDirectory(prefix="docsumd-broker-") as broker_dir:
        if "kafka" in transports:
            from tests.e2e.harness import free_port
            from tests.kafka_broker import KafkaBroker

            broker = KafkaBroker(port=free_port(), data_dir=Path(broker_dir))
            broker.up()
        try:
            for transport in transports:
                for fmt in formats:
                    results.append(
                        run_flood(args, model, transport, fmt, broker if transport == "kafka" else None)
                    )
        finally:
            if broker is not None:
                broker.down()
    return results


# -- the driver -----------------------------------------------------------------------------------


def run_case(
    args: argparse.Namespace, model: Path, shape: str, *, mib: float, docs: int, budget: float
) -> Any:
    """Run one case in a fresh process; its figures."""
    samples = Path(args.code) / "daemon" / "samples"
    with tempfile.TemporaryDirectory(prefix="docsumd-memory-") as work:
        command = [sys.executable, "-m", "bench.memory", "--child", "--shape", shape, "--mib", str(mib)]
        command += ["--docs", str(docs), "--budget-mib", str(budget), "--model", str(model)]
        command += ["--code", args.code, "--work", work, "--samples", str(samples)]
        done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=3600, cwd=REPO)
        if done.returncode != 0:
            raise RuntimeError(f"{shape} failed ({done.returncode}):\n{done.stderr[-4000:]}")
        result = json.loads(done.stdout.strip().splitlines()[-1])
        print(json.dumps(result), flush=True)
        return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated (default: all)")
    parser.add_argument("--mib", type=float, default=5.0, help="size of each document in MiB (default 5)")
    parser.add_argument("--concurrent", type=int, default=0, help="also N tiny_lines documents at once")
    parser.add_argument("--concurrent-mib", type=float, default=2.0, help="their size in MiB (default 2)")
    parser.add_argument("--budget-mib", type=float, default=4.0, help="the budget of the bounded case")
    parser.add_argument("--model", help="the tiny model's folder (default: build one)")
    parser.add_argument("--code", default=str(REPO), help="the checkout whose daemon is measured")
    parser.add_argument("--label", default="", help="a name for this run in the JSON")
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--flood", default="", help="measure floods of these formats instead (see above)")
    parser.add_argument("--transports", default="folder,kafka", help="the floods' sources (default: both)")
    parser.add_argument("--flood-docs", type=int, default=32, help="inputs per flood (default 32)")
    parser.add_argument("--flood-shape", default="capped", choices=("capped", "hostile"))
    parser.add_argument(
        "--flood-text-mib", type=float, default=0.99, help="text of each input (default 0.99)"
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--flood-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--transport", help=argparse.SUPPRESS)
    parser.add_argument("--format", help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    parser.add_argument("--topics", help=argparse.SUPPRESS)
    parser.add_argument("--shape", help=argparse.SUPPRESS)
    parser.add_argument("--docs", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    parser.add_argument("--samples", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    if args.flood_child:
        flood_child(args)
        return
    args.code = str(Path(args.code).resolve())
    with tempfile.TemporaryDirectory(prefix="docsumd-model-") as scratch:
        model = args.model
        if model is None:
            from daemon.models.tiny import build_tiny_model

            model = build_tiny_model(Path(scratch) / "tiny")
        if args.flood:
            results = run_floods(args, Path(model))
        else:
            shapes = [shape for shape in args.shapes.split(",") if shape]
            results = [run_case(args, model, shape, mib=args.mib, docs=1, budget=0) for shape in shapes]
            for budget in (0.0, args.budget_mib) if args.concurrent else ():
                many = {"mib": args.concurrent_mib, "docs": args.concurrent, "budget": budget}
                results.append(run_case(args, model, "tiny_lines", **many))
    commit = subprocess.run(
        ["git", "-C", args.code, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    report = {
        "label": args.label,
        "code": args.code,
        "commit": commit,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
        },
        "method": "peak RSS of one process running the daemon's per-document path with an instant engine, "
        "above its baseline after a warm-up document; one fresh process per case"
        + (
            f"; floods: {args.flood_docs} inputs ({args.flood_shape}) at once through the real source, "
            f"extraction in its sandboxed workers, limits.max_inflight_bytes = {args.budget_mib} MiB"
            if args.flood
            else ""
        ),
        "results": results,
    }
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        write_result(args.json, report)


if __name__ == "__main__":
    main()
