"""Exactly-once mode end to end: a daemon killed with SIGKILL mid-batch, then restarted; a consumer
reading with ``isolation.level=read_committed`` sees each result exactly once.

Real engine (tiny model), real broker (noida-db). noida-db keeps a member killed with SIGKILL in its
group, so the broker is restarted (topics, records, offsets and transactions survive) before the
second daemon joins; real Kafka evicts the dead member after its session timeout instead.
"""

from __future__ import annotations

import asyncio
import json
import signal
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.corpus import corpus_text
from tests.e2e.harness import DaemonProcess, Layout, configure_kafka, wait_for
from tests.kafka_broker import KafkaBroker, Message, Topics, all_committed, create_topics, produce, read_all

pytestmark = [pytest.mark.engine, pytest.mark.kafka]


def _committed_records(broker: KafkaBroker, topic: str) -> list[Any]:
    return asyncio.run(read_all(broker.bootstrap, topic, isolation_level="read_committed"))


def _all_records(broker: KafkaBroker, topic: str) -> list[Any]:
    return asyncio.run(read_all(broker.bootstrap, topic))


def test_exactly_once_survives_kill_9_with_each_result_seen_once(
    layout: Layout, start_daemon: Callable[..., DaemonProcess], corpus: Path, kafka_broker: KafkaBroker
) -> None:
    topics = Topics()
    asyncio.run(create_topics(kafka_broker.bootstrap, [topics.input], partitions=2))
    asyncio.run(create_topics(kafka_broker.bootstrap, [topics.output, topics.dead]))
    names = sorted(p.name for p in (corpus / "docs").iterdir() if p.stat().st_size < 12_000)[:10]
    messages: list[Message] = [(name.encode(), corpus_text(corpus, name), []) for name in names]
    messages.append((b"broken", b'{"id": "broken", "text": ', []))  # one dead letter, also exactly once
    asyncio.run(produce(kafka_broker.bootstrap, topics.input, messages))
    configure_kafka(
        layout,
        kafka_broker,
        topics,
        **{
            "sources.kafka.exactly_once": "true",
            "sources.kafka.transactional_id": json.dumps(f"tx-{uuid.uuid4().hex[:8]}"),
            "service.max_inflight_documents": "3",
        },
    )
    first = start_daemon()
    first.wait_ready()
    wait_for(
        lambda: len(_committed_records(kafka_broker, topics.output)) >= 2,
        240,
        "the first committed results",
        interval=0.5,
    )
    first.kill_group()
    seen_before = Counter(r.key.decode() for r in _committed_records(kafka_broker, topics.output))
    written_before = len(_all_records(kafka_broker, topics.output))

    kafka_broker.down()  # noida-db: forget the killed member (see the module's doc)
    kafka_broker.up()
    second = start_daemon()
    second.wait_ready()

    def all_visible() -> bool:
        keys = {r.key.decode() for r in _committed_records(kafka_broker, topics.output)}
        return keys >= set(names) and len(_committed_records(kafka_broker, topics.dead)) >= 1

    wait_for(all_visible, 300, "every result to be committed after the restart", interval=1.0)
    wait_for(
        lambda: all_committed(kafka_broker, topics), 30, "the group to commit every offset", interval=0.5
    )
    second.signal(signal.SIGTERM)
    assert second.wait_exit() == 0, second.log_tail()

    results = Counter(r.key.decode() for r in _committed_records(kafka_broker, topics.output))
    letters = Counter(r.key.decode() for r in _committed_records(kafka_broker, topics.dead))
    assert results == Counter(names), results  # each result exactly once
    assert letters == Counter(["broken"]), letters
    written = len(_all_records(kafka_broker, topics.output))
    print(  # for the test log: what the crash left behind
        f"exactly once: {sum(seen_before.values())} of {len(names)} results committed before the kill "
        f"({written_before} records written by then); {written} records in the output topic in all, "
        f"{len(names)} of them committed, each once"
    )
    assert sum(seen_before.values()) < len(names), "the first daemon finished everything: no crash test"
