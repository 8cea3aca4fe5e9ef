"""Results and dead letters to Kafka topics.

One idempotent producer (``acks=all``, ``enable_idempotence=True``): a record counts as written only
once every in-sync replica has it, and the producer's retries never duplicate it within a session.
:meth:`KafkaSink.send` returns only after the broker acknowledged the record; only then does the
source marks the input's offset finished. A write that fails is retried for up to ``retry_seconds``
(see :func:`send_failure_remedy`); then, or at once when no retry can help, it raises
:class:`~daemon.errors.SinkError` (fatal: nothing may be acknowledged unwritten). One refusal is not
the service's fault but the record's: a record over ``max_request_bytes``, or one the broker refuses
as too large, raises :class:`RecordTooLargeError` (a per-document error), and the source writes the
record's :attr:`Output.fallback` instead (see :mod:`daemon.kafka.committer`).

In exactly-once mode the producer is transactional instead: the source's transactional committer
(:mod:`daemon.kafka.committer`, which alone reads ``exactly_once``) asks for it before the
sink starts (:meth:`KafkaSink.use_transactions`), holds finished outputs and calls
:meth:`KafkaSink.write_transaction`, which writes them and the consumed offsets in one transaction
(``send_offsets_to_transaction``). Readers with ``isolation.level=read_committed`` see each committed
output once; an aborted or unfinished transaction (a crash) is invisible to them, and its inputs are
read again from the committed offsets.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from daemon.config import KafkaSourceConfig
from daemon.errors import DocumentError, ProducerFencedError, SinkError
from daemon.kafka.client import client_options
from daemon.lifecycle import Lifecycle
from daemon.ops.logging import get_logger
from daemon.records import Headers

log = get_logger(__name__)

SEND_RETRY_SECONDS: Final = 60.0
_FIRST_BACKOFF_S: Final = 0.2
_MAX_BACKOFF_S: Final = 5.0


@dataclass(frozen=True, slots=True)
class Output:
    """One record to produce: a result or a dead letter, and what to write if the broker refuses it."""

    topic: str
    key: str
    value: bytes
    headers: Headers
    fallback: Output | None = None
    """A smaller record to write instead if this one is refused as too large (a result's: its reduced
    ``too_large`` dead letter; a dead letter's: its reduced form); None for the smallest."""

    @property
    def size(self) -> int:
        """The record's size as the producer counts it against ``max_request_size`` (an upper bound:
        record and batch overhead included)."""
        from aiokafka.record.default_records import DefaultRecordBatchBuilder

        size: int = DefaultRecordBatchBuilder.estimate_size_in_bytes(
            self.key.encode("utf-8"), self.value, self.headers
        )
        return size


class RecordTooLargeError(DocumentError):
    """One record is too large to write: over ``max_request_bytes``, or refused by the broker (the
    topic's ``max.message.bytes``). The record's own failure, never the service's."""

    def __init__(self, message: str) -> None:
        super().__init__("too_large", message)


def default_transactional_id(group_id: str) -> str:
    """Stable per host and group, so a restarted daemon fences its previous incarnation."""
    return f"docsumd-{group_id}-{socket.gethostname()}"


class KafkaSink(Lifecycle):
    """The producer for the output and dead-letter topics. ``start()``/``stop()`` are idempotent."""

    def __init__(self, config: KafkaSourceConfig, *, retry_seconds: float = SEND_RETRY_SECONDS) -> None:
        self.config = config
        self.retry_seconds = retry_seconds
        self._producer: Any = None
        self._transactional_id: str | None = None
        self._renewing = asyncio.Lock()

    def use_transactions(self, transactional_id: str) -> None:
        """Make the producer transactional, under ``transactional_id``: the transactional committer
        asks for it (:func:`daemon.kafka.committer.committer_for`), before :meth:`start`."""
        if self._producer is not None:
            raise RuntimeError("the Kafka producer is running: transactions must be asked for before start()")
        self._transactional_id = transactional_id

    async def start(self) -> None:
        """Connect the producer."""
        if self._producer is not None:
            return
        from aiokafka import AIOKafkaProducer

        transactional_id = self._transactional_id
        producer = AIOKafkaProducer(
            **client_options(self.config),
            acks="all",
            enable_idempotence=True,
            transactional_id=transactional_id,
            max_request_size=self.config.max_request_bytes,
            linger_ms=5,
            compression_type=self.config.compression_type,
        )
        await producer.start()
        self._producer = producer
        log.info(
            "kafka producer started", output_topic=self.config.output_topic, transactional_id=transactional_id
        )

    async def stop(self) -> None:
        """Flush what is pending and disconnect."""
        producer, self._producer = self._producer, None
        if producer is not None:
            await producer.stop()

    async def send(self, topic: str, key: str, value: bytes, headers: Headers) -> None:
        """Send one record; :class:`SinkError` unless the broker acknowledged it.

        A failure that can pass is retried, with backoff, for up to ``retry_seconds`` from the first
        one; then, and for any other failure at once, :class:`SinkError` (fatal). See
        :func:`send_failure_remedy` for which failures are retried and how. Nothing is acknowledged
        before the broker has the record, so a retry can at worst write it twice (at least once).
        """
        from aiokafka.errors import KafkaError

        self.check_size(Output(topic, key, value, headers))
        loop = asyncio.get_running_loop()
        deadline: float | None = None
        backoff = _FIRST_BACKOFF_S
        while True:
            producer = self._producer
            if producer is None:
                raise SinkError(f"cannot write to {topic}: the Kafka producer is not running")
            try:
                await producer.send_and_wait(topic, value=value, key=key.encode("utf-8"), headers=headers)
                return
            except (KafkaError, OSError) as exc:
                remedy = send_failure_remedy(exc)
                if remedy is None:
                    raise SinkError(f"cannot write to Kafka topic {topic}: {exc!r}") from exc
                if remedy == "refused":
                    await self._after_refusal(producer)
                    raise RecordTooLargeError(
                        f"the broker refused a record of {len(value)} bytes for {topic} as too large "
                        f"(the topic's max.message.bytes is below it): {exc!r}"
                    ) from exc
                if deadline is None:
                    deadline = loop.time() + self.retry_seconds
                if loop.time() >= deadline:
                    raise SinkError(
                        f"cannot write to Kafka topic {topic}, still failing after "
                        f"{self.retry_seconds:g} s of retries: {exc!r}"
                    ) from exc
                log.warning("kafka write failed; retrying", topic=topic, error=repr(exc), remedy=remedy)
                if remedy == "new_producer":
                    await self._renew(producer)
                await asyncio.sleep(min(backoff, max(0.0, deadline - loop.time())))
                backoff = min(2 * backoff, _MAX_BACKOFF_S)

    def check_size(self, output: Output) -> None:
        """:class:`RecordTooLargeError` if ``output`` is over ``max_request_bytes`` (checked here rather
        than by the producer, so that such a record never reaches it)."""
        limit = self.config.max_request_bytes
        if (size := output.size) > limit:
            raise RecordTooLargeError(
                f"a record of {size} bytes for {output.topic} is over "
                f"sources.kafka.max_request_bytes ({limit})"
            )

    async def _after_refusal(self, producer: Any) -> None:
        """The broker refused a record: it never appended it, but the idempotent producer numbered it,
        so every later record of that partition would be out of sequence (aiokafka does not renumber,
        unlike Kafka's Java client). Start a new producer now rather than fail the next send."""
        await self._renew(producer)

    async def _renew(self, broken: Any) -> None:
        """Replace ``broken`` with a new producer (a new producer id, sequence numbers from 0), unless
        another send replaced it already. If the new one cannot start, ``broken`` stays (the caller's
        next attempt fails again and comes back here)."""
        async with self._renewing:
            if self._producer is not broken:
                return
            self._producer = None
            try:
                await self.start()
            except Exception as exc:
                log.warning("cannot start a new kafka producer; retrying", error=repr(exc))
                return
            finally:
                if self._producer is None:
                    self._producer = broken  # stop() stops it
        log.warning("kafka producer replaced: the broker no longer knows its sequence numbers")
        try:
            # Its pending sends fail as this one did and are retried on the new producer.
            await asyncio.wait_for(broken.stop(), self.retry_seconds)
        except Exception as exc:
            log.warning("the replaced kafka producer did not stop cleanly", error=repr(exc))

    async def write_transaction(
        self, outputs: Sequence[Output], offsets: Mapping[Any, int], group_id: str
    ) -> None:
        """Exactly-once mode: produce ``outputs`` and commit the group's ``offsets`` (TopicPartition to
        next offset) in one transaction. On any failure the transaction is aborted (nothing of it
        becomes visible) and :class:`SinkError` is raised; :class:`ProducerFencedError` when another
        producer took over our transactional id."""
        if self._producer is None:
            raise SinkError("cannot write a transaction: the Kafka producer is not running")
        from aiokafka.errors import KafkaError, ProducerFenced

        for output in outputs:
            self.check_size(output)
        producer = self._producer
        try:
            async with producer.transaction():
                sent = [
                    await producer.send(
                        output.topic,
                        value=output.value,
                        key=output.key.encode("utf-8"),
                        headers=output.headers,
                    )
                    for output in outputs
                ]
                for delivery in sent:
                    await delivery
                await producer.send_offsets_to_transaction(dict(offsets), group_id)
        except ProducerFenced as exc:
            raise ProducerFencedError(
                f"another producer took over this daemon's transactional id: {exc!r}"
            ) from exc
        except (KafkaError, OSError) as exc:
            if send_failure_remedy(exc) == "refused":
                await self._after_refusal(producer)
                raise RecordTooLargeError(
                    f"the broker refused a record of the transaction as too large: {exc!r}"
                ) from exc
            raise SinkError(f"the Kafka transaction failed and was aborted: {exc!r}") from exc


def send_failure_remedy(exc: BaseException) -> Literal["retry", "new_producer", "refused"] | None:
    """What may get a failed send through: ``"retry"`` the same producer (the broker or the
    connection was briefly unavailable: an aiokafka error marked retriable, a timeout waiting for
    metadata or buffer room, an OS error), a ``"new_producer"`` (the broker lost this idempotent
    producer's state, e.g. records it acknowledged and dropped on a restart, so every later sequence
    number is out of order: Kafka's own client starts a new producer epoch for these), ``"refused"``:
    this record is too large for the broker (its fault, not the service's: a smaller record goes
    instead), or None: no retry can help (no authorization, an unknown topic, ...)."""
    from aiokafka.errors import (
        KafkaError,
        KafkaTimeoutError,
        MessageSizeTooLargeError,
        OutOfOrderSequenceNumber,
        RecordListTooLargeError,
        UnknownProducerId,
    )

    if isinstance(exc, MessageSizeTooLargeError | RecordListTooLargeError):
        return "refused"
    if isinstance(exc, OutOfOrderSequenceNumber | UnknownProducerId):
        return "new_producer"
    if isinstance(exc, KafkaTimeoutError | OSError) or (isinstance(exc, KafkaError) and exc.retriable):
        return "retry"
    return None
