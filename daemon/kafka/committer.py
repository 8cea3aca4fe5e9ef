"""The commit rule: when a finished document's output is written, and how offsets are committed.

One strategy per delivery guarantee, picked once at start by :func:`committer_for` (the only place
that reads ``exactly_once``); the source hands each finished output to it and asks it to commit:

* :class:`AtLeastOnceCommitter` (the default): each output is written as soon as its document
  finishes and the broker acknowledged it; then its offset counts as finished. Offsets are committed
  with the consumer's ``commit``. A crash re-reads what was not committed, so an output may be written
  twice.
* :class:`TransactionalCommitter` (``exactly_once = true``): outputs are held
  (:mod:`daemon.kafka.held`) and each commit writes those below the new commit points together
  with the offsets in one Kafka transaction (:meth:`daemon.kafka.sink.KafkaSink.write_transaction`).
  :func:`committer_for` makes the sink's producer transactional for it, before the sink starts
  (``transactional_id``, by default :func:`~daemon.kafka.sink.default_transactional_id`).

Both commit every owned partition's new commit point (:mod:`daemon.kafka.offsets`) and never
commit a partition again after it was revoked. An output the broker refuses as too large
(:class:`~daemon.kafka.sink.RecordTooLargeError`) is that message's problem, not the service's: its
:attr:`~daemon.kafka.sink.Output.fallback` (a reduced dead letter) is written instead, and if there
is none or that is refused too, nothing: the refusal is logged with the message's coordinates and
counted (``docsumd_kafka_refused_records``), and its offset counts as finished all the same, so that
one record can never stop the partition or crash-loop the daemon. A failed commit is retried with
the next one (it sets :attr:`Committer.wanted`); a fenced producer
(:class:`~daemon.errors.ProducerFencedError`) is fatal and propagates. They talk to the consumer and
the sink only through the small protocols below, so unit tests drive them with fakes.
"""

from __future__ import annotations

import asyncio
import contextlib
from abc import ABC, abstractmethod
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any, Generic, Protocol, TypeVar

from aiokafka.errors import KafkaError

from daemon.config import KafkaSourceConfig
from daemon.errors import ProducerFencedError, SinkError
from daemon.kafka.held import Held, HeldOutputs
from daemon.kafka.offsets import OffsetBook, PartitionOffsets
from daemon.kafka.sink import Output, RecordTooLargeError, default_transactional_id
from daemon.ops.logging import get_logger
from daemon.ops.metrics import KAFKA_COMMITS, KAFKA_PENDING_RESULTS, KAFKA_REFUSED_RECORDS
from daemon.records import Headers

# One logger for the whole package, under the name that log queries match on.
log = get_logger("daemon.sources.kafka")

P = TypeVar("P", bound=Hashable)


class OffsetCommitter(Protocol[P]):
    """What a committer needs of the consumer: commit the group's offsets (aiokafka's consumer)."""

    async def commit(self, offsets: dict[P, int]) -> Any:
        """Commit ``offsets`` (partition to next offset); a ``KafkaError`` if the commit failed."""
        ...


class OutputSender(Protocol):
    """What the at-least-once committer needs of the sink: send one record, acknowledged."""

    async def send(self, topic: str, key: str, value: bytes, headers: Headers) -> None:
        """Return once the broker acknowledged the record; :class:`RecordTooLargeError` if it is refused
        as too large, :class:`SinkError` (fatal) if it cannot be written at all."""
        ...


class TransactionWriter(Protocol):
    """What the transactional committer needs of the sink: a transactional producer, and outputs and
    offsets in one transaction."""

    def use_transactions(self, transactional_id: str) -> None:
        """Make the producer transactional under ``transactional_id`` (called before the sink starts)."""
        ...

    async def write_transaction(
        self, outputs: Sequence[Output], offsets: Mapping[Any, int], group_id: str
    ) -> None:
        """Write ``outputs`` and commit ``offsets`` atomically; :class:`SinkError` if aborted
        (:class:`RecordTooLargeError` when because a record was too large), :class:`ProducerFencedError`
        if another producer took over the transactional id."""
        ...


class OutputSink(OutputSender, TransactionWriter, Protocol):
    """Both ways of writing outputs: :class:`~daemon.kafka.sink.KafkaSink`."""


def committer_for(
    config: KafkaSourceConfig, book: OffsetBook[P], consumer: OffsetCommitter[P], sink: OutputSink
) -> Committer[P]:
    """The commit strategy ``config`` asks for: the one place that reads ``exactly_once``. Called
    before ``sink`` starts: the transactional one makes the sink's producer transactional."""
    if config.exactly_once:
        sink.use_transactions(config.transactional_id or default_transactional_id(config.group_id))
        return TransactionalCommitter(
            book, sink, group_id=config.group_id, max_pending_results=config.max_pending_results
        )
    return AtLeastOnceCommitter(book, consumer, sink)


