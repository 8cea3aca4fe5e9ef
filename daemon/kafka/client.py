"""aiokafka's client options, from ``[sources.kafka]``: the one place that turns the connection and
security keys into arguments of aiokafka's consumer (:mod:`daemon.kafka.source`) and
producer (:mod:`daemon.kafka.sink`), the TLS context included.

A module of its own, beside both: the source imports the sink, so the sink cannot import the source's
package (:mod:`daemon.kafka`) without an import cycle. Imported only by daemons that read Kafka.
"""

from __future__ import annotations

import ssl
from typing import Any

from daemon.config import KafkaSourceConfig


def client_options(config: KafkaSourceConfig) -> dict[str, Any]:
    """Connection and security options common to aiokafka's consumer and producer."""
    options: dict[str, Any] = {
        "bootstrap_servers": config.bootstrap_servers,
        "client_id": config.client_id,
        "security_protocol": config.security_protocol,
        "request_timeout_ms": config.request_timeout_ms,
    }
    if config.sasl_mechanism is not None:
        options["sasl_mechanism"] = config.sasl_mechanism
        options["sasl_plain_username"] = config.sasl_plain_username
        options["sasl_plain_password"] = (
            None if config.sasl_plain_password is None else config.sasl_plain_password.get_secret_value()
        )
    if config.security_protocol in ("SSL", "SASL_SSL"):
        options["ssl_context"] = ssl_context(config)
    return options


def ssl_context(config: KafkaSourceConfig) -> ssl.SSLContext:
    """The TLS context of ``ssl_cafile``, ``ssl_certfile`` and ``ssl_keyfile`` (each optional), as
    aiokafka builds it."""
    from aiokafka.helpers import create_ssl_context

    context: ssl.SSLContext = create_ssl_context(
        cafile=None if config.ssl_cafile is None else str(config.ssl_cafile),
        certfile=None if config.ssl_certfile is None else str(config.ssl_certfile),
        keyfile=None if config.ssl_keyfile is None else str(config.ssl_keyfile),
    )
    return context
