"""The watched-folder source.

Every regular file directly in ``inbox`` is a document; its name is the document id. Files already
there at start are processed first (oldest first), then new ones as watchfiles reports them, with a
periodic rescan as a safety net for missed events.

Half-written inputs are never read:

* hidden files (``.NAME``) and names ending in ``.tmp``, ``.part``, ``.partial``, ``.crdownload``
  or ``.swp`` are ignored, so a writer that creates ``.NAME`` or ``NAME.tmp`` and renames it into
  place (the recommended convention, atomic on one file system) is always safe;
* for writers that write in place, a file is read only once its size and modification time have
  not changed for ``settle_seconds``.

Per-document options: a sidecar ``NAME.options.json`` (for ``NAME.txt`` either ``NAME.txt.options.json``
or ``NAME.options.json``; the first wins if both exist) holds a JSON object of summary options
(:mod:`daemon.options`). Sidecars are never documents themselves. Write the sidecar before the
document: it is read when the document is. It moves with its document to ``done/`` or ``failed/``
(only the one that applied; two documents sharing a stem need full-name sidecars).

Acknowledgement: after the sink wrote the result, the input moves to ``done/NAME``; after the
failure record is written, it moves to ``failed/NAME``. A crash before that leaves the input in
``inbox``, where the next start finds it again.

Backpressure: the source hands out a file only when the service asks for the next item, so a large
backlog waits on disk, not in memory.

Out of file descriptors (``EMFILE``/``ENFILE``), the rescan, reads, writes and moves wait and try
again, logging it once in a while (:mod:`daemon.fd_exhaustion`); nothing fails or exits for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections import deque
from collections.abc import AsyncIterator
from pathlib import Path
from stat import S_ISREG
from typing import Final

from daemon.config import FolderSourceConfig
from daemon.documents import read_input_file
from daemon.durable import sync_move
from daemon.errors import DocumentError, SinkError
from daemon.fd_exhaustion import is_fd_exhaustion, note_fd_exhaustion, retry_on_fd_exhaustion
from daemon.lifecycle import Lifecycle
from daemon.logging import get_logger
from daemon.records import Record
from daemon.sinks.folder import FolderSink
from daemon.work import WorkItem

log = get_logger(__name__)

IGNORED_SUFFIXES: Final = (".tmp", ".part", ".partial", ".crdownload", ".swp")
OPTIONS_SUFFIX: Final = ".options.json"
MAX_OPTIONS_BYTES: Final = 64 * 1024
SOURCE_NAME: Final = "folder"
SCAN_RETRY_SECONDS: Final = 1.0
"""After a rescan that ran out of file descriptors, the next try comes this soon (not a whole period)."""


def is_candidate_name(name: str) -> bool:
    """Whether a file name in the inbox is a document (not hidden, not a temporary file, not a sidecar)."""
    return not name.startswith(".") and not name.endswith((*IGNORED_SUFFIXES, OPTIONS_SUFFIX))


def sidecar_names(name: str) -> list[str]:
    """Names an options sidecar of document ``name`` may have, in order of precedence."""
    names = [name + OPTIONS_SUFFIX]
    stem, dot, _ = name.rpartition(".")
    if dot and stem:
        names.append(stem + OPTIONS_SUFFIX)
    return names


class FolderSource(Lifecycle):
    """Yields a :class:`WorkItem` per settled file in the inbox. ``start()``/``stop()`` are idempotent."""

    def __init__(self, config: FolderSourceConfig, sink: FolderSink, *, max_input_bytes: int) -> None:
        self.config = config
        self.sink = sink
        self.max_input_bytes = max_input_bytes
        self._ready: deque[str] = deque()
        self._settling: dict[str, tuple[int, int, float]] = {}  # name -> (size, mtime_ns, last change)
        self._known: set[str] = set()  # queued, settling or in flight: never handed out twice
        self._wakeup = asyncio.Event()
        self._watcher: asyncio.Task[None] | None = None
        self._stop_watching = asyncio.Event()
        self._last_scan = 0.0
        self.started = False

    @property
    def backlog(self) -> int:
        """Files seen in the inbox and not yet handed out."""
        return len(self._ready) + len(self._settling)

    async def start(self) -> None:
        """Create the folders, scan the inbox, and start watching it."""
        if self.started:
            return
        for folder in (self.config.inbox, self.config.done, self.config.failed):
            folder.mkdir(parents=True, exist_ok=True)
        await self.sink.start()
        self._stop_watching.clear()
        self._scan()
        self._watcher = asyncio.create_task(self._watch(), name="folder-watch")
        self._watcher.add_done_callback(self._watcher_done)
        self.started = True
        log.info("folder source started", inbox=str(self.config.inbox), backlog=self.backlog)

    async def stop(self) -> None:
        """Stop watching. Items already handed out can still be completed or failed."""
        if not self.started:
            return
        self.started = False
        self._stop_watching.set()
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watcher
            self._watcher = None
        self._wakeup.set()

    async def items(self) -> AsyncIterator[WorkItem]:
        """Yield work items as files settle, until :meth:`stop`. Pull-driven: nothing is read ahead."""
        while self.started:
            name = self._next_ready()
            if name is not None:
                yield self._work_item(name)
                continue
            self._wakeup.clear()
            timeout = self._next_check_in()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), timeout)

    # -- discovery -------------------------------------------------------------------------------

    def _scan(self) -> None:
        """Add every unknown candidate file in the inbox, oldest first.

        Out of file descriptors (the folder cannot be opened), it logs that once in a while and is
        tried again after :data:`SCAN_RETRY_SECONDS`; file-system events keep arriving meanwhile.
        """
        self._last_scan = time.monotonic()
        try:
            found = self._list_inbox()
        except OSError as exc:
            if not is_fd_exhaustion(exc):
                raise
            note_fd_exhaustion("inbox rescan", exc)
            self._last_scan -= max(0.0, self.config.rescan_seconds - SCAN_RETRY_SECONDS)
            return
        for _, name in sorted(found):
            self._add(name)

    def _list_inbox(self) -> list[tuple[int, str]]:
        """``(mtime_ns, name)`` of every candidate file in the inbox not yet known."""
        found: list[tuple[int, str]] = []
        with os.scandir(self.config.inbox) as entries:
            for entry in entries:
                if entry.name in self._known or not is_candidate_name(entry.name):
                    continue
                with contextlib.suppress(FileNotFoundError):
                    if entry.is_file(follow_symlinks=False):
                        found.append((entry.stat(follow_symlinks=False).st_mtime_ns, entry.name))
        return found

    def _add(self, name: str) -> None:
        if name in self._known or not is_candidate_name(name):
            return
        self._known.add(name)
        self._settling[name] = (-1, -1, time.monotonic())
        self._wakeup.set()

    async def _watch(self) -> None:
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
                    self._add(path.name)
            # The first batch (at most rust_timeout after start) comes once the watch is in place: scan
            # again then, for files created between the start-up scan and the watch.
            if first_batch or time.monotonic() - self._last_scan >= self.config.rescan_seconds:
                first_batch = False
                self._scan()

    def _watcher_done(self, task: asyncio.Task[None]) -> None:
        # The watcher is owned here; its failure must be seen. Periodic rescans still find new files.
        if not task.cancelled() and task.exception() is not None:
            log.error("inbox watcher failed; falling back to periodic rescans", error=repr(task.exception()))

    # -- settling --------------------------------------------------------------------------------

    def _next_ready(self) -> str | None:
        if time.monotonic() - self._last_scan >= self.config.rescan_seconds:
            self._scan()
        if not self._ready:
            self._promote_settled()
        return self._ready.popleft() if self._ready else None

    def _promote_settled(self) -> None:
        """Move files whose size and mtime held still for settle_seconds to the ready queue."""
        now = time.monotonic()
        wall_now = time.time()
        for name, (size, mtime_ns, _) in list(self._settling.items()):
            try:
                stat = (self.config.inbox / name).lstat()
            except FileNotFoundError:  # removed or renamed away before we got to it
                del self._settling[name]
                self._known.discard(name)
                continue
            if not S_ISREG(stat.st_mode):
                # A folder or link made in the inbox: not a document. It stays known, so later
                # events for it are ignored too.
                del self._settling[name]
                continue
            if (stat.st_size, stat.st_mtime_ns) != (size, mtime_ns):
                # Changed since last look (or first look). An old file is settled already.
                age = wall_now - stat.st_mtime_ns / 1e9
                first_look = size == -1
                self._settling[name] = (
                    stat.st_size,
                    stat.st_mtime_ns,
                    now - max(age, 0) if first_look else now,
                )
            if now - self._settling[name][2] >= self.config.settle_seconds:
                del self._settling[name]
                self._ready.append(name)

    def _next_check_in(self) -> float:
        if self._settling:
            return min(0.25, max(0.05, self.config.settle_seconds / 4))
        # Until the next rescan is due (sooner than a whole period after one that failed).
        return max(0.05, self._last_scan + self.config.rescan_seconds - time.monotonic())

    # -- acknowledgement -------------------------------------------------------------------------

    def _work_item(self, name: str) -> WorkItem:
        path = self.config.inbox / name
        return WorkItem(
            id=name,
            source=SOURCE_NAME,
            load=lambda: read_input_file(path, self.max_input_bytes),
            on_complete=lambda record: self._complete(name, record),
            on_fail=lambda record: self._fail(name, record),
            metadata={"file_name": name},
            load_options=lambda: retry_on_fd_exhaustion(
                lambda: self._read_options(name), where="reading an options sidecar"
            ),
            profile=self.config.profile,
        )

    def _read_options(self, name: str) -> bytes | None:
        """The sidecar's bytes, or None without one. DocumentError if it cannot be read or is huge."""
        for sidecar in sidecar_names(name):
            path = self.config.inbox / sidecar
            try:
                with path.open("rb") as file:
                    data = file.read(MAX_OPTIONS_BYTES + 1)
            except FileNotFoundError:
                continue
            except OSError as exc:
                if is_fd_exhaustion(exc):
                    raise  # retried by the caller: not the sidecar's fault
                raise DocumentError("invalid_options", f"cannot read {sidecar}: {exc}") from exc
            if len(data) > MAX_OPTIONS_BYTES:
                raise DocumentError("invalid_options", f"{sidecar} is over {MAX_OPTIONS_BYTES} bytes")
            return data
        return None

    async def _complete(self, name: str, record: Record) -> None:
        await self.sink.write_result(name, record)
        await self._move(name, self.config.done)

    async def _fail(self, name: str, record: Record) -> None:
        await self.sink.write_failure(name, record)
        await self._move(name, self.config.failed)

    async def _move(self, name: str, folder: Path) -> None:
        source, target = self.config.inbox / name, folder / name
        try:
            await asyncio.to_thread(os.replace, source, target)
            # Only the folder syncs open anything, so only they can run out of descriptors; they are
            # retried alone (the rename is done and must not be repeated).
            await retry_on_fd_exhaustion(lambda: sync_move(source, target), where="moving an input")
        except FileNotFoundError:
            log.warning("input vanished from the inbox before it could be moved", doc_id=name)
        except OSError as exc:
            raise SinkError(f"cannot move {name} to {folder}: {exc}") from exc
        finally:
            self._known.discard(name)
        moved = await asyncio.to_thread(self._move_sidecar, name, folder)
        if moved is not None:
            try:
                await retry_on_fd_exhaustion(lambda: sync_move(*moved), where="moving an input")
            except OSError as exc:
                log.warning("cannot sync an options sidecar's move", doc_id=name, error=str(exc))

    def _move_sidecar(self, name: str, folder: Path) -> tuple[Path, Path] | None:
        """Rename the sidecar that applies to ``name`` (the first that exists), and no other: a stem
        sidecar behind a full-name one may belong to another document with the same stem. Returns the
        ``(source, target)`` renamed, whose folders the caller syncs, or None."""
        # After the document: a crash in between leaves the sidecar in the inbox, where it is inert.
        for sidecar in sidecar_names(name):
            source, target = self.config.inbox / sidecar, folder / sidecar
            try:
                os.replace(source, target)  # opens nothing: cannot run out of descriptors
            except FileNotFoundError:
                continue
            except OSError as exc:
                log.warning("cannot move an options sidecar", doc_id=name, sidecar=sidecar, error=str(exc))
                return None
            return source, target
        return None
