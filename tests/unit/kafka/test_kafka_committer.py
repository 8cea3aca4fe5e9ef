"""Unit tests of daemon.kafka.committer: the commit rule, without a broker.

The consumer's commit and the sink are fakes (tests/doubles/kafka.py) that record what they were
asked and fail when told to; partitions are plain strings. The broker path is tests/e2e/test_kafka_source.py.
"""

from __future__ import annotations

import pytest
from aiokafka.errors import CommitFailedError, KafkaConnectionError

from daemon.errors import ProducerFencedError, SinkError
from daemon.kafka.committer import AtLeastOnceCommitter, TransactionalCommitter, committer_for
from daemon.kafka.offsets import OffsetBook, PartitionOffsets
from daemon.kafka.sink import Output, default_transactional_id
from tests.doubles.kafka import FakeConsumer, FakeSink, RefusingSink, kafka_config


def _output(key: str) -> Output:
    return Output("out", key, key.encode(), [])


def _take(book: OffsetBook[str], partition: str, *offsets: int) -> PartitionOffsets:
    """A partition whose committed offset is its first message, and messages taken in."""
    tracker = book.tracker(partition, committed=offsets[0])
    for offset in offsets:
        tracker.add(offset)
    return tracker


def test_the_strategy_is_chosen_from_the_config_and_tells_the_sink_its_producer() -> None:
    book: OffsetBook[str] = OffsetBook()
    plain_sink, exact_sink, named_sink = FakeSink(), FakeSink(), FakeSink()
    plain = committer_for(kafka_config(), book, FakeConsumer(), plain_sink)
    assert isinstance(plain, AtLeastOnceCommitter)
    assert plain_sink.transactional_id is None  # a plain idempotent producer
    exact = committer_for(
        kafka_config(exactly_once=True, max_pending_results=7), book, FakeConsumer(), exact_sink
    )
    assert isinstance(exact, TransactionalCommitter)
    assert exact_sink.transactional_id == default_transactional_id("g")
    committer_for(kafka_config(exactly_once=True, transactional_id="tx-1"), book, FakeConsumer(), named_sink)
    assert named_sink.transactional_id == "tx-1"


# -- at least once ------------------------------------------------------------------------------------


async def test_at_least_once_writes_each_output_and_commits_the_finished_prefix() -> None:
    book: OffsetBook[str] = OffsetBook()
    consumer, sink = FakeConsumer(), FakeSink()
    committer = AtLeastOnceCommitter(book, consumer, sink)
    tracker = _take(book, "p", 0, 1, 2)
    await committer.deliver("p", tracker, 2, _output("c"))
    await committer.deliver("p", tracker, 1, _output("b"))
    assert [output.key for output in sink.sent] == ["c", "b"]  # written as they finish
    assert committer.wanted.is_set()
    await committer.commit(why="test")
    assert consumer.commits == []  # offset 0 is unfinished: nothing past it may be committed
    await committer.deliver("p", tracker, 0, _output("a"))
    await committer.commit(why="test")
    assert consumer.commits == [{"p": 3}]
    await committer.commit(why="test")
    assert consumer.commits == [{"p": 3}]  # nothing new
    assert not committer.pause_needed


async def test_at_least_once_retries_a_failed_commit_with_the_next_one() -> None:
    book: OffsetBook[str] = OffsetBook()
    consumer = FakeConsumer()
    committer = AtLeastOnceCommitter(book, consumer, FakeSink())
    tracker = _take(book, "p", 0)
    await committer.deliver("p", tracker, 0, _output("a"))
    committer.wanted.clear()
    consumer.failures.append(KafkaConnectionError())
    await committer.commit(why="test")
    assert consumer.commits == []
    assert committer.wanted.is_set()  # asks for another try
    await committer.commit(why="test")
    assert consumer.commits == [{"p": 1}]


async def test_at_least_once_commits_a_revoked_partition_once_and_never_again() -> None:
    book: OffsetBook[str] = OffsetBook()
    consumer, sink = FakeConsumer(), FakeSink()
    committer = AtLeastOnceCommitter(book, consumer, sink)
    tracker = _take(book, "p", 0, 1)
    _take(book, "q", 5)
    await committer.deliver("p", tracker, 0, _output("a"))
    await committer.revoke({"p"})
    assert consumer.commits == [{"p": 1}]
    # A document of the revoked partition finishing later is still written (at least once), but
    # its offset is not committed: the partition's new owner reads it again.
    await committer.deliver("p", tracker, 1, _output("b"))
    assert [output.key for output in sink.sent] == ["a", "b"]
    await committer.commit(why="test")
    assert consumer.commits == [{"p": 1}]


