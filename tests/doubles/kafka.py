"""Kafka's doubles, for unit tests without a broker (the broker path is tests/e2e/).

For the committer (daemon.kafka.committer talks to them through its small protocols):
:class:`FakeConsumer` (the consumer's commit) and :class:`FakeSink` (the sink's send and transaction),
with :class:`RefusingSink` refusing large records. For the sink itself (daemon.kafka.sink):
:class:`FakeProducer` (a started producer whose sends fail as scripted), :class:`ScriptedSink` (the
real sink, given scripted producers instead of connecting) and :class:`RecordingProducer` (in place
of ``aiokafka.AIOKafkaProducer``, remembering the options it was made with).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from daemon.config import KafkaSourceConfig
from daemon.kafka.sink import KafkaSink, Output, RecordTooLargeError
from daemon.records import Headers


def kafka_config(**overrides: object) -> KafkaSourceConfig:
    """A valid Kafka source config whose broker is never reached (port 9, discard), with ``overrides``."""
    values: dict[str, object] = {
        "bootstrap_servers": "127.0.0.1:9",
        "input_topics": ["in"],
        "group_id": "g",
        "output_topic": "out",
        "dead_letter_topic": "dlq",
        **overrides,
    }
    return KafkaSourceConfig.model_validate(values)


class FakeConsumer:
    """Records commits; raises the queued failures first, one per call."""

    def __init__(self) -> None:
        self.commits: list[dict[str, int]] = []
        self.failures: list[BaseException] = []

    async def commit(self, offsets: dict[str, int]) -> None:
        """Raise the next queued failure, or record ``offsets``."""
        if self.failures:
            raise self.failures.pop(0)
        self.commits.append(dict(offsets))


class FakeSink:
    """Records sends, transactions and the transactional id asked for; raises the queued transaction
    failures first."""

    def __init__(self) -> None:
        self.transactional_id: str | None = None
        self.sent: list[Output] = []
        self.transactions: list[tuple[list[str], dict[str, int], str]] = []
        self.failures: list[BaseException] = []

    def use_transactions(self, transactional_id: str) -> None:
        """Record the transactional id."""
        self.transactional_id = transactional_id

    async def send(self, topic: str, key: str, value: bytes, headers: Headers) -> None:
        """Record the output."""
        self.sent.append(Output(topic, key, value, headers))

    async def write_transaction(
        self, outputs: Sequence[Output], offsets: Mapping[Any, int], group_id: str
    ) -> None:
        """Raise the next queued failure, or record (the outputs' keys, the offsets, the group)."""
        if self.failures:
            raise self.failures.pop(0)
        self.transactions.append(([output.key for output in outputs], dict(offsets), group_id))


class RefusingSink(FakeSink):
    """Refuses (as too large) every record whose value is longer than ``limit`` bytes; the keys refused
    are in ``refused``."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit
        self.refused: list[str] = []

    async def send(self, topic: str, key: str, value: bytes, headers: Headers) -> None:
        """Refuse a value over the limit, or record the output."""
        if len(value) > self.limit:
            self.refused.append(key)
            raise RecordTooLargeError(f"{len(value)} bytes")
        await super().send(topic, key, value, headers)

    async def write_transaction(
        self, outputs: Sequence[Output], offsets: Mapping[Any, int], group_id: str
    ) -> None:
        """Refuse the whole transaction at its first value over the limit, or go on as FakeSink."""
        for output in outputs:
            if len(output.value) > self.limit:
                self.refused.append(output.key)
                raise RecordTooLargeError(f"{len(output.value)} bytes")
        await super().write_transaction(outputs, offsets, group_id)


class FakeProducer:
    """A started producer: fails sends with the scripted exceptions, in order, then succeeds; records
    what it sent, and refuses to be used once stopped."""

    def __init__(self, name: str, failures: list[BaseException]) -> None:
        self.name = name
        self.failures = failures
        self.sent: list[tuple[str, bytes]] = []
        self.stopped = False

    async def send_and_wait(self, topic: str, *, value: bytes, key: bytes, headers: Any) -> None:
        """Raise the next scripted failure, or record ``(topic, value)``."""
        await asyncio.sleep(0)  # a real send yields: concurrent sends interleave here
        if self.stopped:
            raise AssertionError(f"{self.name} used after stop")
        if self.failures:
            raise self.failures.pop(0)
        self.sent.append((topic, value))

    async def stop(self) -> None:
        """Mark stopped."""
        self.stopped = True


class ScriptedSink(KafkaSink):
    """The real sink, whose start() installs the next scripted producer (or raises the next scripted
    exception) instead of connecting to a broker; ``started`` lists the producers it installed."""

    def __init__(
        self,
        producers: list[FakeProducer | BaseException],
        retry_seconds: float = 5.0,
        config: KafkaSourceConfig | None = None,
    ) -> None:
        super().__init__(config or kafka_config(), retry_seconds=retry_seconds)
        self.script = producers
        self.started: list[FakeProducer] = []

    async def start(self) -> None:
        """Install the next scripted producer, unless one is installed."""
        if self._producer is not None:
            return
        step = self.script.pop(0)
        if isinstance(step, BaseException):
            raise step
        self._producer = step
        self.started.append(step)


class RecordingProducer:
    """Stands in for ``aiokafka.AIOKafkaProducer``: remembers the options each was made with, in the
    class's ``made`` (clear it before use)."""

    made: ClassVar[list[dict[str, Any]]] = []

    def __init__(self, **options: Any) -> None:
        RecordingProducer.made.append(options)

    async def start(self) -> None:
        """Nothing to connect to."""

    async def stop(self) -> None:
        """Nothing to close."""
