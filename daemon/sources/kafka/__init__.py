"""The Kafka source (see :mod:`daemon.sources.kafka.source`)."""

from __future__ import annotations

from daemon.sources.kafka.source import (
    SOURCE_NAME,
    KafkaSource,
    KafkaSourceError,
    ParsedMessage,
    parse_message,
)

__all__ = ["SOURCE_NAME", "KafkaSource", "KafkaSourceError", "ParsedMessage", "parse_message"]
