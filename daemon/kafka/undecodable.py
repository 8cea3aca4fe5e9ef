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

A compressed batch is also bounded before aiokafka inflates it (:func:`check_inflated_size`):
aiokafka decompresses a whole batch into memory, and the fetch sizes and the broker's
``message.max.bytes`` bound only the compressed bytes, so a 1 MiB zstd batch of zeros could carry
32 GiB, get the daemon OOM-killed, and be read again after every restart. The batch is inflated
first into a buffer of at most the limit (gzip as a stream into nothing; snappy's blocks state their
length; lz4 and zstd into a buffer that grows 4x from 16x the compressed size and never past the
limit), and a batch that inflates further becomes one stand-in, as a corrupt one does. A batch that
fits is then decompressed a second time by aiokafka (the cost of not reaching into its internals).

This replaces one name in ``aiokafka.consumer.fetcher`` (the ``MemoryRecords`` it builds its record
sets with); the tests check it with a real broker and forged batches.
"""

from __future__ import annotations

import functools
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


class InflationLimitExceeded(Exception):
    """A compressed record batch inflates past the source's limit (a decompression bomb, or a batch
    larger than the limit allows)."""


_DECOMPRESSION_ERRORS: Final = (
    InflationLimitExceeded,
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


_V2_HEADER_BYTES: Final = 61
"""A v2 record batch's header (offset, length, epoch, magic, CRC, attributes, ...) before its records."""
_CODEC_MASK: Final = 0x07
_GZIP, _SNAPPY, _LZ4, _ZSTD = 1, 2, 3, 4
_XERIAL_MAGIC: Final = b"\x82SNAPPY\x00"
_STREAM_CHUNK: Final = 1 << 20
_FIRST_GUESS_RATIO: Final = 16
_GROWTH: Final = 4


def check_inflated_size(batch: memoryview, limit: int) -> None:
    """Raise :class:`InflationLimitExceeded` if the v2 record batch ``batch`` (its whole bytes) is
    compressed and its records inflate past ``limit`` bytes; peak memory stays within about ``limit``.
    A payload that does not decompress raises what its decoder raises (one of the errors aiokafka's
    own decoders raise for it)."""
    codec = int.from_bytes(batch[21:23], "big") & _CODEC_MASK
    payload = batch[_V2_HEADER_BYTES:]
    if codec == _GZIP:
        inflated = _gzip_size(payload, limit)
    elif codec == _SNAPPY:
        inflated = _snappy_size(bytes(payload))
    elif codec in (_LZ4, _ZSTD):
        inflated = _buffered_size(cramjam.lz4 if codec == _LZ4 else cramjam.zstd, bytes(payload), limit)
    else:
        return  # not compressed, or a codec id aiokafka refuses on its own
    if inflated > limit:
        raise InflationLimitExceeded(f"the record batch inflates past {limit} bytes")


def _gzip_size(payload: memoryview, limit: int) -> int:
    """Bytes the gzip members of ``payload`` inflate to, counted up to just past ``limit``."""
    total, data = 0, bytes(payload)
    inflater = zlib.decompressobj(wbits=31)
    while total <= limit:
        out = inflater.decompress(data, _STREAM_CHUNK)
        total += len(out)
        data = inflater.unconsumed_tail
        if inflater.eof:
            data = inflater.unused_data
            if not data:
                break
            inflater = zlib.decompressobj(wbits=31)  # the next gzip member
        elif not data and len(out) < _STREAM_CHUNK:
            break  # truncated: aiokafka's decoder says so
    return total


def _snappy_size(payload: bytes) -> int:
    """Bytes ``payload`` (raw snappy, or Kafka's xerial framing of raw blocks) inflates to, as its
    blocks state it: nothing is inflated."""
    if not (payload.startswith(_XERIAL_MAGIC) and len(payload) >= 16):
        return int(cramjam.snappy.decompress_raw_len(payload))
    total, cursor = 0, 16
    while cursor + 4 <= len(payload):
        size = int.from_bytes(payload[cursor : cursor + 4], "big", signed=True)
        cursor += 4
        total += int(cramjam.snappy.decompress_raw_len(payload[cursor : cursor + max(size, 0)]))
        cursor += max(size, 0)
    return total


