"""Static membership of the Kafka source (daemon/kafka/membership.py): the member id a daemon
joins under, its session timeout, the checks of the config and of the broker. The behaviour with a
real broker (a restart without a rebalance) is tests/e2e/test_kafka_static_membership.py's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from daemon.config import (
    DYNAMIC_SESSION_TIMEOUT_MS,
    STATIC_SESSION_TIMEOUT_MS,
    KafkaSourceConfig,
    MetricsConfig,
    load_config,
)
from daemon.errors import ConfigError
from daemon.factory import build_sources
from daemon.kafka import KafkaSource, membership
from daemon.kafka.membership import check_static_membership, group_instance_id
from tests.config_files import config_error, config_file

BASE: dict[str, Any] = {
    "bootstrap_servers": "127.0.0.1:9092",
    "input_topics": ["docs"],
    "group_id": "docsumd",
    "output_topic": "summaries",
    "dead_letter_topic": "dead",
}


def _kafka(**keys: Any) -> KafkaSourceConfig:
    return KafkaSourceConfig(**{**BASE, **keys})


def test_the_default_member_id_is_the_host_and_metrics_port() -> None:
    assert group_instance_id(_kafka(), MetricsConfig(port=9400), "gpu-7") == "gpu-7-9400"
    assert group_instance_id(_kafka(), MetricsConfig(port=9401), "gpu-7") == "gpu-7-9401"


def test_a_configured_member_id_wins() -> None:
    kafka = _kafka(group_instance_id="docsumd-0")
    assert group_instance_id(kafka, MetricsConfig(port=9400), "gpu-7") == "docsumd-0"
    assert group_instance_id(kafka, MetricsConfig(enabled=False), "gpu-7") == "docsumd-0"


@pytest.mark.parametrize(
    ("kafka", "metrics"),
    [
        (_kafka(static_membership=False), MetricsConfig(port=9400)),
        (_kafka(static_membership=False, group_instance_id="x"), MetricsConfig(port=9400)),
        (_kafka(), MetricsConfig(enabled=False)),
        (_kafka(), MetricsConfig(port=0)),  # a port picked at random: no stable id
    ],
)
def test_no_member_id_means_a_dynamic_member(kafka: KafkaSourceConfig, metrics: MetricsConfig) -> None:
    assert group_instance_id(kafka, metrics, "gpu-7") is None


def test_a_host_name_becomes_a_legal_member_id() -> None:
    assert group_instance_id(_kafka(), MetricsConfig(port=9400), "höst name/x") == "h-st-name-x-9400"
    assert group_instance_id(_kafka(), MetricsConfig(port=9400), "...") == "docsumd-9400"
    long = group_instance_id(_kafka(), MetricsConfig(port=9400), "a" * 400)
    assert long is not None
    assert len(long) == 249
    assert long.endswith("a-9400")


def test_session_timeout_defaults_cover_a_restart_for_static_members_only() -> None:
    assert _kafka().session_timeout(static=True) == STATIC_SESSION_TIMEOUT_MS == 300_000
    assert _kafka().session_timeout(static=False) == DYNAMIC_SESSION_TIMEOUT_MS == 30_000
    assert _kafka(session_timeout_ms=120_000).session_timeout(static=True) == 120_000
    assert _kafka(session_timeout_ms=120_000).session_timeout(static=False) == 120_000


def test_the_rebalance_timeout_must_leave_room_below_the_request_timeout(tmp_path: Path) -> None:
    assert _kafka().rebalance_timeout_ms == 30_000
    text = '[engine]\nmodel = "m"\n[sources.kafka]\n' + "".join(
        f"{key} = {value!r}\n".replace("'", '"') for key, value in BASE.items()
    )
    message = config_error(config_file(tmp_path, text + "rebalance_timeout_ms = 38000\n"))
    assert "rebalance_timeout_ms (38000) must be at least 5000 below request_timeout_ms (40000)" in message
    longer = text + "rebalance_timeout_ms = 60000\nrequest_timeout_ms = 70000\n"
    config = load_config(config_file(tmp_path, longer))
    assert config.sources.kafka is not None


@pytest.mark.parametrize("bad", ["", "two words", "a:b", "x" * 250])
def test_a_member_id_kafka_would_refuse_is_a_config_error(bad: str) -> None:
    with pytest.raises(ValueError, match="group_instance_id"):
        _kafka(group_instance_id=bad)


def test_the_factory_gives_the_source_its_member_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("socket.gethostname", lambda: "gpu-7")
    text = '[engine]\nmodel = "m"\n[metrics]\nport = 9555\n[sources.kafka]\n' + "".join(
        f"{key} = {value!r}\n".replace("'", '"') for key, value in BASE.items()
    )
    (source,) = build_sources(load_config(config_file(tmp_path, text)))
    assert isinstance(source, KafkaSource)
    assert source.group_instance_id == "gpu-7-9555"
    monkeypatch.setenv("DOCSUMD_SOURCES__KAFKA__GROUP_INSTANCE_ID", "docsumd-3")
    (source,) = build_sources(load_config(config_file(tmp_path, text)))
    assert isinstance(source, KafkaSource)
    assert source.group_instance_id == "docsumd-3"


class _Response:
    def __init__(self, join_group_max: int | None) -> None:
        self.api_versions = [(0, 0, 9), (3, 0, 12)]
        if join_group_max is not None:
            self.api_versions.append((membership.JOIN_GROUP_API_KEY, 0, join_group_max))


def _fake_client(join_group_max: int | None) -> Any:
    class Broker:
        nodeId = 1  # aiokafka's name

    class Cluster:
        def brokers(self) -> set[Broker]:
            return {Broker()}

    class Client:
        closed = False

        def __init__(self, **options: Any) -> None:
            self.cluster = Cluster()

        async def bootstrap(self) -> None:
            return None

        async def send(self, node: int, request: Any) -> _Response:
            return _Response(join_group_max)

        async def close(self) -> None:
            Client.closed = True

    return Client


@pytest.mark.parametrize("join_group_max", [4, None])
async def test_a_broker_without_static_membership_is_refused_at_start(
    monkeypatch: pytest.MonkeyPatch, join_group_max: int | None
) -> None:
    client = _fake_client(join_group_max)
    monkeypatch.setattr("aiokafka.AIOKafkaClient", client)
    with pytest.raises(ConfigError, match="static_membership = false"):
        await check_static_membership({"bootstrap_servers": "x"})
    assert client.closed


async def test_a_broker_with_join_group_v5_is_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("aiokafka.AIOKafkaClient", _fake_client(5))
    await check_static_membership({"bootstrap_servers": "x"})
