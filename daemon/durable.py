"""Durable file operations: what is written or moved survives a crash or a power cut.

Shared by the folder sink (atomic result files) and the folder source (claiming inputs, moving
acknowledged ones). Every name made here stays within the file system's 255 bytes
(:mod:`daemon.names`), and :func:`rename_noreplace` never replaces what is already there.
"""

from __future__ import annotations

import ctypes
import errno
import os
import secrets
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Final

from daemon.names import temp_name

_CREATE_FLAGS: Final = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
_AT_FDCWD: Final = -100
_RENAME_NOREPLACE: Final = 1
_RENAMEAT2_UNSUPPORTED: Final = frozenset({errno.ENOSYS, errno.EINVAL, errno.ENOTSUP})
# Serialises the check-then-rename fallback between our own threads (file systems without
# renameat2's RENAME_NOREPLACE; docsumd is the only writer of the folders it renames into).
_fallback_lock = threading.Lock()


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
    """Create and open a new hidden temporary file beside ``path``; its name fits in 255 bytes
    whatever the length of ``path``'s (:func:`daemon.names.temp_name`).

    Not ``tempfile.mkstemp``: it always creates 0600, whatever the umask. Opening with mode 0666 lets
    the kernel apply the umask (and a folder's default ACL) as for any other new file; O_EXCL and a
    random name keep the creation safe the way mkstemp's is.
    """
    while True:
        name = str(path.parent / temp_name(path.name, secrets.token_hex(6)))
        try:
            return os.open(name, _CREATE_FLAGS, 0o666), name
        except FileExistsError:
            continue


def move_durably(source: Path, target: Path) -> None:
    """Rename ``source`` to ``target`` and make the rename durable in both folders."""
    os.replace(source, target)
    fsync_dir(target.parent)
    fsync_dir(source.parent)


def rename_noreplace(source: Path, target: Path) -> None:
    """Rename ``source`` to ``target`` atomically, unless ``target`` exists: then
    :class:`FileExistsError`, and nothing changed. Not durable by itself (sync the folders after).

    Linux's ``renameat2(RENAME_NOREPLACE)`` where the file system has it; elsewhere a check and a
    rename under a lock, which is exact against our own threads.
    """
    if _renameat2 is not None:
        result = _renameat2(_AT_FDCWD, os.fsencode(source), _AT_FDCWD, os.fsencode(target), _RENAME_NOREPLACE)
        if result == 0:
            return
        code = ctypes.get_errno()
        if code not in _RENAMEAT2_UNSUPPORTED:
            raise OSError(code, os.strerror(code), str(source), None, str(target))
    with _fallback_lock:
        if os.path.lexists(target):
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(target))
        os.rename(source, target)


def fsync_dir(folder: Path) -> None:
    """Make renames in ``folder`` durable."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _load_renameat2() -> Callable[..., int] | None:
    """glibc's ``renameat2`` (2.28 and later), or None where the C library lacks it."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        function = libc.renameat2
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    function.restype = ctypes.c_int
    renameat2: Callable[..., int] = function
    return renameat2


_renameat2 = _load_renameat2()
