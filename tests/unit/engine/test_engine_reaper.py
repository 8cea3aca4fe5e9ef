"""The engine's processes known by id and start time: alive until they exit, killable, never confused
with a later process that reuses an id; the target that arms their parent-death signal as they start;
the thread they are started from, which they die with."""

from __future__ import annotations

import asyncio
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from structlog.typing import EventDict

from daemon.engine.reaper import ParentThread, Processes, WatchedTarget
from daemon.ops.parent_death import EXIT_PARENT_GONE

REPO = Path(__file__).resolve().parents[2]


def test_processes_are_alive_until_killed_and_then_gone() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        processes = Processes({child.pid})
        assert processes.alive() == {child.pid}
        assert processes.kill() == {child.pid}
        child.wait(10)
        assert processes.alive() == set()
        assert processes.kill() == set()
    finally:
        child.kill()
        child.wait()


def test_with_descendants_takes_in_what_they_started_since() -> None:
    # A child that starts a grandchild after it was recorded: the grandchild is killed with it.
    child = subprocess.Popen(
        [sys.executable, "-c", GRANDCHILD], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert child.stdout is not None
        grandchild = int(child.stdout.readline())
        recorded = Processes({child.pid})
        assert recorded.alive() == {child.pid}
        tree = recorded.with_descendants()
        assert tree.alive() == {child.pid, grandchild}
        assert [entry.split(":")[0] for entry in Processes({grandchild}).describe()] == [str(grandchild)]
        assert tree.kill() == {child.pid, grandchild}
        child.wait(10)
        _wait_until(lambda: not tree.alive())
        assert tree.describe() == []
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()


GRANDCHILD = """
import subprocess, sys, time
grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
print(grandchild.pid, flush=True)
time.sleep(60)
"""


def _wait_until(condition: Callable[[], bool], seconds: float = 10.0) -> None:
    end = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.05)


def test_a_process_that_was_gone_when_recorded_is_never_alive() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert Processes({child.pid}).alive() == set()


# -- the engine's processes die with the thread that started them ------------------------------------------

ARMED = """
import ctypes, os, pickle, sys
target = pickle.loads(sys.stdin.buffer.read())  # a WatchedTarget, pickled by the test
armed = ctypes.c_int()
ctypes.CDLL(None).prctl(2, ctypes.byref(armed), 0, 0, 0)  # PR_GET_PDEATHSIG
print(type(target).__name__, target.key, armed.value, flush=True)
"""


def _unpickle_in_child(data: bytes, *, through_shell: bool = False) -> subprocess.CompletedProcess[bytes]:
    command = [sys.executable, "-c", ARMED]
    if through_shell:  # a parent other than the one that pickled it: the shell (a command follows: no exec)
        command = ["sh", "-c", '"$0" -c "$1"; exit $?', sys.executable, ARMED]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(command, input=data, capture_output=True, timeout=60, env=env, check=False)


def test_a_watched_target_arms_the_signal_in_the_child_as_it_is_unpickled() -> None:
    done = _unpickle_in_child(pickle.dumps(WatchedTarget("worker")))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [b"WatchedTarget", b"worker", str(int(signal.SIGKILL)).encode()]


def test_a_watched_target_unpickled_under_another_parent_exits_at_once() -> None:
    done = _unpickle_in_child(pickle.dumps(WatchedTarget("engine_core")), through_shell=True)
    assert done.returncode == EXIT_PARENT_GONE, done.stderr
    assert done.stdout == b""


def test_a_watched_target_is_for_engine_processes_only() -> None:
    with pytest.raises(ValueError, match="no engine process target"):
        WatchedTarget("other")


CHILD = """
import os, sys, time
from daemon.ops.parent_death import die_with_parent
die_with_parent(int(sys.argv[1]))
print("armed", flush=True)
time.sleep(60)
"""


def _start_armed_child() -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(os.getpid())], stdout=subprocess.PIPE, text=True, env=env
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "armed"
    return child


async def test_processes_started_from_a_parent_thread_live_until_it_is_closed() -> None:
    parent = ParentThread("test-parent")
    child = await parent.run(_start_armed_child)
    try:
        assert await parent.run(lambda: threading.current_thread().name) == "test-parent"
        await asyncio.sleep(0.5)
        assert child.poll() is None  # the jobs are done, the thread lives on: so does the child
        parent.close()
        assert child.wait(timeout=5) == -signal.SIGKILL
        assert not parent.alive
    finally:
        child.kill()
        child.wait()


async def test_a_parent_thread_hands_back_exceptions_and_refuses_jobs_once_closed() -> None:
    parent = ParentThread("test-parent")

    def fail() -> None:
        raise KeyError("boom")

    with pytest.raises(KeyError, match="boom"):
        await parent.run(fail)
    assert await parent.run(lambda: 42) == 42
    parent.close()
    parent.close()
    with pytest.raises(RuntimeError, match="closed"):
        parent.run(lambda: 1)


# -- a stop waits for the engine's processes, kills what outlives the wait, and waits for it to go -----------


def test_a_stop_kills_what_outlives_the_wait_and_waits_until_it_is_gone(
    monkeypatch: pytest.MonkeyPatch, logs: list[EventDict]
) -> None:
    from daemon.engine import vllm_engine

    monkeypatch.setattr(vllm_engine, "STOP_PROCESSES_SECONDS", 0.3)
    stubborn = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        processes = Processes({stubborn.pid})
        asyncio.run(vllm_engine._reap(processes))
        # Gone before the stop returns: dead, its exit seen (a zombie until this test waits on it).
        assert processes.alive() == set()
        assert stubborn.wait(1) == -signal.SIGKILL
    finally:
        stubborn.kill()
        stubborn.wait()
    assert [(e["event"], e["pids"]) for e in logs if "outlived" in e["event"]] == [
        ("engine processes outlived the shutdown: killed", [stubborn.pid])
    ]
    assert not [e for e in logs if e["log_level"] == "error"]


def test_a_stop_kills_nothing_when_the_processes_exit_by_themselves(logs: list[EventDict]) -> None:
    from daemon.engine import vllm_engine

    quick = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
    processes = Processes({quick.pid})
    reaping = threading.Thread(target=quick.wait)  # reaped as it exits, as EngineCore reaps its workers
    reaping.start()
    asyncio.run(vllm_engine._reap(processes))
    reaping.join()
    assert quick.returncode == 0
    assert not [e for e in logs if "outlived" in e["event"]]
