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
from pathlib import Path

import pytest

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
