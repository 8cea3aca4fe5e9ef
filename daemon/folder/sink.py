"""Result and failure files, written atomically.

A record is written to a hidden temporary file in the target folder, flushed to disk, and renamed
into place; the folder itself is then synced. Both folders are opened once at start and written
only through their descriptors (:mod:`daemon.fs.dirs`): a folder swapped for a link later changes
nothing. A reader therefore sees either no file or the whole
file, and after a power cut the rename is durable before the input is acknowledged. Running out of
file descriptors is waited out (:mod:`daemon.ops.fd_exhaustion`).

Names: a record of key ``KEY`` is ``KEY.summary.json`` or ``KEY.error.json`` when ``KEY`` is UTF-8
and short enough; otherwise a readable prefix and a hash of the key stand in for it
(:func:`daemon.fs.names.record_stem`), so every name fits the file system. The folder source passes keys
that fit already (its claims' record stems).

Errors, per the policy of :mod:`daemon.errors`: a record that cannot be encoded, or whose name this
file system refuses, is that document's problem (:class:`~daemon.errors.DocumentError`); any other
failure to write (disk full, read-only, permissions, a write that hangs past the timeout) is the whole
folder's, and fatal (:class:`~daemon.errors.SinkError`).
"""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Final

from daemon.errors import DocumentError, SinkError
from daemon.fs.blocking_io import BlockingIO, file_io
from daemon.fs.dirs import Dir
from daemon.fs.durable import write_atomic, write_atomic_at
from daemon.fs.names import record_stem
from daemon.ops.fd_exhaustion import retry_on_fd_exhaustion
from daemon.records import Record, encode_record

RESULT_SUFFIX: Final = ".summary.json"
ERROR_SUFFIX: Final = ".error.json"
DEFAULT_IO_TIMEOUT: Final = 30.0
# Errors that say "not this name" rather than "not this folder".
_PER_NAME_ERRNOS: Final = frozenset({errno.ENAMETOOLONG, errno.EILSEQ})


def write_json_atomic(path: Path, record: Record) -> None:
    """Write ``record`` as JSON to ``path`` atomically and durably (``fs.durable.write_atomic``)."""
    write_atomic(path, encode_record(record, pretty=True))


def record_file_name(key: str, suffix: str) -> str:
    """The file name of the record of ``key``: ``KEY`` + ``suffix``, or its stand-in + ``suffix``."""
    return record_stem(key) + suffix


class FolderSink:
    """Writes ``outbox/KEY.summary.json`` results and ``failed/KEY.error.json`` failure records."""

    def __init__(
        self,
        outbox: Path,
        failed: Path,
        *,
        io_timeout: float = DEFAULT_IO_TIMEOUT,
        io: BlockingIO | None = None,
        keys: tuple[str, str] = ("outbox", "failed"),
    ) -> None:
        """Writes run on ``io`` (the process's file I/O pool by default), each within ``io_timeout``.
        ``keys``: what the two folders are called in messages (their configuration keys)."""
        self.outbox = outbox
        self.failed = failed
        self.outbox_dir = Dir(outbox, key=keys[0])
        self.failed_dir = Dir(failed, key=keys[1])
        self.io_timeout = io_timeout
        self._io = io or file_io()

    async def start(self) -> None:
        """Create the folders and open them (idempotent); :class:`~daemon.errors.ConfigError` if one
        is a link or not a folder."""
        self.outbox_dir.open()
        self.failed_dir.open()

    def result_name(self, key: str) -> str:
        """The file name of the result for ``key`` (in :attr:`outbox_dir`)."""
        return record_file_name(key, RESULT_SUFFIX)

    def error_name(self, key: str) -> str:
        """The file name of the failure record for ``key`` (in :attr:`failed_dir`)."""
        return record_file_name(key, ERROR_SUFFIX)

    def result_path(self, key: str) -> Path:
        """Where the result for ``key`` goes."""
        return self.outbox / record_file_name(key, RESULT_SUFFIX)

    def error_path(self, key: str) -> Path:
        """Where the failure record for ``key`` goes."""
        return self.failed / record_file_name(key, ERROR_SUFFIX)

    async def stop(self) -> None:
        """Close the folders (idempotent; ``start()`` opens them again)."""
        self.outbox_dir.close()
        self.failed_dir.close()

    async def write_result(self, key: str, record: Record) -> Path:
        """Write a result record. :class:`DocumentError` if this record cannot be written,
        :class:`SinkError` if no record can."""
        return await self._write(self.outbox_dir, self.result_name(key), record)

    async def write_failure(self, key: str, record: Record) -> Path:
        """Write a failure record. :class:`DocumentError` if this record cannot be written,
        :class:`SinkError` if no record can."""
        return await self._write(self.failed_dir, self.error_name(key), record)

    async def _write(self, folder: Dir, name: str, record: Record) -> Path:
        path = folder.path / name
        try:
            data = encode_record(record, pretty=True)
        except (TypeError, ValueError, RecursionError) as exc:
            raise DocumentError("internal_error", f"its record cannot be encoded as JSON: {exc!r}") from exc
        try:
            # Out of file descriptors: wait for some to come back (a rewrite is harmless).
            await retry_on_fd_exhaustion(
                lambda: write_atomic_at(folder.fd, name, data),
                where="writing a record",
                run=lambda write: self._io.run(write, time_limit=self.io_timeout),
            )
        except TimeoutError as exc:
            raise SinkError(f"cannot write {path}: the write took longer than {self.io_timeout:g} s") from exc
        except OSError as exc:
            if exc.errno in _PER_NAME_ERRNOS:
                message = f"cannot write its record {path.name!r}: {exc}"
                raise DocumentError("internal_error", message) from exc
            raise SinkError(f"cannot write {path}: {exc}") from exc
        return path
