"""Results and dead letters to Kafka topics.

One idempotent producer (``acks=all``, ``enable_idempotence=True``): a record counts as written only
once every in-sync replica has it, and the producer's retries never duplicate it within a session.
:meth:`KafkaSink.send` returns only after the broker acknowledged the record; only then does the
source mark the input's offset finished. Any failure to write raises
:class:`~daemon.work.SinkError` (fatal: nothing may be acknowledged unwritten).
"""

from __future__ import annotations

import json
from typing import Any

from daemon.config import KafkaSourceConfig
from daemon.lifecycle import Lifecycle
from daemon.logging import get_logger
from daemon.work import Record, SinkError

log = get_logger(__name__)

Headers = list[tuple[str, bytes]]


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

        producer = AIOKafkaProducer(
            **self.config.client_options(),
            acks="all",
            enable_idempotence=True,
            max_request_size=self.config.max_request_bytes,
            linger_ms=5,
        )
        await producer.start()
        self._producer = producer
        log.info("kafka producer started", output_topic=self.config.output_topic)

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
