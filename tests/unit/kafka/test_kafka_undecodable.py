"""Record batches as aiokafka's fetcher reads them through :mod:`daemon.kafka.undecodable`:
compressed batches decode; a payload that does not decompress, an unknown codec and a CRC mismatch each
become one stand-in for the batch, never an exception out of the fetcher; so does a batch that would
inflate past the limit (a decompression bomb), found without inflating more than the limit."""

from __future__ import annotations

from typing import Any

import pytest
from aiokafka import TopicPartition
from aiokafka.consumer.fetcher import READ_UNCOMMITTED, PartitionRecords
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from daemon.kafka.undecodable import _TolerantRecords, undecodable
from tests.kafka_broker import CODEC_IDS, forged_batch

TP = TopicPartition("t", 0)
LIMIT = 4 << 20


def _batch(codec: str | None, count: int = 3, base_offset: int = 0) -> bytes:
    builder = DefaultRecordBatchBuilder(2, CODEC_IDS[codec] if codec else 0, 0, -1, -1, -1, 1 << 20)
    for i in range(count):
        builder.append(i, timestamp=None, key=f"k{i}".encode(), value=b"some text " * 100, headers=[])
    # the base offset is the broker's to assign (outside the CRC)
    return base_offset.to_bytes(8, "big") + bytes(builder.build())[8:]


def _read(buffer: bytes, limit: int = LIMIT) -> list[Any]:
    """What the fetcher hands out for ``buffer`` (aiokafka's own PartitionRecords, CRCs checked), with
    compressed batches allowed to inflate to ``limit`` bytes."""
    records = _TolerantRecords(buffer, max_inflated_bytes=limit)
    return list(PartitionRecords(TP, records, None, 0, None, None, True, READ_UNCOMMITTED))


@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches_decode(codec: str | None) -> None:
    records = _read(_batch(codec))
    assert [(r.offset, r.key) for r in records] == [(0, b"k0"), (1, b"k1"), (2, b"k2")]
    assert all(r.value == b"some text " * 100 for r in records)


@pytest.mark.parametrize(
    ("payload", "codec_id", "error"),
    [
        (b"\x28\xb5\x2f\xfd" + b"garbage!" * 8, CODEC_IDS["zstd"], "DecompressionError"),
        (b"\x1f\x8b\x08\x00" + b"garbage!" * 8, CODEC_IDS["gzip"], "error: Error -3"),
        (b"garbage!" * 8, CODEC_IDS["lz4"], "DecompressionError"),
        (b"garbage!" * 8, CODEC_IDS["snappy"], "DecompressionError"),
        (b"garbage!" * 8, 6, "Unknown compression codec 0x06"),
    ],
    ids=["zstd", "gzip", "lz4", "snappy", "codec-6"],
)
def test_a_batch_that_does_not_decompress_is_one_stand_in(payload: bytes, codec_id: int, error: str) -> None:
    records = _read(forged_batch(payload, codec_id) + _batch(None, base_offset=1))
    skipped = undecodable(records[0])
    assert skipped is not None
    assert error in skipped.error
    assert (skipped.first_offset, skipped.last_offset) == (0, 0)
    assert "skipped" in skipped.refusal().message
    assert skipped.refusal().reason == "invalid_message"
    # the next batch is read as usual
    assert [(r.offset, r.key) for r in records[1:]] == [(1, b"k0"), (2, b"k1"), (3, b"k2")]


def test_a_crc_mismatch_is_one_stand_in_for_the_batch() -> None:
    data = bytearray(_batch("lz4"))
    data[-3] ^= 0xFF  # a flipped byte inside the compressed payload: the CRC no longer matches
    records = _read(bytes(data))
    assert len(records) == 1
    skipped = undecodable(records[0])
    assert skipped is not None
    assert "CRC does not match" in skipped.error
    assert (skipped.first_offset, skipped.last_offset) == (0, 2)


def _one_record_batch(codec: str, value: bytes, base_offset: int = 0) -> bytes:
    builder = DefaultRecordBatchBuilder(2, CODEC_IDS[codec], 0, -1, -1, -1, 1 << 20)
    builder.append(0, timestamp=None, key=b"big", value=value, headers=[])
    return base_offset.to_bytes(8, "big") + bytes(builder.build())[8:]


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_a_batch_that_inflates_past_the_limit_is_one_stand_in(codec: str) -> None:
    bomb = _one_record_batch(codec, bytes(2 * LIMIT))  # zeros: zstd makes 8 MiB of them about 300 bytes
    records = _read(bomb + _batch(None, base_offset=1))
    skipped = undecodable(records[0])
    assert skipped is not None
    assert f"InflationLimitExceeded: the record batch inflates past {LIMIT} bytes" == skipped.error
    assert (skipped.first_offset, skipped.last_offset) == (0, 0)
    assert skipped.refusal().reason == "invalid_message"
    assert [(r.offset, r.key) for r in records[1:]] == [(1, b"k0"), (2, b"k1"), (3, b"k2")]


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_a_batch_that_inflates_to_just_under_the_limit_decodes(codec: str) -> None:
    # Far above the first guess of 16x the compressed size: the lz4 and zstd buffers have to grow.
    value = bytes(LIMIT - 4096)
    records = _read(_one_record_batch(codec, value))
    assert [(r.offset, r.key, len(r.value)) for r in records] == [(0, b"big", len(value))]
    assert records[0].value == value
