"""Sources and their sinks, and the engine, built from the config: the one place that knows every kind.

Each ``[sources.NAME]`` section of the config has a builder here. Adding a source (S3, HTTP, ...)
means: a config section in :class:`~daemon.config.SourcesConfig` (saying which profiles it names:
``profile_keys`` and ``profile_uses``), a package of its own beside ``daemon/folder/`` and
``daemon/kafka/`` holding its source and sink, that keeps the contracts of :mod:`daemon.contracts`,
and one entry in :data:`BUILDERS`.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any, Final

from daemon.config import Config, EngineConfig, FolderSourceConfig, KafkaSourceConfig
from daemon.contracts import EngineClient, Source
from daemon.ops.logging import get_logger

log = get_logger(__name__)


def build_folder(section: FolderSourceConfig, config: Config) -> Source:
    """The watched folder, writing to its outbox and failed folders."""
    from daemon.folder.sink import FolderSink
    from daemon.folder.source import FolderSource

    sink = FolderSink(section.outbox, section.failed, io_timeout=section.io_timeout_seconds)
    return FolderSource(section, sink, max_input_bytes=config.limits.max_input_bytes)


def build_kafka(section: KafkaSourceConfig, config: Config) -> Source:
    """The Kafka consumer group, writing results and dead letters back to Kafka."""
    # Imported here: aiokafka is loaded only by daemons that read Kafka.
    from daemon.kafka import KafkaSource
    from daemon.kafka.membership import group_instance_id, why_dynamic
    from daemon.kafka.sink import KafkaSink

    member = group_instance_id(section, config.metrics, socket.gethostname())
    if member is None and section.static_membership:
        log.warning("kafka: joining as a dynamic member", reason=why_dynamic(section))
    return KafkaSource(
        section,
        KafkaSink(section),
        max_input_bytes=config.limits.max_input_bytes,
        group_instance_id=member,
    )


BUILDERS: Final[dict[str, Callable[[Any, Config], Source]]] = {
    "folder": build_folder,
    "kafka": build_kafka,
}
"""Config section name under ``[sources]`` -> the builder of that source."""


def build_sources(config: Config) -> list[Source]:
    """A source for every ``[sources.NAME]`` section present, in the order of :data:`BUILDERS`."""
    sources: list[Source] = []
    for name, build in BUILDERS.items():
        section = getattr(config.sources, name)
        if section is not None:
            sources.append(build(section, config))
    return sources


def build_engine(config: EngineConfig) -> EngineClient:
    """The engine ``config`` asks for: vLLM in this process (``mode = "local"``), or the servers of
    ``[engine.remote]`` (``mode = "remote"``)."""
    # Imported here: neither is loaded by a daemon that does not use it.
    if config.mode == "remote":
        from daemon.engine.remote.engine import RemoteEngine

        return RemoteEngine(config)
    from daemon.engine.vllm_engine import Engine

    return Engine(config)
