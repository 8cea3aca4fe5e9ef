"""A real Kafka-protocol broker for tests (noida-db), and small async helpers to talk to it.

noida-db (``pip install noida-db==0.2.3``) is a single Rust binary that speaks the Kafka protocol;
``noida-db up --only kafka`` returns once the broker runs. Its quirks (see the project notes): the
replication factor must be 1; a member killed with SIGKILL is never evicted from its group (restart
the broker or use a new group id); a restart keeps topics, records and committed offsets.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic


def noida_binary() -> str | None:
    """The noida-db command beside this interpreter, or on PATH."""
    beside = Path(sys.executable).parent / "noida-db"
    return str(beside) if beside.exists() else shutil.which("noida-db")


@dataclass
class KafkaBroker:
    """One noida-db broker on 127.0.0.1:``port`` with its state in ``data_dir``."""

    port: int
    data_dir: Path

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def up(self) -> None:
        binary = noida_binary()
        assert binary is not None, "noida-db is not installed"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        command = [binary, "up", "--only", "kafka", "--host", "127.0.0.1"]
        command += ["--kafka-port", str(self.port), "--data-dir", str(self.data_dir)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"noida-db up failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")

    def down(self) -> None:
        binary = noida_binary()
        assert binary is not None
        subprocess.run(
            [binary, "down", "--data-dir", str(self.data_dir)], capture_output=True, timeout=60, check=False
        )


async def create_topics(bootstrap: str, names: list[str], partitions: int = 1) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics(
            [NewTopic(name=name, num_partitions=partitions, replication_factor=1) for name in names]
        )
    finally:
        await admin.close()


Message = tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]  # key, value, headers
AnyMessage = tuple[bytes | None, bytes | None, Sequence[tuple[str, bytes | None]]]
"""A message whose headers may have null values (legal in Kafka's format)."""


async def produce(
    bootstrap: str, topic: str, messages: Sequence[AnyMessage], partition: int | None = None
) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", max_request_size=8 << 20)
    await producer.start()
    try:
        for key, value, headers in messages:
            await producer.send_and_wait(topic, value=value, key=key, headers=headers, partition=partition)
    finally:
        await producer.stop()


class _RawName(str):
    """A header name whose UTF-8 form is whatever bytes it was made from (aiokafka's pure-Python batch
    builder encodes names with ``str.encode``): how a test forges what another client could send."""

    raw: bytes

    def __new__(cls, raw: bytes) -> _RawName:
        name = super().__new__(cls, "x" * len(raw))
        name.raw = raw
        return name

    def encode(self, encoding: str = "utf-8", errors: str = "strict") -> bytes:
        return self.raw


RawMessage = tuple[bytes | None, bytes | None, Sequence[tuple[bytes, bytes | None]]]
"""A message whose header names are raw bytes, UTF-8 or not."""


async def produce_batch(
    bootstrap: str, topic: str, messages: Sequence[RawMessage], partition: int = 0
) -> int:
    """Write ``messages`` as one record batch, header names byte for byte (Kafka's brokers do not
    check that they are UTF-8); return the batch's first offset."""
    from aiokafka.record.default_records import _DefaultRecordBatchBuilderPy

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        batch = producer.create_batch()
        # Forging on purpose: the pure-Python builder writes the names given as they encode.
        batch._builder = _DefaultRecordBatchBuilderPy(
            2, 0, is_transactional=0, producer_id=-1, producer_epoch=-1, base_sequence=0, batch_size=1 << 20
        )
        for key, value, headers in messages:
            named = [(_RawName(name), header) for name, header in headers]
            assert batch.append(timestamp=None, key=key, value=value, headers=named) is not None
        batch.close()
        sent = await producer.send_batch(batch, topic, partition=partition)
        return int((await sent).offset)
    finally:
        await producer.stop()


async def produce_compressed(
    bootstrap: str, topic: str, messages: Sequence[Message], compression_type: str, partition: int = 0
) -> int:
    """Write ``messages`` as one record batch compressed with ``compression_type`` (gzip, snappy, lz4,
    zstd); return the batch's first offset."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", compression_type=compression_type)
    await producer.start()
    try:
        batch = producer.create_batch()
        for key, value, headers in messages:
            assert batch.append(timestamp=None, key=key, value=value, headers=headers) is not None
        batch.close()
        sent = await producer.send_batch(batch, topic, partition=partition)
        return int((await sent).offset)
    finally:
        await producer.stop()


CODEC_IDS = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def forged_batch(compressed: bytes, codec_id: int, records: int = 1) -> bytes:
    """A v2 record batch whose framing (lengths, counts, CRC) is valid and whose compressed payload is
    ``compressed``, whatever it holds: what a broken or hostile producer can write. ``codec_id`` may be
    one Kafka does not define (5-7)."""
    import aiokafka.record.default_records as records_module

    builder = records_module._DefaultRecordBatchBuilderPy(
        2, 1, is_transactional=0, producer_id=-1, producer_epoch=-1, base_sequence=0, batch_size=1 << 20
    )
    for i in range(records):
        builder.append(i, timestamp=None, key=b"k", value=b"v" * 4096, headers=[])
    original = records_module.gzip_encode
    records_module.gzip_encode = lambda data, compresslevel=None: compressed  # the payload chosen
    try:
        data = builder.build()
    finally:
        records_module.gzip_encode = original
    data[22] = (data[22] & ~0x07) | codec_id  # the codec bits of attributes (an int16 at 21)
    crc = records_module.calc_crc32c(bytes(data[21:]))
    data[17:21] = crc.to_bytes(4, "big")
    return bytes(data)


async def produce_forged_batch(
    bootstrap: str, topic: str, compressed: bytes, codec_id: int, partition: int = 0
) -> int:
    """Write :func:`forged_batch` to ``topic``; return its first offset."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        batch = producer.create_batch()
        forged = forged_batch(compressed, codec_id)
        batch._builder = _Forged(forged)  # forging on purpose: the bytes go out as they are
        batch._relative_offset = 1  # one record: the producer resolves an empty batch with no offset
        batch.close()
        sent = await producer.send_batch(batch, topic, partition=partition)
        return int((await sent).offset)
    finally:
        await producer.stop()


class _Forged:
    """A batch builder that hands the producer bytes already built."""

    def __init__(self, data: bytes) -> None:
        self._data = bytearray(data)

    def build(self) -> bytearray:
        return self._data

    def size(self) -> int:
        return len(self._data)


async def read_all(
    bootstrap: str,
    topic: str,
    timeout: float = 10.0,  # noqa: ASYNC109
    *,
    isolation_level: str = "read_uncommitted",
) -> list[Any]:
    """Every record of ``topic`` up to its current end (no group, nothing committed).
    ``isolation_level="read_committed"``: only records of committed transactions (and non-transactional
    ones), up to the last stable offset."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        fetch_max_bytes=64 << 20,
        isolation_level=isolation_level,
    )
    await consumer.start()
    try:
        partitions = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        if not partitions:
            return []
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        ends = await consumer.end_offsets(partitions)
        records: list[Any] = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while loop.time() < deadline:
            positions = [await consumer.position(tp) for tp in partitions]
            if all(position >= ends[tp] for position, tp in zip(positions, partitions, strict=True)):
                break
            batches = await consumer.getmany(timeout_ms=200)
            for batch in batches.values():
                records.extend(batch)
        return records
    finally:
        await consumer.stop()


async def committed_offsets(bootstrap: str, group_id: str, topic: str) -> dict[int, int | None]:
    """The group's committed offset per partition of ``topic``."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group_id, enable_auto_commit=False)
    await consumer.start()
    try:
        partitions = sorted(consumer.partitions_for_topic(topic) or ())
        return {p: await consumer.committed(TopicPartition(topic, p)) for p in partitions}
    finally:
        await consumer.stop()


async def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    try:
        partitions = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        ends = await consumer.end_offsets(partitions)
        return {tp.partition: offset for tp, offset in ends.items()}
    finally:
        await consumer.stop()


class Topics:
    """Fresh topic and group names for one test."""

    def __init__(self) -> None:
        name = uuid.uuid4().hex[:8]
        self.input = f"docs-{name}"
        self.output = f"summaries-{name}"
        self.dead = f"dead-{name}"
        self.group = f"docsumd-{name}"


def all_committed(broker: KafkaBroker, topics: Topics) -> bool:
    """Whether the group has committed every partition of the input topic up to its end."""
    ends = asyncio.run(end_offsets(broker.bootstrap, topics.input))
    committed = asyncio.run(committed_offsets(broker.bootstrap, topics.group, topics.input))
    return all(committed.get(partition) == end for partition, end in ends.items())