async def test_at_least_once_survives_a_failed_commit_of_revoked_partitions() -> None:
    book: OffsetBook[str] = OffsetBook()
    consumer = FakeConsumer()
    committer = AtLeastOnceCommitter(book, consumer, FakeSink())
    tracker = _take(book, "p", 0)
    await committer.deliver("p", tracker, 0, _output("a"))
    consumer.failures.append(CommitFailedError())
    await committer.revoke({"p"})  # logged; the new owner reads the partition again
    await committer.commit(why="test")
    assert consumer.commits == []


# -- transactional ------------------------------------------------------------------------------------


def _transactional(
    sink: FakeSink, book: OffsetBook[str], max_pending: int = 100
) -> TransactionalCommitter[str]:
    return TransactionalCommitter(book, sink, group_id="g", max_pending_results=max_pending)


async def test_transactional_writes_the_held_outputs_below_the_commit_point_with_the_offsets() -> None:
    book: OffsetBook[str] = OffsetBook()
    sink = FakeSink()
    committer = _transactional(sink, book)
    p = _take(book, "p", 0, 1, 2, 3)
    q = _take(book, "q", 7)
    for offset, key in ((1, "p1"), (0, "p0"), (3, "p3")):
        await committer.deliver("p", p, offset, _output(key))
    await committer.deliver("q", q, 7, _output("q7"))
    assert sink.sent == []  # nothing goes out one by one
    assert committer.held == 4
    await committer.commit(why="test")
    # p's point is 2 (offset 2 unfinished): p0 and p1 go with it, in input order; p3 stays held.
    assert sink.transactions == [(["p0", "p1", "q7"], {"p": 2, "q": 8}, "g")]
    assert committer.held == 1
    await committer.deliver("p", p, 2, _output("p2"))
    await committer.commit(why="test")
    assert sink.transactions[1] == (["p2", "p3"], {"p": 4}, "g")
    assert committer.held == 0


async def test_a_failed_transaction_leaves_the_outputs_held_for_the_next_commit() -> None:
    book: OffsetBook[str] = OffsetBook()
    sink = FakeSink()
    committer = _transactional(sink, book)
    tracker = _take(book, "p", 0, 1)
    await committer.deliver("p", tracker, 0, _output("p0"))
    committer.wanted.clear()
    sink.failures.append(SinkError("aborted"))
    await committer.commit(why="test")
    assert sink.transactions == []
    assert committer.held == 1
    assert committer.wanted.is_set()
    await committer.deliver("p", tracker, 1, _output("p1"))
    await committer.commit(why="test")
    assert sink.transactions == [(["p0", "p1"], {"p": 2}, "g")]  # the offsets were not marked committed
    assert committer.held == 0


async def test_a_fenced_producer_is_fatal() -> None:
    book: OffsetBook[str] = OffsetBook()
    sink = FakeSink()
    committer = _transactional(sink, book)
    tracker = _take(book, "p", 0)
    await committer.deliver("p", tracker, 0, _output("p0"))
    sink.failures.append(ProducerFencedError("another incarnation"))
    with pytest.raises(ProducerFencedError):
        await committer.commit(why="test")
    assert committer.held == 1


async def test_held_outputs_are_bounded_and_pause_intake_at_the_limit() -> None:
    book: OffsetBook[str] = OffsetBook()
    committer = _transactional(FakeSink(), book, max_pending=2)
    tracker = _take(book, "p", 0, 1, 2)
    pause_needed = []
    await committer.deliver("p", tracker, 1, _output("p1"))
    pause_needed.append(committer.pause_needed)
    await committer.deliver("p", tracker, 2, _output("p2"))
    pause_needed.append(committer.pause_needed)  # both wait for offset 0: the limit is reached
    await committer.deliver("p", tracker, 0, _output("p0"))
    await committer.commit(why="test")
    pause_needed.append(committer.pause_needed)
    assert pause_needed == [False, True, False]
    assert committer.held == 0


