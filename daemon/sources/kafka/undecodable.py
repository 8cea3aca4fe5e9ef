"""Records the Kafka client cannot decode become dead letters, instead of a consumer that fails forever.

Kafka's record format says a header's name is a UTF-8 string, but brokers do not check it: any
producer may write other bytes there. aiokafka decodes every record of a fetched batch while it hands
records out, and a name that is not UTF-8 raises ``UnicodeDecodeError`` out of ``getmany`` (a
malformed record, ``CorruptRecordException``). The consumer's position stays where it was, so every
later fetch fails at the same record, and after a restart too: one message would stop the service
for good. Neither can be skipped from outside the client: the error names no partition or offset,
and the records of the same batch before the bad one are lost with the exception.

:func:`install` makes aiokafka's fetcher read record batches through :class:`_TolerantRecords`.
A batch that fails while being decoded yields, in place of the record that failed and the rest of
the batch (aiokafka cannot decode past it), one stand-in record whose offset is the batch's last
offset and whose value is an :class:`UndecodableRecords` (no producer can send a Python object, so
it cannot be forged). The records before it come through as usual; the source turns the stand-in
into a dead letter (``invalid_message``, naming the offsets), and committing it moves the group's
offset past the whole batch, so a restart never reads it again.

A compressed batch is decompressed when it is iterated (aiokafka's batches do it in ``__iter__``),
so the wrapper's ``__iter__`` must call the batch's own: without it the compressed bytes were parsed
as records, and every compressed batch, gzip included, became a dead letter. A compressed payload that
does not decompress (garbage inside valid framing: ``cramjam.DecompressionError``, ``zlib.error``;
a codec id Kafka does not define: ``UnsupportedCodecError``) and a batch whose CRC does not match its
bytes are the input's fault too: the whole batch becomes one stand-in. A codec whose library is
missing is a broken installation, not an input: this module imports cramjam (aiokafka's snappy, lz4
and zstd codecs), so a daemon without it does not start.

This replaces one name in ``aiokafka.consumer.fetcher`` (the ``MemoryRecords`` it builds its record
sets with); the tests check it with a real broker and forged batches. Not bounded here: how large a
compressed batch inflates to (aiokafka decompresses a whole batch into memory; see the README's
Kafka section).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

import aiokafka.consumer.fetcher as _fetcher
import cramjam
from aiokafka.errors import CorruptRecordException, UnsupportedCodecError
from aiokafka.record.memory_records import MemoryRecords

from daemon.errors import DocumentError

_DECODING_ERRORS: Final = (UnicodeDecodeError, CorruptRecordException)
"""What a record's own bytes can make aiokafka raise while it decodes them."""

_DECOMPRESSION_ERRORS: Final = (
    UnsupportedCodecError,  # a codec id that Kafka does not define (5-7)
    zlib.error,  # gzip: garbage inside a gzip header
    EOFError,  # gzip: a truncated stream
    OSError,  # gzip: not a gzip header at all (gzip.BadGzipFile)
    cramjam.DecompressionError,  # snappy, lz4, zstd: garbage inside valid framing
    CorruptRecordException,
)
"""What a batch's compressed payload can make aiokafka raise while it decompresses it."""


@dataclass(frozen=True, slots=True)
class UndecodableRecords:
    """The value of the stand-in record for the part of a batch the client could not decode."""

    first_offset: int
    """The offset after the last record of the batch that was decoded (the failing one, or a gap)."""
    last_offset: int
    """The batch's last offset: the stand-in record's own."""
    error: str
    """What the decoder raised."""

    def __len__(self) -> int:
        """No bytes of the batch come with it (aiokafka takes the value's length for its size)."""
        return 0

    def refusal(self) -> DocumentError:
        """The failure the stand-in's document gets: a dead letter that names the offsets skipped."""
        span = (
            f"offset {self.last_offset}"
            if self.first_offset >= self.last_offset
            else f"offsets {self.first_offset}-{self.last_offset}"
        )
        return DocumentError(
            "invalid_message",
            f"the Kafka client cannot decode the record at or after offset {self.first_offset} "
            f"({self.error}); {span} of this partition (the rest of its record batch) were skipped",
        )


@dataclass(frozen=True, slots=True)
class _StandIn:
    """A record as aiokafka's fetcher reads one (the fields ``PartitionRecords`` uses)."""

    offset: int
    timestamp: int
    timestamp_type: int
    value: UndecodableRecords
    key: None = None
    headers: tuple[()] = ()
    checksum: None = None


class _TolerantBatch:
    """A record batch whose records are handed out until one fails to decode; then one stand-in for
    the rest of the batch. Everything else is the batch's own."""

    def __init__(self, batch: Any) -> None:
        self._batch = batch
        self._next_offset: int = batch.base_offset
        self._done = False
        self._failure: Exception | None = None
        """Why the whole batch cannot be read (its CRC, its compressed payload), once known."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._batch, name)

    def validate_crc(self) -> bool:
        """Whether the batch's CRC matches; a mismatch makes the batch a stand-in instead of an error
        out of the fetcher (which would stop at this batch on every fetch)."""
        if not self._batch.validate_crc():
            self._failure = CorruptRecordException(
                f"the record batch's CRC does not match its bytes (CRC {self._batch.crc:#010x})"
            )
        return True

    def __iter__(self) -> Iterator[Any]:
        if self._failure is None:
            try:
                iter(self._batch)  # decompresses a compressed batch: aiokafka's batches do it here
            except _DECOMPRESSION_ERRORS as exc:
                self._failure = exc
        return self

    def __next__(self) -> Any:
        if self._done:
            raise StopIteration
        if self._failure is not None:
            self._done = True
            return self._stand_in(self._failure)
        try:
            record = next(self._batch)
        except StopIteration:
            self._done = True
            raise
        except _DECODING_ERRORS as exc:
            self._done = True  # the batch's own iterator cannot go past the record that failed
            return self._stand_in(exc)
        self._next_offset = record.offset + 1
        return record

    def _stand_in(self, exc: Exception) -> _StandIn:
        batch = self._batch
        last_offset = batch.next_offset - 1
        skipped = UndecodableRecords(
            first_offset=min(self._next_offset, last_offset),
            last_offset=last_offset,
            error=f"{type(exc).__name__}: {exc}"[:300],
        )
        return _StandIn(
            offset=last_offset,
            timestamp=batch.max_timestamp,
            timestamp_type=batch.timestamp_type,
            value=skipped,
        )


class _TolerantRecords:
    """aiokafka's ``MemoryRecords`` (a fetched record set), whose batches are :class:`_TolerantBatch`."""

    def __init__(self, buffer: bytes) -> None:
        self._records = MemoryRecords(buffer)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._records, name)

    def has_next(self) -> bool:
        """Whether another batch follows."""
        return bool(self._records.has_next())

    def next_batch(self) -> Any:
        """The next batch, or None (as ``MemoryRecords``)."""
        batch = self._records.next_batch()
        # Only v2 batches (Kafka 0.11 and later) have headers; legacy batches come through unchanged.
        return _TolerantBatch(batch) if batch is not None and getattr(batch, "magic", 0) >= 2 else batch


def install() -> None:
    """Make aiokafka's fetcher read batches through :class:`_TolerantRecords`. Idempotent."""
    _fetcher.MemoryRecords = _TolerantRecords


def undecodable(message: Any) -> UndecodableRecords | None:
    """What a consumed message stands in for, if it is a stand-in."""
    value = getattr(message, "value", None)
    return value if isinstance(value, UndecodableRecords) else None
