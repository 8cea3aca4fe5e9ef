"""Run the real daemon (real vLLM engine, tiny model) as a subprocess and watch its folders.

The daemon runs in its own process group with its own TMPDIR, so a test can kill everything it
started (as systemd's control group would) and check that no engine process is left behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from daemon.engine.reaper import Processes
from tests.corpus import CORPUS_DIR
from tests.record_schemas import assert_valid

if TYPE_CHECKING:
    from tests.kafka_broker import KafkaBroker, Topics

REPO = Path(__file__).resolve().parents[2]
CORPUS = CORPUS_DIR
MAX_KAFKA_MESSAGE_BYTES = 300_000
"""The Kafka tests' message limit: small enough that an oversized message is cheap to make."""


def free_port() -> int:
    """A TCP port free on loopback right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_for(predicate: Callable[[], bool], timeout: float, what: str, interval: float = 0.2) -> None:
    """Poll ``predicate`` until true; fail with ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def wait_for_progress(
    count: Callable[[], int], target: int, stall: float, what: str, *, interval: float = 1.0
) -> None:
    """Poll ``count`` until it reaches ``target``; fail with ``what`` once it has not grown for ``stall``
    seconds. For a stream of work whose pace depends on the machine's load (a CI machine running other
    engines): a stalled stream fails as fast as on an idle machine, a slow one that moves is not failed."""
    best, moved_at = -1, time.monotonic()
    while True:
        now_count = count()
        if now_count >= target:
            return
        if now_count > best:
            best, moved_at = now_count, time.monotonic()
        elif time.monotonic() - moved_at > stall:
            raise AssertionError(f"no progress for {stall:.0f}s ({best} of {target}) waiting for {what}")
        time.sleep(interval)


@dataclass
class Layout:
    """A daemon's folders and config under one test directory."""

    root: Path
    model: Path
    metrics_port: int

    @property
    def inbox(self) -> Path:
        return self.root / "inbox"

    @property
    def outbox(self) -> Path:
        return self.root / "outbox"

    @property
    def done(self) -> Path:
        return self.root / "done"

    @property
    def failed(self) -> Path:
        return self.root / "failed"

    @property
    def work(self) -> Path:
        """The default work folder, where inputs in flight are (hidden, beside the inbox)."""
        return self.root / ".inbox.docsumd-work"

    @property
    def config(self) -> Path:
        return self.root / "docsumd.toml"

    def write_config(self, **overrides: Any) -> Path:
        """Write a config for the tiny model; ``overrides`` maps "section.key" to a TOML literal."""
        values: dict[str, dict[str, str]] = {
            "engine": {
                "model": json.dumps(str(self.model)),
                "max_model_len": "4096",
                "max_num_seqs": "64",
                "max_num_batched_tokens": "4096",
                "enable_chunked_prefill": "true",
                "enable_prefix_caching": "true",
                "kv_cache_memory_bytes": str(1 << 30),
                "enforce_eager": "true",
            },
            "summary": {"max_summary_tokens": "32", "temperature": "0.3", "top_p": "0.9"},
            "sources.folder": {
                "inbox": '"inbox"',
                "outbox": '"outbox"',
                "done": '"done"',
                "failed": '"failed"',
                "settle_seconds": "0.3",
            },
            "metrics": {"host": '"127.0.0.1"', "port": str(self.metrics_port)},
            "service": {"drain_seconds": "60", "status_interval_seconds": "5"},
            "logging": {"format": '"json"'},
            # Each test's own summary cache: none reuses another's summaries.
            "cache": {"path": json.dumps(str(self.root / "cache" / "summaries.sqlite3"))},
        }
        for dotted, literal in overrides.items():
            section, key = dotted.rsplit(".", 1)
            values.setdefault(section, {})[key] = literal
        lines = []
        for section, pairs in values.items():
            lines.append(f"[{section}]")
            lines.extend(f"{key} = {literal}" for key, literal in pairs.items())
            lines.append("")
        self.config.write_text("\n".join(lines), encoding="utf-8")
        return self.config

    def names(self, folder: Path, suffix: str = "") -> set[str]:
        """File names in ``folder`` ending in ``suffix`` (hidden temp files excluded)."""
        if not folder.exists():
            return set()
        return {p.name for p in folder.iterdir() if p.name.endswith(suffix) and not p.name.startswith(".")}

    def inputs_in(self, folder: Path) -> set[str]:
        """Input files (not result or error records) in ``folder``."""
        return {n for n in self.names(folder) if not n.endswith((".summary.json", ".error.json"))}

    def inputs_in_work(self) -> set[str]:
        """Inputs claimed into the work folder (in flight, or left by a crash), by their names."""
        if not self.work.exists():
            return set()
        return {
            path.name
            for claim in self.work.iterdir()
            for path in claim.iterdir()
            if not path.name.endswith(".options.json")
        }

    def pending(self) -> set[str]:
        """Inputs not yet acknowledged: waiting in the inbox or claimed into its work folder."""
        return self.inputs_in(self.inbox) | self.inputs_in_work()

    def result(self, name: str) -> dict[str, Any]:
        """The result record of ``name``, checked against its published JSON Schema."""
        data: dict[str, Any] = json.loads((self.outbox / f"{name}.summary.json").read_text(encoding="utf-8"))
        assert_valid(data, "result")
        return data

    def error(self, name: str) -> dict[str, Any]:
        """The failure record of ``name``, checked against its published JSON Schema."""
        data: dict[str, Any] = json.loads((self.failed / f"{name}.error.json").read_text(encoding="utf-8"))
        assert_valid(data, "failure")
        return data


