"""Fixtures shared by unit and end-to-end tests: a real Kafka-protocol broker for the session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.kafka_broker import KafkaBroker, noida_binary


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """A noida-db Kafka broker on a free loopback port, stopped at the end of the session."""
    if noida_binary() is None:
        # A failure, not a skip: scripts/setup-venv.sh installs it, and a skipped Kafka suite in CI
        # would pass without testing anything.
        pytest.fail("noida-db is not installed: run scripts/setup-venv.sh (or pip install noida-db==0.2.3)")
    from tests.e2e.harness import free_port

    broker = KafkaBroker(port=free_port(), data_dir=tmp_path_factory.mktemp("kafka-broker"))
    broker.up()
    try:
        yield broker
    finally:
        broker.down()
