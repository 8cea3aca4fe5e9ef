"""The Kafka source itself: a facade over the consumer, the offset book and the committer.

It owns the consumer's lifecycle and its background tasks (fetch, commit, lag), the local buffer and
its backpressure (pause, resume, idle pause), and the rebalance listener; it turns messages into work
items (:mod:`~daemon.kafka.messages`) and hands finished outputs to the committer chosen at
start (:mod:`~daemon.kafka.committer`), which owns every commit. See :mod:`daemon.kafka`
for what the source does as a whole.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from aiokafka.abc import ConsumerRebalanceListener
from aiokafka.errors import KafkaError

from daemon.config import KafkaSourceConfig
from daemon.kafka.client import client_options
from daemon.kafka.committer import Committer, committer_for
from daemon.kafka.membership import check_static_membership
from daemon.kafka.messages import (
    MessageLimits,
    OutputTopics,
    ParsedMessage,
    dead_letter_output,
    header_value,
    message_bytes,
    message_coordinates,
    message_metadata,
    read_message,
    result_output,
)
from daemon.kafka.offsets import OffsetBook, PartitionOffsets
from daemon.kafka.sink import KafkaSink, Output
from daemon.kafka.undecodable import install as install_tolerant_decoding
from daemon.kafka.undecodable import undecodable
from daemon.lifecycle import Lifecycle
from daemon.ops.logging import get_logger
from daemon.ops.metrics import (
    KAFKA_ASSIGNED_PARTITIONS,
    KAFKA_BUFFERED,
    KAFKA_BUFFERED_BYTES,
    KAFKA_LAG,
    KAFKA_PAUSED_PARTITIONS,
    KAFKA_REBALANCES,
    observe_kafka_commits,
    observe_source,
)
from daemon.ops.pending import PENDING
from daemon.ops.tracing import trace_context_of
from daemon.records import Record
from daemon.work import WorkItem

# One logger for the whole package, under the name that log queries match on.
log = get_logger("daemon.sources.kafka")

SOURCE_NAME: Final = "kafka"
_POLL_MS: Final = 50
_PAUSED_POLL_MS: Final = 200


@dataclass(slots=True)
class _Entry:
    """A message taken in: its partition, the partition's tracker at the time, the message."""

    partition: TopicPartition
    tracker: PartitionOffsets
    message: ConsumerRecord[bytes, bytes]
    size: int
    """The message's bytes (key, value, headers): what it weighs in the local buffer."""
    refusal: ParsedMessage | None = None
    """Set for a stand-in for records the client could not decode (:mod:`.undecodable`)."""


def _entry(partition: TopicPartition, tracker: PartitionOffsets, message: ConsumerRecord[Any, Any]) -> _Entry:
    """A fetched message as the buffer holds it; a stand-in for undecodable records becomes a refusal
    (its value, not bytes, is dropped so that every output sees an ordinary message without one)."""
    skipped = undecodable(message)
    if skipped is None:
        return _Entry(partition, tracker, message, message_bytes(message))
    log.error(
        "records the Kafka client cannot decode: skipped, with a dead letter",
        partition=f"{message.topic}-{message.partition}",
        first_offset=skipped.first_offset,
        last_offset=skipped.last_offset,
        error=skipped.error,
    )
    message = dataclasses.replace(message, value=None, key=None, headers=())
    refusal = ParsedMessage(message_coordinates(message), error=skipped.refusal())
    return _Entry(partition, tracker, message, 0, refusal)


