"""The engine's processes known by id and start time: alive until they exit, killable, never confused
with a later process that reuses an id."""

from __future__ import annotations

import subprocess
import sys

from daemon.engine.reaper import Processes


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