def _described(offsets: Mapping[Any, int]) -> dict[str, int]:
    """Offsets for the log: a TopicPartition as ``TOPIC-PARTITION``, another partition (tests) as text."""
    return {
        f"{tp.topic}-{tp.partition}" if hasattr(tp, "topic") else str(tp): offset
        for tp, offset in offsets.items()
    }


def _where(partition: Any, offset: int) -> str:
    """A message's coordinates for the log: ``TOPIC-PARTITION@OFFSET``."""
    return f"{next(iter(_described({partition: offset})))}@{offset}"


class Committer(ABC, Generic[P]):
    """A delivery guarantee: how finished outputs are written and offsets committed.

    Shares the source's :class:`OffsetBook`: the source takes offsets in, the committer finishes and
    commits them. Commits and revocations are serialized (one at a time).
    """

    def __init__(self, book: OffsetBook[P]) -> None:
        self.book = book
        self.wanted = asyncio.Event()
        """Set when there may be something to commit (a finished output, a failed commit to retry)."""
        self._lock = asyncio.Lock()

    @property
    def pause_needed(self) -> bool:
        """Whether the source must take in no more messages for now (too many outputs waiting)."""
        return False

    @abstractmethod
    async def deliver(self, partition: P, tracker: PartitionOffsets, offset: int, output: Output) -> None:
        """The document of the message at ``offset`` of ``partition`` finished with ``output``.
        ``tracker`` is the partition's tracker when the message was taken in (revoked since, maybe)."""

    async def commit(self, *, why: str) -> None:
        """Commit every owned partition's new commit point (``why``: for the log). A failed commit is
        retried with the next one; what it covered is at worst read again."""
        async with self._lock:
            offsets = self.book.to_commit()
            if offsets and await self._commit(offsets, why=why):
                self.book.mark_committed(offsets)

    @abstractmethod
    async def _commit(self, offsets: dict[P, int], *, why: str) -> bool:
        """Commit ``offsets`` (the lock is held); False if it failed and is retried later."""

    @abstractmethod
    async def revoke(self, partitions: Iterable[P]) -> None:
        """``partitions`` are taken away: commit what is finished of them, then never again."""

    def drop(self, *, why: str) -> None:
        """The consumer stops: forget what is waiting (it is redone from the committed offsets)."""

    def _finished(self, tracker: PartitionOffsets, offset: int) -> None:
        tracker.finish(offset)  # ignored if the partition was revoked meanwhile
        self.wanted.set()

    @staticmethod
    def _instead_of(output: Output, error: RecordTooLargeError, where: str) -> Output | None:
        """``output`` was refused as too large: what to write instead (its fallback, or None), logged
        and counted."""
        fallback = output.fallback
        KAFKA_REFUSED_RECORDS.labels(
            written_instead="nothing" if fallback is None else "reduced_dead_letter"
        ).inc()
        if fallback is None:
            log.error(
                "the broker refused a record as too large and there is nothing smaller to write: the "
                "message ends without an output",
                message=where,
                topic=output.topic,
                error=error.message,
            )
        else:
            log.warning(
                "the broker refused a record as too large: writing its reduced dead letter instead",
                message=where,
                topic=output.topic,
                error=error.message,
            )
        return fallback


class AtLeastOnceCommitter(Committer[P]):
    """Outputs written one by one as documents finish; offsets committed with the consumer."""

    def __init__(self, book: OffsetBook[P], consumer: OffsetCommitter[P], sink: OutputSender) -> None:
        super().__init__(book)
        self._consumer = consumer
        self._sink = sink

    async def deliver(self, partition: P, tracker: PartitionOffsets, offset: int, output: Output) -> None:
        """Write ``output`` (acknowledged by the broker), then count its offset as finished. Written
        even if the partition was revoked meanwhile: at least once. Refused as too large: its fallback
        instead, or nothing (see the module's doc)."""
        current: Output | None = output
        while current is not None:
            try:
                await self._sink.send(current.topic, current.key, current.value, current.headers)
            except RecordTooLargeError as exc:
                current = self._instead_of(current, exc, _where(partition, offset))
            else:
                break
        self._finished(tracker, offset)

    async def _commit(self, offsets: dict[P, int], *, why: str) -> bool:
        try:
            await self._consumer.commit(offsets)
        except KafkaError as exc:
            KAFKA_COMMITS.labels(outcome="failed").inc()
            log.warning("offset commit failed; retrying later", why=why, error=repr(exc))
            self.wanted.set()
            return False
        KAFKA_COMMITS.labels(outcome="ok").inc()
        log.debug("offsets committed", why=why, offsets=_described(offsets))
        return True

    async def revoke(self, partitions: Iterable[P]) -> None:
        """Commit the revoked partitions' last commit points (once: a failure means they are read
        again by their new owner)."""
        async with self._lock:
            last = self.book.revoke(partitions)
        if not last:
            return
        # The lock is released: the book no longer has these partitions, so no later commit can
        # include them; this is their last commit from this consumer.
        try:
            await self._consumer.commit(last)
            KAFKA_COMMITS.labels(outcome="ok").inc()
        except KafkaError as exc:
            KAFKA_COMMITS.labels(outcome="failed").inc()
            log.warning("commit of revoked partitions failed; they will be read again", error=repr(exc))