class _Rebalance(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(
        self,
        revoked: Callable[[set[TopicPartition]], Awaitable[None]],
        assigned: Callable[[set[TopicPartition]], None],
    ) -> None:
        self._revoked = revoked
        self._assigned = assigned

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await self._revoked(set(revoked))

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self._assigned(set(assigned))


class KafkaSourceError(Exception):
    """The consumer cannot go on (its background work failed)."""


class KafkaSource(Lifecycle):
    """Yields a :class:`WorkItem` per message of the input topics. ``start()``/``stop()`` are idempotent."""

    def __init__(
        self,
        config: KafkaSourceConfig,
        sink: KafkaSink,
        *,
        max_input_bytes: int,
        group_instance_id: str | None = None,
    ) -> None:
        """``group_instance_id``: join as a static member under this id (the factory derives it,
        :mod:`~daemon.kafka.membership`); None: a dynamic member."""
        self.config = config
        self.group_instance_id = group_instance_id
        self.sink = sink
        self.max_input_bytes = max_input_bytes
        self._limits = MessageLimits.of(config)
        self._outputs = OutputTopics.of(config)
        self._consumer: AIOKafkaConsumer | None = None
        self._committer: Committer[TopicPartition] | None = None
        self._book: OffsetBook[TopicPartition] = OffsetBook()
        self._buffer: deque[_Entry] = deque()
        self._buffered_bytes = 0
        self._next_fetch: dict[TopicPartition, int] = {}
        self._data = asyncio.Event()
        self._room = asyncio.Event()
        self._intake_paused = False  # the service's: the engine serves nothing now, fetch nothing
        self._lag_due = asyncio.Event()  # set when partitions are assigned: update the lag at once
        self._tasks: list[asyncio.Task[None]] = []
        self._failure: BaseException | None = None
        self.started = False

    @property
    def backlog(self) -> int:
        """Messages fetched and waiting, plus those known to be in the owned partitions and not fetched."""
        unread = 0
        if self._consumer is not None:
            for partition, position in self._next_fetch.items():
                end = self._consumer.highwater(partition)
                if end is not None and partition in self._book:
                    unread += max(0, end - position)
        return len(self._buffer) + unread

    # -- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the producer, join the consumer group, and start fetching, committing and the lag metric."""
        if self.started:
            return
        consumer = self._new_consumer()
        # Chosen once: from here on the source never asks which delivery guarantee it gives. Chosen
        # before the sink starts (it decides whether the producer is transactional) and before the
        # consumer starts (the rebalance listener may run from then on).
        committer = self._committer = committer_for(self.config, self._book, consumer, self.sink)
        try:
            await self.sink.start()
        except BaseException:
            await consumer.stop()  # never started: only its client to close (no "unclosed" warning)
            raise
        try:
            if self.group_instance_id is not None:
                await check_static_membership(client_options(self.config))
            await consumer.start()
        except BaseException:
            await consumer.stop()
            await self.sink.stop()
            raise
        self._consumer = consumer
        self._failure = None
        self.started = True
        observe_source(SOURCE_NAME)
        observe_kafka_commits()
        for name, work in (
            ("fetch", self._fetch(consumer, committer)),
            ("commit", self._commit_loop(committer)),
            ("lag", self._lag_loop(consumer)),
        ):
            task = asyncio.create_task(work, name=f"kafka-{name}")
            task.add_done_callback(self._task_done)
            self._tasks.append(task)
        log.info(
            "kafka source started",
            topics=self.config.input_topics,
            group_id=self.config.group_id,
            group_instance_id=self.group_instance_id,
            session_timeout_ms=self._session_timeout_ms,
        )

    @property
    def _session_timeout_ms(self) -> int:
        return self.config.session_timeout(static=self.group_instance_id is not None)

    def _new_consumer(self) -> AIOKafkaConsumer:
        """A consumer of the input topics, subscribed (with our rebalance listener), not started.
        Auto-commit is off (the committer commits); reads see only committed transactions."""
        config = self.config
        # One undecodable record must not stop the consumer for good, nor one compressed batch
        # exhaust its memory: a batch may inflate to what the local buffer holds, or to two messages
        # of the largest size allowed, whichever is more.
        install_tolerant_decoding(
            max_inflated_bytes=max(config.max_buffered_bytes, 2 * config.max_message_bytes)
        )
        consumer = AIOKafkaConsumer(
            **client_options(config),
            group_id=config.group_id,
            # Static membership: no LeaveGroup on stop, and the partitions wait for the same id.
            group_instance_id=self.group_instance_id,
            enable_auto_commit=False,
            auto_offset_reset=config.auto_offset_reset,
            session_timeout_ms=self._session_timeout_ms,
            rebalance_timeout_ms=config.rebalance_timeout_ms,
            heartbeat_interval_ms=config.heartbeat_interval_ms,
            max_poll_interval_ms=config.max_poll_interval_ms,
            # The client's own read-ahead, bounded like the local buffer (a larger message still comes).
            fetch_max_bytes=config.max_buffered_bytes,
            isolation_level="read_committed",
        )
        consumer.subscribe(
            topics=config.input_topics, listener=_Rebalance(self._on_revoked, self._on_assigned)
        )
        return consumer

    async def stop(self) -> None:
        """Stop fetching, commit what is finished, leave the group, flush and stop the producer."""
        if not self.started:
            return
        self.started = False
        self._data.set()
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        consumer, self._consumer = self._consumer, None
        committer = self._committer
        try:
            if consumer is not None and committer is not None:
                with contextlib.suppress(Exception):
                    await committer.commit(why="stop")
                self._log_unfinished()
                self._book.revoke_all()
                self._set_buffer(deque())
                committer.drop(why="stop")
                await consumer.stop()
        finally:
            await self.sink.stop()
            KAFKA_PAUSED_PARTITIONS.set(0)
            KAFKA_ASSIGNED_PARTITIONS.set(0)
            log.info("kafka source stopped")

    def _log_unfinished(self) -> None:
        """Say where each partition will be read again from, when messages of it were unfinished: after
        a crash on every start, the message at that offset (or one just after it) is the suspect."""
        for partition in self._book.partitions:
            tracker = self._book.get(partition)
            if tracker is not None and tracker.pending:
                log.warning(
                    "unfinished messages: read again from the committed offset on the next start",
                    partition=f"{partition.topic}-{partition.partition}",
                    committed=tracker.committed,
                    first_unfinished=tracker.commit_point,
                    unfinished=tracker.pending,
                )

    def _task_done(self, task: asyncio.Task[None]) -> None:
        # Background tasks are owned here; a failure stops intake (items() raises it to the service).
        if task.cancelled() or (exc := task.exception()) is None:
            return
        log.error("kafka background task failed", task=task.get_name(), error=repr(exc))
        if self._failure is None:
            self._failure = exc
        self._data.set()

    # -- intake ----------------------------------------------------------------------------------

    async def items(self) -> AsyncIterator[WorkItem]:
        """Yield work items in fetch order until :meth:`stop`. Pull-driven: the buffer is bounded."""
        while self.started:
            if self._failure is not None:
                raise KafkaSourceError(f"the Kafka consumer failed: {self._failure!r}") from self._failure
            if not self._buffer:
                self._data.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._data.wait(), 1.0)
                continue
            entry = self._buffer.popleft()
            self._buffered_bytes -= entry.size
            self._report_buffer()
            self._room.set()
            parsed = entry.refusal or await read_message(entry.message, self._limits)
            if entry.tracker.revoked:
                continue  # the partition was taken away meanwhile; its new owner reads it again
            yield self._work_item(entry, parsed)

    def _work_item(self, entry: _Entry, parsed: ParsedMessage) -> WorkItem:
        async def load() -> bytes:
            if parsed.error is not None:
                raise parsed.error
            assert parsed.text is not None
            return parsed.text

        async def load_options() -> Any:
            return parsed.options

        return WorkItem(
            id=parsed.id,
            source=SOURCE_NAME,
            load=load,
            on_complete=lambda record: self._complete(entry, parsed.id, record),
            on_fail=lambda record: self._fail(entry, parsed.id, record),
            metadata=message_metadata(entry.message, self._limits),
            load_options=load_options,
            size=len(parsed.text or b""),
            profile=self.config.profile_for(entry.message.topic),
            format_hint=header_value(entry.message.headers, "content-type"),
            trace_context=trace_context_of(entry.message.headers),
        )

    # -- acknowledgement: the committer writes or holds the output, then the offset is finished ---

    async def _complete(self, entry: _Entry, doc_id: str, record: Record) -> None:
        # DocumentError too_large when the result cannot fit: the document fails (a dead letter).
        await self._deliver(entry, result_output(entry.message, doc_id, record, self._outputs))

    async def _fail(self, entry: _Entry, doc_id: str, record: Record) -> None:
        await self._deliver(entry, dead_letter_output(entry.message, doc_id, record, self._outputs))

    async def _deliver(self, entry: _Entry, output: Output) -> None:
        committer = self._committer
        assert committer is not None  # items exist only once started
        await committer.deliver(entry.partition, entry.tracker, entry.message.offset, output)

    def pause_intake(self) -> None:
        """Pause every assigned partition until :meth:`resume_intake` (the consumer keeps polling, so
        it stays in its group; see PausableSource)."""
        self._intake_paused = True
        self._room.set()

    def resume_intake(self) -> None:
        """Fetch again."""
        self._intake_paused = False
        self._room.set()

    # -- fetching --------------------------------------------------------------------------------

    async def _fetch(self, consumer: AIOKafkaConsumer, committer: Committer[TopicPartition]) -> None:
        """Fill the local buffer; pause every partition while it is full, keep polling regardless."""
        while True:
            room = self.config.max_buffered_messages - len(self._buffer)
            if self._buffered_bytes >= self.config.max_buffered_bytes:
                room = 0  # full by bytes: a few large messages weigh as much as many small ones
            if committer.pause_needed or self._intake_paused:
                room = 0  # outputs wait for an earlier message, or no engine serves: take no more
            assigned = consumer.assignment()
            self._pause_or_resume(consumer, assigned, room)
            self._room.clear()
            batches = await consumer.getmany(
                timeout_ms=_PAUSED_POLL_MS if room <= 0 else _POLL_MS, max_records=max(room, 1)
            )
            if not batches and room > 0 and assigned:
                await self._idle_pause(consumer)
            for partition, messages in batches.items():
                self._take_in(partition, messages)
            if batches:
                self._report_buffer()
                self._data.set()
            elif room <= 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._room.wait(), _PAUSED_POLL_MS / 1000)

    def _pause_or_resume(self, consumer: AIOKafkaConsumer, assigned: set[TopicPartition], room: int) -> None:
        """No room: pause every assigned partition (polls go on, so the group keeps us). Room: resume."""
        paused = consumer.paused()
        if room <= 0:
            if assigned - paused:
                consumer.pause(*(assigned - paused))
                log.debug(
                    "local buffer full: partitions paused",
                    buffered=len(self._buffer),
                    buffered_bytes=self._buffered_bytes,
                )
        elif paused:
            consumer.resume(*paused)
        KAFKA_PAUSED_PARTITIONS.set(len(consumer.paused()))

    def _take_in(self, partition: TopicPartition, messages: list[ConsumerRecord[bytes, bytes]]) -> None:
        """Buffer fetched ``messages`` of ``partition`` and register their offsets with the book."""
        if not messages:
            return
        tracker = self._book.tracker(partition)
        for message in messages:
            try:
                tracker.add(message.offset)
            except ValueError:
                log.warning("skipping a message fetched twice", topic=message.topic, offset=message.offset)
                continue
            entry = _entry(partition, tracker, message)
            self._buffer.append(entry)
            self._buffered_bytes += entry.size
        self._next_fetch[partition] = messages[-1].offset + 1

    def _set_buffer(self, entries: deque[_Entry]) -> None:
        """Replace the local buffer (on revocation and stop), keeping its byte count."""
        self._buffer = entries
        self._buffered_bytes = sum(entry.size for entry in entries)
        self._report_buffer()

    def _report_buffer(self) -> None:
        KAFKA_BUFFERED.set(len(self._buffer))
        KAFKA_BUFFERED_BYTES.set(self._buffered_bytes)
        PENDING.fetched(SOURCE_NAME, self._buffered_bytes)

    async def _idle_pause(self, consumer: AIOKafkaConsumer) -> None:
        """Nothing came in: stop fetching for ``idle_pause_ms``. aiokafka keeps a fetch request in
        flight for every partition that is not paused; Kafka holds an empty fetch up to its
        ``fetch.max.wait.ms``, but a broker that answers at once turns that into a busy loop (the test
        broker does: one core at 100 %). New messages wait at most this long."""
        pause_s = self.config.idle_pause_ms / 1000
        if pause_s <= 0:
            return
        idle = consumer.assignment() - consumer.paused()
        consumer.pause(*idle)
        try:
            with contextlib.suppress(TimeoutError):
                # A rebalance (room set by the assignment listener) ends the pause early.
                await asyncio.wait_for(self._room.wait(), pause_s)
        finally:
            still_ours = idle & consumer.assignment()
            if still_ours:
                consumer.resume(*still_ours)

    # -- commits and rebalances --------------------------------------------------------------------

    async def _commit_loop(self, committer: Committer[TopicPartition]) -> None:
        """Commit when something finished, at most every ``commit_interval_seconds``."""
        while True:
            await committer.wanted.wait()
            committer.wanted.clear()
            await committer.commit(why="periodic")
            await asyncio.sleep(self.config.commit_interval_seconds)

    async def _on_revoked(self, revoked: set[TopicPartition]) -> None:
        committer = self._committer
        assert committer is not None  # set before the consumer that calls this starts
        await committer.revoke(revoked)
        self._set_buffer(deque(entry for entry in self._buffer if entry.partition not in revoked))
        for partition in revoked:
            self._next_fetch.pop(partition, None)
            with contextlib.suppress(KeyError):
                KAFKA_LAG.remove(partition.topic, str(partition.partition))
        if revoked:
            log.info("partitions revoked", partitions=sorted(f"{tp.topic}-{tp.partition}" for tp in revoked))

    def _on_assigned(self, assigned: set[TopicPartition]) -> None:
        # Every assignment ends a rebalance this member took part in, its own first join included.
        KAFKA_REBALANCES.inc()
        KAFKA_ASSIGNED_PARTITIONS.set(len(assigned))
        log.info("partitions assigned", partitions=sorted(f"{tp.topic}-{tp.partition}" for tp in assigned))
        self._room.set()
        self._lag_due.set()  # the new partitions' lag series now, not a lag interval later

    # -- lag ---------------------------------------------------------------------------------------

    async def _lag_loop(self, consumer: AIOKafkaConsumer) -> None:
        while True:
            self._lag_due.clear()
            try:
                await self._update_lag(consumer)
            except KafkaError as exc:
                log.warning("cannot read end offsets for the lag metric", error=repr(exc))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.config.lag_interval_seconds):
                    await self._lag_due.wait()

    async def _update_lag(self, consumer: AIOKafkaConsumer) -> None:
        partitions = sorted(consumer.assignment())
        if not partitions:
            return
        ends = await consumer.end_offsets(partitions)
        for partition in partitions:
            tracker = self._book.get(partition)
            committed = None if tracker is None else tracker.committed
            if committed is None:
                committed = await consumer.committed(partition)
            if committed is None:
                committed = (await consumer.beginning_offsets([partition]))[partition]
            if partition in consumer.assignment():
                KAFKA_LAG.labels(partition.topic, str(partition.partition)).set(
                    max(0, ends[partition] - committed)
                )
