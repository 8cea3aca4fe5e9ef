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
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Container
from pathlib import Path
from stat import S_ISREG
from typing import Final

from daemon.config import FolderSourceConfig
from daemon.documents import read_input_file
from daemon.durable import move_durably
from daemon.errors import DocumentError, SinkError
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
SYNC_SCAN_DIR_BYTES: Final = 64 * 1024
"""An inbox directory up to this size (about 2,000 entries on ext4) is listed on the event loop."""
SCAN_ADD_CHUNK: Final = 5000
"""Files of a listing made in a worker thread that one event-loop turn adds."""


def is_candidate_name(name: str) -> bool:
    """Whether a file name in the inbox is a document (not hidden, not a temporary file, not a sidecar)."""
    return not name.startswith(".") and not name.endswith((*IGNORED_SUFFIXES, OPTIONS_SUFFIX))


def list_new_files(inbox: Path, known: Container[str], settle_seconds: float) -> tuple[list[str], list[str]]:
    """Candidate files in ``inbox`` not in ``known``, oldest first: those unchanged for
    ``settle_seconds`` (settled), and the others (to watch until they settle)."""
    found: list[tuple[int, str]] = []
    with os.scandir(inbox) as entries:
        for entry in entries:
            if entry.name in known or not is_candidate_name(entry.name):
                continue
            with contextlib.suppress(FileNotFoundError):
                if entry.is_file(follow_symlinks=False):
                    found.append((entry.stat(follow_symlinks=False).st_mtime_ns, entry.name))
    found.sort()
    settled_before = (time.time() - settle_seconds) * 1e9
    return [name for mtime, name in found if mtime <= settled_before], [
        name for mtime, name in found if mtime > settled_before
    ]


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

        Listing a large inbox takes seconds (100,000 files: a stat each), which must not stall the
        event loop (health checks, the engine's outputs): a small inbox (its directory at most
        :data:`SYNC_SCAN_DIR_BYTES`) is listed here, a larger one in a worker thread, its files
        added when the listing is back (one listing at a time). Files unchanged for
        ``settle_seconds`` when listed are ready at once: no second look each, which for a large
        backlog would be another stat per file on the event loop.
        """
        self._last_scan = time.monotonic()
        inbox, settle = self.config.inbox, self.config.settle_seconds

        def add(listing: tuple[list[str], list[str]]) -> None:
            settled, fresh = listing
            for name in settled:
                if name not in self._known:
                    self._known.add(name)
                    self._ready.append(name)
            for name in fresh:
                self._add(name)
            self._wakeup.set()

        if inbox.stat().st_size <= SYNC_SCAN_DIR_BYTES:
            add(list_new_files(inbox, self._known, settle))
            return
        if getattr(self, "_listing", None) is not None:
            return  # the listing under way finds what this one would
        loop = asyncio.get_running_loop()

        def listed(listing: tuple[list[str], list[str]]) -> None:
            settled, fresh = listing
            if len(settled) > SCAN_ADD_CHUNK:  # in slices, so that no loop turn takes long
                add((settled[:SCAN_ADD_CHUNK], []))
                loop.call_soon(listed, (settled[SCAN_ADD_CHUNK:], fresh))
                return
            self._listing: threading.Thread | None = None
            add(listing)

        def list_in_thread() -> None:
            listing = list_new_files(inbox, self._known, settle)  # membership tests: safe beside the loop
            with contextlib.suppress(RuntimeError):  # the loop is closed: the source is gone
                loop.call_soon_threadsafe(listed, listing)

        thread = threading.Thread(target=list_in_thread, name="inbox-listing", daemon=True)
        self._listing = thread
        thread.start()

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
        return self.config.rescan_seconds

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
            load_options=lambda: asyncio.to_thread(self._read_options, name),
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
        try:
            await asyncio.to_thread(move_durably, self.config.inbox / name, folder / name)
        except FileNotFoundError:
            log.warning("input vanished from the inbox before it could be moved", doc_id=name)
        except OSError as exc:
            raise SinkError(f"cannot move {name} to {folder}: {exc}") from exc
        finally:
            self._known.discard(name)
        await asyncio.to_thread(self._move_sidecars, name, folder)

    def _move_sidecars(self, name: str, folder: Path) -> None:
        """Move the sidecar that applies to ``name`` (the first that exists), and no other: a stem
        sidecar behind a full-name one may belong to another document with the same stem."""
        # After the document: a crash in between leaves the sidecar in the inbox, where it is inert.
        for sidecar in sidecar_names(name):
            try:
                move_durably(self.config.inbox / sidecar, folder / sidecar)
            except FileNotFoundError:
                continue
            except OSError as exc:
                log.warning("cannot move an options sidecar", doc_id=name, sidecar=sidecar, error=str(exc))
            return
