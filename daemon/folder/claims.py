"""The work folder: inputs are claimed out of the inbox before they are read, as maildir does.

Layout: ``WORK/K.STEM/NAME``, and ``WORK/K.STEM/SIDECAR`` for the options sidecar that applies.

* **Claiming** is one atomic rename of ``inbox/NAME`` into a new claim folder (then of its sidecar).
  What docsumd reads from then on is what it acknowledges: nobody can swap or rename over the file in
  the inbox any more, and a new file of the same name in the inbox is simply a new input.
* ``STEM`` is the claim's **record stem**: its result is ``outbox/STEM.summary.json``, its failure
  record ``failed/STEM.error.json``. It is chosen when claiming (:func:`daemon.fs.names.record_stem`,
  then ``~2``, ``~3``... until it is free in both folders and among claims), so writing the record
  again after a crash replaces only this input's own record, never another's.
* ``K`` is the number of **consecutive unclean exits** the input was in flight at, counting this run
  as one should it end uncleanly: a new claim is ``1.STEM``; each start that finds a claim left
  behind makes it ``K+1`` (the run before ended with it in flight: crash, kill, power cut or fatal
  error). A clean stop ends the sequence: it gives unfinished claims back to the inbox, or, if a new
  file took the name there, keeps the claim as ``0.STEM``. The folder source sets an input aside
  once ``K`` reaches ``crash_loop_exits``.
* **Settling** moves the document and its sidecar to ``done/`` or ``failed/`` under a name that is
  free there (``NAME``, else ``NAME~2``...; never over anything) and removes the claim folder.

The inbox, the work folder and the done folder are :class:`~daemon.fs.dirs.Dir` objects: every
lookup, read and rename goes through their descriptors, and inside the work folder (docsumd's alone,
mode 0700) through names docsumd made. A folder renamed, replaced or swapped for a link after start
redirects nothing.

Every method here blocks on the file system: the folder source calls them on its I/O threads
(:mod:`daemon.fs.blocking_io`), one at a time per claim.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
import threading
import time
from dataclasses import dataclass, field
from typing import Final

from daemon.errors import ConfigError
from daemon.folder.names import is_sidecar_name, sidecar_names
from daemon.folder.sink import ERROR_SUFFIX, FolderSink
from daemon.fs.dirs import PRIVATE_MODE, Dir
from daemon.fs.durable import rename_noreplace_at
from daemon.fs.names import MAX_STEM_BYTES, display_name, first_free, numbered, record_stem, shortened
from daemon.ops.logging import get_logger

log = get_logger(__name__)

LEGACY_WORK_FOLDER: Final = ".docsumd-work"
"""Where versions before 0.10 kept the work folder: inside the inbox, where any writer could swap it."""
FOLDER_MODE: Final = PRIVATE_MODE
"""The work folder and its claim folders are docsumd's alone."""
_CLAIM_FOLDER: Final = re.compile(r"(\d{1,6})\.(.+)", re.DOTALL)
# Names the file system refuses for what they hold, not for where they go: try a plain stand-in.
_NAME_REFUSED: Final = frozenset({errno.EILSEQ, errno.ENAMETOOLONG})


@dataclass(eq=False)
class Claim:
    """One claimed input: its original name, its record stem, its unclean-exit count, its folder
    (a name in the work folder)."""

    name: str
    stem: str
    exits: int
    folder: str
    sidecar: str | None = None
    sidecar_problem: str | None = None
    """Why a sidecar that exists could not be claimed (the document then fails ``invalid_options``)."""
    claimed_ns: int = field(default_factory=time.time_ns)
    """When this run claimed (or recovered) it: a sidecar of its name that reached the inbox later
    came too late for it, and must not apply to the next document of that name either."""

    @property
    def document(self) -> str:
        """Where the document is while claimed, relative to the work folder."""
        return f"{self.folder}/{self.name}"

    @property
    def sidecar_path(self) -> str | None:
        """Where its sidecar is while claimed (relative to the work folder), if it has one."""
        return None if self.sidecar is None else f"{self.folder}/{self.sidecar}"


