"""Static group membership, end to end: three real daemons (real vLLM engine, tiny model) in one consumer
group on the noida-db test broker; one of them is stopped (SIGTERM: drained, committed, no LeaveGroup)
and started again under the same member id (its metrics port, so its default id, is the same).

What must hold: the other two see no rebalance (no revocation, no assignment, their
``docsumd_kafka_rebalances_total`` unchanged) and keep working on their own partitions while the third
is down; the third gets its own partitions back and goes on from its committed offsets; no document is
summarized twice.

What the test broker cannot show (see ../shared/notes/kafka-broker.md and docs/guides/kafka.md, "Static group
membership"):

* **A restarted group leader.** noida-db hands a restarted static *leader* another member's partitions
  (two members then read the same ones); real Kafka gives it its own. So the daemon restarted here is
  not the leader: A joins first and leads, C is restarted.
* **Eviction.** noida-db never drops a static member whose session expired (Kafka does, after
  ``session_timeout_ms``, with one rebalance), so "a daemon stopped for good leaves its partitions idle
  for its session timeout, then they move" is Kafka's documented behaviour, not tested here.
* **Fencing.** Two live daemons under one member id: noida-db lets both read the same partitions; Kafka
  fences the older one (it rejoins, and they alternate). Not tested: the default id (host and metrics
  port) makes it impossible on one host, and Kubernetes' StatefulSet on many.
* **A session long enough for a GPU engine's restart** (minutes, the 300 s default): the restart here
  takes the tiny model's engine start; noida-db does not evict anyway, so a session shorter than the
  restart would pass here too.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.e2e.harness import DaemonProcess, Layout, free_port, wait_for, wait_for_progress
from tests.kafka_broker import KafkaBroker, Topics, all_committed, create_topics, produce, read_all

pytestmark = [pytest.mark.engine, pytest.mark.kafka]

PARTITIONS = 6
SAMPLES = Path(__file__).resolve().parents[2] / "daemon" / "samples"


def _configure(layout: Layout, broker: KafkaBroker, topics: Topics) -> None:
    """A Kafka-only daemon with the default membership settings (static, member id HOST-PORT, 300 s
    session, 30 s rebalance timeout), fast commits."""
    layout.write_config(
        **{
            "sources.kafka.bootstrap_servers": json.dumps(broker.bootstrap),
            "sources.kafka.input_topics": json.dumps([topics.input]),
            "sources.kafka.group_id": json.dumps(topics.group),
            "sources.kafka.output_topic": json.dumps(topics.output),
            "sources.kafka.dead_letter_topic": json.dumps(topics.dead),
            "sources.kafka.commit_interval_seconds": "0.2",
            "sources.kafka.heartbeat_interval_ms": "1000",
            "engine.kv_cache_memory_bytes": str(256 << 20),
        }
    )
    text = layout.config.read_text(encoding="utf-8")
    layout.config.write_text(re.sub(r"\[sources\.folder\]\n(?:.+\n)*\n", "", text), encoding="utf-8")


def _documents() -> list[bytes]:
    """Short documents (one request each), cut from the samples shipped with the package."""
    pieces = []
    for path in sorted(SAMPLES.glob("*.txt")):
        text = path.read_bytes()
        pieces += [text[start : start + 1500] for start in range(0, len(text) - 1500, 1500)]
    return pieces


def _produce(broker: KafkaBroker, topics: Topics, batch: str, docs: list[bytes]) -> list[str]:
    """Two documents per partition, keyed ``BATCH-PARTITION-N``; returns their ids."""
    ids = []
    for partition in range(PARTITIONS):
        messages: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]] = []
        for n in range(2):
            doc_id = f"{batch}-{partition}-{n}"
            ids.append(doc_id)
            messages.append((doc_id.encode(), docs[(partition * 2 + n) % len(docs)], []))
        asyncio.run(produce(broker.bootstrap, topics.input, messages, partition=partition))
    return ids


def _results(broker: KafkaBroker, topics: Topics) -> Counter[str]:
    return Counter(record.key.decode() for record in asyncio.run(read_all(broker.bootstrap, topics.output)))


def _metric(daemon: DaemonProcess, name: str) -> float:
    status, text = daemon.http_get("/metrics")
    assert status == 200, daemon.log_tail()
    values = [float(line.split()[-1]) for line in text.splitlines() if line.startswith(f"{name} ")]
    assert len(values) == 1, (name, values)
    return values[0]


def _events(daemon: DaemonProcess, event: str) -> list[dict[str, object]]:
    return [e for e in daemon.log_events() if e.get("event") == event]


def _membership_events(daemon: DaemonProcess) -> tuple[int, int]:
    """How many assignments and revocations the daemon logged."""
    return len(_events(daemon, "partitions assigned")), len(_events(daemon, "partitions revoked"))


def _owned(daemon: DaemonProcess) -> set[str]:
    assigned = _events(daemon, "partitions assigned")
    return set(assigned[-1]["partitions"]) if assigned else set()  # type: ignore[call-overload]


# Four engine starts, three of them one after another (A; B and C together; C again): about 2-3 minutes
# on an idle 2-core machine, over 10 on a loaded one (engine starts of 120-280 s seen): more than the
# suite's 600 s per test.
@pytest.mark.timeout(1800)
def test_restarting_one_of_three_static_members_rebalances_nothing(
    tmp_path: Path, daemons: Callable[[Layout], DaemonProcess], kafka_broker: KafkaBroker, tiny_model: Path
) -> None:
    started = time.monotonic()
    topics = Topics()
    asyncio.run(create_topics(kafka_broker.bootstrap, [topics.input], partitions=PARTITIONS))
    asyncio.run(create_topics(kafka_broker.bootstrap, [topics.output, topics.dead]))
    layouts = {}
    for name in "abc":
        layouts[name] = Layout(root=tmp_path / name, model=tiny_model, metrics_port=free_port())
        layouts[name].root.mkdir()
        _configure(layouts[name], kafka_broker, topics)
    # A joins first and leads the group; B and C start together (their engines share the start-up).
    a = daemons(layouts["a"])
    a.wait_ready()
    b, c = daemons(layouts["b"]), daemons(layouts["c"])
    b.wait_ready(timeout=400)
    c.wait_ready(timeout=400)
    everyone = {f"{topics.input}-{p}" for p in range(PARTITIONS)}

    def settled() -> bool:
        owned = [_owned(daemon) for daemon in (a, b, c)]
        return all(len(parts) == 2 for parts in owned) and set().union(*owned) == everyone

    wait_for(settled, 120, "the group to settle with two partitions each")
    docs = _documents()
    ids = _produce(kafka_broker, topics, "one", docs)
    wait_for_progress(lambda: len(_results(kafka_broker, topics)), len(ids), 180, "the first batch")
    joined_s = time.monotonic() - started

    # The members as they are before C's restart.
    a_rebalances, b_rebalances = (_metric(d, "docsumd_kafka_rebalances_total") for d in (a, b))
    a_owned, b_owned, c_owned = _owned(a), _owned(b), _owned(c)
    (c_started,) = _events(c, "kafka source started")
    member = c_started["group_instance_id"]
    assert str(member).endswith(f"-{layouts['c'].metrics_port}"), member
    assert c_started["session_timeout_ms"] == 300_000
    events_before = {d: _membership_events(d) for d in (a, b)}

    stopping = time.monotonic()
    c.signal(signal.SIGTERM)
    assert c.wait_exit() == 0, c.log_tail()
    stopped_s = time.monotonic() - stopping
    # While C is down, A and B go on with their own partitions; C's wait for it.
    ids += (down := _produce(kafka_broker, topics, "down", docs))
    theirs = [i for i in down if f"{topics.input}-{i.split('-')[1]}" in a_owned | b_owned]
    wait_for_progress(
        lambda: len(set(theirs) & set(_results(kafka_broker, topics))), len(theirs), 180, "A's and B's"
    )
    waiting = set(down) - set(theirs)
    assert not waiting & set(_results(kafka_broker, topics)), "C's partitions were read while C was down"

    restarting = time.monotonic()
    c2 = daemons(layouts["c"])  # the same port: the same member id
    c2.wait_ready(timeout=400)
    restart_s = time.monotonic() - restarting
    wait_for_progress(lambda: len(_results(kafka_broker, topics)), len(ids), 180, "C's, after its restart")
    ids += _produce(kafka_broker, topics, "after", docs)
    wait_for_progress(lambda: len(_results(kafka_broker, topics)), len(ids), 180, "the last batch")
    wait_for(lambda: all_committed(kafka_broker, topics), 60, "every offset committed", interval=0.5)

    # No rebalance of the other two: no revocation, no assignment, the counter unchanged.
    for daemon, rebalances in ((a, a_rebalances), (b, b_rebalances)):
        assert _metric(daemon, "docsumd_kafka_rebalances_total") == rebalances, daemon.log_tail()
        assert _membership_events(daemon) == events_before[daemon]
    assert (_owned(a), _owned(b)) == (a_owned, b_owned)
    # C came back under the same id to its own partitions, in one join.
    (c2_started,) = _events(c2, "kafka source started")
    assert c2_started["group_instance_id"] == member
    assert _events(c2, "partitions assigned") == [_events(c2, "partitions assigned")[0]]
    assert _owned(c2) == c_owned
    assert _metric(c2, "docsumd_kafka_rebalances_total") == 1
    assert _metric(c2, "docsumd_kafka_assigned_partitions") == 2

    # No document summarized twice: one result each, one "document summarized" each over all processes.
    results = _results(kafka_broker, topics)
    assert set(results) == set(ids)
    assert [doc for doc, count in results.items() if count > 1] == []
    summarized = Counter(str(e["doc_id"]) for d in (a, b, c, c2) for e in _events(d, "document summarized"))
    assert summarized == Counter(ids)
    assert asyncio.run(read_all(kafka_broker.bootstrap, topics.dead)) == []
    for daemon in (a, b, c2):
        daemon.signal(signal.SIGTERM)
    for daemon in (a, b, c2):
        assert daemon.wait_exit() == 0, daemon.log_tail()
    print(
        f"static membership: group of three up and first batch done in {joined_s:.0f} s; C stopped in "
        f"{stopped_s:.1f} s, back (engine start included) in {restart_s:.0f} s; A and B rebalances "
        f"{a_rebalances:.0f}/{b_rebalances:.0f} before and after; {len(ids)} documents, none twice; "
        f"test {time.monotonic() - started:.0f} s"
    )
