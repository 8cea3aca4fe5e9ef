"""The inbox watcher: which files in the inbox are there, and which of them have settled.

Discovery: a scan at start (oldest first), watchfiles' events after it, and a periodic rescan as a
safety net for missed events. Settling: a file is ready once its size and modification time have not
changed for ``settle_seconds`` (a file already old at first look is ready at once); a name that is
gone, or a folder, is forgotten, so that a later event or rescan finds it again.

The watcher only names files: claiming them, reading them and the folders' health are the
:class:`~daemon.folder.source.FolderSource`'s. Time comes from an injected monotonic ``clock`` (and
``wall_clock`` for the files' ages), so that settling can be tested without waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import heapq
import itertools
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from pathlib import Path
from stat import S_ISDIR
from typing import Final, TypeVar

from daemon.config import FolderSourceConfig
from daemon.folder.names import is_candidate_name
from daemon.fs.blocking_io import BlockingIO
from daemon.fs.dirs import Dir
from daemon.lifecycle import Lifecycle
from daemon.ops.fd_exhaustion import is_fd_exhaustion, note_fd_exhaustion, retry_on_fd_exhaustion
from daemon.ops.logging import get_logger

__all__ = ["LOOP_SLICE", "SETTLE_BATCH", "InboxWatcher"]

log = get_logger(__name__)

T = TypeVar("T")

SCAN_RETRY_SECONDS: Final = 1.0
"""After a rescan that ran out of file descriptors, the next try comes this soon (not a whole period)."""
WATCH_RETRY_SECONDS: Final = 0.5
"""A failed inbox watcher is started again after this pause, doubling while it keeps failing..."""
WATCH_RETRY_MAX_SECONDS: Final = 10.0
"""...up to this long."""
LOOP_SLICE: Final = 2048
"""Names handled on the event loop between two yields to it: an inbox of 100,000 files must not hold
the loop (and /healthz) for the whole scan (bench/RESULTS.md, the backlog section)."""
SETTLE_BATCH: Final = 4096
"""Names looked at (statted) per settling pass, oldest first."""

_Stat = tuple[int, int, int]  # (mode, size, mtime_ns) of an lstat


async def _in_slices(items: Iterable[T]) -> AsyncIterator[T]:
    """``items``, giving the event loop a turn after every :data:`LOOP_SLICE` of them."""
    for index, item in enumerate(items, start=1):
        yield item
        if index % LOOP_SLICE == 0:
            await asyncio.sleep(0)


def _popped_in_order(heap: list[tuple[int, str]]) -> Iterator[tuple[int, str]]:
    """Empty ``heap`` smallest first, one item per step (no single long sort)."""
    while heap:
        yield heapq.heappop(heap)


async def _always_usable() -> bool:
    return True


class InboxWatcher(Lifecycle):
    """Finds the candidate files in the inbox and hands out their names once settled, oldest first.
    ``start()`` scans the inbox and starts watching it; ``start()``/``stop()`` are idempotent."""

    def __init__(
        self,
        config: FolderSourceConfig,
        inbox: Dir,
        io: BlockingIO,
        *,
        folders_usable: Callable[[], Awaitable[bool]] = _always_usable,
        on_found: Callable[[], None] = lambda: None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        """``inbox`` is the open inbox folder, looked at on ``io``. A scan is skipped while
        ``folders_usable()`` is false; ``on_found()`` is called for every new name. ``clock`` gives the
        monotonic time, ``wall_clock`` the time files' mtimes are compared with."""
        self.config = config
        self.inbox = inbox
        self._io = io
        self._folders_usable = folders_usable
        self._on_found = on_found
        self._clock = clock
        self._wall_clock = wall_clock
        self._ready: deque[str] = deque()
        self._settling: dict[str, tuple[int, int, float]] = {}  # name -> (size, mtime_ns, last change)
        self._known: set[str] = set()  # queued or settling in the inbox: never handed out twice at once
        self._retry_at: dict[str, float] = {}  # names that could not be claimed -> when to try again
        self._stop_watching = asyncio.Event()
        self._last_scan = 0.0
        self.task: asyncio.Task[None] | None = None
        """The watch task while started (owned: its failure is logged)."""

    @property
    def settling(self) -> int:
        """Names seen and not yet settled."""
        return len(self._settling)

    @property
    def ready(self) -> int:
        """Settled names not yet handed out."""
        return len(self._ready)

    @property
    def pending(self) -> int:
        """Names seen and not yet handed out."""
        return len(self._ready) + len(self._settling)

    async def start(self) -> None:
        """Scan the inbox, then watch it."""
        if self.task is not None:
            return
        self._stop_watching.clear()
        await self.scan()
        self.task = asyncio.create_task(self._watch(), name="folder-watch")
        self.task.add_done_callback(self._watcher_done)

    async def stop(self) -> None:
        """Stop watching. Names already found stay found (a later start scans again)."""
        if self.task is None:
            return
        self._stop_watching.set()
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):  # its failure was logged
            await self.task
        self.task = None

    async def next_ready(self, limit: int) -> list[str]:
        """Up to ``limit`` settled names, oldest first (a rescan or a settling pass first when due).
        A name handed out is no longer watched until :meth:`forget` (the caller claims it)."""
        if self._clock() - self._last_scan >= self.config.rescan_seconds:
            await self.scan()
        if not self._ready:
            await self._promote_settled()
        return [self._ready.popleft() for _ in range(min(limit, len(self._ready)))]

    def forget(self, names: Iterable[str]) -> None:
        """``names`` left the inbox (claimed, or gone): a new file of such a name is a new input."""
        for name in names:
            self._known.discard(name)
            self._retry_at.pop(name, None)

    def retry_later(self, name: str) -> None:
        """``name`` could not be claimed: it stays in the inbox and is found again at the next rescan
        after ``rescan_seconds``, not before."""
        self._retry_at[name] = self._clock() + self.config.rescan_seconds

    def check_in(self) -> float:
        """Seconds until settling or a rescan may have something new."""
        if self._settling:
            return min(0.25, max(0.05, self.config.settle_seconds / 4))
        return self.config.rescan_seconds

    # -- discovery -------------------------------------------------------------------------------

    async def scan(self) -> None:
        """Add every unknown candidate file in the inbox, oldest first.

        Out of file descriptors (the folder cannot be opened), it logs that once in a while and is
        tried again after :data:`SCAN_RETRY_SECONDS`; file-system events keep arriving meanwhile.
        """
        self._last_scan = self._clock()
        if not await self._folders_usable():
            return
        try:
            found = await self._io.run(self._list_inbox, time_limit=self.config.io_timeout_seconds)
        except (OSError, TimeoutError) as exc:
            if is_fd_exhaustion(exc):
                note_fd_exhaustion("inbox rescan", exc)
                self._last_scan -= max(0.0, self.config.rescan_seconds - SCAN_RETRY_SECONDS)
            else:
                log.error("cannot list the inbox", inbox=str(self.config.inbox), error=str(exc))
            return
        # Oldest first, taken from a heap a slice at a time: sorting 100,000 names in one call holds
        # the GIL (and so the event loop, even from a thread) for a noticeable time.
        async for _, name in _in_slices(_popped_in_order(found)):
            self.add(name)

    def _list_inbox(self) -> list[tuple[int, str]]:
        """``(mtime_ns, name)`` of every entry in the inbox with a document's name but folders (links,
        FIFOs, sockets and devices are claimed to be refused as ``not_regular``), as a heap (I/O
        thread)."""
        found: list[tuple[int, str]] = []
        with self.inbox.scandir() as entries:
            for entry in entries:
                # Known names are skipped here, in the thread: a rescan of a 100,000-file backlog
                # then stats and queues only what is new. (A set lookup while the event loop adds
                # to the set is safe under the GIL; a name added meanwhile is skipped by add.)
                if entry.name in self._known or not is_candidate_name(entry.name):
                    continue
                with contextlib.suppress(FileNotFoundError):
                    if not entry.is_dir(follow_symlinks=False):
                        found.append((entry.stat(follow_symlinks=False).st_mtime_ns, entry.name))
        heapq.heapify(found)
        return found

    def add(self, name: str) -> None:
        """A name reported in the inbox (by an event or a scan): settled from now on, unless it is
        known already, not a document's name, or waiting for its retry."""
        if name in self._known or not is_candidate_name(name):
            return
        if self._retry_at.get(name, 0.0) > self._clock():
            return
        self._retry_at.pop(name, None)
        self._known.add(name)
        self._settling[name] = (-1, -1, self._clock())
        self._on_found()

    async def _watch(self) -> None:
        """Watch the inbox until stopped. A watcher that fails is started again after a rescan:
        watchfiles cannot report a name that is not UTF-8 and gives up on the whole batch instead, so
        one such file would otherwise leave the inbox to the periodic rescans."""
        failures = 0
        while not self._stop_watching.is_set():
            started = self._clock()
            try:
                await self._watch_once()
            except Exception as exc:
                failures = 1 if self._clock() - started > WATCH_RETRY_MAX_SECONDS else failures + 1
                pause = min(WATCH_RETRY_MAX_SECONDS, WATCH_RETRY_SECONDS * 2 ** (failures - 1))
                # Cut: the error may quote a 255-byte name, escaped four times over.
                log.warning("inbox watcher failed; rescanning, then watching again", error=repr(exc)[:300])
                await asyncio.sleep(pause)
                await self.scan()
            else:
                return

    async def _watch_once(self) -> None:
        from watchfiles import Change, awatch

        first_batch = True
        async for changes in awatch(
            self.config.inbox,
            stop_event=self._stop_watching,
            recursive=False,
            debounce=200,
            step=50,
            rust_timeout=1000,
            yield_on_timeout=True,
            ignore_permission_denied=True,
        ):
            for change, raw_path in changes:
                path = Path(raw_path)
                if change != Change.deleted and path.parent == self.config.inbox:
                    self.add(path.name)
            # The first batch (at most rust_timeout after start) comes once the watch is in place: scan
            # again then, for files created between the start-up scan and the watch.
            if first_batch or self._clock() - self._last_scan >= self.config.rescan_seconds:
                first_batch = False
                await self.scan()

    def _watcher_done(self, task: asyncio.Task[None]) -> None:
        # The watcher is owned here; its failure must be seen. Periodic rescans still find new files.
        if not task.cancelled() and task.exception() is not None:
            log.error("inbox watcher failed; falling back to periodic rescans", error=repr(task.exception()))

    # -- settling --------------------------------------------------------------------------------

    async def _promote_settled(self) -> None:
        """Move files whose size and mtime held still for settle_seconds to the ready queue."""
        if not self._settling:
            return
        # The oldest SETTLE_BATCH names only: statting a 100,000-file backlog before the first one
        # is handed out would delay the first result by seconds. Names still settling go to the back
        # below, so files being written at the front cannot hide the ones behind them.
        names = list(itertools.islice(self._settling, SETTLE_BATCH))
        try:
            stats = await self._io_call(self.lstat_all, names)
        except TimeoutError:
            log.error("looking at the inbox's files timed out", inbox=str(self.config.inbox))
            return
        now = self._clock()
        wall_now = self._wall_clock()
        async for name, found in _in_slices(zip(names, stats, strict=True)):
            if name not in self._settling:  # gone while the loop had its turn
                continue
            if found is None or S_ISDIR(found[0]):
                # Gone, or a folder (never a document): forgotten, so that a later event for the name
                # (a regular file taking it) or a rescan finds it again. Links, FIFOs, sockets and
                # devices settle like files, to be claimed and refused as not_regular.
                del self._settling[name]
                self._known.discard(name)
                continue
            _, size, mtime_ns = found
            if (size, mtime_ns) != self._settling[name][:2]:
                # Changed since last look (or first look). An old file is settled already.
                age = wall_now - mtime_ns / 1e9
                first_look = self._settling[name][0] == -1
                self._settling[name] = (size, mtime_ns, now - max(age, 0) if first_look else now)
            if now - self._settling[name][2] >= self.config.settle_seconds:
                del self._settling[name]
                self._ready.append(name)
            else:
                self._settling[name] = self._settling.pop(name)

    def lstat_all(self, names: list[str]) -> list[_Stat | None]:
        """``(mode, size, mtime_ns)`` of each inbox entry, None for one that is gone (I/O thread)."""
        stats: list[_Stat | None] = []
        for name in names:
            try:
                found = self.inbox.lstat(name)
            except OSError:
                stats.append(None)
            else:
                stats.append((found.st_mode, found.st_size, found.st_mtime_ns))
        return stats

    async def _io_call(self, function: Callable[..., T], *args: object) -> T:
        """``function(*args)`` on the I/O threads, within ``io_timeout_seconds``, waiting out a lack
        of file descriptors (:mod:`daemon.ops.fd_exhaustion`)."""
        return await retry_on_fd_exhaustion(
            functools.partial(function, *args),
            where="folder I/O",
            run=lambda call: self._io.run(call, time_limit=self.config.io_timeout_seconds),
        )
