"""Hostile Kafka records (issue 10) against a real broker (noida-db): no single message stops the daemon.

* A real daemon (real vLLM engine, tiny model) reads, among normal documents: a header whose value is
  null, a 400 KiB key, 600 KiB of headers, options nested 50,000 levels deep (and 500: parseable),
  and a message whose result would exceed ``max_request_bytes``. It stays up and healthy, every
  message ends with exactly one result or dead letter with its reason, every record fits
  ``max_request_bytes``, and every offset is committed.
* Without the engine: lz4 and zstd batches are read, a corrupt compressed batch becomes one dead letter
  and the source goes on (the sink runs with compression_type = "zstd"; its batches' codec is not checked).
* Without the engine (the test plays the service): records that fit ``max_request_bytes`` but that
  the broker refuses (noida-db, like Kafka, refuses records over about 1 MiB) are replaced by their
  reduced dead letters, the producer goes on, and the offsets are committed.
"""

from __future__ import annotations

import asyncio
import json
import signal
import uuid
from collections.abc import Callable
from typing import Any

import cramjam
import pytest

from daemon.config import KafkaSourceConfig
from daemon.errors import DocumentError
from daemon.kafka import KafkaSource
from daemon.kafka.sink import KafkaSink, Output
from daemon.work import WorkItem
from tests.e2e.harness import DaemonProcess, Layout, configure_kafka, wait_for
from tests.kafka_broker import (
    CODEC_IDS,
    AnyMessage,
    KafkaBroker,
    Topics,
    all_committed,
    committed_offsets,
    create_topics,
    produce,
    produce_compressed,
    produce_forged_batch,
    read_all,
)
from tests.record_schemas import assert_valid

pytestmark = [pytest.mark.kafka]

MAX_REQUEST_BYTES = 64 * 1024
MAX_HEADER_BYTES = 40 * 1024


def _nested_options(levels: int) -> bytes:
    return (
        b'{"id": "deep-%d", "text": "Some text.", "options": {"style": ' % levels
        + b"[" * levels
        + b"]" * levels
        + b"}}"
    )


def _hostile_messages() -> list[tuple[str, AnyMessage]]:
    """(what it is, the message) in the order produced: offsets 0, 1, ... of one partition."""
    text = b"A notice about the delivery of goods and the terms of payment. " * 40
    return [
        ("ok-plain", (b"ok-plain", text, [("trace", b"t-1")])),
        ("null-header", (b"null-header", text, [("trace", b"t-2"), ("empty", None)])),
        ("huge-key", (b"k" * 400 * 1024, text, [])),
        ("huge-headers", (b"huge-headers", text, [(f"h{i}", b"v" * 100 * 1024) for i in range(6)])),
        ("deep-50000", (None, _nested_options(50_000), [])),
        ("deep-500", (None, _nested_options(500), [])),
        # Accepted (under max_header_bytes), but the result carries the headers twice: over 64 KiB.
        ("result-too-large", (b"result-too-large", text, [("a", b"x" * 17_000), ("b", b"y" * 17_000)])),
        ("ok-json", (None, json.dumps({"id": "ok-json", "text": text.decode()}).encode(), [])),
    ]


EXPECTED = {
    "ok-plain": "ok",
    "null-header": "invalid_message",
    "huge-key": "too_large",
    "huge-headers": "too_large",
    "deep-50000": "invalid_message",
    "deep-500": "invalid_options",
    "result-too-large": "too_large",
    "ok-json": "ok",
}


def _size(record: Any) -> int:
    return Output("t", (record.key or b"").decode(), record.value, list(record.headers)).size


