"""The work folder: inputs are claimed out of the inbox before they are read, as maildir does.

Layout: ``WORK/K.STEM/NAME``, and ``WORK/K.STEM/SIDECAR`` for the options sidecar that applies.

* **Claiming** is one atomic rename of ``inbox/NAME`` into a new claim folder (then of its sidecar).
  What docsumd reads from then on is what it acknowledges: nobody can swap or rename over the file in
  the inbox any more, and a new file of the same name in the inbox is simply a new input.
* ``STEM`` is the claim's **record stem**: its result is ``outbox/STEM.summary.json``, its failure
  record ``failed/STEM.error.json``. It is chosen when claiming (:func:`daemon.names.record_stem`,
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

Every method here blocks on the file system: the folder source calls them on its I/O threads
(:mod:`daemon.blocking_io`), one at a time per claim.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from daemon.durable import fsync_dir, rename_noreplace
from daemon.errors import ConfigError
from daemon.logging import get_logger
from daemon.names import MAX_STEM_BYTES, first_free, numbered, record_stem, shortened
from daemon.records import display_name
from daemon.sinks.folder import ERROR_SUFFIX, FolderSink
from daemon.sources.inbox_names import is_sidecar_name, sidecar_names

log = get_logger(__name__)

FOLDER_MODE: Final = 0o700
"""The work folder and its claim folders are docsumd's alone."""
_CLAIM_FOLDER: Final = re.compile(r"(\d{1,6})\.(.+)", re.DOTALL)
# Names the file system refuses for what they hold, not for where they go: try a plain stand-in.
_NAME_REFUSED: Final = frozenset({errno.EILSEQ, errno.ENAMETOOLONG})


@dataclass(eq=False)
class Claim:
    """One claimed input: its original name, its record stem, its unclean-exit count, its folder."""

    name: str
    stem: str
    exits: int
    folder: Path
    sidecar: str | None = None
    sidecar_problem: str | None = None
    """Why a sidecar that exists could not be claimed (the document then fails ``invalid_options``)."""

    @property
    def document(self) -> Path:
        """Where the document is while claimed."""
        return self.folder / self.name

    @property
    def sidecar_path(self) -> Path | None:
        """Where its sidecar is while claimed, if it has one."""
        return None if self.sidecar is None else self.folder / self.sidecar