async def test_revoke_commits_what_it_can_and_drops_the_rest() -> None:
    book: OffsetBook[str] = OffsetBook()
    sink = FakeSink()
    committer = _transactional(sink, book)
    p = _take(book, "p", 0, 1, 2)
    q = _take(book, "q", 0)
    await committer.deliver("p", p, 0, _output("p0"))
    await committer.deliver("p", p, 2, _output("p2"))  # behind unfinished 1: cannot be committed
    await committer.deliver("q", q, 0, _output("q0"))
    await committer.revoke({"p"})
    assert sink.transactions == [(["p0"], {"p": 1}, "g")]
    assert committer.held == 1  # p2 dropped (redone by the new owner), q0 kept
    await committer.deliver("p", p, 1, _output("p1"))  # finished after the revocation: not held
    assert committer.held == 1
    await committer.commit(why="test")
    assert sink.transactions[1] == (["q0"], {"q": 1}, "g")


async def test_a_failed_last_transaction_of_revoked_partitions_drops_their_outputs() -> None:
    book: OffsetBook[str] = OffsetBook()
    sink = FakeSink()
    committer = _transactional(sink, book)
    tracker = _take(book, "p", 0)
    await committer.deliver("p", tracker, 0, _output("p0"))
    sink.failures.append(SinkError("aborted"))
    await committer.revoke({"p"})
    assert (sink.transactions, committer.held) == ([], 0)


async def test_stop_drops_every_held_output() -> None:
    book: OffsetBook[str] = OffsetBook()
    committer = _transactional(FakeSink(), book)
    tracker = _take(book, "p", 0, 1)
    await committer.deliver("p", tracker, 1, _output("p1"))
    committer.drop(why="stop")
    assert committer.held == 0


# -- records the broker refuses as too large ------------------------------------------------------------


def _large(key: str, *, fallback: Output | None) -> Output:
    return Output("out", key, b"x" * 100, [], fallback)


async def test_at_least_once_writes_the_fallback_of_a_refused_record_and_finishes_its_offset() -> None:
    book: OffsetBook[str] = OffsetBook()
    consumer, sink = FakeConsumer(), RefusingSink(limit=10)
    committer = AtLeastOnceCommitter(book, consumer, sink)
    tracker = _take(book, "p", 0, 1)
    reduced = Output("dlq", "a", b"small", [("reason", b"too_large")])
    await committer.deliver("p", tracker, 0, _large("a", fallback=reduced))
    assert sink.refused == ["a"]
    assert sink.sent == [reduced]
    await committer.commit(why="test")
    assert consumer.commits == [{"p": 1}]


async def test_at_least_once_with_nothing_left_to_write_still_finishes_the_offset() -> None:
    book: OffsetBook[str] = OffsetBook()
    consumer, sink = FakeConsumer(), RefusingSink(limit=1)
    committer = AtLeastOnceCommitter(book, consumer, sink)
    tracker = _take(book, "p", 0)
    await committer.deliver("p", tracker, 0, _large("a", fallback=Output("dlq", "a", b"still big", [])))
    assert sink.refused == ["a", "a"]
    assert sink.sent == []
    await committer.commit(why="test")
    assert consumer.commits == [{"p": 1}]  # the message ends (logged and counted), the partition goes on


async def test_transactional_replaces_the_largest_refused_output_and_commits_on_the_next_try() -> None:
    book: OffsetBook[str] = OffsetBook()
    sink = RefusingSink(limit=50)
    committer = TransactionalCommitter(book, sink, group_id="g", max_pending_results=10)
    tracker = _take(book, "p", 0, 1, 2)
    reduced = Output("dlq", "b", b"reduced", [])
    await committer.deliver("p", tracker, 0, _output("a"))
    await committer.deliver("p", tracker, 1, _large("b", fallback=reduced))
    await committer.deliver("p", tracker, 2, _output("c"))
    committer.wanted.clear()
    await committer.commit(why="test")
    assert sink.transactions == []  # aborted: the broker refused "b"
    assert committer.wanted.is_set()
    assert committer.held == 3
    await committer.commit(why="test")
    assert sink.transactions == [(["a", "b", "c"], {"p": 3}, "g")]
    assert sink.sent == []
    assert committer.held == 0


async def test_transactional_drops_an_output_with_no_fallback_and_commits_its_offset() -> None:
    book: OffsetBook[str] = OffsetBook()
    sink = RefusingSink(limit=50)
    committer = TransactionalCommitter(book, sink, group_id="g", max_pending_results=10)
    tracker = _take(book, "p", 0, 1)
    await committer.deliver("p", tracker, 0, _large("a", fallback=None))
    await committer.deliver("p", tracker, 1, _output("b"))
    await committer.commit(why="test")
    await committer.commit(why="test")
    assert sink.transactions == [(["b"], {"p": 2}, "g")]
    assert committer.held == 0
