"""Sources' doubles: :class:`IdleSource`, a source with nothing to give, and :class:`Collector`, the
consumer side of a real source (what the service would be), for tests that wait for its items."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

from daemon.contracts import Source
from daemon.work import WorkItem

WAIT = 10.0  # upper bound for anything that should happen "soon": a hang fails instead of blocking CI
PROBE_PREFIX = "probe-"  # the files :meth:`Collector.wait_until_watching` drops, never handed to a test


class IdleSource:
    """A source with nothing to give, ever (a quiet inbox)."""

    backlog = 0

    async def start(self) -> None:
        """Nothing to open."""

    async def stop(self) -> None:
        """Nothing to close."""

    async def items(self) -> AsyncIterator[WorkItem]:
        """Wait forever."""
        await asyncio.Event().wait()
        yield  # type: ignore[misc]  # pragma: no cover - never reached


class Collector:
    """Pulls a source's work items into a queue in the background, each with the monotonic time it was
    handed out: a bounded wait for the next item then times out on the queue, and does not cancel (and
    so end) the source's generator. :meth:`close` stops pulling.
    """

    def __init__(self, source: Source) -> None:
        self.source = source
        self.queue: asyncio.Queue[tuple[WorkItem, float]] = asyncio.Queue()
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        async for item in self.source.items():
            self.queue.put_nowait((item, time.monotonic()))

    async def next_timed(self, wait: float = WAIT) -> tuple[WorkItem, float]:
        """The next item that is not a watcher probe, and when it was handed out."""
        while True:
            item, at = await asyncio.wait_for(self.queue.get(), wait)
            if not item.id.startswith(PROBE_PREFIX):
                return item, at

    async def next(self, wait: float = WAIT) -> WorkItem:
        """The next item that is not a watcher probe."""
        return (await self.next_timed(wait))[0]

    async def none_within(self, seconds: float) -> bool:
        """True if no item at all is handed out within ``seconds``."""
        try:
            await asyncio.wait_for(self.queue.get(), seconds)
        except TimeoutError:
            return True
        return False

    async def wait_until_watching(self, inbox: Path) -> None:
        """For a folder source: drop probe files into ``inbox`` until one is handed out; from then on
        the watcher sees new files."""
        deadline = time.monotonic() + WAIT
        for number in range(1_000_000):
            if time.monotonic() > deadline:
                raise AssertionError(f"the inbox watcher did not report a new file within {WAIT} s")
            _write_settled(inbox / f"{PROBE_PREFIX}{number}.txt")
            try:
                item, _ = await asyncio.wait_for(self.queue.get(), 0.3)
            except TimeoutError:
                continue
            assert item.id.startswith(PROBE_PREFIX)
            return

    async def close(self) -> None:
        """Stop pulling (cancels the background task)."""
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


def _write_settled(path: Path, *, age: float = 600.0) -> None:
    # Ten minutes old: settled at first look, so the probe is handed out as soon as it is seen.
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"some text\n")
    stamp = time.time() - age
    os.utime(path, (stamp, stamp))