class WorkFolder:
    """Claims, recovers, settles and releases inputs (see the module's doc). Thread-safe."""

    def __init__(self, *, inbox: Path, work: Path, done: Path, sink: FolderSink) -> None:
        """``sink``: where the records go (a stem must be free in its outbox and failed folders)."""
        self.inbox = inbox
        self.path = work
        self.done = done
        self.sink = sink
        self._stems: set[str] = set()  # stems of every claim in the work folder
        self._lock = threading.Lock()

    def prepare(self) -> None:
        """Create the work folder (mode 0700) and check it is on the inbox's file system (a claim is a
        rename); :class:`ConfigError` if not."""
        self.path.mkdir(mode=FOLDER_MODE, parents=True, exist_ok=True)
        if os.stat(self.path).st_dev != os.stat(self.inbox).st_dev:
            raise ConfigError(
                f"sources.folder.work ({self.path}) must be on the same file system as the inbox "
                f"({self.inbox}): inputs are claimed into it by an atomic rename"
            )

    def remove_if_empty(self) -> None:
        """Remove the work folder if nothing is in it (tidy inbox between runs)."""
        with contextlib.suppress(OSError):  # not empty, or already gone: either is fine
            self.path.rmdir()

    # -- claiming --------------------------------------------------------------------------------

    def claim(self, name: str) -> Claim | None:
        """Claim ``inbox/NAME`` (and its sidecar); None if it is gone. Whatever the entry is now
        (file, link, FIFO, folder) is moved as it is: reading it decides what it is."""
        stem = self._reserve_stem(name)
        folder = self.path / f"1.{stem}"
        try:
            self._make_claim_folder(folder)
            try:
                os.rename(self.inbox / name, folder / name)
            except BaseException:
                folder.rmdir()
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

    def _make_claim_folder(self, folder: Path) -> None:
        try:
            folder.mkdir(mode=FOLDER_MODE)
        except FileNotFoundError:  # the work folder itself was removed under us: make it again
            self.path.mkdir(mode=FOLDER_MODE, parents=True, exist_ok=True)
            folder.mkdir(mode=FOLDER_MODE)

    def claim_sidecar(self, claim: Claim) -> None:
        """Claim the sidecar that applies to the claim's document (the first of its names that exists
        in the inbox), unless it has one. A sidecar that cannot be moved is noted on the claim."""
        if claim.sidecar is not None:
            return
        for sidecar in sidecar_names(claim.name):
            try:
                os.rename(self.inbox / sidecar, claim.folder / sidecar)
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
                return stem in self._stems or any(os.path.lexists(path) for path in self._record_paths(stem))

            stem = numbered(base, first_free(taken), limit=MAX_STEM_BYTES)
            self._stems.add(stem)
            return stem

    def _release_stem(self, stem: str) -> None:
        with self._lock:
            self._stems.discard(stem)

    def _record_paths(self, stem: str) -> tuple[Path, Path]:
        return self.sink.result_path(stem), self.sink.error_path(stem)

    # -- at start --------------------------------------------------------------------------------

    def recover(self) -> list[Claim]:
        """The claims an earlier run left, oldest document first. Empty claim folders (a crash while
        claiming) are removed; a sidecar whose document was already settled follows it."""
        found: list[tuple[int, Claim]] = []
        with os.scandir(self.path) as entries:
            folders = [(entry.name, entry.is_dir(follow_symlinks=False)) for entry in entries]
        for folder_name, is_dir in sorted(folders):
            parsed = _CLAIM_FOLDER.fullmatch(folder_name)
            if parsed is None or not is_dir:
                log.warning("not a claim: left alone in the work folder", entry=display_name(folder_name))
                continue
            claim = self._recover_one(self.path / folder_name, int(parsed[1]), parsed[2])
            if claim is not None:
                found.append((_mtime_ns(claim.document), claim))
        return [claim for _, claim in sorted(found, key=lambda pair: pair[0])]

    def _recover_one(self, folder: Path, exits: int, stem: str) -> Claim | None:
        with self._lock:
            self._stems.add(stem)
        names = sorted(os.listdir(folder))
        documents = [name for name in names if not is_sidecar_name(name)]
        sidecars = [name for name in names if is_sidecar_name(name)]
        if not documents:
            self._finish_orphans(folder, stem, sidecars)
            return None
        if len(documents) > 1:
            log.warning("a claim folder holds more than one document; the others stay", folder=str(folder))
        return Claim(documents[0], stem, exits, folder, sidecars[0] if sidecars else None)

    def _finish_orphans(self, folder: Path, stem: str, sidecars: list[str]) -> None:
        """A claim whose document was settled, left by a run that ended before its sidecar followed
        (or before the empty folder was removed): the sidecar goes where the document's record says."""
        target = self.sink.failed if os.path.lexists(self.sink.error_path(stem)) else self.done
        for sidecar in sidecars:
            log.warning("an options sidecar follows its settled document", sidecar=display_name(sidecar))
            self._move_free(folder / sidecar, target, sidecar)
        if sidecars:
            fsync_dir(target)
        self._remove_folder(folder, stem)

    def bump(self, claim: Claim) -> None:
        """Count one more unclean exit for a recovered claim: ``K.STEM`` becomes ``K+1.STEM``."""
        self._rename_claim(claim, claim.exits + 1)

    def sync(self) -> None:
        """Make the renames in the work folder durable (after :meth:`bump` of every recovered claim)."""
        fsync_dir(self.path)

    # -- settling and giving back ------------------------------------------------------------------

    def settle(self, claim: Claim, target: Path) -> str | None:
        """Move the claim's document, then its sidecar, to ``target`` under names free there; remove
        the claim. In the failed folder no input is named like a failure record (``*.error.json``).
        Returns the document's new name (None if it was no longer in the claim)."""
        moved: str | None = None
        try:
            moved = self._move_free(claim.document, target, claim.name)
        except FileNotFoundError:
            log.warning("the claimed input vanished from the work folder", doc_id=display_name(claim.name))
        sidecar = claim.sidecar_path
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
        fsync_dir(target)
        self._remove_folder(claim.folder, claim.stem)
        return moved

    def release(self, claim: Claim) -> bool:
        """A clean stop: give the claim back to the inbox (document and sidecar, under their names)
        and return True. If a new file took either name there, keep the claim with its count of
        consecutive unclean exits back at 0, and return False."""
        moves = [(claim.document, self.inbox / claim.name)]
        if claim.sidecar is not None:
            moves.append((claim.folder / claim.sidecar, self.inbox / claim.sidecar))
        done: list[tuple[Path, Path]] = []
        try:
            for source, target in moves:
                rename_noreplace(source, target)
                done.append((source, target))
        except FileExistsError:
            for source, target in reversed(done):
                rename_noreplace(target, source)
            self._rename_claim(claim, 0)
            return False
        except FileNotFoundError:
            pass  # nothing (more) to give back
        self._remove_folder(claim.folder, claim.stem)
        return True

    def _move_free(self, source: Path, folder: Path, name: str) -> str:
        """Rename ``source`` into ``folder`` as ``name``, else ``name~2``, ``name~3``...: the first
        that is free, never over anything; returns the name it got."""
        # Failure records are *.error.json in the failed folder: an input never takes such a name.
        reserved = (ERROR_SUFFIX,) if folder == self.sink.failed else ()
        base, number = name, 1
        while True:
            candidate = numbered(base, number)
            if not (reserved and candidate.endswith(reserved)):
                try:
                    rename_noreplace(source, folder / candidate)
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
        folder = self.path / f"{exits}.{claim.stem}"
        if folder != claim.folder:
            os.rename(claim.folder, folder)
            claim.folder, claim.exits = folder, exits

    def _remove_folder(self, folder: Path, stem: str) -> None:
        try:
            folder.rmdir()
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("a claim folder could not be removed", folder=str(folder), error=str(exc))
        fsync_dir(self.path)
        self._release_stem(stem)


def _next_candidate(folder: Path, base: str, taken_number: int, reserved: tuple[str, ...]) -> int:
    """The next candidate number after ``taken_number``: past the whole run of taken ones, found in a
    few checks (a name reused many times)."""

    def taken(step: int) -> bool:
        name = numbered(base, taken_number + step)
        return (bool(reserved) and name.endswith(reserved)) or os.path.lexists(folder / name)

    return taken_number + first_free(taken)


def _mtime_ns(path: Path) -> int:
    try:
        return os.lstat(path).st_mtime_ns
    except OSError:
        return 0
