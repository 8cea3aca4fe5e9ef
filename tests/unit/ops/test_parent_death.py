"""A process that armed its parent-death signal dies the moment its parent does (``kill -9``
included), exits at once if the parent was gone before it armed, and dies with the *thread* that
started it: the rule :class:`daemon.engine.reaper.ParentThread` exists for."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from daemon.ops import parent_death

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")

REPO = Path(__file__).resolve().parents[3]
ENV = {**os.environ, "PYTHONPATH": str(REPO)}

# A child that arms (or not), says so with its pid, and sleeps.
CHILD = """
import os, sys, time
from daemon.ops.parent_death import die_with_parent
if sys.argv[1] == "arm":
    die_with_parent(int(sys.argv[2]))
print(os.getpid(), flush=True)
time.sleep(60)
"""

# A middle process that starts CHILD (armed for the middle, or not), prints its pid, and sleeps.
MIDDLE = f"""
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", {CHILD!r}, sys.argv[1], str(os.getpid())],
                         stdout=subprocess.PIPE, text=True)
print(child.stdout.readline().strip(), flush=True)
time.sleep(60)
"""


def _gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.02)
    return False


def _grandchild(arm: str) -> tuple[subprocess.Popen[str], int]:
    middle = subprocess.Popen([sys.executable, "-c", MIDDLE, arm], stdout=subprocess.PIPE, text=True, env=ENV)
    assert middle.stdout is not None
    return middle, int(middle.stdout.readline())


@pytest.mark.parametrize("arm", ["arm", "no"])
def test_an_armed_child_dies_with_its_parent_killed_by_sigkill(arm: str) -> None:
    middle, child = _grandchild(arm)
    try:
        middle.kill()
        middle.wait()
        gone = _gone_within(child, 2.0)
        # The control: without the signal the child is orphaned and lives on.
        assert gone is (arm == "arm")
    finally:
        if psutil.pid_exists(child):
            os.kill(child, signal.SIGKILL)


def test_a_child_whose_parent_is_already_gone_exits_at_once() -> None:
    # It expects a parent it does not have: as if that one had died before it armed.
    done = subprocess.run(
        [sys.executable, "-c", CHILD, "arm", "1"], env=ENV, timeout=60, capture_output=True, check=False
    )
    assert done.returncode == parent_death.EXIT_PARENT_GONE
    assert done.stdout == b""


def _armed_child_started_from_this_thread(started: list[subprocess.Popen[str]]) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, "arm", str(os.getpid())], stdout=subprocess.PIPE, text=True, env=ENV
    )
    assert child.stdout is not None
    child.stdout.readline()  # armed
    started.append(child)


def test_an_armed_child_dies_when_the_thread_that_started_it_ends() -> None:
    started: list[subprocess.Popen[str]] = []
    thread = threading.Thread(target=_armed_child_started_from_this_thread, args=(started,))
    thread.start()
    thread.join()
    (child,) = started
    try:
        assert child.wait(timeout=5) == -signal.SIGKILL  # this process lives on: the thread is its parent
    finally:
        child.kill()


def test_prctl_refused_is_an_error() -> None:
    with pytest.raises(OSError, match="Invalid argument"):
        parent_death.prctl(parent_death.PR_SET_PDEATHSIG, 1000)
