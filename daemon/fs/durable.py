"""Durable file operations: what is written or moved survives a crash or a power cut.

Shared by the folder sink (atomic result files) and the folder source (claiming inputs, moving
acknowledged ones). Every name made here stays within the file system's 255 bytes
(:mod:`daemon.fs.names`), and :func:`rename_noreplace` never replaces what is already there.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import secrets
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Final

from daemon.fs.names import temp_name

_CREATE_FLAGS: Final = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_AT_FDCWD: Final = -100
_RENAME_NOREPLACE: Final = 1
_RENAMEAT2_UNSUPPORTED: Final = frozenset({errno.ENOSYS, errno.EINVAL, errno.ENOTSUP})
# Serialises the check-then-rename fallback between our own threads (file systems without
# renameat2's RENAME_NOREPLACE; docsumd is the only writer of the folders it renames into).
_fallback_lock = threading.Lock()


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically and durably (:func:`write_atomic_at` in its folder)."""
    folder = os.open(path.parent, _DIR_FLAGS)
    try:
        write_atomic_at(folder, path.name, data)
    finally:
        os.close(folder)


def write_atomic_at(folder: int, name: str, data: bytes) -> None:
    """Write ``data`` as ``name`` in the folder open as ``folder``, atomically and durably: a hidden
    temporary file in that folder, flushed and synced, renamed into place, then the folder synced. A
    reader sees no file or all of it. Only through the descriptor: a swapped path changes nothing.

    The file gets the mode any new file gets, 0666 less the process umask (0640 under the unit's
    ``UMask=0027``), so a reader group set up by the operator can read results."""
    fd, tmp_name = _create_hidden(folder, name)
    try:
        with os.fdopen(fd, "wb") as tmp:
            tmp.write(data)
            tmp.flush()
            os.fsync(tmp.fileno())
        os.replace(tmp_name, name, src_dir_fd=folder, dst_dir_fd=folder)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name, dir_fd=folder)
        raise
    os.fsync(folder)


def _create_hidden(folder: int, target: str) -> tuple[int, str]:
    """Create and open a new hidden temporary file in ``folder`` beside ``target``; its name fits in
    255 bytes whatever the length of ``target`` (:func:`daemon.fs.names.temp_name`).

    Not ``tempfile.mkstemp``: it always creates 0600, whatever the umask. Opening with mode 0666 lets
    the kernel apply the umask (and a folder's default ACL) as for any other new file; O_EXCL and a
    random name keep the creation safe the way mkstemp's is.
    """
    while True:
        name = temp_name(target, secrets.token_hex(6))
        try:
            return os.open(name, _CREATE_FLAGS, 0o666, dir_fd=folder), name
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
    rename_noreplace_at(_AT_FDCWD, str(source), _AT_FDCWD, str(target))


def rename_noreplace_at(source_dir: int, source: str, target_dir: int, target: str) -> None:
    """:func:`rename_noreplace` of ``source`` in the folder open as ``source_dir`` to ``target`` in
    the folder open as ``target_dir`` (``renameat2``: names resolved from the descriptors only)."""
    if _renameat2 is not None:
        names = os.fsencode(source), os.fsencode(target)
        result = _renameat2(source_dir, names[0], target_dir, names[1], _RENAME_NOREPLACE)
        if result == 0:
            return
        code = ctypes.get_errno()
        if code not in _RENAMEAT2_UNSUPPORTED:
            raise OSError(code, os.strerror(code), source, None, target)
    with _fallback_lock:
        if _lexists_at(target_dir, target):
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), target)
        os.rename(source, target, src_dir_fd=_dir_fd(source_dir), dst_dir_fd=_dir_fd(target_dir))


def _dir_fd(fd: int) -> int | None:
    return None if fd == _AT_FDCWD else fd


def _lexists_at(folder: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=_dir_fd(folder), follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def fsync_dir(folder: Path) -> None:
    """Make renames in ``folder`` durable."""
    fd = os.open(folder, _DIR_FLAGS)
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
