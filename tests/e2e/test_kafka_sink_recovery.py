"""The Kafka sink against a broker that lost records it had acknowledged (real noida-db, no engine).

noida-db acknowledges writes while ``noida-db down`` is under way and may leave them out of the state
it keeps; a real Kafka cluster can do the same after an unclean leader election. The idempotent
producer's next record then has a sequence number the broker does not expect
(OutOfOrderSequenceNumber) and so has every later one: the sink must start a new producer and send
again instead of failing for good. The loss is made deterministic here by restoring the broker's
state file from before the lost write, on a broker of the test's own (the session's is shared).
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from daemon.config import KafkaSourceConfig
from daemon.kafka.sink import KafkaSink
from tests.e2e.harness import free_port
from tests.kafka_broker import KafkaBroker, create_topics, noida_binary, read_all

pytestmark = pytest.mark.kafka


async def test_sink_gets_past_a_broker_that_lost_acknowledged_records(tmp_path: Path) -> None:
    if noida_binary() is None:
        pytest.skip("noida-db is not installed (pip install noida-db==0.2.3)")
    broker = KafkaBroker(port=free_port(), data_dir=tmp_path / "broker")
    state = broker.data_dir / "kafka.json"
    name = uuid.uuid4().hex[:8]
    config = KafkaSourceConfig.model_validate(
        {
            "bootstrap_servers": broker.bootstrap,
            "input_topics": [f"in-{name}"],
            "group_id": f"g-{name}",
            "output_topic": f"out-{name}",
            "dead_letter_topic": f"dlq-{name}",
        }
    )
    await asyncio.to_thread(broker.up)
    try:
        await create_topics(broker.bootstrap, [config.output_topic])
        sink = KafkaSink(config, retry_seconds=30)
        await sink.start()
        try:
            await sink.send(config.output_topic, "a", b"first", [])
            await asyncio.to_thread(broker.down)
            before_b = state.read_bytes()
            await asyncio.to_thread(broker.up)
            await sink.send(config.output_topic, "b", b"acknowledged, then lost", [])
            await asyncio.to_thread(broker.down)
            state.write_bytes(before_b)  # the broker forgets "b" and the sequence number it used
            await asyncio.to_thread(broker.up)
            await asyncio.wait_for(sink.send(config.output_topic, "c", b"after the loss", []), 60)
            await asyncio.wait_for(sink.send(config.output_topic, "d", b"and on", []), 60)
        finally:
            await sink.stop()
        records = await read_all(broker.bootstrap, config.output_topic)
        assert [(r.key, r.value) for r in records] == [
            (b"a", b"first"),
            (b"c", b"after the loss"),
            (b"d", b"and on"),
        ]
    finally:
        await asyncio.to_thread(broker.down)
