"""The Kafka source and sink against a real broker (noida-db), without the engine.

The service is played by the test: it pulls items, acknowledges them out of order, and checks what
the group commits, what reaches the output and dead-letter topics, and pause/resume.
"""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest

from daemon.config import KafkaSourceConfig
from daemon.errors import DocumentError
from daemon.kafka import KafkaSource, parse_message
from daemon.kafka.sink import KafkaSink
from daemon.work import WorkItem
from tests.kafka_broker import (
    KafkaBroker,
    committed_offsets,
    create_topics,
    produce,
    produce_batch,
    read_all,
)

pytestmark = pytest.mark.kafka


def _config(broker: KafkaBroker, **overrides: object) -> KafkaSourceConfig:
    name = uuid.uuid4().hex[:8]
    values: dict[str, object] = {
        "bootstrap_servers": broker.bootstrap,
        "input_topics": [f"in-{name}"],
        "group_id": f"g-{name}",
        "output_topic": f"out-{name}",
        "dead_letter_topic": f"dlq-{name}",
        "commit_interval_seconds": 0.1,
        "lag_interval_seconds": 0.5,
        "session_timeout_ms": 30000,
        "heartbeat_interval_ms": 1000,
        **overrides,
    }
    return KafkaSourceConfig.model_validate(values)


async def _take(items: object, count: int, timeout: float = 30) -> list[WorkItem]:  # noqa: ASYNC109
    taken: list[WorkItem] = []
    async with asyncio.timeout(timeout):
        while len(taken) < count:
            taken.append(await anext(items))  # type: ignore[call-overload]
    return taken


def test_parse_message_kinds() -> None:
    coordinates = "t-0-7"
    plain = parse_message(b"hello", b"k1", [], coordinates=coordinates, max_message_bytes=100)
    assert (plain.id, plain.text, plain.error) == ("k1", b"hello", None)
    record = json.dumps({"id": "d1", "text": "body", "options": {"style": "bullets"}}).encode()
    parsed = parse_message(record, None, [], coordinates=coordinates, max_message_bytes=100)
    assert (parsed.id, parsed.text, parsed.options) == ("d1", b"body", {"style": "bullets"})
    bad = parse_message(b'{"id": "x", "text": ', b"k", [], coordinates=coordinates, max_message_bytes=100)
    assert isinstance(bad.error, DocumentError)
    assert (bad.id, bad.error.reason) == ("k", "invalid_message")
    big = parse_message(b"x" * 101, None, [], coordinates=coordinates, max_message_bytes=100)
    assert big.error is not None
    assert (big.id, big.error.reason) == (coordinates, "too_large")
    forced = parse_message(
        b"{not json", None, [("content-type", b"text/plain")], coordinates="c", max_message_bytes=99
    )
    assert forced.text == b"{not json"
    for value in (b'{"text": 3}', b'{"text": "a", "extra": 1}', b'{"id": true, "text": "a"}'):
        refused = parse_message(value, None, [], coordinates="c", max_message_bytes=99)
        assert refused.error is not None
        assert refused.error.reason == "invalid_message", value
    assert parse_message(None, b"k", [], coordinates="c", max_message_bytes=9).error is not None


async def test_out_of_order_acks_commit_the_finished_prefix_and_dead_letters(
    kafka_broker: KafkaBroker,
) -> None:
    config = _config(kafka_broker, max_message_bytes=1000, dead_letter_payload_bytes=100)
    topic = config.input_topics[0]
    await create_topics(kafka_broker.bootstrap, [topic, config.output_topic, config.dead_letter_topic])
    await produce(
        kafka_broker.bootstrap,
        topic,
        [
            (None, json.dumps({"id": "a", "text": "alpha"}).encode(), [("trace", b"t-a")]),
            (b"b", b"plain text b", []),
            (b"c", b'{"id": "c", "text": ', []),  # malformed JSON
            (b"d", b"y" * 5000, []),  # over max_message_bytes
            (b"e", b"plain text e", []),
        ],
    )
    source = KafkaSource(config, KafkaSink(config), max_input_bytes=1 << 20)
    async with source:
        items = source.items()
        a, b, c, d, e = await _take(items, 5)
        assert [i.id for i in (a, b, c, d, e)] == ["a", "b", "c", "d", "e"]
        assert a.metadata["headers"] == {"trace": "t-a"}
        assert (a.metadata["topic"], a.metadata["partition"], a.metadata["offset"]) == (topic, 0, 0)
        assert await a.load() == b"alpha"
        with pytest.raises(DocumentError, match="not valid JSON"):
            await c.load()
        with pytest.raises(DocumentError) as too_large:
            await d.load()
        assert too_large.value.reason == "too_large"
        # Out of order: e, then b and the failures; a (offset 0) last.
        await e.complete({"id": "e", "model": "m", "prompt_version": "v"})
        await b.complete({"id": "b", "model": "m", "prompt_version": "v"})
        await c.fail({"id": "c", "reason": "invalid_message", "message": "bad json"})
        await d.fail({"id": "d", "reason": "too_large", "message": "big"})
        await asyncio.sleep(0.5)
        committed = await committed_offsets(kafka_broker.bootstrap, config.group_id, topic)
        assert committed[0] in (None, 0)  # a is unfinished: nothing past it is committed
        await a.complete({"id": "a", "model": "m", "prompt_version": "v"})

        async def all_committed() -> None:
            while (await committed_offsets(kafka_broker.bootstrap, config.group_id, topic))[0] != 5:  # noqa: ASYNC110
                await asyncio.sleep(0.2)

        await asyncio.wait_for(all_committed(), 15)
        await items.aclose()  # type: ignore[attr-defined]

    results = await read_all(kafka_broker.bootstrap, config.output_topic)
    assert sorted(r.key for r in results) == [b"a", b"b", b"e"]
    a_result = next(r for r in results if r.key == b"a")
    assert dict(a_result.headers)["model"] == b"m"
    assert dict(a_result.headers)["prompt_version"] == b"v"
    assert dict(a_result.headers)["trace"] == b"t-a"
    letters = {
        r.key: json.loads(r.value) for r in await read_all(kafka_broker.bootstrap, config.dead_letter_topic)
    }
    assert set(letters) == {b"c", b"d"}
    assert letters[b"c"]["reason"] == "invalid_message"
    assert (letters[b"c"]["topic"], letters[b"c"]["partition"], letters[b"c"]["offset"]) == (topic, 0, 2)
    assert letters[b"c"]["payload"] == '{"id": "c", "text": '
    assert letters[b"d"]["payload_bytes"] == 5000
    assert letters[b"d"]["payload_truncated"] is True
    assert letters[b"d"]["payload"] == "y" * 100


