"""Reading a file that someone else may have put in place: no link followed, no blocking, regular only.

The inbox is written by others. What looks like a file there may be a symbolic link to something
outside it, a FIFO whose open or read blocks forever, or a device. :func:`read_regular_file` refuses
all of those before reading a byte: it checks the entry with ``lstat``, opens it with
``O_NOFOLLOW | O_NONBLOCK`` (a link is refused by the kernel, a FIFO cannot block the open), checks
the opened descriptor with ``fstat`` (the entry may have been swapped in between), and reads only from
that descriptor, at most one byte past the limit.

Bounding the time a read may take is the caller's part (:mod:`daemon.fs.blocking_io`).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Final

from daemon.errors import DocumentError
from daemon.ops.fd_exhaustion import is_fd_exhaustion, retry_on_fd_exhaustion

_OPEN_FLAGS: Final = (
    os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
)
_READ_CHUNK: Final = 1 << 20


class NotRegularFileError(Exception):
    """The entry is not a regular file; ``kind`` says what it is."""

    def __init__(self, kind: str) -> None:
        super().__init__(f"it is {kind}, not a regular file")
        self.kind = kind


def describe_mode(mode: int) -> str:
    """What a file of ``mode`` is, in words (for failure messages)."""
    kinds = (
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    )
    return next((words for test, words in kinds if test(mode)), "not a regular file")


def read_bounded(
    path: Path | str,
    limit: int,
    *,
    check_size: Callable[[int], None] | None = None,
    dir_fd: int | None = None,
    single_link: bool = False,
    follow_symlinks: bool = False,
) -> bytes:
    """The bytes of the regular file at ``path``, at most ``limit`` + 1 of them (so a caller can tell
    "over the limit"). ``check_size`` is called with the opened file's size before anything is read,
    and may raise to refuse it. Raises :class:`NotRegularFileError` for anything but a regular file and
    :class:`OSError` if it cannot be opened or read; never blocks on a FIFO, and follows no link
    unless ``follow_symlinks``. With ``dir_fd``, ``path`` is relative to that open folder
    (:mod:`daemon.fs.dirs`). With ``single_link``, a file with more than one hard link is refused
    too: in a folder others write to, it may be another name of a file elsewhere that they cannot
    read but docsumd can. With ``follow_symlinks``, a link to a regular file is read: for files the
    operator names (the config, an instruction file), never for the inbox."""
    mode = os.stat(path, dir_fd=dir_fd, follow_symlinks=follow_symlinks).st_mode
    if not stat.S_ISREG(mode):
        raise NotRegularFileError(describe_mode(mode))
    try:
        fd = os.open(path, _OPEN_FLAGS & ~os.O_NOFOLLOW if follow_symlinks else _OPEN_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow_symlinks:  # swapped for a link since the lstat
            raise NotRegularFileError("a symbolic link") from exc
        raise
    try:
        opened = os.fstat(fd)
        if not stat.S_ISREG(opened.st_mode):  # swapped for something else since the lstat
            raise NotRegularFileError(describe_mode(opened.st_mode))
        if single_link and opened.st_nlink > 1:
            raise NotRegularFileError(
                f"a file with {opened.st_nlink} hard links (another name of a file elsewhere)"
            )
        if check_size is not None:
            check_size(opened.st_size)
        return _read_up_to(fd, limit + 1, expected=opened.st_size)
    finally:
        os.close(fd)


def read_regular_file(
    path: Path | str, max_bytes: int, *, dir_fd: int | None = None, single_link: bool = False
) -> bytes:
    """An input's bytes (:func:`read_bounded`), or :class:`DocumentError`: ``not_regular``,
    ``unreadable``, ``too_large`` (refused from its size before it is read) or ``empty``."""
    try:
        data = read_bounded(
            path,
            max_bytes,
            check_size=lambda size: check_size(size, max_bytes),
            dir_fd=dir_fd,
            single_link=single_link,
        )
    except NotRegularFileError as exc:
        raise DocumentError("not_regular", f"the input is not read: {exc}") from exc
    except OSError as exc:
        if is_fd_exhaustion(exc):
            raise  # not the input's fault: the caller waits for descriptors and tries again
        raise DocumentError("unreadable", f"cannot read the input: {exc.strerror or exc}") from exc
    check_size(len(data), max_bytes)
    return data


def _read_up_to(fd: int, count: int, *, expected: int) -> bytes:
    """Up to ``count`` bytes from ``fd``, until end of file. A regular file usually comes whole in the
    first read (its ``expected`` size and one byte more, to see its end); then no second copy is made."""
    parts: list[bytes] = []
    left = count
    size = min(count, expected + 1)
    while left > 0:
        chunk = os.read(fd, min(left, size))
        if not chunk:
            break
        parts.append(chunk)
        left -= len(chunk)
        size = _READ_CHUNK
    return parts[0] if len(parts) == 1 else b"".join(parts)


def check_size(size_bytes: int, max_input_bytes: int) -> None:
    """Refuse a size before reading it. Raises DocumentError('too_large' or 'empty')."""
    if size_bytes > max_input_bytes:
        raise DocumentError(
            "too_large",
            f"input is {size_bytes} bytes, over the limit of {max_input_bytes} bytes "
            "(limits.max_input_bytes)",
        )
    if size_bytes == 0:
        raise DocumentError("empty", "input is empty (0 bytes)")


async def read_input_file(path: Path, max_input_bytes: int) -> bytes:
    """Read a file's bytes, refusing one over the limit before reading it into memory. Out of file
    descriptors, it waits and tries again (:mod:`daemon.ops.fd_exhaustion`): that is not the input's fault."""
    return await retry_on_fd_exhaustion(
        lambda: _read_input_file(path, max_input_bytes), where="reading an input"
    )


def _read_input_file(path: Path, max_input_bytes: int) -> bytes:
    try:
        with path.open("rb") as stream:
            check_size(os.fstat(stream.fileno()).st_size, max_input_bytes)
            # Read at most one byte past the limit: a file that grew since the check is still refused.
            data = stream.read(max_input_bytes + 1)
    except OSError as exc:
        if is_fd_exhaustion(exc):
            raise  # retried by the caller, never the document's failure
        raise DocumentError("unreadable", f"cannot read the input: {exc.strerror or exc}") from exc
    check_size(len(data), max_input_bytes)
    return data