_BUFFER_FULL: Final = "failed to write whole buffer"
"""cramjam's error when ``decompress_into``'s buffer is too small (Rust's ``WriteZero``); any other
error is a payload that does not decompress."""


def _buffered_size(codec: Any, payload: bytes, limit: int) -> int:
    """Bytes ``payload`` inflates to with ``codec`` (cramjam's lz4 frames or zstd), into a buffer that
    grows up to ``limit + 1`` bytes; ``limit + 1`` means more than ``limit``."""
    size = min(limit + 1, max(_STREAM_CHUNK, _FIRST_GUESS_RATIO * len(payload)))
    while True:
        try:
            return int(codec.decompress_into(payload, bytearray(size)))
        except cramjam.DecompressionError as exc:
            if _BUFFER_FULL not in str(exc):
                raise  # corrupt: aiokafka's decoder would fail the same way
            if size > limit:
                return size
            size = min(limit + 1, size * _GROWTH)


def _crc_failure(batch: Any) -> CorruptRecordException | None:
    """The failure of a batch whose CRC does not match its bytes, or None."""
    if batch.validate_crc():
        return None
    return CorruptRecordException(f"the record batch's CRC does not match its bytes (CRC {batch.crc:#010x})")


class _TolerantBatch:
    """A record batch whose records are handed out until one fails to decode; then one stand-in for
    the rest of the batch. Everything else is the batch's own."""

    def __init__(self, batch: Any, failure: Exception | None = None) -> None:
        self._batch = batch
        self._next_offset: int = batch.base_offset
        self._done = False
        self._failure: Exception | None = failure
        """Why the whole batch cannot be read (its size, CRC or compressed payload), once known."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._batch, name)

    def validate_crc(self) -> bool:
        """Whether the batch's CRC matches; a mismatch makes the batch a stand-in instead of an error
        out of the fetcher (which would stop at this batch on every fetch)."""
        if self._failure is None:
            self._failure = _crc_failure(self._batch)
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
    """aiokafka's ``MemoryRecords`` (a fetched record set), whose batches are :class:`_TolerantBatch`,
    each compressed one checked to inflate to at most ``max_inflated_bytes``."""

    def __init__(self, buffer: bytes, *, max_inflated_bytes: int) -> None:
        self._records = MemoryRecords(buffer)
        self._buffer = memoryview(buffer)
        self._cursor = 0
        """Where the next batch starts: ``MemoryRecords`` hands batches out in order, back to back."""
        self._max_inflated_bytes = max_inflated_bytes

    def __getattr__(self, name: str) -> Any:
        return getattr(self._records, name)

    def has_next(self) -> bool:
        """Whether another batch follows."""
        return bool(self._records.has_next())

    def next_batch(self) -> Any:
        """The next batch, or None (as ``MemoryRecords``)."""
        start = self._cursor
        batch = self._records.next_batch()
        if batch is None:
            return None
        # Every batch, legacy or v2, starts with its offset (8 bytes) and its length (4).
        self._cursor = start + 12 + int.from_bytes(self._buffer[start + 8 : start + 12], "big")
        # Only v2 batches (Kafka 0.11 and later) have headers; legacy batches come through unchanged.
        if getattr(batch, "magic", 0) < 2:
            return batch
        if batch.compression_type == 0:
            return _TolerantBatch(batch)
        # A compressed batch's CRC first (bytes that are not what the producer wrote are the finding,
        # whatever they inflate to), then its size, before aiokafka inflates it.
        failure: Exception | None = _crc_failure(batch)
        if failure is None:
            try:
                check_inflated_size(self._buffer[start : self._cursor], self._max_inflated_bytes)
            except _DECOMPRESSION_ERRORS as exc:
                failure = exc
        return _TolerantBatch(batch, failure=failure)


def install(*, max_inflated_bytes: int) -> None:
    """Make aiokafka's fetcher read batches through :class:`_TolerantRecords`, compressed batches
    bounded to ``max_inflated_bytes`` once inflated. Idempotent."""
    _fetcher.MemoryRecords = functools.partial(_TolerantRecords, max_inflated_bytes=max_inflated_bytes)


def undecodable(message: Any) -> UndecodableRecords | None:
    """What a consumed message stands in for, if it is a stand-in."""
    value = getattr(message, "value", None)
    return value if isinstance(value, UndecodableRecords) else None