async def test_a_record_the_client_cannot_decode_is_a_dead_letter_and_never_read_again(
    kafka_broker: KafkaBroker,
) -> None:
    """A header name that is not UTF-8 (brokers accept it) makes aiokafka's decoder raise inside every
    fetch of its partition, on every start. The rest of its record batch becomes one dead letter; the
    records before it in the batch, and everything after the batch, come through."""
    config = _config(kafka_broker)
    topic = config.input_topics[0]
    await create_topics(kafka_broker.bootstrap, [topic, config.output_topic, config.dead_letter_topic])
    await produce(kafka_broker.bootstrap, topic, [(b"a", b"doc a", [])])  # offset 0, its own batch
    first = await produce_batch(
        kafka_broker.bootstrap,
        topic,
        [
            (b"b", b"doc b", [(b"trace", b"ok")]),  # offset 1
            (b"c", b"doc c", [(b"\xff\xfename", b"v")]),  # offset 2: the client cannot decode it
            (b"d", b"doc d", []),  # offset 3: after it in the same batch, skipped with it
        ],
    )
    assert first == 1
    await produce(kafka_broker.bootstrap, topic, [(b"e", b"doc e", [])])  # offset 4
    source = KafkaSource(config, KafkaSink(config), max_input_bytes=1 << 20)
    async with source:
        items = source.items()
        taken = await _take(items, 4)
        assert [i.id for i in taken] == ["a", "b", f"{topic}-0-3", "e"]
        a, b, skipped, e = taken
        assert b.metadata["headers"] == {"trace": "ok"}
        with pytest.raises(DocumentError) as refused:
            await skipped.load()
        assert refused.value.reason == "invalid_message"
        assert "offsets 2-3" in str(refused.value)
        assert "UnicodeDecodeError" in str(refused.value)
        for item in (a, b, e):
            await item.complete({"id": item.id, "model": "m", "prompt_version": "v"})
        await skipped.fail({"id": skipped.id, "reason": "invalid_message", "message": str(refused.value)})

        async def all_committed() -> None:
            while (await committed_offsets(kafka_broker.bootstrap, config.group_id, topic))[0] != 5:  # noqa: ASYNC110
                await asyncio.sleep(0.2)

        await asyncio.wait_for(all_committed(), 15)
        await items.aclose()  # type: ignore[attr-defined]
    letters = await read_all(kafka_broker.bootstrap, config.dead_letter_topic)
    assert len(letters) == 1
    letter = json.loads(letters[0].value)
    assert (letter["reason"], letter["topic"], letter["partition"], letter["offset"]) == (
        "invalid_message",
        topic,
        0,
        3,
    )
    assert sorted(r.key for r in await read_all(kafka_broker.bootstrap, config.output_topic)) == [
        b"a",
        b"b",
        b"e",
    ]
    # A restart reads on from the committed offset: the batch is not read again.
    await produce(kafka_broker.bootstrap, topic, [(b"f", b"doc f", [])])
    async with KafkaSource(config, KafkaSink(config), max_input_bytes=1 << 20) as again:
        items = again.items()
        (f,) = await _take(items, 1)
        assert f.id == "f"
        await items.aclose()  # type: ignore[attr-defined]