def run_cli(layout: Layout, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``python -m daemon ARGS`` once, offline, in ``layout``'s folder, with this checkout's package;
    its output captured as text, its exit code not checked."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "daemon", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=layout.root,
        check=False,
    )


def drop_file(folder: Path, name: str, data: bytes) -> None:
    """Put a file into ``folder`` the recommended way: write a hidden temp file, then rename."""
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".incoming-{uuid.uuid4().hex}"  # not .NAME.incoming: NAME may have 255 bytes
    tmp.write_bytes(data)
    os.replace(tmp, folder / name)


class DaemonProcess:
    """``docsumd run`` as a subprocess in its own process group."""

    def __init__(self, layout: Layout, log_path: Path) -> None:
        self.layout = layout
        self.log_path = log_path
        # Short, outside the test's folder: vLLM puts its IPC sockets here, and a socket path must fit
        # 107 bytes (pytest's per-worker folders under xdist made the test folder's too long).
        self.tmpdir = Path(tempfile.mkdtemp(prefix="docsumd-e2e-"))
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, extra_env: dict[str, str] | None = None) -> DaemonProcess:
        env = {
            **os.environ,
            "TMPDIR": str(self.tmpdir),
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "PYTHONUNBUFFERED": "1",
            # The daemon under test is this checkout's, whatever the venv has installed (a worktree
            # shares its venv with the main checkout).
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
            **(extra_env or {}),
        }
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "daemon", "run", "--config", str(self.layout.config)],
            cwd=self.layout.root,
            env=env,
            stdin=subprocess.DEVNULL,  # as under systemd
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # own process group: the test can clean up everything it started
        )
        log.close()
        return self

    @property
    def pgid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def http_get(self, path: str) -> tuple[int, str]:
        url = f"http://127.0.0.1:{self.layout.metrics_port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return int(response.status), response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()
        except OSError:
            return 0, ""

    def wait_ready(self, timeout: float = 240) -> None:
        def ready() -> bool:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"daemon exited with {self.proc.returncode} before ready:\n{self.log_tail()}"
                )
            return self.http_get("/readyz")[0] == 200

        wait_for(ready, timeout, "the daemon to become ready")

    def signal(self, signum: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(signum)

    def wait_exit(self, timeout: float = 120) -> int:
        assert self.proc is not None
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill_group()
            raise AssertionError(f"daemon did not exit within {timeout}s:\n{self.log_tail()}") from None

    def kill_group(self) -> None:
        """SIGKILL every process of the daemon's group (what a crash plus systemd's cleanup does)."""
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pgid, signal.SIGKILL)
            if self.proc is not None:
                self.proc.wait(timeout=30)
            # A killed process stays visible for a moment while the kernel tears it down.
            if not self.group_processes() or time.monotonic() > deadline:
                return
            time.sleep(0.1)

    def leftover_processes(self, grace: float = 90.0) -> list[str]:
        """Processes of the daemon's group still alive ``grace`` seconds after it exited. Python's
        multiprocessing resource tracker outlives its parent by a moment (it cleans up after it), longer
        on a loaded machine; so does a killed vLLM worker freeing its memory (seen running, state R,
        35 s after its SIGKILL on a loaded 2-core machine). A process still there after the grace is
        a real leak."""
        deadline = time.monotonic() + grace
        while (alive := self.group_processes()) and time.monotonic() < deadline:
            time.sleep(0.2)
        return alive

    def group_processes(self) -> list[str]:
        """Descriptions of processes still alive in the daemon's process group (zombies excluded)."""
        alive = []
        for status in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = status.read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            state, pgrp = fields[0], int(fields[2])
            if pgrp == self.pgid and state != "Z":
                alive.append(f"{status.parent.name}:{_read(status.parent / 'comm')}:{state}")
        return alive

    def stop_log(self) -> str:
        """The daemon's log lines on stopping and on processes left or killed, and what each process
        of its group is waiting in: what a failed no-process-left check needs."""
        words = ("stop", "outlived", "killed", "fatal", "exiting")
        lines = [line for line in self.log_tail(400).splitlines() if any(word in line for word in words)]
        pids = {int(described.split(":", 1)[0]) for described in self.group_processes()}
        lines += Processes(pids).describe()  # pid:name:state:wchan
        return "\n".join(lines)

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def log_events(self) -> list[dict[str, Any]]:
        """The daemon's JSON log lines (other lines, e.g. from engine subprocesses, skipped)."""
        events = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                try:
                    events.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
        return events


def configure_kafka(layout: Layout, broker: KafkaBroker, topics: Topics, **extra: str) -> None:
    """Write ``layout``'s config with a Kafka source on ``broker``'s ``topics``: fast commits and lag
    updates, a short session, and messages up to :data:`MAX_KAFKA_MESSAGE_BYTES`; ``extra`` keys win."""
    layout.write_config(
        **{
            "sources.kafka.bootstrap_servers": json.dumps(broker.bootstrap),
            "sources.kafka.input_topics": json.dumps([topics.input]),
            "sources.kafka.group_id": json.dumps(topics.group),
            "sources.kafka.output_topic": json.dumps(topics.output),
            "sources.kafka.dead_letter_topic": json.dumps(topics.dead),
            "sources.kafka.max_message_bytes": str(MAX_KAFKA_MESSAGE_BYTES),
            "sources.kafka.commit_interval_seconds": "0.2",
            "sources.kafka.lag_interval_seconds": "1",
            "sources.kafka.session_timeout_ms": "6000",
            "sources.kafka.heartbeat_interval_ms": "1000",
            **extra,
        }
    )


def _read(path: Path) -> str:
    """A small /proc file's text, or "?" once its process is gone."""
    try:
        return path.read_text().strip()
    except OSError:
        return "?"
