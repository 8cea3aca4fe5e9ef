"""Backlog scale: the daemon started on an inbox of N files, or a topic with N messages of lag.

For each source (``folder``, ``kafka``) and backlog size N (default 1,000, 10,000 and 100,000 small
documents), the real daemon runs as its own process (``python -m daemon run``, the engine and model
of ``--config``) for ``--seconds`` after it is ready, while this script:

* polls ``/healthz`` every 100 ms (latency of each answer: the event loop's responsiveness);
* samples the daemon process's RSS every 0.5 s (the front end, where a backlog would pile up; the
  engine's processes are reported apart);
* reads the daemon's log for its readiness and for every document summarized.

It reports per run: seconds to ready, seconds from ready to the first result, documents per second
after that, RSS at ready and at most, and the health-check latencies. Flat RSS, health answers well
under 100 ms and the same time to first result and rate at every N mean the backlog costs nothing
but disk or broker space.

    .venv/bin/python -m bench.backlog [--sizes 1000,10000,100000] [--sources folder,kafka] [--json FILE]

Kafka runs start a local noida-db broker (as the Kafka tests do).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil

from bench.lib import REPO
from bench.lib.results import write_result

DOCUMENT = (
    "Document {n}. The committee met on Tuesday to review the budget for the coming year. "
    "It agreed to fund the new library wing, to postpone the road repairs until spring, and to "
    "ask the council for a report on the water supply before the next meeting.\n"
)


@dataclass
class RunResult:
    """What one daemon run on one backlog showed."""

    source: str
    backlog: int
    ready_s: float | None = None
    first_result_s: float | None = None
    results: int = 0
    docs_per_s: float | None = None
    rss_mib_at_ready: float | None = None
    rss_mib_max: float = 0.0
    engine_rss_mib_max: float = 0.0
    health: list[float] = field(default_factory=list)
    health_before_ready: list[float] = field(default_factory=list)
    health_failures: int = 0
    ready_wall: float | None = None  # time.time() at ready
    slow_answers: list[tuple[float, float]] = field(default_factory=list)  # (time.time(), seconds)

    def as_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "backlog": self.backlog,
            "ready_s": self.ready_s,
            "first_result_after_ready_s": self.first_result_s,
            "results": self.results,
            "docs_per_s": self.docs_per_s,
            "rss_mib_at_ready": self.rss_mib_at_ready,
            "rss_mib_max": round(self.rss_mib_max, 1),
            "engine_rss_mib_max": round(self.engine_rss_mib_max, 1),
            "healthz_after_ready": {**_latencies(self.health), "failed": self.health_failures},
            "healthz_engine_starting": _latencies(self.health_before_ready),
            # When the answers over 100 ms came (seconds after ready) and how long they took (ms):
            # lined up with the daemon's log, they show what held its event loop.
            "healthz_slow_after_ready": [
                [round(at - (self.ready_wall or at), 1), round(1000 * seconds, 1)]
                for at, seconds in self.slow_answers
            ],
        }


def _latencies(values: list[float]) -> dict[str, Any]:
    """Health-check latencies in ms: how many, p50, p99, max, and how many over 100 ms."""
    latencies = sorted(values)
    if not latencies:
        return {"checks": 0}
    return {
        "checks": len(latencies),
        "p50_ms": round(1000 * statistics.median(latencies), 1),
        "p99_ms": round(1000 * latencies[int(0.99 * (len(latencies) - 1))], 1),
        "max_ms": round(1000 * latencies[-1], 1),
        "over_100ms": sum(1 for latency in latencies if latency > 0.1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--sources", default="folder,kafka")
    parser.add_argument(
        "--config", type=Path, default=REPO / "docsumd.toml", help="engine and model settings"
    )
    parser.add_argument("--seconds", type=float, default=60.0, help="run time after the daemon is ready")
    parser.add_argument("--summary-tokens", type=int, default=32, help="short summaries: more documents/s")
    parser.add_argument("--work", type=Path, default=None, help="scratch folder (default: a temporary one)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    work = args.work or Path(tempfile.mkdtemp(prefix="docsumd-backlog-"))
    work.mkdir(parents=True, exist_ok=True)
    runs: list[dict[str, Any]] = []
    result = {"benchmark": "bench/backlog.py", "runs": runs, "environment": _environment(args)}
    broker = None
    try:
        for source in args.sources.split(","):
            if source == "kafka" and broker is None:
                broker = _start_broker(work / "broker")
            for size in sizes:
                run = _run(source, size, args, work / f"{source}-{size}", broker)
                runs.append(run.as_dict())
                print(json.dumps(runs[-1]), file=sys.stderr)
                if args.json is not None:
                    args.json.parent.mkdir(parents=True, exist_ok=True)
                    write_result(args.json, result, config=args.config)
    finally:
        if broker is not None:
            broker.down()
    print(json.dumps(result, indent=2))
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


# -- backlogs --------------------------------------------------------------------------------------


def _fill_inbox(inbox: Path, size: int) -> None:
    """``size`` small documents, an hour old (settled), oldest first by name."""
    inbox.mkdir(parents=True, exist_ok=True)
    old = time.time() - 3600
    for number in range(size):
        path = inbox / f"doc-{number:06d}.txt"
        path.write_text(DOCUMENT.format(n=number), encoding="utf-8")
        os.utime(path, (old + number / 1000, old + number / 1000))


def _start_broker(folder: Path) -> Any:
    from tests.e2e.harness import free_port
    from tests.kafka_broker import KafkaBroker

    broker = KafkaBroker(port=free_port(), data_dir=folder)
    broker.up()
    return broker


async def _fill_topic(bootstrap: str, topic: str, size: int) -> None:
    """``size`` documents as JSON messages, sent in batches (send_and_wait one by one takes minutes)."""
    from aiokafka import AIOKafkaProducer

    from tests.kafka_broker import create_topics

    await create_topics(bootstrap, [topic], partitions=4)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=20)
    await producer.start()
    try:
        for start in range(0, size, 2000):
            sent = [
                await producer.send(
                    topic,
                    key=f"doc-{number:06d}".encode(),
                    value=json.dumps({"id": f"doc-{number:06d}", "text": DOCUMENT.format(n=number)}).encode(),
                )
                for number in range(start, min(size, start + 2000))
            ]
            await asyncio.gather(*sent)
    finally:
        await producer.stop()


# -- one run ---------------------------------------------------------------------------------------


def _run(source: str, size: int, args: argparse.Namespace, folder: Path, broker: Any) -> RunResult:
    from tests.e2e.harness import free_port

    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    config = _config_text(args, folder, port, source, broker)
    print(f"{source} {size}: filling the backlog", file=sys.stderr)
    if source == "folder":
        _fill_inbox(folder / "inbox", size)
    else:
        asyncio.run(_fill_topic(broker.bootstrap, f"backlog-{size}", size))
    (folder / "docsumd.toml").write_text(config, encoding="utf-8")
    result = RunResult(source=source, backlog=size)
    log_path = folder / "daemon.log"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with log_path.open("w", encoding="utf-8") as log_file:
        started = time.monotonic()
        process = subprocess.Popen(
            [sys.executable, "-m", "daemon", "run", "--config", str(folder / "docsumd.toml")],
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=REPO,
        )
        probe = _Probe(process.pid, port, result)
        probe.start()
        try:
            _wait_ready(port, process, started, result, probe)
            deadline = time.monotonic() + args.seconds
            while time.monotonic() < deadline and process.poll() is None:
                time.sleep(0.5)
        finally:
            probe.stop()
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=120)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    _read_log(log_path, result)
    shutil.rmtree(folder / "inbox", ignore_errors=True)
    return result


def _config_text(args: argparse.Namespace, folder: Path, port: int, source: str, broker: Any) -> str:
    base = args.config.resolve()
    text = base.read_text(encoding="utf-8")
    engine = text[text.index("[engine]") : text.index("[summary]")]
    model = (base.parent / _toml_value(engine, "model")).resolve()
    engine = engine.replace(f'"{_toml_value(engine, "model")}"', f'"{model}"', 1)
    lines = [
        engine,
        f"[summary]\nmax_summary_tokens = {args.summary_tokens}\n",
        f'[metrics]\nhost = "127.0.0.1"\nport = {port}\n',
        '[logging]\nformat = "json"\n',
    ]
    if source == "folder":
        lines.append(
            f'[sources.folder]\ninbox = "{folder / "inbox"}"\noutbox = "{folder / "outbox"}"\n'
            f'done = "{folder / "done"}"\nfailed = "{folder / "failed"}"\n'
        )
    else:
        size = folder.name.rpartition("-")[2]
        lines.append(
            f'[sources.kafka]\nbootstrap_servers = "{broker.bootstrap}"\ninput_topics = ["backlog-{size}"]\n'
            f'group_id = "backlog-{size}"\noutput_topic = "backlog-out-{size}"\n'
            f'dead_letter_topic = "backlog-dead-{size}"\n'
        )
    return "\n".join(lines)


def _toml_value(section: str, key: str) -> str:
    for line in section.splitlines():
        name, _, value = line.partition("=")
        if name.strip() == key:
            return value.split("#")[0].strip().strip('"')
    raise KeyError(key)


def _wait_ready(
    port: int, process: subprocess.Popen[bytes], started: float, result: RunResult, probe: _Probe
) -> None:
    while process.poll() is None:
        with contextlib.suppress(OSError, http.client.HTTPException):
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            connection.request("GET", "/readyz")
            if connection.getresponse().status == 200:
                result.ready_s = round(time.monotonic() - started, 2)
                result.ready_wall = time.time()
                result.rss_mib_at_ready = round(probe.rss_now() / 2**20, 1)
                return
        time.sleep(0.2)
    raise SystemExit(f"the daemon exited with {process.returncode} before it was ready")


def _read_log(path: Path, result: RunResult) -> None:
    ready_at = None
    finished: list[float] = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if not line.startswith('{"'):
            continue
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            event = record.get("event")
            if event not in ("docsumd ready", "document summarized"):
                continue
            at = datetime.fromisoformat(record["timestamp"].replace("Z", "+00:00")).timestamp()
            if event == "docsumd ready":
                ready_at = at
            else:
                finished.append(at)
    result.results = len(finished)
    if ready_at is not None and finished:
        result.first_result_s = round(min(finished) - ready_at, 2)
        span = max(finished) - min(finished)
        if len(finished) > 1 and span > 0:
            result.docs_per_s = round((len(finished) - 1) / span, 2)


class _Probe:
    """Health checks every 100 ms and RSS samples every 0.5 s, in threads of this process."""

    def __init__(self, pid: int, port: int, result: RunResult) -> None:
        self.process = psutil.Process(pid)
        self.port = port
        self.result = result
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._health, daemon=True),
            threading.Thread(target=self._rss, daemon=True),
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()

    def rss_now(self) -> int:
        with contextlib.suppress(psutil.Error):
            return int(self.process.memory_info().rss)
        return 0

    def _rss(self) -> None:
        while not self._stop.wait(0.5):
            self.result.rss_mib_max = max(self.result.rss_mib_max, self.rss_now() / 2**20)
            engine = 0
            with contextlib.suppress(psutil.Error):
                for child in self.process.children(recursive=True):
                    with contextlib.suppress(psutil.Error):
                        engine += child.memory_info().rss
            self.result.engine_rss_mib_max = max(self.result.engine_rss_mib_max, engine / 2**20)

    def _health(self) -> None:
        ready = False
        while not self._stop.wait(0.1):
            started = time.monotonic()
            try:
                connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
                connection.request("GET", "/healthz")
                status = connection.getresponse().status
            except (OSError, http.client.HTTPException):
                if ready:
                    self.result.health_failures += 1
                continue
            ready = ready or status == 200
            if ready:
                after = self.result.ready_s is not None
                latency = time.monotonic() - started
                (self.result.health if after else self.result.health_before_ready).append(latency)
                if after and latency > 0.1:
                    self.result.slow_answers.append((time.time(), latency))


def _environment(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "host_cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
        "config": str(args.config),
        "seconds_after_ready": args.seconds,
        "summary_tokens": args.summary_tokens,
        "python": platform.python_version(),
    }


if __name__ == "__main__":
    raise SystemExit(main())