@pytest.mark.engine
def test_hostile_records_each_end_with_a_record_and_the_daemon_stays_up(
    layout: Layout, start_daemon: Callable[..., DaemonProcess], kafka_broker: KafkaBroker
) -> None:
    topics = Topics()
    asyncio.run(create_topics(kafka_broker.bootstrap, [topics.input, topics.output, topics.dead]))
    messages = _hostile_messages()
    configure_kafka(
        layout,
        kafka_broker,
        topics,
        **{
            "sources.kafka.max_request_bytes": str(MAX_REQUEST_BYTES),
            "sources.kafka.max_header_bytes": str(MAX_HEADER_BYTES),
        },
    )
    daemon = start_daemon()
    daemon.wait_ready()
    asyncio.run(produce(kafka_broker.bootstrap, topics.input, [message for _, message in messages]))

    def records() -> tuple[list[Any], list[Any]]:
        return (
            asyncio.run(read_all(kafka_broker.bootstrap, topics.output)),
            asyncio.run(read_all(kafka_broker.bootstrap, topics.dead)),
        )

    wait_for(lambda: sum(map(len, records())) >= len(messages), 240, "a record for every message", 1.0)
    wait_for(lambda: all_committed(kafka_broker, topics), 30, "every offset committed", 0.5)
    assert daemon.proc is not None
    assert daemon.proc.poll() is None, daemon.log_tail()
    assert daemon.http_get("/healthz")[0] == 200

    results, letters = records()
    assert len(results) + len(letters) == len(messages)  # exactly one each
    for record in results:
        assert_valid(json.loads(record.value), "result")
    for record in letters:
        assert_valid(json.loads(record.value), "dead-letter")
    outcome: dict[int, str] = {}
    for record in results:
        outcome[json.loads(record.value)["metadata"]["offset"]] = "ok"
    by_offset = {json.loads(record.value)["offset"]: record for record in letters}
    for offset, record in by_offset.items():
        outcome[offset] = json.loads(record.value)["reason"]
    assert {name: outcome.get(offset) for offset, (name, _) in enumerate(messages)} == EXPECTED
    for record in results + letters:
        assert _size(record) <= MAX_REQUEST_BYTES

    names = {name: offset for offset, (name, _) in enumerate(messages)}
    null_header = json.loads(by_offset[names["null-header"]].value)
    assert null_header["metadata"]["headers"] == {"trace": "t-2", "empty": None}
    huge_key = by_offset[names["huge-key"]]
    assert huge_key.key == f"{topics.input}-0-{names['huge-key']}".encode()  # not the key itself
    key_letter = json.loads(huge_key.value)
    assert (key_letter["metadata"]["key_bytes"], len(key_letter["metadata"]["key"])) == (400 * 1024, 1024)
    headers_letter = json.loads(by_offset[names["huge-headers"]].value)
    # Headers are carried whole or not at all: not one of these 100 KiB headers fits in 40 KiB.
    assert headers_letter["metadata"]["headers"] == {}
    assert headers_letter["metadata"]["headers_count"] == 6
    assert headers_letter["metadata"]["headers_bytes"] > 600 * 1024
    assert "nested too deeply" in json.loads(by_offset[names["deep-50000"]].value)["message"]
    too_large = json.loads(by_offset[names["result-too-large"]].value)
    assert "max_request_bytes" in too_large["message"]
    assert too_large["reduced"] is True  # its 34 KiB of headers, twice, do not fit 64 KiB either

    _, metrics = daemon.http_get("/metrics")
    assert 'docsumd_documents_total{outcome="too_large",source="kafka"} 3.0' in metrics
    assert 'docsumd_documents_total{outcome="ok",source="kafka"} 2.0' in metrics
    daemon.signal(signal.SIGTERM)
    assert daemon.wait_exit() == 0, daemon.log_tail()
    events = daemon.log_events()
    assert not [event for event in events if event.get("event") == "unexpected error on a document"]


async def _take(items: Any, count: int) -> list[WorkItem]:
    taken: list[WorkItem] = []
    async with asyncio.timeout(30):
        while len(taken) < count:
            taken.append(await anext(items))
    return taken


@pytest.mark.parametrize("exactly_once", [False, True], ids=["at-least-once", "exactly-once"])
async def test_records_the_broker_refuses_are_replaced_by_reduced_dead_letters(
    kafka_broker: KafkaBroker, exactly_once: bool
) -> None:
    name = uuid.uuid4().hex[:8]
    config = KafkaSourceConfig.model_validate(
        {
            "bootstrap_servers": kafka_broker.bootstrap,
            "input_topics": [f"in-{name}"],
            "group_id": f"g-{name}",
            "output_topic": f"out-{name}",
            "dead_letter_topic": f"dlq-{name}",
            "commit_interval_seconds": 0.1,
            "session_timeout_ms": 30000,
            "heartbeat_interval_ms": 1000,
            # Larger than the broker's own limit (about 1 MiB): these records pass our checks.
            "max_request_bytes": 4 * 1024 * 1024,
            "max_header_bytes": 2 * 1024 * 1024,
            "exactly_once": exactly_once,
            "transactional_id": f"t-{name}",
        }
    )
    topic = config.input_topics[0]
    await create_topics(kafka_broker.bootstrap, [topic, config.output_topic, config.dead_letter_topic])
    big_headers: list[tuple[str, bytes | None]] = [(f"h{i}", b"v" * 100 * 1024) for i in range(6)]
    await produce(
        kafka_broker.bootstrap,
        topic,
        [
            (b"a", b"text a", big_headers),  # its result carries 600 KiB of headers twice
            (b"b", b"text b", [*big_headers, ("null", None)]),  # refused: its dead letter too
            (b"c", b"text c", []),
        ],
    )
    source = KafkaSource(config, KafkaSink(config), max_input_bytes=1 << 20)
    async with source:
        items = source.items()
        a, b, c = await _take(items, 3)
        await a.complete(
            {"id": "a", "source": "kafka", "model": "m", "prompt_version": "v", "metadata": a.metadata}
        )
        failure = {"id": "b", "source": "kafka", "reason": "invalid_message", "message": "null header"}
        await b.fail({**failure, "metadata": b.metadata})
        await c.complete({"id": "c", "source": "kafka", "model": "m", "prompt_version": "v", "metadata": {}})

        async def committed() -> None:
            while (await committed_offsets(kafka_broker.bootstrap, config.group_id, topic))[0] != 3:  # noqa: ASYNC110
                await asyncio.sleep(0.2)

        await asyncio.wait_for(committed(), 20)
        await items.aclose()  # type: ignore[attr-defined]

    isolation = "read_committed"
    results = await read_all(kafka_broker.bootstrap, config.output_topic, isolation_level=isolation)
    assert [record.key for record in results] == [b"c"]  # the producer went on after two refusals
    dead = await read_all(kafka_broker.bootstrap, config.dead_letter_topic, isolation_level=isolation)
    letters = {record.key: json.loads(record.value) for record in dead}
    assert set(letters) == {b"a", b"b"}
    assert (letters[b"a"]["reason"], letters[b"a"]["reduced"]) == ("too_large", True)
    assert "refused the result" in letters[b"a"]["message"]
    assert (letters[b"b"]["reason"], letters[b"b"]["reduced"]) == ("invalid_message", True)
    assert letters[b"b"]["offset"] == 1


