"""Results and dead letters to Kafka topics.

One idempotent producer (``acks=all``, ``enable_idempotence=True``): a record counts as written only
once every in-sync replica has it, and the producer's retries never duplicate it within a session.
:meth:`KafkaSink.send` returns only after the broker acknowledged the record; only then does the
source marks the input's offset finished. Any failure to write raises
:class:`~daemon.work.SinkError` (fatal: nothing may be acknowledged unwritten).

In exactly-once mode (``exactly_once = true``) the producer is transactional instead: the source
collects finished outputs and calls :meth:`KafkaSink.write_transaction`, which writes them and the
consumed offsets in one transaction (``send_offsets_to_transaction``). Readers with
``isolation.level=read_committed`` see each committed output once; an aborted or unfinished
transaction (a crash) is invisible to them, and its inputs are read again from the committed offsets.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from daemon.config import KafkaSourceConfig
from daemon.lifecycle import Lifecycle
from daemon.logging import get_logger
from daemon.work import Record, SinkError

log = get_logger(__name__)

Headers = list[tuple[str, bytes]]


@dataclass(frozen=True, slots=True)
class Output:
    """One record to produce: a result or a dead letter."""

    topic: str
    key: str
    value: bytes
    headers: Headers


class ProducerFencedError(SinkError):
    """Another producer with our transactional id started: this daemon must stop (fatal)."""


def default_transactional_id(group_id: str) -> str:
    """Stable per host and group, so a restarted daemon fences its previous incarnation."""
    return f"docsumd-{group_id}-{socket.gethostname()}"


def encode_record(record: Record) -> bytes:
    """A record as compact UTF-8 JSON."""
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


class KafkaSink(Lifecycle):
    """The producer for the output and dead-letter topics. ``start()``/``stop()`` are idempotent."""

    def __init__(self, config: KafkaSourceConfig) -> None:
        self.config = config
        self._producer: Any = None

    async def start(self) -> None:
        """Connect the producer."""
        if self._producer is not None:
            return
        from aiokafka import AIOKafkaProducer

        transactional_id = None
        if self.config.exactly_once:
            transactional_id = self.config.transactional_id or default_transactional_id(self.config.group_id)
        producer = AIOKafkaProducer(
            **self.config.client_options(),
            acks="all",
            enable_idempotence=True,
            transactional_id=transactional_id,
            max_request_size=self.config.max_request_bytes,
            linger_ms=5,
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

    async def write_result(self, key: str, record: Record, headers: Headers) -> None:
        """Send a result to the output topic and wait for the broker's acknowledgement."""
        await self.send(self.config.output_topic, key, encode_record(record), headers)

    async def write_failure(self, key: str, record: Record, headers: Headers) -> None:
        """Send a failure record to the dead-letter topic and wait for the acknowledgement."""
        await self.send(self.config.dead_letter_topic, key, encode_record(record), headers)

    async def send(self, topic: str, key: str, value: bytes, headers: Headers) -> None:
        """Send one record; :class:`SinkError` unless the broker acknowledged it."""
        if self._producer is None:
            raise SinkError(f"cannot write to {topic}: the Kafka producer is not running")
        from aiokafka.errors import KafkaError

        try:
            await self._producer.send_and_wait(topic, value=value, key=key.encode("utf-8"), headers=headers)
        except (KafkaError, OSError) as exc:
            raise SinkError(f"cannot write to Kafka topic {topic}: {exc!r}") from exc

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
            raise SinkError(f"the Kafka transaction failed and was aborted: {exc!r}") from exc
