"""Durable file operations: what is written or moved survives a crash or a power cut.

Shared by the folder sink (atomic result files) and the folder source (moving acknowledged inputs).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically and durably: a hidden temporary file in the same folder,
    flushed and synced, renamed into place, then the folder synced. A reader sees no file or all of it."""
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
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


def move_durably(source: Path, target: Path) -> None:
    """Rename ``source`` to ``target`` and make the rename durable in both folders."""
    os.replace(source, target)
    fsync_dir(target.parent)
    fsync_dir(source.parent)


def fsync_dir(folder: Path) -> None:
    """Make renames in ``folder`` durable."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
