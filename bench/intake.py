"""The daemon's intake: how fast a backlog gets from the inbox to the engine.

Under admission control a short document's latency starts with its intake: the light wave of
short documents can end only after the last of them reached the engine. On the H200 the daemon took
in ``compare.py``'s 400 mixed documents at 70-130 per second (4.0-5.8 s for the backlog, read from
the logs of ``bench/results/logs/*_h200_compare_mixed-fp8-384-*``), so the wave's prefill waited for
its documents.

This runs the real service (folder source, reader, tokenizer, summarizer, admission) on the same
workload with an engine that answers at once: no model, so what is measured is everything before the
engine. It reports when each document's first request reached the engine, from the moment the
service was ready. Baseline in the same process: the same documents tokenized one after another by
``tokenize_text`` as the summarizer calls it (character offsets only for a document longer than one
request of the default profile), the intake's largest single piece of work.
``intake_vs_serial_tokenizing`` above 1 means the intake overlaps its work (threads); below 1,
something else serializes it.

    .venv/bin/python -m bench.intake --config bench/configs/h200-qwen7b-dummy-fp8-seqs384.toml \
        --docs .gpu/docs --count 400 --json bench/results/DATE_cpu2_intake.json [--repeat 3] [--hold]

``--hold`` keeps every request in the engine until the whole backlog has reached it, as a real
engine does for seconds: the results are then written after the intake, not in the middle of it
(where their writing takes the same threads and lock). Each pass also reports the light documents
(whose first request admission counts as light under the config) apart: when the first one reached
the engine, their median, and how many were in within a second.

The instant engine is a benchmark's tool, not a test double standing in for vLLM in a test: nothing
here checks summaries.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.lib import REPO
from bench.lib.daemon_pass import folder_pass_config
from bench.lib.results import write_result
from bench.lib.workloads import mixed
from daemon.cli import prepare_process
from daemon.config import Config, load_config
from daemon.contracts import Generation, Sampling
from daemon.engine.admission import admission_limits
from daemon.models.files import load_tokenizer
from daemon.records import parse_request_id
from daemon.summary.chunking import tokenize_text
from daemon.summary.profiles import build_profiles
from daemon.summary.prompts import PromptKind


class InstantEngine:
    """An engine that answers every request at once; records when each document first reached it,
    and its first request's prompt length.

    ``hold_until``: with a count, every request is held until that many documents have reached the
    engine, as a real engine holds a backlog's requests for seconds: the results are then written
    after the intake, not in the middle of it (where they take the same threads and lock).
    """

    def __init__(self, hold_until: int | None = None) -> None:
        self.first_request_at: dict[str, float] = {}
        self.first_prompt_tokens: dict[str, int] = {}
        self._hold_until = hold_until
        self._all_reached = asyncio.Event()
        self._running = False

    @property
    def is_running(self) -> bool:
        return self._running

    @property
    def kv_cache_tokens(self) -> int | None:
        return 4_000_000  # an H200's FP8 KV cache with the 7B shape: admission sizes itself by it

    @property
    def start_seconds(self) -> float | None:
        return 0.0

    async def start(self) -> None:
        self._running = True

    async def stop(self) -> None:
        self._running = False

    async def generate(
        self,
        prompt_token_ids: list[int],
        sampling: Sampling,
        request_id: str,
        *,
        on_prefilled: Callable[[], None] | None = None,
        priority: int = 0,
    ) -> Generation:
        doc_id = parse_request_id(request_id).doc_id
        if doc_id not in self.first_request_at:
            self.first_request_at[doc_id] = time.monotonic()
            self.first_prompt_tokens[doc_id] = len(prompt_token_ids)
        if on_prefilled is not None:
            on_prefilled()
        if self._hold_until is None:
            await asyncio.sleep(0)
        else:
            if len(self.first_request_at) >= self._hold_until:
                self._all_reached.set()
            await self._all_reached.wait()
        return Generation(
            text="A summary.",
            prompt_tokens=len(prompt_token_ids),
            output_tokens=3,
            cached_prompt_tokens=0,
            finish_reason="stop",
            first_token_s=0.0,
            total_s=0.0,
        )


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def _intake_pass(
    config: Config, docs: list[tuple[str, str]], folder: Path, *, hold: bool
) -> dict[str, Any]:
    from daemon.service import Service

    run_config = folder_pass_config(config, docs, folder)
    if hold:  # every document's first request is in the engine at once: admission must let them in
        engine_config = run_config.engine.model_copy(update={"max_num_seqs": 4 * len(docs)})
        run_config = run_config.model_copy(update={"engine": engine_config})
    engine = InstantEngine(hold_until=len(docs) if hold else None)
    all_done = asyncio.Event()
    finished: list[str] = []

    def on_finished(item: Any, outcome: str) -> None:
        finished.append(outcome)
        if len(finished) == len(docs):
            all_done.set()

    service = Service(run_config, engine=engine, on_finished=on_finished)
    task = asyncio.create_task(service.run())
    while not service.ready() and not task.done():  # noqa: ASYNC110 - no event for "ready"
        await asyncio.sleep(0.005)
    ready = time.monotonic()
    waiter = asyncio.create_task(all_done.wait())
    await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    service.request_stop()
    await task
    waiter.cancel()
    reached = {doc: at - ready for doc, at in engine.first_request_at.items()}
    times = list(reached.values())
    light_tokens = admission_limits(
        run_config.admission, run_config.engine, kv_cache_tokens=engine.kv_cache_tokens
    ).light_prompt_tokens
    light = [at for doc, at in reached.items() if engine.first_prompt_tokens[doc] <= light_tokens]
    return {
        "docs_reached_engine": len(reached),
        "outcomes_ok": finished.count("ok"),
        "intake_s": round(max(times), 3),
        "p50_s": round(_percentile(times, 0.5), 3),
        "p90_s": round(_percentile(times, 0.9), 3),
        "docs_per_s": round(len(reached) / max(times), 1),
        "light": {
            "docs": len(light),
            "first_s": round(min(light), 3),
            "p50_s": round(_percentile(light, 0.5), 3),
            "last_s": round(max(light), 3),
            "by_1s": sum(at <= 1.0 for at in light),
        },
    }


def _document_room(config: Config, tokenizer: Any) -> int:
    """The default profile's room for a document in one request: the summarizer reads a document's
    character offsets only beyond it (the baseline does the same work)."""
    profile = build_profiles(config, tokenizer).default
    style = profile.output.style(profile.summary.style)
    return profile.budget.room(PromptKind.DOCUMENT, style, profile.budget.summary_tokens)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", type=Path, default=REPO / "docsumd.toml")
    parser.add_argument("--docs", type=Path, default=REPO.parent / "shared" / "corpus" / "docs")
    parser.add_argument("--count", type=int, default=400)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=3, help="intake passes (the baseline runs before each)")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument(
        "--hold",
        action="store_true",
        help="hold every request until the whole backlog reached the engine (results written after)",
    )
    parser.add_argument(
        "--model", default=None, help="the model folder whose tokenizer to use (default: the config's)"
    )
    args = parser.parse_args()

    config = load_config(args.config)
    if args.model is not None:  # the tokenizer's folder (the engine itself is never built)
        config = config.model_copy(update={"engine": config.engine.model_copy(update={"model": args.model})})
    prepare_process(config)
    tokenizer = load_tokenizer(config.engine)
    paths = sorted(args.docs.glob("*.txt"))
    texts = [(path.name, path.read_text(encoding="utf-8", errors="replace")) for path in paths]
    docs = mixed(texts, tokenizer, args.count, random.Random(args.seed))
    work = Path(tempfile.mkdtemp(prefix="docsumd-intake-"))
    passes: list[dict[str, Any]] = []
    serial: list[float] = []
    tokens = 0
    room = _document_room(config, tokenizer)
    for number in range(args.repeat):
        started = time.perf_counter()
        tokens = sum(len(tokenize_text(tokenizer, text, offsets_beyond=room).ids) for _, text in docs)
        serial.append(time.perf_counter() - started)
        passes.append(asyncio.run(_intake_pass(config, docs, work / f"pass{number}", hold=args.hold)))
        print(f"pass {number}: {passes[-1]}; tokenizing serially {serial[-1]:.2f} s", file=sys.stderr)
    intake = statistics.median(p["intake_s"] for p in passes)
    result = {
        "benchmark": "bench/intake.py",
        "config": str(args.config),
        "hold": args.hold,
        "docs": len(docs),
        "bytes": sum(len(text.encode("utf-8")) for _, text in docs),
        "tokens": tokens,
        "passes": passes,
        "intake_s": intake,
        "docs_per_s": round(len(docs) / intake, 1),
        "serial_tokenizing_s": [round(s, 3) for s in serial],
        "intake_vs_serial_tokenizing": round(statistics.median(serial) / intake, 3),
        "environment": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "machine": platform.node(),
        },
    }
    print(result)
    if args.json is not None:
        write_result(args.json, result, config=args.config, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