async def test_full_buffer_pauses_partitions_and_room_resumes_them(kafka_broker: KafkaBroker) -> None:
    config = _config(kafka_broker, max_buffered_messages=2)
    topic = config.input_topics[0]
    await create_topics(kafka_broker.bootstrap, [topic, config.output_topic, config.dead_letter_topic], 2)
    await produce(
        kafka_broker.bootstrap, topic, [(f"k{i}".encode(), f"doc {i}".encode(), []) for i in range(12)]
    )
    source = KafkaSource(config, KafkaSink(config), max_input_bytes=1 << 20)
    async with source:
        consumer = source._consumer
        assert consumer is not None

        async def paused() -> None:
            while len(consumer.paused()) < 2:  # noqa: ASYNC110
                await asyncio.sleep(0.1)

        await asyncio.wait_for(paused(), 20)
        assert len(source._buffer) <= 4  # bounded: nothing is read ahead beyond the buffer (and one poll)
        # Hold the buffer full for longer than the session timeout: the consumer must stay in its group.
        generation = consumer._coordinator.generation
        await asyncio.sleep(8)
        assert consumer._coordinator.generation == generation  # no rebalance: still the same member
        assert len(consumer.assignment()) == 2
        assert len(source._buffer) <= 4
        items = source.items()
        taken = await _take(items, 12, timeout=30)
        for item in taken:
            await item.complete({"id": item.id, "model": "m", "prompt_version": "v"})
        assert sorted(i.id for i in taken) == sorted(f"k{i}" for i in range(12))

        async def all_committed() -> None:
            while True:
                offsets = await committed_offsets(kafka_broker.bootstrap, config.group_id, topic)
                if sum(o or 0 for o in offsets.values()) == 12:
                    return
                await asyncio.sleep(0.2)

        await asyncio.wait_for(all_committed(), 15)
        await items.aclose()  # type: ignore[attr-defined]


async def test_exactly_once_outputs_become_visible_with_their_offsets_once(kafka_broker: KafkaBroker) -> None:
    name = uuid.uuid4().hex[:8]
    config = _config(kafka_broker, exactly_once=True, transactional_id=f"tx-{name}")
    topic = config.input_topics[0]
    await create_topics(kafka_broker.bootstrap, [topic, config.output_topic, config.dead_letter_topic])
    await produce(kafka_broker.bootstrap, topic, [(f"d{i}".encode(), b"text", []) for i in range(5)])
    result = {"model": "m", "prompt_version": "v"}

    async def visible(topic_name: str) -> list[str]:
        records = await read_all(kafka_broker.bootstrap, topic_name, isolation_level="read_committed")
        return [record.key.decode() for record in records]

    async def committed() -> int | None:
        return (await committed_offsets(kafka_broker.bootstrap, config.group_id, topic))[0]

    async def until_committed(offset: int) -> None:
        async with asyncio.timeout(15):
            while await committed() != offset:  # noqa: ASYNC110
                await asyncio.sleep(0.1)

    source = KafkaSource(config, KafkaSink(config), max_input_bytes=1 << 20)
    async with source:
        items = source.items()
        by_id = {item.id: item for item in await _take(items, 5)}
        # Finished out of order: held until the earlier message is finished, nothing visible yet.
        await by_id["d1"].complete({"id": "d1", **result})
        await by_id["d2"].complete({"id": "d2", **result})
        await asyncio.sleep(1.0)
        assert await visible(config.output_topic) == []
        assert await committed() in (None, 0)
        await by_id["d0"].complete({"id": "d0", **result})
        await until_committed(3)
        assert await visible(config.output_topic) == ["d0", "d1", "d2"]
        # d4's dead letter waits for d3, which never finishes: the stop drops it, commits nothing more.
        await by_id["d4"].fail({"id": "d4", "reason": "invalid_message", "message": "bad"})
        await asyncio.sleep(0.5)
        await items.aclose()  # type: ignore[attr-defined]
    assert await committed() == 3
    assert await visible(config.dead_letter_topic) == []
    # Everything the producer wrote was committed: a plain reader sees no extra records either.
    assert [r.key.decode() for r in await read_all(kafka_broker.bootstrap, config.output_topic)] == [
        "d0",
        "d1",
        "d2",
    ]

    # A new incarnation (same transactional id) redoes d3 and d4 only; each output is visible once.
    again = KafkaSource(config, KafkaSink(config), max_input_bytes=1 << 20)
    async with again:
        items = again.items()
        redo = {item.id: item for item in await _take(items, 2)}
        assert set(redo) == {"d3", "d4"}
        await redo["d4"].fail({"id": "d4", "reason": "invalid_message", "message": "bad"})
        await redo["d3"].complete({"id": "d3", **result})
        await until_committed(5)
        await items.aclose()  # type: ignore[attr-defined]
    assert await visible(config.output_topic) == ["d0", "d1", "d2", "d3"]
    assert await visible(config.dead_letter_topic) == ["d4"]
