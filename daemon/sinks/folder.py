"""Result and failure files, written atomically.

A record is written to a hidden temporary file in the target folder, flushed to disk, and renamed
into place; the folder itself is then synced. A reader therefore sees either no file or the whole
file, and after a power cut the rename is durable before the input is acknowledged. Running out of
file descriptors is waited out (:mod:`daemon.fd_exhaustion`); any other write error is fatal.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Final

from daemon.durable import write_atomic
from daemon.errors import SinkError
from daemon.fd_exhaustion import retry_on_fd_exhaustion
from daemon.records import Record, encode_record

RESULT_SUFFIX: Final = ".summary.json"
ERROR_SUFFIX: Final = ".error.json"


def write_json_atomic(path: Path, record: Record) -> None:
    """Write ``record`` as JSON to ``path`` atomically and durably (:func:`daemon.durable.write_atomic`)."""
    write_atomic(path, encode_record(record, pretty=True))


class FolderSink:
    """Writes ``outbox/NAME.summary.json`` results and ``failed/NAME.error.json`` failure records."""

    def __init__(self, outbox: Path, failed: Path) -> None:
        self.outbox = outbox
        self.failed = failed

    async def start(self) -> None:
        """Create the folders (idempotent)."""
        self.outbox.mkdir(parents=True, exist_ok=True)
        self.failed.mkdir(parents=True, exist_ok=True)

    def result_path(self, name: str) -> Path:
        """Where the result for input ``name`` goes."""
        return self.outbox / f"{name}{RESULT_SUFFIX}"

    def error_path(self, name: str) -> Path:
        """Where the failure record for input ``name`` goes."""
        return self.failed / f"{name}{ERROR_SUFFIX}"

    async def stop(self) -> None:
        """Nothing to release."""

    async def write_result(
        self, name: str, record: Record, headers: Sequence[tuple[str, bytes]] = ()
    ) -> Path:
        """Write a result record; raises :class:`SinkError` if it cannot be written (headers: unused)."""
        return await self._write(self.result_path(name), record)

    async def write_failure(
        self, name: str, record: Record, headers: Sequence[tuple[str, bytes]] = ()
    ) -> Path:
        """Write a failure record; raises :class:`SinkError` if it cannot be written (headers: unused)."""
        return await self._write(self.error_path(name), record)

    async def _write(self, path: Path, record: Record) -> Path:
        try:
            # Out of file descriptors: wait for some to come back (a rewrite is harmless).
            await retry_on_fd_exhaustion(lambda: write_json_atomic(path, record), where="writing a record")
        except OSError as exc:
            raise SinkError(f"cannot write {path}: {exc}") from exc
        return path
