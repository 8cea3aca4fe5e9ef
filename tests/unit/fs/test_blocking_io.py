"""Unit tests for daemon.fs.blocking_io: results, errors, timeouts, stuck threads, and exit not waiting.

Stuck calls are simulated with threading events that the test releases at its end; every wait is
bounded.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from daemon.fs.blocking_io import BlockingIO


@pytest.fixture
def release() -> Iterator[threading.Event]:
    """Set at teardown, so no test leaves a thread blocked for good."""
    event = threading.Event()
    yield event
    event.set()


async def test_runs_a_call_and_returns_its_result() -> None:
    pool = BlockingIO("test", workers=2)
    assert await pool.run(sum, [1, 2, 3], time_limit=5) == 6


async def test_an_exception_reaches_the_caller() -> None:
    pool = BlockingIO("test", workers=2)
    with pytest.raises(FileNotFoundError):
        await pool.run(os.lstat, "/nonexistent/docsumd", time_limit=5)


async def test_a_stuck_call_times_out_and_others_still_run(release: threading.Event) -> None:
    pool = BlockingIO("test", workers=1)
    started = time.monotonic()
    with pytest.raises(TimeoutError, match=r"did not finish within 0\.2 s"):
        await pool.run(release.wait, 30, time_limit=0.2)
    assert time.monotonic() - started < 5
    assert pool.stuck == 1
    # Its thread was given up on and replaced: the pool still serves calls.
    assert await pool.run(sum, [2, 2], time_limit=5) == 4
    release.set()
    for _ in range(200):  # the stuck thread comes back
        if pool.stuck == 0:
            break
        await asyncio.sleep(0.05)
    assert pool.stuck == 0


async def test_at_most_max_stuck_threads_are_given_up_on(release: threading.Event) -> None:
    pool = BlockingIO("test", workers=1, max_stuck=2)
    for _ in range(3):
        with pytest.raises(TimeoutError):
            await pool.run(release.wait, 30, time_limit=0.1)
    assert pool.stuck == 2  # the third stuck call got no replacement thread
    with pytest.raises(TimeoutError):  # queued behind the stuck calls: times out, does not hang
        await pool.run(sum, [1], time_limit=0.2)


async def test_a_call_given_up_before_it_started_never_runs(release: threading.Event) -> None:
    pool = BlockingIO("test", workers=1, max_stuck=0)
    ran: list[str] = []
    blocker = pool.submit(release.wait, 30)
    waiting = pool.submit(ran.append, "ran")
    with pytest.raises(TimeoutError):
        await pool.wait(waiting, 0.1)
    release.set()
    await pool.wait(blocker, 5)
    await asyncio.sleep(0.1)
    assert ran == []
    assert waiting.future.cancelled()


def test_a_stuck_call_does_not_hold_up_the_process_exit() -> None:
    # asyncio.to_thread's threads are joined at exit; these are not.
    script = (
        "import asyncio, threading\n"
        "from daemon.fs.blocking_io import BlockingIO\n"
        "async def main():\n"
        "    pool = BlockingIO('exit', workers=1)\n"
        "    try:\n"
        "        await pool.run(threading.Event().wait, time_limit=0.2)\n"
        "    except TimeoutError:\n"
        "        print('timed out')\n"
        "asyncio.run(main())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "timed out" in done.stdout


async def test_a_cancellation_that_arrives_as_the_call_finishes_is_not_lost() -> None:
    # asyncio.wait_for (Python 3.11) returns the result then and drops the cancellation: a source's
    # generator cancelled at that moment would run on forever.
    pool = BlockingIO("test", workers=2)
    for _ in range(50):
        job = pool.submit(int, "1")
        task = asyncio.create_task(pool.wait(job, 5))
        await asyncio.sleep(0)
        while not job.future.done():  # noqa: ASYNC110 - the same tick as the result, on purpose
            await asyncio.sleep(0)
        if not task.cancel():
            continue  # it finished before the cancellation: nothing to lose
        with pytest.raises(asyncio.CancelledError):
            await task
