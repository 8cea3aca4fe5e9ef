"""Unit tests of KafkaSink.send's retries: which failures are retried, on which producer, for how long.

The producer is a scripted stand-in (each send pops the next outcome; tests/doubles/kafka.py); the
real broker path, a broker restart under a running daemon, is tests/e2e/test_kafka_resilience.py.
"""

from __future__ import annotations

import asyncio

import pytest
from aiokafka.errors import (
    KafkaConnectionError,
    KafkaTimeoutError,
    MessageSizeTooLargeError,
    OutOfOrderSequenceNumber,
    RecordListTooLargeError,
    TopicAuthorizationFailedError,
    UnknownProducerId,
)

from daemon.errors import SinkError
from daemon.kafka.sink import KafkaSink, Output, RecordTooLargeError, send_failure_remedy
from tests.doubles.kafka import FakeProducer, RecordingProducer, ScriptedSink, kafka_config

CONFIG = kafka_config()


def test_remedies() -> None:
    assert send_failure_remedy(OutOfOrderSequenceNumber()) == "new_producer"
    assert send_failure_remedy(UnknownProducerId()) == "new_producer"
    assert send_failure_remedy(KafkaConnectionError()) == "retry"
    assert send_failure_remedy(KafkaTimeoutError()) == "retry"
    assert send_failure_remedy(ConnectionResetError()) == "retry"
    assert send_failure_remedy(MessageSizeTooLargeError()) == "refused"
    assert send_failure_remedy(RecordListTooLargeError()) == "refused"
    assert send_failure_remedy(TopicAuthorizationFailedError()) is None


async def test_lost_producer_state_gets_a_new_producer_and_the_record_is_sent_again() -> None:
    old = FakeProducer("old", [OutOfOrderSequenceNumber()])
    new = FakeProducer("new", [])
    sink = ScriptedSink([old, new])
    await sink.start()
    await sink.send("out", "k", b"v", [])
    assert old.sent == []
    assert old.stopped
    assert new.sent == [("out", b"v")]
    assert sink.started == [old, new]


async def test_concurrent_sends_on_a_broken_producer_replace_it_once() -> None:
    old = FakeProducer("old", [OutOfOrderSequenceNumber() for _ in range(3)])
    new = FakeProducer("new", [])
    sink = ScriptedSink([old, new])
    await sink.start()
    await asyncio.gather(*(sink.send("out", f"k{i}", b"v%d" % i, []) for i in range(3)))
    assert sink.started == [old, new]
    assert sorted(value for _, value in new.sent) == [b"v0", b"v1", b"v2"]


async def test_a_retriable_error_is_retried_on_the_same_producer() -> None:
    producer = FakeProducer("only", [KafkaConnectionError(), KafkaTimeoutError()])
    sink = ScriptedSink([producer])
    await sink.start()
    await sink.send("out", "k", b"v", [])
    assert producer.sent == [("out", b"v")]
    assert not producer.stopped


async def test_a_new_producer_that_cannot_start_leaves_the_old_one_and_is_tried_again() -> None:
    old = FakeProducer("old", [OutOfOrderSequenceNumber(), OutOfOrderSequenceNumber()])
    new = FakeProducer("new", [])
    sink = ScriptedSink([old, KafkaConnectionError(), new])
    await sink.start()
    await sink.send("out", "k", b"v", [])
    assert new.sent == [("out", b"v")]
    assert old.stopped


async def test_an_error_no_retry_can_pass_is_fatal_at_once() -> None:
    producer = FakeProducer("only", [TopicAuthorizationFailedError(), OutOfOrderSequenceNumber()])
    sink = ScriptedSink([producer])
    await sink.start()
    with pytest.raises(SinkError, match="TopicAuthorizationFailed"):
        await sink.send("out", "k", b"v", [])
    assert sink.started == [producer]


async def test_a_record_the_broker_refuses_as_too_large_is_that_records_error_and_renews_the_producer() -> (
    None
):
    # The broker never appended the refused record, but the idempotent producer numbered it: the next
    # record would be out of sequence, so a new producer takes over at once.
    old = FakeProducer("old", [MessageSizeTooLargeError()])
    new = FakeProducer("new", [])
    sink = ScriptedSink([old, new])
    await sink.start()
    with pytest.raises(RecordTooLargeError, match="refused") as refused:
        await sink.send("out", "k", b"v", [])
    assert refused.value.reason == "too_large"
    assert old.stopped
    await sink.send("out", "k2", b"v2", [])
    assert new.sent == [("out", b"v2")]


async def test_a_record_over_max_request_bytes_never_reaches_the_producer() -> None:
    producer = FakeProducer("only", [])
    sink = ScriptedSink([producer])
    await sink.start()
    value = b"x" * CONFIG.max_request_bytes
    assert Output("out", "k", value, []).size > CONFIG.max_request_bytes
    with pytest.raises(RecordTooLargeError, match="max_request_bytes"):
        await sink.send("out", "k", value, [])
    assert producer.sent == []
    assert not producer.stopped


async def test_retries_end_at_the_deadline_with_a_sink_error() -> None:
    producer = FakeProducer("only", [KafkaConnectionError() for _ in range(1000)])
    sink = ScriptedSink([producer], retry_seconds=0.5)
    await sink.start()
    loop = asyncio.get_running_loop()
    began = loop.time()
    with pytest.raises(SinkError, match=r"still failing after 0\.5 s"):
        await sink.send("out", "k", b"v", [])
    assert 0.5 <= loop.time() - began < 2.0
    assert producer.sent == []


async def test_a_stopped_sink_refuses_to_send() -> None:
    sink = ScriptedSink([FakeProducer("only", [])])
    with pytest.raises(SinkError, match="not running"):
        await sink.send("out", "k", b"v", [])


@pytest.mark.parametrize("transactional_id", [None, "tx-1"])
async def test_the_producer_is_transactional_only_when_asked_before_it_starts(
    monkeypatch: pytest.MonkeyPatch, transactional_id: str | None
) -> None:
    import aiokafka

    monkeypatch.setattr(aiokafka, "AIOKafkaProducer", RecordingProducer)
    RecordingProducer.made.clear()
    sink = KafkaSink(CONFIG)
    if transactional_id is not None:
        sink.use_transactions(transactional_id)  # the transactional committer does, before start()
    await sink.start()
    try:
        assert [options["transactional_id"] for options in RecordingProducer.made] == [transactional_id]
        with pytest.raises(RuntimeError, match="before start"):
            sink.use_transactions("too-late")
    finally:
        await sink.stop()
