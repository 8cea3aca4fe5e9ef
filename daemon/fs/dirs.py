"""Folders opened once, by descriptor: nothing an inbox writer renames or swaps redirects docsumd.

A path is looked up each time it is used, so a folder renamed away and replaced by a link (or by a
folder of someone else's) after start would send reads and moves somewhere else. A :class:`Dir` opens
its folder once, ``O_DIRECTORY | O_NOFOLLOW``, and every operation on the names in it goes through
that descriptor (``dir_fd=``, ``renameat2``). The configured path is looked at again only to notice
that the folder at it is no longer the one held (:meth:`Dir.change`): the source then stops taking
work and reports unhealthy until it is back, while what is in flight is settled through the
descriptors it holds.

A **private** folder (the work folder) must in addition be docsumd's alone: owned by its user and
writable by nobody else; otherwise :class:`~daemon.errors.ConfigError` (exit 2). Anyone else who can
write to it could plant or swap what docsumd reads and moves as its own.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from daemon.errors import ConfigError

_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
PRIVATE_MODE: Final = 0o700


class FolderChangedError(OSError):
    """The folder at the configured path is not the one docsumd holds (gone, a link, another folder)."""


class Dir:
    """One folder, held by descriptor. ``open()`` is idempotent; ``close()`` too."""

    def __init__(self, path: Path, *, key: str, private: bool = False) -> None:
        """``key``: the configuration key that names it (for messages); ``private``: see the module."""
        self.path = path
        self.key = key
        self.private = private
        self._fd: int | None = None
        self._identity: tuple[int, int] | None = None

    # -- holding ---------------------------------------------------------------------------------

    def open(self, *, create: bool = True) -> None:
        """Open the folder (creating it, mode 0700 if private, when missing and ``create``) and check
        it; :class:`ConfigError` naming the key if it is a link, not a folder, or (private) not ours."""
        if self._fd is not None:
            return
        if create and not os.path.lexists(self.path):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileExistsError):  # made meanwhile: checked below like any other
                os.mkdir(self.path, PRIVATE_MODE if self.private else 0o777)
        try:
            fd = os.open(self.path, _DIR_FLAGS)
        except OSError as exc:
            raise ConfigError(f"{self.key} ({self.path}): {_why_not_a_folder(exc)}") from exc
        self._hold(fd)

    def fd_in(self, parent: Dir) -> None:
        """Open the folder by its name in ``parent`` (never through a link), checked as :meth:`open`."""
        if self._fd is not None:
            return
        self._hold(os.open(self.path.name, _DIR_FLAGS, dir_fd=parent.fd))

    def _hold(self, fd: int) -> None:
        """Keep ``fd`` as the folder's descriptor once checked (closed if the check fails)."""
        try:
            found = os.fstat(fd)
            if self.private:
                _check_private(found, self.key, self.path)
        except BaseException:
            os.close(fd)
            raise
        self._fd, self._identity = fd, (found.st_dev, found.st_ino)

    def close(self) -> None:
        """Let go of the descriptor."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None

    @property
    def fd(self) -> int:
        """The folder's descriptor (``open()`` first)."""
        if self._fd is None:
            raise RuntimeError(f"{self.key} is not open")
        return self._fd

    @property
    def device(self) -> int:
        """The file system the held folder is on."""
        return os.fstat(self.fd).st_dev

    def change(self) -> str | None:
        """None while the configured path still names the held folder; else what it is now, in words."""
        try:
            now = os.lstat(self.path)
        except FileNotFoundError:
            return "it is gone"
        except OSError as exc:
            return f"it cannot be looked at ({exc.strerror or exc})"
        if stat.S_ISLNK(now.st_mode):
            return "it was replaced by a symbolic link"
        if not stat.S_ISDIR(now.st_mode):
            return "it was replaced by something that is not a folder"
        if (now.st_dev, now.st_ino) != self._identity:
            return "it was replaced by another folder"
        if self.private and (reason := _private_problem(now)) is not None:
            return reason
        return None

    def reopen(self) -> None:
        """Hold the folder now at the path instead (a re-created inbox); errors as :meth:`open`."""
        old = self._fd
        self._fd = None
        try:
            self.open(create=False)
        except BaseException:
            self._fd = old
            raise
        if old is not None:
            with contextlib.suppress(OSError):
                os.close(old)

    # -- names in it -----------------------------------------------------------------------------

    def lstat(self, name: str) -> os.stat_result:
        """``lstat`` of ``name`` in the folder (a link is described, never followed)."""
        return os.stat(name, dir_fd=self.fd, follow_symlinks=False)

    def lexists(self, name: str) -> bool:
        """Whether anything (even a dangling link) has ``name`` in the folder."""
        try:
            self.lstat(name)
        except FileNotFoundError:
            return False
        return True

    @contextlib.contextmanager
    def scandir(self, name: str = ".") -> Iterator[Iterator[os.DirEntry[str]]]:
        """The entries of the folder (or of the sub-folder ``name``, never through a link).

        A descriptor of its own each time: ``os.scandir(fd)`` shares the read position of ``fd``
        between every listing at once (the I/O threads list concurrently)."""
        fd = os.open(name, _DIR_FLAGS, dir_fd=self.fd)
        try:
            with os.scandir(fd) as entries:
                yield entries
        finally:
            os.close(fd)

    def listdir(self, name: str = ".") -> list[str]:
        """The names in the folder, or in its sub-folder ``name`` (never through a link)."""
        with self.scandir(name) as entries:
            return [entry.name for entry in entries]

    def mkdir(self, name: str, mode: int = PRIVATE_MODE) -> None:
        """Create the sub-folder ``name``."""
        os.mkdir(name, mode, dir_fd=self.fd)

    def rmdir(self, name: str) -> None:
        """Remove the empty sub-folder ``name``."""
        os.rmdir(name, dir_fd=self.fd)

    def rename(self, name: str, target: Dir, new_name: str) -> None:
        """Rename ``name`` here to ``new_name`` in ``target`` (may replace: only for our own names)."""
        os.rename(name, new_name, src_dir_fd=self.fd, dst_dir_fd=target.fd)

    def fsync(self) -> None:
        """Make renames in the folder durable."""
        os.fsync(self.fd)


def _why_not_a_folder(exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return "it is a symbolic link; name the folder itself"
    if exc.errno == errno.ENOTDIR:
        return "it is not a folder"
    return f"cannot open it: {exc.strerror or exc}"


def _private_problem(found: os.stat_result) -> str | None:
    if found.st_uid != os.geteuid():
        return f"it is owned by uid {found.st_uid}, not by docsumd's user (uid {os.geteuid()})"
    if found.st_mode & 0o022:
        return f"its mode is {stat.S_IMODE(found.st_mode):04o}: others can write to it"
    return None


def _check_private(found: os.stat_result, key: str, path: Path) -> None:
    reason = _private_problem(found)
    if reason is not None:
        raise ConfigError(
            f"{key} ({path}) must be docsumd's alone (owned by its user, mode 0700): {reason}. "
            "Remove it, or chown/chmod it, and start again"
        )
