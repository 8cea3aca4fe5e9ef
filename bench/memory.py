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
* ``prose``: real documents (the bundled samples) repeated: paragraphs, sections, sentences.

``--concurrent N`` adds a case with N documents of the worst shape (``tiny_lines``) at once, with
the configured ``limits.max_inflight_bytes`` and with ``--budget-mib`` (where the code has the
setting), to show what the byte budget bounds.

    .venv/bin/python bench/memory.py [--model DIR] [--mib 5] [--json bench/results/memory.json]
    .venv/bin/python bench/memory.py --code /path/to/other/checkout --label before ...

``--code`` measures another checkout's daemon (e.g. before a change); the cases use only what both
have. Without ``--model`` the tiny model is built into a temporary folder (offline, about 30 s).
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

REPO = Path(__file__).resolve().parents[1]
MIB = 1024 * 1024
SHAPES = ("one_line", "tiny_lines", "one_word", "prose")


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


def child(args: argparse.Namespace) -> None:
    """Run one case in this process and print its figures as one JSON line."""
    sys.path.insert(0, args.code)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from daemon.config import Config, EngineConfig, LimitsConfig, MetricsConfig, ServiceConfig, SummaryConfig
    from daemon.contracts import Generation, Sampling
    from daemon.folder.files import FilesSource
    from daemon.folder.sink import FolderSink
    from daemon.models.files import load_tokenizer
    from daemon.ops.logging import configure_logging
    from daemon.service import Service

    configure_logging("warning", "json")

    class InstantEngine:
        """Answers every request at once with a short summary (the engine's memory is not measured)."""

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
    tokenizer = load_tokenizer(config.engine)
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


# -- the driver -----------------------------------------------------------------------------------


def run_case(
    args: argparse.Namespace, model: Path, shape: str, *, mib: float, docs: int, budget: float
) -> Any:
    """Run one case in a fresh process; its figures."""
    samples = Path(args.code) / "daemon" / "samples"
    with tempfile.TemporaryDirectory(prefix="docsumd-memory-") as work:
        command = [sys.executable, __file__, "--child", "--shape", shape, "--mib", str(mib)]
        command += ["--docs", str(docs), "--budget-mib", str(budget), "--model", str(model)]
        command += ["--code", args.code, "--work", work, "--samples", str(samples)]
        done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=3600)
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
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--shape", help=argparse.SUPPRESS)
    parser.add_argument("--docs", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    parser.add_argument("--samples", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    args.code = str(Path(args.code).resolve())
    with tempfile.TemporaryDirectory(prefix="docsumd-model-") as scratch:
        model = args.model
        if model is None:
            sys.path.insert(0, str(REPO))
            from daemon.models.tiny import build_tiny_model

            model = build_tiny_model(Path(scratch) / "tiny")
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
        "above its baseline after a warm-up document; one fresh process per case",
        "results": results,
    }
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