class TransactionalCommitter(Committer[P]):
    """Exactly once: outputs held until every earlier message of their partition is finished, then
    written with the offsets that cover them in one transaction."""

    def __init__(
        self, book: OffsetBook[P], sink: TransactionWriter, *, group_id: str, max_pending_results: int
    ) -> None:
        super().__init__(book)
        self._sink = sink
        self._group_id = group_id
        self._max_pending = max_pending_results
        # None: nothing is written for that offset (the broker refused every form of its output).
        self._held: HeldOutputs[P, Output | None] = HeldOutputs()

    @property
    def held(self) -> int:
        """Outputs held for their transaction."""
        return len(self._held)

    @property
    def pause_needed(self) -> bool:
        """Held outputs reached ``max_pending_results``: they wait for an earlier message, take no more."""
        return len(self._held) >= self._max_pending

    async def deliver(self, partition: P, tracker: PartitionOffsets, offset: int, output: Output) -> None:
        """Hold ``output`` for the transaction that commits its offset; nothing if the partition was
        revoked meanwhile (its new owner redoes the message)."""
        if tracker.revoked:
            return
        self._held.hold(partition, offset, output)
        KAFKA_PENDING_RESULTS.set(len(self._held))
        self._finished(tracker, offset)

    async def _commit(self, offsets: dict[P, int], *, why: str) -> bool:
        """Write the held outputs below ``offsets`` and the offsets in one transaction. False if it
        failed (aborted, the outputs stay held: retried later); a fenced producer propagates."""
        covered = self._held.covered_below(offsets)
        outputs = [held.output for held in covered if held.output is not None]
        try:
            await self._sink.write_transaction(outputs, offsets, self._group_id)
        except ProducerFencedError:
            KAFKA_COMMITS.labels(outcome="failed").inc()
            raise
        except RecordTooLargeError as exc:
            KAFKA_COMMITS.labels(outcome="failed").inc()
            self._shrink_largest(covered, exc)
            self.wanted.set()
            return False
        except SinkError as exc:
            KAFKA_COMMITS.labels(outcome="failed").inc()
            log.warning("transaction failed and aborted; retrying later", why=why, error=str(exc))
            self.wanted.set()
            return False
        KAFKA_COMMITS.labels(outcome="ok").inc()
        self._held.release(covered)
        KAFKA_PENDING_RESULTS.set(len(self._held))
        log.debug("transaction committed", why=why, outputs=len(outputs), offsets=_described(offsets))
        return True

    def _shrink_largest(self, covered: list[Held[P, Output | None]], error: RecordTooLargeError) -> None:
        """The broker refused a record of the transaction, without saying which: replace the largest
        by what goes instead (the next try finds the next one, if there is one)."""
        candidates = [held for held in covered if held.output is not None]
        if not candidates:
            return
        largest = max(candidates, key=lambda held: held.output.size if held.output is not None else 0)
        assert largest.output is not None
        where = _where(largest.partition, largest.offset)
        self._held.replace(largest, self._instead_of(largest.output, error, where))

    async def revoke(self, partitions: Iterable[P]) -> None:
        """One last transaction for the revoked partitions; whatever it does not cover is dropped and
        redone by their new owner."""
        revoked = list(partitions)
        # One producer, one transaction at a time: the last one for these partitions runs under the
        # lock, so no periodic commit interleaves with it.
        async with self._lock:
            last = self.book.revoke(revoked)
            if last:
                with contextlib.suppress(SinkError):
                    await self._commit(last, why="revoke")
            self._drop(revoked, why="revoke")

    def drop(self, *, why: str) -> None:
        """Forget every held output (the consumer stops; they are redone from the committed offsets)."""
        self._report_dropped(self._held.drop_all(), why=why)

    def _drop(self, partitions: Iterable[P], *, why: str) -> None:
        self._report_dropped(self._held.drop(partitions), why=why)

    def _report_dropped(self, dropped: int, *, why: str) -> None:
        if not dropped:
            return
        KAFKA_PENDING_RESULTS.set(len(self._held))
        log.info(
            "finished outputs dropped: an earlier message of their partition was not finished; "
            "they are redone from the committed offset",
            count=dropped,
            why=why,
        )