async def test_compressed_batches_are_read_and_a_corrupt_one_is_a_dead_letter(
    kafka_broker: KafkaBroker,
) -> None:
    """lz4 and zstd batches are read like any other; a zstd batch whose payload is garbage inside valid
    framing becomes one dead letter (invalid_message, naming the offset) and so does a 2 KiB zstd batch
    that would inflate to 64 MiB, past the source's limit (here 32 MiB: twice max_message_bytes); the
    source goes on. The sink runs with ``compression_type = "zstd"`` (its results are read back; their
    codec is not checked)."""
    name = uuid.uuid4().hex[:8]
    config = KafkaSourceConfig.model_validate(
        {
            "bootstrap_servers": kafka_broker.bootstrap,
            "input_topics": [f"in-{name}"],
            "group_id": f"g-{name}",
            "output_topic": f"out-{name}",
            "dead_letter_topic": f"dlq-{name}",
            "commit_interval_seconds": 0.1,
            "compression_type": "zstd",
            "max_buffered_bytes": 1 << 20,
        }
    )
    topic = config.input_topics[0]
    await create_topics(kafka_broker.bootstrap, [topic, config.output_topic, config.dead_letter_topic])
    text = b"A notice about the delivery of goods. " * 20
    await produce_compressed(
        kafka_broker.bootstrap, topic, [(b"lz4-a", text, []), (b"lz4-b", text, [])], "lz4"
    )
    await produce_compressed(kafka_broker.bootstrap, topic, [(b"zstd-a", text, [])], "zstd")
    corrupt_at = await produce_forged_batch(
        kafka_broker.bootstrap, topic, b"\x28\xb5\x2f\xfd" + b"garbage!" * 8, CODEC_IDS["zstd"]
    )
    bomb = bytes(cramjam.zstd.compress(bytes(64 << 20)))
    bomb_at = await produce_forged_batch(kafka_broker.bootstrap, topic, bomb, CODEC_IDS["zstd"])
    await produce(kafka_broker.bootstrap, topic, [(b"after", text, [])])
    source = KafkaSource(config, KafkaSink(config), max_input_bytes=1 << 20)
    async with source:
        items = source.items()
        taken = await asyncio.wait_for(_take(items, 6), 30)
        stand_ins = [f"{topic}-0-{corrupt_at}", f"{topic}-0-{bomb_at}"]
        assert [item.id for item in taken] == ["lz4-a", "lz4-b", "zstd-a", *stand_ins, "after"]
        for item in taken:
            try:
                assert await item.load() == text
            except DocumentError as error:
                assert item in taken[3:5]
                failure = {"id": item.id, "source": "kafka", "reason": error.reason, "message": error.message}
                await item.fail({**failure, "metadata": item.metadata})
            else:
                record = {"id": item.id, "source": "kafka", "model": "m", "prompt_version": "v"}
                await item.complete({**record, "metadata": item.metadata})

        async def committed() -> None:
            while (await committed_offsets(kafka_broker.bootstrap, config.group_id, topic))[0] != 6:  # noqa: ASYNC110
                await asyncio.sleep(0.2)

        await asyncio.wait_for(committed(), 20)
        assert source._failure is None  # the consumer never failed
        await items.aclose()  # type: ignore[attr-defined]

    results = await read_all(kafka_broker.bootstrap, config.output_topic)
    assert [record.key for record in results] == [b"lz4-a", b"lz4-b", b"zstd-a", b"after"]
    dead = await read_all(kafka_broker.bootstrap, config.dead_letter_topic)
    assert len(dead) == 2
    letter, bomb_letter = (json.loads(record.value) for record in dead)
    assert (letter["reason"], letter["offset"]) == ("invalid_message", corrupt_at)
    assert "DecompressionError" in letter["message"]
    assert f"offset {corrupt_at}" in letter["message"]
    assert (bomb_letter["reason"], bomb_letter["offset"]) == ("invalid_message", bomb_at)
    assert f"inflates past {32 << 20} bytes" in bomb_letter["message"]