class WorkFolder:
    """Claims, recovers, settles and releases inputs (see the module's doc). Thread-safe."""

    def __init__(self, *, inbox: Dir, work: Dir, done: Dir, sink: FolderSink) -> None:
        """``sink``: where the records go (a stem must be free in its outbox and failed folders)."""
        self.inbox = inbox
        self.work = work
        self.done = done
        self.sink = sink
        self._stems: set[str] = set()  # stems of every claim in the work folder
        self._lock = threading.Lock()

    def prepare(self) -> None:
        """Open the work folder (created mode 0700; ConfigError unless it is docsumd's alone) and check
        it is on the inbox's file system (a claim is a rename); :class:`ConfigError` if not."""
        self.work.open()
        if self.work.device != self.inbox.device:
            raise ConfigError(
                f"sources.folder.work ({self.work.path}) must be on the same file system as the inbox "
                f"({self.inbox.path}): inputs are claimed into it by an atomic rename"
            )

    def adopt_legacy(self) -> None:
        """Take over the claims of the work folder earlier versions kept in the inbox
        (``INBOX/.docsumd-work``), if that folder is a real one that is docsumd's alone; anything else
        of that name is left where it is (an inbox writer may have made it)."""
        try:
            found = self.inbox.lstat(LEGACY_WORK_FOLDER)
        except FileNotFoundError:
            return
        if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.geteuid() or found.st_mode & 0o077:
            log.warning(
                "left alone: an INBOX/.docsumd-work that docsumd did not make (or others can write to)",
                inbox=str(self.inbox.path),
            )
            return
        legacy = Dir(self.inbox.path / LEGACY_WORK_FOLDER, key="the old work folder", private=True)
        legacy.fd_in(self.inbox)
        try:
            for name in legacy.listdir():
                if _CLAIM_FOLDER.fullmatch(name) is None or self.work.lexists(name):
                    log.warning("left alone in the old work folder", entry=display_name(name))
                    continue
                rename_noreplace_at(legacy.fd, name, self.work.fd, name)
            self.work.fsync()
            with contextlib.suppress(OSError):  # not empty: what was left alone stays
                self.inbox.rmdir(LEGACY_WORK_FOLDER)
            log.info("claims taken over from the old work folder in the inbox", work=str(self.work.path))
        finally:
            legacy.close()

    # -- claiming --------------------------------------------------------------------------------

    def claim(self, name: str) -> Claim | None:
        """Claim ``inbox/NAME`` (and its sidecar); None if it is gone. Whatever the entry is now
        (file, link, FIFO, folder) is moved as it is: reading it decides what it is."""
        stem = self._reserve_stem(name)
        folder = f"1.{stem}"
        try:
            self.work.mkdir(folder, FOLDER_MODE)
            try:
                self.inbox.rename(name, self.work, f"{folder}/{name}")
            except BaseException:
                self.work.rmdir(folder)
                raise
        except FileNotFoundError:  # removed or renamed away before we got to it
            self._release_stem(stem)
            return None
        except BaseException:
            self._release_stem(stem)
            raise
        claim = Claim(name, stem, 1, folder)
        self.claim_sidecar(claim)
        return claim

    def claim_sidecar(self, claim: Claim) -> None:
        """Claim the sidecar that applies to the claim's document (the first of its names that exists
        in the inbox), unless it has one. A sidecar that cannot be moved is noted on the claim."""
        if claim.sidecar is not None:
            return
        for sidecar in sidecar_names(claim.name):
            try:
                self.inbox.rename(sidecar, self.work, f"{claim.folder}/{sidecar}")
            except FileNotFoundError:
                continue
            except OSError as exc:
                claim.sidecar_problem = f"cannot claim {display_name(sidecar)}: {exc.strerror or exc}"
                return
            claim.sidecar = sidecar
            return

    def _reserve_stem(self, name: str) -> str:
        base = record_stem(name)
        with self._lock:

            def taken(number: int) -> bool:
                stem = numbered(base, number, limit=MAX_STEM_BYTES)
                return stem in self._stems or self._has_record(stem)

            stem = numbered(base, first_free(taken), limit=MAX_STEM_BYTES)
            self._stems.add(stem)
            return stem

    def _release_stem(self, stem: str) -> None:
        with self._lock:
            self._stems.discard(stem)

    def _has_record(self, stem: str) -> bool:
        return self.sink.outbox_dir.lexists(self.sink.result_name(stem)) or self._has_failure(stem)

    def _has_failure(self, stem: str) -> bool:
        return self.sink.failed_dir.lexists(self.sink.error_name(stem))

    # -- at start --------------------------------------------------------------------------------

    def recover(self) -> list[Claim]:
        """The claims an earlier run left, oldest document first. Empty claim folders (a crash while
        claiming) are removed; a sidecar whose document was already settled follows it."""
        found: list[tuple[int, Claim]] = []
        with self.work.scandir() as entries:
            folders = [(entry.name, entry.is_dir(follow_symlinks=False)) for entry in entries]
        for folder_name, is_dir in sorted(folders):
            parsed = _CLAIM_FOLDER.fullmatch(folder_name)
            if parsed is None or not is_dir:
                log.warning("not a claim: left alone in the work folder", entry=display_name(folder_name))
                continue
            claim = self._recover_one(folder_name, int(parsed[1]), parsed[2])
            if claim is not None:
                found.append((self._mtime_ns(claim.document), claim))
        return [claim for _, claim in sorted(found, key=lambda pair: pair[0])]

    def _recover_one(self, folder: str, exits: int, stem: str) -> Claim | None:
        with self._lock:
            self._stems.add(stem)
        names = sorted(self.work.listdir(folder))
        documents = [name for name in names if not is_sidecar_name(name)]
        sidecars = [name for name in names if is_sidecar_name(name)]
        if not documents:
            self._finish_orphans(folder, stem, sidecars)
            return None
        if len(documents) > 1:
            log.warning("a claim folder holds more than one document; the others stay", folder=folder)
        return Claim(documents[0], stem, exits, folder, sidecars[0] if sidecars else None)

    def _finish_orphans(self, folder: str, stem: str, sidecars: list[str]) -> None:
        """A claim whose document was settled, left by a run that ended before its sidecar followed
        (or before the empty folder was removed): the sidecar goes where the document's record says."""
        target = self.sink.failed_dir if self._has_failure(stem) else self.done
        for sidecar in sidecars:
            log.warning("an options sidecar follows its settled document", sidecar=display_name(sidecar))
            self._move_free(f"{folder}/{sidecar}", target, sidecar)
        if sidecars:
            target.fsync()
        self._remove_folder(folder, stem)

    def bump(self, claim: Claim) -> None:
        """Count one more unclean exit for a recovered claim: ``K.STEM`` becomes ``K+1.STEM``."""
        self._rename_claim(claim, claim.exits + 1)

    def uncount(self, claim: Claim) -> None:
        """Take back this run's count (its exit was not the inputs' doing): ``K.STEM`` becomes
        ``K-1.STEM``, so the next start counts it as this run found it."""
        self._rename_claim(claim, max(0, claim.exits - 1))

    def sync(self) -> None:
        """Make the renames in the work folder durable (after :meth:`bump` of every recovered claim)."""
        self.work.fsync()

    # -- settling and giving back ------------------------------------------------------------------

    def settle(self, claim: Claim, target: Dir) -> str | None:
        """Move the claim's document, then its sidecar, to ``target`` under names free there; remove
        the claim. In the failed folder no input is named like a failure record (``*.error.json``).
        Returns the document's new name (None if it was no longer in the claim)."""
        moved: str | None = None
        try:
            moved = self._move_free(claim.document, target, claim.name)
        except FileNotFoundError:
            log.warning("the claimed input vanished from the work folder", doc_id=display_name(claim.name))
        sidecar = claim.sidecar_path
        if sidecar is None:
            self._settle_late_sidecars(claim, target)
        if sidecar is not None and claim.sidecar is not None:
            try:
                self._move_free(sidecar, target, claim.sidecar)
            except OSError as exc:
                log.warning(
                    "cannot move an options sidecar",
                    doc_id=display_name(claim.name),
                    sidecar=display_name(claim.sidecar),
                    error=str(exc),
                )
        target.fsync()
        self._remove_folder(claim.folder, claim.stem)
        return moved

    def _settle_late_sidecars(self, claim: Claim, target: Dir) -> None:
        """A sidecar of the claim's name that reached the inbox after the claim was made for this
        document, too late: it goes with it, never to the next document of that name."""
        for sidecar in sidecar_names(claim.name):
            try:
                found = self.inbox.lstat(sidecar)
            except OSError:
                continue
            if found.st_ctime_ns < claim.claimed_ns:
                continue  # there before the claim (and not taken): written for a later document
            log.warning(
                "an options sidecar came after its document; it is moved with it, unused",
                doc_id=display_name(claim.name),
                sidecar=display_name(sidecar),
            )
            try:
                self._move_free(sidecar, target, sidecar, source_dir=self.inbox)
            except OSError as exc:
                log.warning(
                    "cannot move a late options sidecar", sidecar=display_name(sidecar), error=str(exc)
                )

    def release(self, claim: Claim) -> bool:
        """A clean stop: give the claim back to the inbox (document and sidecar, under their names)
        and return True. If a new file took either name there, keep the claim with its count of
        consecutive unclean exits back at 0, and return False."""
        if self.inbox.change() is not None:  # no inbox to give it back to: kept, not counted
            self._rename_claim(claim, 0)
            return False
        moves = [(claim.document, claim.name)]
        if claim.sidecar is not None:
            moves.append((f"{claim.folder}/{claim.sidecar}", claim.sidecar))
        done: list[tuple[str, str]] = []
        try:
            for source, target in moves:
                rename_noreplace_at(self.work.fd, source, self.inbox.fd, target)
                done.append((source, target))
        except FileExistsError:
            for source, target in reversed(done):
                rename_noreplace_at(self.inbox.fd, target, self.work.fd, source)
            self._rename_claim(claim, 0)
            return False
        except FileNotFoundError:
            pass  # nothing (more) to give back
        self._remove_folder(claim.folder, claim.stem)
        return True

    def _move_free(self, source: str, folder: Dir, name: str, *, source_dir: Dir | None = None) -> str:
        """Rename ``source`` (in ``source_dir``, default the work folder) into ``folder`` as ``name``,
        else ``name~2``, ``name~3``...: the first that is free, never over anything; returns the name
        it got."""
        origin = self.work if source_dir is None else source_dir
        # Failure records are *.error.json in the failed folder: an input never takes such a name.
        reserved = (ERROR_SUFFIX,) if folder is self.sink.failed_dir else ()
        base, number = name, 1
        while True:
            candidate = numbered(base, number)
            if not (reserved and candidate.endswith(reserved)):
                try:
                    rename_noreplace_at(origin.fd, source, folder.fd, candidate)
                except FileExistsError:
                    pass
                except OSError as exc:
                    if exc.errno not in _NAME_REFUSED or base != name:
                        raise
                    base, number = shortened(name), 1  # this file system refuses the name's bytes
                    continue
                else:
                    return candidate
            number = _next_candidate(folder, base, number, reserved)

    def _rename_claim(self, claim: Claim, exits: int) -> None:
        folder = f"{exits}.{claim.stem}"
        if folder != claim.folder:
            self.work.rename(claim.folder, self.work, folder)
            claim.folder, claim.exits = folder, exits

    def _remove_folder(self, folder: str, stem: str) -> None:
        try:
            self.work.rmdir(folder)
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("a claim folder could not be removed", folder=folder, error=str(exc))
        self.work.fsync()
        self._release_stem(stem)

    def _mtime_ns(self, name: str) -> int:
        try:
            return self.work.lstat(name).st_mtime_ns
        except OSError:
            return 0


def _next_candidate(folder: Dir, base: str, taken_number: int, reserved: tuple[str, ...]) -> int:
    """The next candidate number after ``taken_number``: past the whole run of taken ones, found in a
    few checks (a name reused many times)."""

    def taken(step: int) -> bool:
        name = numbered(base, taken_number + step)
        return (bool(reserved) and name.endswith(reserved)) or folder.lexists(name)

    return taken_number + first_free(taken)
