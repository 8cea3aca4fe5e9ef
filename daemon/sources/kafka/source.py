"""The Kafka source: a consumer group reading documents; results and dead letters go back to Kafka.

**Input.** A message's value is either a JSON object ``{"id": ..., "text": ..., "options": {...}}``
(``id`` and ``options`` optional; options as in :mod:`daemon.options`) or plain UTF-8 text whose
document id is the message key. A value whose first non-blank byte is ``{`` is read as JSON, unless
the ``content-type`` header says ``text/plain`` (``application/json`` forces JSON). Without an id or
a key, the id is ``TOPIC-PARTITION-OFFSET``. The message's headers, key and coordinates go into the
work item's metadata, so they reach the result record. A malformed message (bad JSON, no text, a
tombstone) fails with reason ``invalid_message``; a value over ``max_message_bytes`` with
``too_large``. Neither ever stops its partition: both become dead letters and the offset moves on.

**Output.** :class:`~daemon.sinks.kafka.KafkaSink`: results to ``output_topic`` (key: the document
id; value: the same record as the folder's result file; headers: the input's, plus ``model`` and
``prompt_version``), failure records to ``dead_letter_topic`` with the source topic, partition and
offset and the original value (its first ``dead_letter_payload_bytes`` and its size when larger).

**Offsets.** Auto-commit is off. Documents finish out of order; per partition the committed offset
is the lowest one not yet finished (:mod:`daemon.sources.kafka.offsets`): a result or dead letter is
acknowledged by the broker before its offset counts as finished. Commits run every
``commit_interval_seconds``, on rebalance (for the partitions being revoked; nothing is committed for
them afterwards) and on stop. Delivery is at least once: a crash re-reads what was not committed.

**Backpressure.** The service pulls an item only when it has room. Fetched messages wait in a local
buffer of ``max_buffered_messages``; when it is full every assigned partition is paused, and resumed
once there is room. The consumer keeps polling while paused, so however long a document takes it
stays in its group (heartbeats run in aiokafka's background task; polls satisfy max.poll.interval).

**Exactly once** (opt-in, ``exactly_once = true``). Outputs are not sent one by one: a finished
document's result or dead letter is held until every earlier message of its partition is finished;
each commit then writes the held outputs below the new commit points and those offsets in one Kafka
transaction. A reader with ``isolation.level=read_committed`` sees each output once: a crash loses
only uncommitted transactions, whose inputs are read again and redone. Held outputs are bounded by
``max_pending_results`` (partitions pause when it is reached); outputs of a revoked partition that
were not yet committable are dropped and redone by its new owner. aiokafka does not send the group
generation with the offsets (KIP-447), so a daemon stalled past its session timeout that wakes up
after its partitions moved is not fenced by the broker; its transactional id fences only an
incarnation with the same id.

**Lag.** ``docsumd_kafka_consumer_lag{topic,partition}``: end offset minus committed offset, per owned
partition, refreshed every ``lag_interval_seconds``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from aiokafka.abc import ConsumerRebalanceListener
from aiokafka.errors import KafkaError

from daemon.config import KafkaSourceConfig
from daemon.errors import DocumentError, ProducerFencedError, SinkError
from daemon.lifecycle import Lifecycle
from daemon.logging import get_logger
from daemon.metrics import (
    KAFKA_BUFFERED,
    KAFKA_COMMITS,
    KAFKA_LAG,
    KAFKA_PAUSED_PARTITIONS,
    KAFKA_PENDING_RESULTS,
)
from daemon.records import Record, dead_letter, dead_letter_headers, encode_record, result_headers
from daemon.sinks.kafka import KafkaSink, Output
from daemon.sources.kafka.offsets import OffsetBook, PartitionOffsets
from daemon.work import WorkItem

log = get_logger(__name__)

SOURCE_NAME: Final = "kafka"
_JSON_FIELDS: Final = frozenset({"id", "text", "options"})
_PARSE_IN_THREAD_BYTES: Final = 256 * 1024
_POLL_MS: Final = 50
_PAUSED_POLL_MS: Final = 200


@dataclass(frozen=True, slots=True)
class ParsedMessage:
    """What a message holds: its document id and text and options, or why it is refused."""

    id: str
    text: bytes | None = None
    options: Any = None
    error: DocumentError | None = None


def _header(headers: Sequence[tuple[str, bytes]], name: str) -> str | None:
    for key, value in headers:
        if key.lower() == name:
            return value.decode("utf-8", "replace").strip().lower()
    return None


def parse_message(
    value: bytes | None,
    key: bytes | None,
    headers: Sequence[tuple[str, bytes]],
    *,
    coordinates: str,
    max_message_bytes: int,
) -> ParsedMessage:
    """Read a message's value as a JSON document record or as plain text (see the module's doc)."""
    fallback_id = key.decode("utf-8", "replace") if key else coordinates
    if value is None:
        return ParsedMessage(fallback_id, error=DocumentError("invalid_message", "the message has no value"))
    if len(value) > max_message_bytes:
        return ParsedMessage(
            fallback_id,
            error=DocumentError(
                "too_large", f"the message is {len(value)} bytes, over the limit of {max_message_bytes}"
            ),
        )
    content_type = _header(headers, "content-type") or ""
    if content_type.startswith("application/json"):
        as_json = True
    elif content_type.startswith("text/"):
        as_json = False
    else:
        as_json = value.lstrip()[:1] == b"{"
    if not as_json:
        return ParsedMessage(fallback_id, text=value)

    def refuse(message: str) -> ParsedMessage:
        return ParsedMessage(fallback_id, error=DocumentError("invalid_message", message))

    try:
        record = json.loads(value)
    except (ValueError, RecursionError) as exc:
        return refuse(f"the message is not valid JSON: {exc}")
    if not isinstance(record, dict):
        return refuse(f"the message must be a JSON object, got {type(record).__name__}")
    unknown = sorted(set(record) - _JSON_FIELDS)
    if unknown:
        return refuse(f"unknown fields {unknown}: a message has id, text and options")
    doc_id = record.get("id")
    if doc_id is not None:
        if isinstance(doc_id, bool) or not isinstance(doc_id, str | int) or str(doc_id) == "":
            return refuse("id must be a non-empty string or an integer")
        fallback_id = str(doc_id)
    text = record.get("text")
    if not isinstance(text, str):
        return refuse("the message has no text: it needs a string field 'text'")
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return refuse(f"text is not valid Unicode: {exc}")
    return ParsedMessage(fallback_id, text=data, options=record.get("options"))


@dataclass(slots=True)
class _Entry:
    partition: TopicPartition
    tracker: PartitionOffsets
    message: ConsumerRecord[bytes, bytes]


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

    def __init__(self, config: KafkaSourceConfig, sink: KafkaSink, *, max_input_bytes: int) -> None:
        self.config = config
        self.sink = sink
        self.max_input_bytes = max_input_bytes
        self._consumer: AIOKafkaConsumer | None = None
        self._book: OffsetBook[TopicPartition] = OffsetBook()
        self._buffer: deque[_Entry] = deque()
        self._next_fetch: dict[TopicPartition, int] = {}
        self._data = asyncio.Event()
        self._room = asyncio.Event()
        self._commit_wanted = asyncio.Event()
        self._commit_lock = asyncio.Lock()
        self._tasks: list[asyncio.Task[None]] = []
        self._failure: BaseException | None = None
        # Exactly-once mode: finished outputs waiting for their transaction, per partition and offset.
        self._held: dict[TopicPartition, dict[int, Output]] = {}
        self._held_count = 0
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
        await self.sink.start()
        config = self.config
        consumer = AIOKafkaConsumer(
            **config.client_options(),
            group_id=config.group_id,
            enable_auto_commit=False,
            auto_offset_reset=config.auto_offset_reset,
            session_timeout_ms=config.session_timeout_ms,
            heartbeat_interval_ms=config.heartbeat_interval_ms,
            max_poll_interval_ms=config.max_poll_interval_ms,
            isolation_level="read_committed",
        )
        consumer.subscribe(
            topics=config.input_topics, listener=_Rebalance(self._on_revoked, self._on_assigned)
        )
        try:
            await consumer.start()
        except BaseException:
            await self.sink.stop()
            raise
        self._consumer = consumer
        self._failure = None
        self.started = True
        for name, work in (("fetch", self._fetch), ("commit", self._commit_loop), ("lag", self._lag_loop)):
            task = asyncio.create_task(work(), name=f"kafka-{name}")
            task.add_done_callback(self._task_done)
            self._tasks.append(task)
        log.info("kafka source started", topics=config.input_topics, group_id=config.group_id)

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
        try:
            if consumer is not None:
                with contextlib.suppress(Exception):
                    await self._commit(consumer, self._book.to_commit(), why="stop")
                self._book.revoke_all()
                self._buffer.clear()
                self._drop_held(list(self._held), why="stop")
                await consumer.stop()
        finally:
            await self.sink.stop()
            KAFKA_BUFFERED.set(0)
            KAFKA_PAUSED_PARTITIONS.set(0)
            log.info("kafka source stopped")

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
            KAFKA_BUFFERED.set(len(self._buffer))
            self._room.set()
            message = entry.message
            coordinates = f"{message.topic}-{message.partition}-{message.offset}"
            args = (message.value, message.key, list(message.headers))
            kwargs: dict[str, Any] = {
                "coordinates": coordinates,
                "max_message_bytes": self.config.max_message_bytes,
            }
            size = len(message.value or b"")
            if _PARSE_IN_THREAD_BYTES < size <= self.config.max_message_bytes:
                parsed = await asyncio.to_thread(parse_message, *args, **kwargs)
            else:
                parsed = parse_message(*args, **kwargs)
            if entry.tracker.revoked:
                continue  # the partition was taken away meanwhile; its new owner reads it again
            yield self._work_item(entry, parsed)

    def _work_item(self, entry: _Entry, parsed: ParsedMessage) -> WorkItem:
        message = entry.message

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
            metadata={
                "topic": message.topic,
                "partition": message.partition,
                "offset": message.offset,
                "timestamp_ms": message.timestamp,
                "key": None if message.key is None else message.key.decode("utf-8", "replace"),
                "headers": {key: value.decode("utf-8", "replace") for key, value in message.headers},
            },
            load_options=load_options,
        )

    # -- acknowledgement -------------------------------------------------------------------------

    async def _complete(self, entry: _Entry, doc_id: str, record: Record) -> None:
        headers = result_headers(entry.message.headers, record)
        if self.config.exactly_once:
            self._hold(entry, Output(self.config.output_topic, doc_id, encode_record(record), headers))
            return
        await self.sink.write_result(doc_id, record, headers)
        self._finished(entry)

    async def _fail(self, entry: _Entry, doc_id: str, record: Record) -> None:
        message = entry.message
        letter = dead_letter(
            record,
            topic=message.topic,
            partition=message.partition,
            offset=message.offset,
            value=message.value,
            payload_bytes=self.config.dead_letter_payload_bytes,
        )
        headers = dead_letter_headers(message.headers, record)
        if self.config.exactly_once:
            self._hold(entry, Output(self.config.dead_letter_topic, doc_id, encode_record(letter), headers))
            return
        await self.sink.write_failure(doc_id, letter, headers)
        self._finished(entry)

    def _hold(self, entry: _Entry, output: Output) -> None:
        """Exactly-once mode: keep ``output`` for the transaction that commits its offset."""
        if entry.tracker.revoked:
            return  # the partition moved on; its new owner redoes this message
        self._held.setdefault(entry.partition, {})[entry.message.offset] = output
        self._held_count += 1
        KAFKA_PENDING_RESULTS.set(self._held_count)
        self._finished(entry)

    def _held_below(self, offsets: dict[TopicPartition, int]) -> list[tuple[TopicPartition, int]]:
        """The held outputs that the commit of ``offsets`` covers, as (partition, offset), in order."""
        covered = []
        for partition, point in offsets.items():
            held = self._held.get(partition, {})
            covered += [(partition, offset) for offset in sorted(held) if offset < point]
        return covered

    def _release(self, covered: list[tuple[TopicPartition, int]]) -> None:
        for partition, offset in covered:
            del self._held[partition][offset]
        self._held_count -= len(covered)
        KAFKA_PENDING_RESULTS.set(self._held_count)

    def _drop_held(self, partitions: list[TopicPartition], *, why: str) -> None:
        dropped = sum(len(self._held.pop(partition, {})) for partition in partitions)
        if dropped:
            self._held_count -= dropped
            KAFKA_PENDING_RESULTS.set(self._held_count)
            log.info(
                "finished outputs dropped: an earlier message of their partition was not finished; "
                "they are redone from the committed offset",
                count=dropped,
                why=why,
            )

    def _finished(self, entry: _Entry) -> None:
        entry.tracker.finish(entry.message.offset)  # ignored if the partition was revoked meanwhile
        self._commit_wanted.set()

    # -- fetching --------------------------------------------------------------------------------

    async def _fetch(self) -> None:
        """Fill the local buffer; pause every partition while it is full, keep polling regardless."""
        consumer = self._consumer
        assert consumer is not None
        capacity = self.config.max_buffered_messages
        while True:
            room = capacity - len(self._buffer)
            if self._held_count >= self.config.max_pending_results:
                room = 0  # exactly-once: outputs wait for an earlier message; take no more for now
            assigned = consumer.assignment()
            paused = consumer.paused()
            if room <= 0:
                if assigned - paused:
                    consumer.pause(*(assigned - paused))
                    log.debug("local buffer full: partitions paused", buffered=len(self._buffer))
            elif paused:
                consumer.resume(*paused)
            KAFKA_PAUSED_PARTITIONS.set(len(consumer.paused()))
            self._room.clear()
            batches = await consumer.getmany(
                timeout_ms=_PAUSED_POLL_MS if room <= 0 else _POLL_MS, max_records=max(room, 1)
            )
            if not batches and room > 0 and assigned:
                await self._idle_pause(consumer)
            for partition, messages in batches.items():
                if not messages:
                    continue
                tracker = self._book.tracker(partition)
                for message in messages:
                    try:
                        tracker.add(message.offset)
                    except ValueError:
                        log.warning(
                            "skipping a message fetched twice", topic=message.topic, offset=message.offset
                        )
                        continue
                    self._buffer.append(_Entry(partition, tracker, message))
                self._next_fetch[partition] = messages[-1].offset + 1
            if batches:
                KAFKA_BUFFERED.set(len(self._buffer))
                self._data.set()
            elif room <= 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._room.wait(), _PAUSED_POLL_MS / 1000)

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

    async def _commit_loop(self) -> None:
        consumer = self._consumer
        assert consumer is not None
        while True:
            await self._commit_wanted.wait()
            self._commit_wanted.clear()
            await self._commit(consumer, None, why="periodic")
            await asyncio.sleep(self.config.commit_interval_seconds)

    async def _commit(
        self, consumer: AIOKafkaConsumer, offsets: dict[TopicPartition, int] | None, *, why: str
    ) -> None:
        """Commit ``offsets`` (default: every owned partition's new commit point). A failed commit is
        retried with the next one; what it covered is at worst read again (at least once)."""
        async with self._commit_lock:
            if offsets is None:
                offsets = self._book.to_commit()
            if not offsets:
                return
            if self.config.exactly_once:
                if await self._commit_transaction(offsets, why=why):
                    self._book.mark_committed(offsets)
                return
            try:
                await consumer.commit(offsets)
            except KafkaError as exc:
                KAFKA_COMMITS.labels(outcome="failed").inc()
                log.warning("offset commit failed; retrying later", why=why, error=repr(exc))
                self._commit_wanted.set()
                return
            KAFKA_COMMITS.labels(outcome="ok").inc()
            self._book.mark_committed(offsets)
            log.debug(
                "offsets committed",
                why=why,
                offsets={f"{tp.topic}-{tp.partition}": o for tp, o in offsets.items()},
            )

    async def _commit_transaction(self, offsets: dict[TopicPartition, int], *, why: str) -> bool:
        """Exactly-once mode: write the held outputs below ``offsets`` and the offsets in one
        transaction. Call with the commit lock held. False if it failed (aborted: retried later)."""
        covered = self._held_below(offsets)
        outputs = [self._held[partition][offset] for partition, offset in covered]
        try:
            await self.sink.write_transaction(outputs, offsets, self.config.group_id)
        except ProducerFencedError:
            KAFKA_COMMITS.labels(outcome="failed").inc()
            raise
        except SinkError as exc:
            KAFKA_COMMITS.labels(outcome="failed").inc()
            log.warning("transaction failed and aborted; retrying later", why=why, error=str(exc))
            self._commit_wanted.set()
            return False
        KAFKA_COMMITS.labels(outcome="ok").inc()
        self._release(covered)
        log.debug(
            "transaction committed",
            why=why,
            outputs=len(outputs),
            offsets={f"{tp.topic}-{tp.partition}": o for tp, o in offsets.items()},
        )
        return True

    async def _on_revoked(self, revoked: set[TopicPartition]) -> None:
        consumer = self._consumer
        async with self._commit_lock:
            last = self._book.revoke(revoked)
            if self.config.exactly_once:
                # One producer, one transaction at a time: the last one for these partitions runs
                # under the lock. Whatever it does not cover is dropped and redone by the new owner.
                if last:
                    with contextlib.suppress(SinkError):
                        await self._commit_transaction(last, why="revoke")
                self._drop_held(list(revoked), why="revoke")
                last = {}
        self._buffer = deque(entry for entry in self._buffer if entry.partition not in revoked)
        KAFKA_BUFFERED.set(len(self._buffer))
        for partition in revoked:
            self._next_fetch.pop(partition, None)
            with contextlib.suppress(KeyError):
                KAFKA_LAG.remove(partition.topic, str(partition.partition))
        if last and consumer is not None:
            # The lock is released: the book no longer has these partitions, so no later commit can
            # include them; this is their last commit from this consumer.
            try:
                await consumer.commit(last)
                KAFKA_COMMITS.labels(outcome="ok").inc()
            except KafkaError as exc:
                KAFKA_COMMITS.labels(outcome="failed").inc()
                log.warning("commit of revoked partitions failed; they will be read again", error=repr(exc))
        if revoked:
            log.info("partitions revoked", partitions=sorted(f"{tp.topic}-{tp.partition}" for tp in revoked))

    def _on_assigned(self, assigned: set[TopicPartition]) -> None:
        log.info("partitions assigned", partitions=sorted(f"{tp.topic}-{tp.partition}" for tp in assigned))
        self._room.set()

    # -- lag ---------------------------------------------------------------------------------------

    async def _lag_loop(self) -> None:
        consumer = self._consumer
        assert consumer is not None
        while True:
            try:
                await self._update_lag(consumer)
            except KafkaError as exc:
                log.warning("cannot read end offsets for the lag metric", error=repr(exc))
            await asyncio.sleep(self.config.lag_interval_seconds)

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
