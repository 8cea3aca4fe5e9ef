"""Durable file operations: what is written or moved survives a crash or a power cut.

Shared by the folder sink (atomic result files) and the folder source (moving acknowledged inputs).
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically and durably: a hidden temporary file in the same folder,
    flushed and synced, renamed into place, then the folder synced. A reader sees no file or all of it.

    The file gets the mode any new file gets, 0666 less the process umask (0640 under the unit's
    ``UMask=0027``), so a reader group set up by the operator can read results."""
    fd, tmp_name = _create_hidden(path)
    try:
        with os.fdopen(fd, "wb") as tmp:
            tmp.write(data)
            tmp.flush()
            os.fsync(tmp.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def _create_hidden(path: Path) -> tuple[int, str]:
    """Create and open a new hidden temporary file beside ``path``.

    Not ``tempfile.mkstemp``: it always creates 0600, whatever the umask. Opening with mode 0666 lets
    the kernel apply the umask (and a folder's default ACL) as for any other new file; O_EXCL and a
    random name keep the creation safe the way mkstemp's is.
    """
    while True:
        name = str(path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp")
        try:
            return os.open(name, _CREATE_FLAGS, 0o666), name
        except FileExistsError:
            continue


def move_durably(source: Path, target: Path) -> None:
    """Rename ``source`` to ``target`` and make the rename durable in both folders."""
    os.replace(source, target)
    sync_move(source, target)


def sync_move(source: Path, target: Path) -> None:
    """Make a rename of ``source`` to ``target`` durable: sync both folders. Safe to repeat (the rename
    itself opens nothing, so only this part can run out of file descriptors)."""
    fsync_dir(target.parent)
    fsync_dir(source.parent)


def fsync_dir(folder: Path) -> None:
    """Make renames in ``folder`` durable."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
