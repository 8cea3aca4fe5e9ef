"""Signals the daemon does not stop on, a ``kill -9`` that must not orphan the engine, and SIGTERM
while the engine starts.

Real engine, tiny model. One daemon serves the first test from start to ``kill -9`` (each engine start
costs 20-40 s here); the second test's daemon is stopped seconds into its start.
"""

from __future__ import annotations

import functools
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from daemon.engine.reaper import descendants
from tests.e2e.harness import DaemonProcess, Layout, drop_file, wait_for
from tests.e2e.kill9 import GONE_WITHIN_S, kill_9

pytestmark = pytest.mark.engine


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _engine_processes(daemon: DaemonProcess) -> dict[int, str]:
    """The daemon's descendants except multiprocessing's resource tracker: EngineCore and its workers."""
    assert daemon.proc is not None
    found = {pid: _cmdline(pid) for pid in descendants(daemon.proc.pid)}
    return {pid: line for pid, line in found.items() if "resource_tracker" not in line}


def _events(daemon: DaemonProcess, name: str) -> list[dict[str, object]]:
    return [e for e in daemon.log_events() if str(e.get("event", "")).startswith(name)]


def _logged(daemon: DaemonProcess, name: str) -> bool:
    return bool(_events(daemon, name))


def test_hup_usr1_usr2_leave_it_running_and_kill_9_leaves_no_engine_process(
    layout: Layout, start_daemon: Callable[..., DaemonProcess], corpus: Path
) -> None:
    daemon = start_daemon()
    daemon.wait_ready()
    assert daemon.proc is not None
    engine = _engine_processes(daemon)
    assert any("EngineCore" in line for line in engine.values()), engine
    everyone = descendants(daemon.proc.pid)  # the resource tracker too

    # To the whole process group, as `kill -HUP -PGID` (or a closing terminal) would: EngineCore,
    # its workers and the resource tracker get it as well as the main process.
    for signum, event in (
        (signal.SIGHUP, "SIGHUP ignored"),
        (signal.SIGUSR1, "status (SIGUSR1)"),
        (signal.SIGUSR2, "SIGUSR2 ignored"),
    ):
        os.killpg(daemon.pgid, signum)
        wait_for(functools.partial(_logged, daemon, event), 15, f"the log line {event!r}")
        time.sleep(0.5)
        assert daemon.proc.poll() is None, f"{signum.name} ended the daemon:\n{daemon.log_tail()}"
        dead = sorted(pid for pid in everyone if not _alive(pid))
        assert not dead, f"{signum.name} ended {dead} ({engine})"
    status = _events(daemon, "status (SIGUSR1)")[0]
    assert status["ready"] is True
    assert status["engine_running"] is True
    assert {"inflight", "backlog", "succeeded", "failed"} <= set(status)
    assert daemon.http_get("/healthz")[0] == 200

    # It still summarizes.
    text = (corpus / "docs" / "legal-cal-ms-rl.txt").read_bytes()[:6000]
    drop_file(layout.inbox, "after-signals.txt", text)
    wait_for(lambda: "after-signals.txt" in layout.inputs_in(layout.done), 120, "a summary after the signals")
    assert layout.result("after-signals.txt")["summary_tokens"] > 0

    # kill -9 of the main process alone: nothing it started may outlive it (tests/e2e/test_kill_9.py
    # does the same at other moments).
    outcome = kill_9(daemon, "idle", [])
    assert set(everyone) <= set(outcome.processes), (everyone, outcome)
    assert not outcome.left, f"left behind by kill -9: {outcome}"
    assert outcome.slowest_s <= GONE_WITHIN_S, outcome
    print(f"kill -9: {len(outcome.processes)} processes gone within {outcome.slowest_s:.2f} s of the kill")


def test_sigterm_during_engine_start_exits_promptly_with_0(
    layout: Layout, start_daemon: Callable[..., DaemonProcess]
) -> None:
    daemon = start_daemon()
    # Stop once EngineCore runs (the build thread is then waiting for its handshake, the longest part).
    wait_for(
        lambda: any("EngineCore" in line for line in _engine_processes(daemon).values()),
        120,
        "EngineCore to start",
        interval=0.1,
    )
    started = time.monotonic()
    daemon.signal(signal.SIGTERM)
    code = daemon.wait_exit(timeout=60)
    took = time.monotonic() - started
    assert code == 0, daemon.log_tail()
    assert _events(daemon, "engine start abandoned"), daemon.log_tail()
    assert not _events(daemon, "engine ready"), "the start was not abandoned: it finished first"
    assert took < 30, f"stopping during the engine start took {took:.1f} s"
    assert daemon.leftover_processes() == [], daemon.stop_log()
    print(f"SIGTERM during the engine start: exit 0 after {took:.1f} s")
