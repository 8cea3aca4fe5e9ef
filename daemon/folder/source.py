"""The watched-folder source.

Every regular file directly in ``inbox`` whose name is a document's
(:func:`~daemon.folder.names.is_candidate_name`) is a document; its name is the document id.
Every other entry of such a name but a folder is an input too, refused unread (below).
Files already there at start are processed first (oldest first), then new ones as watchfiles reports
them, with a periodic rescan as a safety net for missed events; the :class:`~daemon.folder.inbox.InboxWatcher`
finds them and says which have settled, the source claims, reads and acknowledges them.

Half-written inputs are never read:

* hidden files, temporary and partial names, and editors' lock, swap and backup files are ignored
  (:mod:`daemon.folder.names`), so a writer that creates ``.NAME`` or ``NAME.tmp`` and renames it
  into place (the recommended convention, atomic on one file system) is always safe;
* for writers that write in place, a file is taken only once its size and modification time have
  not changed for ``settle_seconds``.

A symbolic link, FIFO, socket or device with a document's name is never opened or followed: it is
claimed like a file (a rename moves the entry itself), refused as ``not_regular`` when it is read,
and moved, itself, to ``failed/`` beside its failure record, so that nothing sits in the inbox
unexplained. A folder is not a document and is never entered or moved; it is looked at again
whenever the file system reports a change to it, so a regular file that later takes the name is
picked up.

Claiming (:mod:`daemon.folder.claims`): a settled file is first moved, by one atomic rename, into
its own folder in the private work folder, with the options sidecar that applies. Only then is it
read, without following links and without blocking, and only if it is a regular file
(:mod:`daemon.fs.safe_read`). What is read is what is acknowledged; a new file of the same name in the
inbox is a new input.

Folders (:mod:`daemon.fs.dirs`): the inbox, work, done and failed folders are opened once at start
and used only through their descriptors; the work folder lies outside the inbox and must be
docsumd's alone. If the folder at one of those paths goes away or is replaced (by a link, another
folder, a file), the source logs it once, stops taking work and reports it (:attr:`problem`, which
makes the service unhealthy); what is in flight is settled through the descriptors. It goes on when
the folder is back: the inbox, done and failed folders may come back as new folders, the work folder
only as itself (the claims are in it).

Per-document options: a sidecar ``NAME.options.json`` (for ``NAME.txt`` either ``NAME.txt.options.json``
or ``NAME.options.json``; the first wins if both exist) holds a JSON object of summary options
(:mod:`daemon.summary.options`). Sidecars are never documents themselves. Write the sidecar before the
document: it is claimed with it. It moves with its document to ``done/`` or ``failed/``.

Acknowledgement: after the sink wrote the result (``outbox/STEM.summary.json``), the input moves to
``done/``; after the failure record is written (``failed/STEM.error.json``), it moves to ``failed/``;
both times under its own name if that is free there, else ``NAME~2``, ``NAME~3``...: nothing is ever
overwritten. A crash before that leaves it in the work folder, where the next start finds it again;
after ``crash_loop_exits`` unclean exits with it in flight it is set aside (reason ``crash_loop``).

Every file-system call runs on the file I/O threads (:mod:`daemon.fs.blocking_io`), bounded by
``io_timeout_seconds``: a hung read fails its document, never the event loop or the shutdown.

Backpressure: the source hands out a file only when the service asks for the next item, so a large
backlog waits on disk, not in memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Final, TypeVar

from daemon.config import FolderSourceConfig
from daemon.errors import DocumentError, SinkError
from daemon.folder.claims import Claim, WorkFolder
from daemon.folder.inbox import InboxWatcher
from daemon.folder.names import (
    IGNORED_SUFFIXES,
    OPTIONS_SUFFIX,
    is_candidate_name,
    sidecar_names,
)
from daemon.folder.sink import FolderSink
from daemon.fs.blocking_io import BlockingIO, file_io
from daemon.fs.dirs import Dir
from daemon.fs.names import display_name, name_fields
from daemon.fs.safe_read import NotRegularFileError, read_bounded, read_regular_file
from daemon.lifecycle import Lifecycle
from daemon.ops.fd_exhaustion import is_fd_exhaustion, retry_on_fd_exhaustion
from daemon.ops.logging import get_logger
from daemon.ops.metrics import observe_failed, observe_source
from daemon.records import Record, failure_record
from daemon.typing import DEFAULT_PROFILE
from daemon.work import WorkItem

__all__ = [
    "IGNORED_SUFFIXES",
    "MAX_OPTIONS_BYTES",
    "OPTIONS_SUFFIX",
    "SOURCE_NAME",
    "FolderSource",
    "is_candidate_name",
    "sidecar_names",
]

log = get_logger(__name__)

T = TypeVar("T")

MAX_OPTIONS_BYTES: Final = 64 * 1024
SOURCE_NAME: Final = "folder"
CLAIM_BATCH: Final = 32
"""Ready files claimed per trip to the I/O threads while a backlog waits. A trip is two hand-offs
between threads, and while a backlog is read the tokenizer's threads hold the interpreter lock for
their Python work, so each hand-off waits its turn: claiming one file per trip made the source the
pace of a backlog's intake (bench/intake.py). Claimed files wait in the work folder and are handed
out one per pull; a clean stop gives back those not handed out (:meth:`FolderSource.release_unsettled`)."""


class FolderSource(Lifecycle):
    """Yields a :class:`WorkItem` per settled file in the inbox. ``start()``/``stop()`` are idempotent."""

    def __init__(
        self,
        config: FolderSourceConfig,
        sink: FolderSink,
        *,
        max_input_bytes: int,
        io: BlockingIO | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        """File-system calls run on ``io`` (the process's file I/O pool by default); the inbox
        watcher's settling runs on ``clock`` (monotonic) and ``wall_clock`` (files' ages)."""
        self.config = config
        self.sink = sink
        self.max_input_bytes = max_input_bytes
        self.inbox = Dir(config.inbox, key="sources.folder.inbox")
        self.done = Dir(config.done, key="sources.folder.done")
        work = Dir(config.work_folder, key="sources.folder.work", private=True)
        self.work = WorkFolder(inbox=self.inbox, work=work, done=self.done, sink=sink)
        self._problem: str | None = None  # a folder gone or replaced: no work is taken meanwhile
        self._io = io or file_io()
        self._waiting: deque[Claim] = deque()  # claimed, not yet handed out (left by an earlier run)
        self._claims: set[Claim] = set()  # claimed and not yet settled (includes _waiting)
        self._wakeup = asyncio.Event()
        self._intake_paused = False  # the service's: the engine serves nothing now, claim nothing
        self.watcher = InboxWatcher(
            config,
            self.inbox,
            self._io,
            folders_usable=self._check_folders,
            on_found=self._wakeup.set,
            clock=clock,
            wall_clock=wall_clock,
        )
        """Finds the inbox's files and says which have settled; claiming them is this source's."""
        self.started = False

    @property
    def backlog(self) -> int:
        """Files waiting in the inbox or the work folder, not yet handed out."""
        return self.watcher.pending + len(self._waiting)

    @property
    def problem(self) -> str | None:
        """Why no work is taken now (a folder gone or replaced), or None: the service is unhealthy
        while there is one."""
        return self._problem

    async def start(self) -> None:
        """Create the folders, take over what an earlier run left in flight, scan the inbox, and
        start watching it."""
        if self.started:
            return
        await self.open_folders()
        await self._io_call(self.work.adopt_legacy)
        await self._recover()
        await self.watcher.start()
        self.started = True
        observe_source(SOURCE_NAME)
        log.info("folder source started", inbox=str(self.config.inbox), backlog=self.backlog)

    async def open_folders(self) -> None:
        """Create (where missing) and open the inbox, done, failed, outbox and work folders, checked
        (:mod:`daemon.fs.dirs`); :class:`~daemon.errors.ConfigError` for one that cannot be used."""
        await self._io_call(self.inbox.open)
        await self._io_call(self.done.open)
        await self.sink.start()
        await self._io_call(self.work.prepare)

    async def stop(self) -> None:
        """Stop watching. Items already handed out can still be completed or failed."""
        if not self.started:
            return
        self.started = False
        await self.watcher.stop()
        self._wakeup.set()

    async def release_unsettled(self) -> None:
        """A clean stop: give every claimed and unsettled input back to the inbox (it did not take
        part in an unclean exit). Called by the service after a drain, before :meth:`stop`."""
        for claim in list(self._claims):
            try:
                returned = await self._io_call(self.work.release, claim)
            except (OSError, TimeoutError) as exc:
                log.error("cannot give an input back to the inbox", doc_id=_doc_id(claim), error=str(exc))
                continue
            self._claims.discard(claim)
            if not returned:
                log.info(
                    "input kept in the work folder (uncounted): the inbox cannot take it back now",
                    doc_id=_doc_id(claim),
                )
        self._waiting.clear()

    async def uncount_unsettled(self) -> None:
        """A stop the inputs did not cause (the output folders failed): leave every claimed and
        unsettled input in the work folder without counting this exit against it."""
        for claim in list(self._claims):
            try:
                await self._io_call(self.work.uncount, claim)
            except (OSError, TimeoutError) as exc:
                log.error("cannot mark an input as not at fault", doc_id=_doc_id(claim), error=str(exc))
        with contextlib.suppress(OSError, TimeoutError):
            await self._io_call(self.work.sync)
        self._waiting.clear()

    async def items(self) -> AsyncIterator[WorkItem]:
        """Yield work items as files settle, until :meth:`stop`. Pull-driven: nothing is read ahead,
        and at most :data:`CLAIM_BATCH` ready files are claimed ahead of the pulls."""
        while self.started:
            if self._problem is not None and not await self._folders_back():
                await self._pause(self.watcher.check_in())
                continue
            if self._waiting:
                yield self._work_item(self._waiting.popleft())
                continue
            if self._intake_paused:
                await self._pause(self.watcher.check_in())
                continue
            names = await self.watcher.next_ready(CLAIM_BATCH)
            if names:
                self._waiting.extend(await self._claim_all(names))
                continue
            await self._pause(self.watcher.check_in())

    def pause_intake(self) -> None:
        """Claim no new file until :meth:`resume_intake` (files stay in the inbox; see PausableSource)."""
        self._intake_paused = True

    def resume_intake(self) -> None:
        """Claim files again."""
        self._intake_paused = False
        self._wakeup.set()

    async def _pause(self, seconds: float) -> None:
        """Wait for a wake-up (a file event, an adopted claim, a stop) or ``seconds``."""
        self._wakeup.clear()
        # asyncio.timeout, not wait_for: on Python 3.11 wait_for can lose a cancellation that
        # arrives just as the event is set, and this generator would then never end.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._wakeup.wait()

    # -- the folders -------------------------------------------------------------------------------

    def _folders(self) -> tuple[Dir, ...]:
        return (self.inbox, self.work.work, self.done, self.sink.failed_dir)

    def _folder_problem(self) -> str | None:
        """What is wrong with the first folder no longer at its path, or None (I/O thread)."""
        for folder in self._folders():
            change = folder.change()
            if change is not None:
                return f"{folder.key} ({folder.path}): {change}"
        return None

    async def _check_folders(self) -> bool:
        """True if every folder is still the one held; otherwise note the problem (logged once)."""
        try:
            problem = await self._io_call(self._folder_problem)
        except (OSError, TimeoutError) as exc:
            problem = f"the folders cannot be looked at: {exc}"
        if problem is not None and self._problem is None:
            log.error("a folder is gone or was replaced: taking no work until it is back", problem=problem)
        self._problem = problem
        return problem is None

    async def _folders_back(self) -> bool:
        """Whether the folders are usable again: each is the one held, or a folder that may take its
        place (not the work folder) is held instead. Logs the recovery."""
        try:
            await self._io_call(self._reopen_replaced)
        except (OSError, TimeoutError):
            return False
        except Exception as exc:  # a ConfigError: what is there now is not usable (a link...)
            log.debug("a replaced folder is not usable yet", error=str(exc))
            return False
        if not await self._check_folders():
            return False
        log.warning("the folders are back: taking work again")
        await self.watcher.scan()
        return True

    def _reopen_replaced(self) -> None:
        for folder in (self.inbox, self.done, self.sink.failed_dir):
            change = folder.change()
            if change is not None and change.endswith("another folder"):
                folder.reopen()

    # -- claiming --------------------------------------------------------------------------------

    async def _claim_all(self, names: list[str]) -> list[Claim]:
        """Move ``names`` into the work folder in one trip to the I/O threads; the claims, in order,
        of those that were there and could be moved."""
        # Out of the inbox from now on (or gone): a new file of this name is a new input.
        self.watcher.forget(names)
        if not await self._check_folders():
            return []
        job = self._io.submit(self._claim_each, names)
        try:
            outcomes = await self._io.wait(job, self.config.io_timeout_seconds)
        except asyncio.CancelledError:
            job.future.add_done_callback(self._adopt_late_claims)
            raise
        except TimeoutError as exc:
            # A hung inbox: whatever the trip claims after all is still ours (handed out later).
            job.future.add_done_callback(self._adopt_late_claims)
            for name in names:
                self._cannot_claim(name, exc)
            return []
        claims: list[Claim] = []
        for name, outcome in zip(names, outcomes, strict=True):
            if isinstance(outcome, Exception):
                self._cannot_claim(name, outcome)
            elif outcome is not None:
                self._claims.add(outcome)
                claims.append(outcome)
        return claims

    def _claim_each(self, names: list[str]) -> list[Claim | Exception | None]:
        """Claim each name (I/O thread): its claim, None if it is gone, or the error that kept it.
        One name's error never loses the others' claims (they are in the work folder already)."""
        outcomes: list[Claim | Exception | None] = []
        for name in names:
            try:
                outcomes.append(self.work.claim(name))
            except Exception as exc:  # its own problem, or out of file descriptors: tried again later
                outcomes.append(exc)
        return outcomes

    def _cannot_claim(self, name: str, exc: Exception) -> None:
        # Not ours to move (another user's file in a sticky inbox, a mount point) or a hung inbox:
        # left where it is, and tried again at the next rescan.
        log.error("cannot claim an input; it stays there", doc_id=display_name(name), error=repr(exc))
        self.watcher.retry_later(name)

    def _adopt_late_claims(self, future: asyncio.Future[list[Claim | Exception | None]]) -> None:
        """Claims that finished after their caller gave up are still ours: they wait to be handed out
        (or given back by a clean stop)."""
        if future.cancelled() or future.exception() is not None:
            return
        late = [outcome for outcome in future.result() if isinstance(outcome, Claim)]
        for claim in late:
            self._claims.add(claim)
            self._waiting.append(claim)
        if late:
            self._wakeup.set()

    async def _recover(self) -> None:
        """Take over the claims an earlier run left: each was in flight when that run ended uncleanly.
        Those at ``crash_loop_exits`` are set aside; the rest are handed out before anything new."""
        ours = {claim.folder for claim in self._claims}  # a source started again in one process
        claims = [claim for claim in await self._io_call(self.work.recover) if claim.folder not in ours]
        set_aside = 0
        for claim in claims:
            self._claims.add(claim)
            if claim.exits >= self.config.crash_loop_exits:
                await self._set_aside(claim)
                set_aside += 1
                continue
            await self._io_call(self.work.bump, claim)
            await self._io_call(self.work.claim_sidecar, claim)
            self._waiting.append(claim)
        if claims:
            await self._io_call(self.work.sync)
            log.warning(
                "inputs left in flight by an unclean exit: tried again first, or set aside",
                again=len(claims) - set_aside,
                set_aside=set_aside,
            )

    async def _set_aside(self, claim: Claim) -> None:
        message = (
            f"the input was in flight at {claim.exits} unclean exits of docsumd in a row (crash, kill, "
            "power cut or fatal error); it was set aside unread so that it cannot stop the service "
            "again. Move it back into the inbox to try it once more."
        )
        record = failure_record(
            doc_id=_doc_id(claim),
            source=SOURCE_NAME,
            error=DocumentError("crash_loop", message),
            metadata=name_fields(claim.name),
            sha256=None,
            input_bytes=None,
        )
        await self._fail(claim, record)
        # Unread, so its own options never chose a profile: it counts under the folder's.
        observe_failed(SOURCE_NAME, "crash_loop", self.config.profile or DEFAULT_PROFILE)
        log.error("input set aside after repeated unclean exits", doc_id=_doc_id(claim), exits=claim.exits)

    # -- work items --------------------------------------------------------------------------------

    def _work_item(self, claim: Claim) -> WorkItem:
        return WorkItem(
            id=_doc_id(claim),
            source=SOURCE_NAME,
            load=lambda: self._load(claim),
            on_complete=lambda record: self._complete(claim, record),
            on_fail=lambda record: self._fail(claim, record),
            metadata=name_fields(claim.name),
            load_options=lambda: self._load_options(claim),
            profile=self.config.profile,
            format_hint=display_name(claim.name),
        )

    async def _load(self, claim: Claim) -> bytes:
        try:
            return await self._io_call(self._read_document, claim)
        except TimeoutError as exc:
            raise DocumentError(
                "unreadable",
                f"reading the input took longer than {self.config.io_timeout_seconds:g} s "
                "(io_timeout_seconds; a hung file system?)",
            ) from exc

    def _read_document(self, claim: Claim) -> bytes:
        return read_regular_file(
            claim.document, self.max_input_bytes, dir_fd=self.work.work.fd, single_link=True
        )

    async def _load_options(self, claim: Claim) -> bytes | None:
        try:
            return await self._io_call(self._read_options, claim)
        except TimeoutError as exc:
            raise DocumentError(
                "invalid_options",
                f"reading {display_name(claim.sidecar or '')} took longer than "
                f"{self.config.io_timeout_seconds:g} s (io_timeout_seconds)",
            ) from exc

    def _read_options(self, claim: Claim) -> bytes | None:
        """The sidecar's bytes, or None without one. DocumentError if it cannot be read, is not a
        regular file (a link is never followed, a FIFO never waited on) or is huge (I/O thread)."""
        if claim.sidecar_problem is not None:
            raise DocumentError("invalid_options", claim.sidecar_problem)
        path, sidecar = claim.sidecar_path, display_name(claim.sidecar or "")
        if path is None:
            return None
        try:
            data = read_bounded(path, MAX_OPTIONS_BYTES, dir_fd=self.work.work.fd, single_link=True)
        except NotRegularFileError as exc:
            raise DocumentError("invalid_options", f"{sidecar} is not read: {exc}") from exc
        except OSError as exc:
            if is_fd_exhaustion(exc):
                raise  # waited out by _io_call, not the sidecar's fault
            raise DocumentError("invalid_options", f"cannot read {sidecar}: {exc.strerror or exc}") from exc
        if len(data) > MAX_OPTIONS_BYTES:
            raise DocumentError("invalid_options", f"{sidecar} is over {MAX_OPTIONS_BYTES} bytes")
        return data

    # -- acknowledgement -------------------------------------------------------------------------

    async def _complete(self, claim: Claim, record: Record) -> None:
        await self._write_record(self.sink.write_result, claim, record)
        await self._settle(claim, self.done)

    async def _fail(self, claim: Claim, record: Record) -> None:
        await self._write_record(self.sink.write_failure, claim, record)
        await self._settle(claim, self.sink.failed_dir)

    async def _write_record(
        self, write: Callable[[str, Record], Awaitable[Path]], claim: Claim, record: Record
    ) -> None:
        """Write the claim's record under its stem. Nothing is acknowledged yet, so anything but a
        fatal sink error is this document's failure (:class:`DocumentError`)."""
        try:
            await write(claim.stem, record)
        except (SinkError, DocumentError):
            raise
        except Exception as exc:
            log.exception("unexpected error writing a record")
            raise DocumentError("internal_error", f"its record could not be written: {exc!r}") from exc

    async def _settle(self, claim: Claim, folder: Dir) -> None:
        try:
            await self._io_call(self.work.settle, claim, folder)
        except (OSError, TimeoutError) as exc:
            raise SinkError(f"cannot move {_doc_id(claim)!r} to {folder.path}: {exc}") from exc
        self._claims.discard(claim)

    async def _io_call(self, function: Callable[..., T], *args: object) -> T:
        """``function(*args)`` on the I/O threads, within ``io_timeout_seconds`` (else TimeoutError).
        Out of file descriptors, it is tried again until some come back (:mod:`daemon.ops.fd_exhaustion`):
        not the document's fault, and no reason to stop; every call passed here is safe to repeat."""
        return await retry_on_fd_exhaustion(
            functools.partial(function, *args),
            where="folder I/O",
            run=lambda call: self._io.run(call, time_limit=self.config.io_timeout_seconds),
        )


def _doc_id(claim: Claim) -> str:
    return display_name(claim.name)
