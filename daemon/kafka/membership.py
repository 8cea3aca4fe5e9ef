"""Static group membership (KIP-345): which member id a daemon joins under, and whether the broker
can take one.

A static member joins with a ``group.instance.id``. When it comes back within its session timeout
(a restart: drain, engine stop, a new process, the engine's start) the broker hands it its old
partitions and the other members notice nothing: no rebalance, no documents redone. What it costs:

* **No leaving on purpose.** aiokafka sends no LeaveGroup for a static member (and has no request
  that could name one), so a daemon stopped for good, or scaled away, leaves its partitions idle
  until its session times out; then the group rebalances once. The session timeout is the trade:
  long enough to cover a restart, short enough for the wait after a crash or a scale-down.
* **The id must be stable and unique.** A daemon that comes back under a new id (a Kubernetes
  Deployment's pod, a container re-created with a new host name) costs a rebalance when it joins and
  another when its old id's session expires, its old partitions idle in between: worse than dynamic
  membership. Two daemons running at once under one id replace each other in the group (real Kafka
  fences the older one, which joins again, and so on) or both read the same partitions (the test
  broker).

So the id is the config's ``group_instance_id`` when set (on Kubernetes: the StatefulSet's pod name,
stable across its restarts), else ``HOST-PORT``: the host name with the metrics port, which every
daemon on a host holds alone (a second daemon on the same port fails to bind it, before it joins).
With metrics off or on port 0 there is no such id, and the daemon joins as a dynamic member.
"""

from __future__ import annotations

import re
from typing import Any, Final

from daemon.config import KafkaSourceConfig, MetricsConfig
from daemon.errors import ConfigError

JOIN_GROUP_API_KEY: Final = 11
STATIC_JOIN_GROUP_VERSION: Final = 5
"""The first JoinGroup version that carries a group.instance.id (Kafka 2.3). aiokafka picks the
highest version both sides speak, and an older one drops the id without a word."""
_MAX_ID_CHARS: Final = 249
_NOT_ID_CHARS: Final = re.compile(r"[^A-Za-z0-9._-]+")


def group_instance_id(kafka: KafkaSourceConfig, metrics: MetricsConfig, host: str) -> str | None:
    """The member id a daemon on ``host`` joins under: ``kafka.group_instance_id``, else
    ``HOST-PORT`` (the metrics port); None for a dynamic member (``static_membership = false``, or no
    metrics port to make the default unique on the host)."""
    if not kafka.static_membership:
        return None
    if kafka.group_instance_id is not None:
        return kafka.group_instance_id
    if not metrics.enabled or metrics.port == 0:
        return None
    name = _NOT_ID_CHARS.sub("-", host).strip("-.") or "docsumd"
    suffix = f"-{metrics.port}"
    return name[: _MAX_ID_CHARS - len(suffix)] + suffix


def why_dynamic(kafka: KafkaSourceConfig) -> str:
    """Why a daemon whose config asks for static membership has no member id (for the warning)."""
    return (
        "no stable member id: the default one is HOST-METRICSPORT and the metrics endpoint is off or "
        f"on port 0; set sources.kafka.group_instance_id (group {kafka.group_id!r}) for static membership"
    )


async def check_static_membership(options: dict[str, Any]) -> None:
    """Raise :class:`~daemon.errors.ConfigError` unless the bootstrap broker speaks JoinGroup v5 or
    later: with an older one aiokafka would drop the member id and still never send LeaveGroup, so
    every stop would leave partitions idle for a whole session timeout. ``options``: the client's
    (:func:`daemon.kafka.client.client_options`)."""
    from aiokafka import AIOKafkaClient
    from aiokafka.protocol.admin import ApiVersionRequest

    client = AIOKafkaClient(**options)
    try:
        await client.bootstrap()
        node = min(broker.nodeId for broker in client.cluster.brokers())
        response = await client.send(node, ApiVersionRequest())
    finally:
        await client.close()
    versions = {entry[0]: entry[2] for entry in response.api_versions}  # (key, lowest, highest, ...)
    highest = versions.get(JOIN_GROUP_API_KEY)
    if highest is None or highest < STATIC_JOIN_GROUP_VERSION:
        raise ConfigError(
            f"sources.kafka.static_membership: the broker speaks JoinGroup up to v{highest}, and a static "
            f"member needs v{STATIC_JOIN_GROUP_VERSION} (Kafka 2.3 or later); set "
            "sources.kafka.static_membership = false"
        )
