"""The Kafka path under stress, end to end: real daemons (real vLLM engine, tiny model), real broker.

* two daemons in one consumer group split the input partitions and together finish every document;
* a daemon killed with SIGKILL mid-batch loses nothing once a new one takes over;
* a broker restart while the daemon runs: the daemon reconnects, rejoins its group and goes on.

Delivery is at least once, so a document may get two results. Every duplicate must be a
re-publication of the same input: the fields that depend only on the input message, the model and the
prompt are compared; the summary text and the token counts it implies are not, because sampling is
random (temperature 0.3, and vLLM's CPU backend refuses a per-request seed, so a document's text
depends on what else shares its batch), and neither are timings.

noida-db quirks these tests work with (see the project notes): a member killed with SIGKILL is never
evicted from its group, so after a kill the broker is restarted before the next daemon joins; a restart
keeps topics, records and committed offsets, and drops group membership. And while ``noida-db down``
runs, the broker goes on acknowledging writes for seconds and then keeps only what it had at some
point of its shutdown: acknowledged results and offset commits are lost, which a real Kafka broker
never does with ``acks=all``. So the broker is never stopped under a running daemon's writes: the
daemon is frozen while the broker shuts down (:func:`_restart_broker_under`), and then every document
must have its result, whatever happened to the connection. (The sink's recovery from a broker that
did lose acknowledged records is tests/e2e/test_kafka_sink_recovery.py's.)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import signal
import socket
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import DaemonProcess, Layout, free_port, wait_for, wait_for_progress
from tests.kafka_broker import (
    KafkaBroker,
    Topics,
    all_committed,
    committed_offsets,
    create_topics,
    produce,
    read_all,
)

pytestmark = [pytest.mark.engine, pytest.mark.kafka]

# Result fields that depend only on the input message, the model and the prompt (and the config, the
# same for every daemon of a test): a re-published result must repeat them exactly.
STABLE_FIELDS = (
    "id",
    "source",
    "model",
    "prompt_version",
    "strategy",
    "style",
    "max_summary_tokens",
    "truncated",
    "parts",
    "document_tokens",
    "dropped_tokens",
    "sha256",
    "input_bytes",
    "encoding",
    "metadata",
    "docsumd_version",
)


def _configure(layout: Layout, broker: KafkaBroker, topics: Topics, **extra: str) -> None:
    """A Kafka-only daemon: the harness's config also has the watched folder, whose pump holds one of
    ``service.max_inflight_documents`` while it waits for a file (with a limit of 1 the Kafka source
    would get none); without it, the limit is what the Kafka source gets."""
    layout.write_config(
        **{
            "sources.kafka.bootstrap_servers": json.dumps(broker.bootstrap),
            "sources.kafka.input_topics": json.dumps([topics.input]),
            "sources.kafka.group_id": json.dumps(topics.group),
            "sources.kafka.output_topic": json.dumps(topics.output),
            "sources.kafka.dead_letter_topic": json.dumps(topics.dead),
            "sources.kafka.commit_interval_seconds": "0.2",
            "sources.kafka.lag_interval_seconds": "1",
            # 30 s, not the 6 s of the other Kafka tests: on a shared 2-core machine, while the engine
            # generates, the daemon's event loop can get no CPU for several seconds (measured: no
            # syscall from its main thread for 5 s, a nice -15 sampler stalled for 7 s); a missed
            # session makes the broker drop the member, and the rebalance that follows re-reads the
            # documents in flight. The tests count on rebalances only where they cause them.
            "sources.kafka.session_timeout_ms": "30000",
            "sources.kafka.heartbeat_interval_ms": "1000",
            **extra,
        }
    )
    text = layout.config.read_text(encoding="utf-8")
    kafka_only = re.sub(r"\[sources\.folder\]\n(?:.+\n)*\n", "", text)
    assert "[sources.folder]" not in kafka_only, kafka_only
    layout.config.write_text(kafka_only, encoding="utf-8")


def _records(broker: KafkaBroker, topic: str) -> list[Any]:
    return asyncio.run(read_all(broker.bootstrap, topic))


def _short_docs(corpus: Path) -> list[Path]:
    """The corpus's short documents (under 12 kB: one request each, a fraction of a second)."""
    docs = sorted(p for p in (corpus / "docs").iterdir() if p.stat().st_size < 12_000)
    assert len(docs) >= 6, docs
    return docs


def _produce_docs(
    broker: KafkaBroker, topics: Topics, docs: list[Path], partitions: int, first: int = 0
) -> list[str]:
    """Produce ``docs`` as plain-text messages keyed by a unique id, round robin over ``partitions``
    (explicitly, so every partition gets its share); return the ids."""
    by_partition: dict[int, list[tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]]] = defaultdict(
        list
    )
    ids = []
    for index, path in enumerate(docs, start=first):
        doc_id = f"{index:03d}-{path.name}"
        ids.append(doc_id)
        by_partition[index % partitions].append((doc_id.encode(), path.read_bytes(), []))
    for partition, messages in by_partition.items():
        asyncio.run(produce(broker.bootstrap, topics.input, messages, partition=partition))
    return ids


def _result_ids(broker: KafkaBroker, topics: Topics) -> set[str]:
    return {r.key.decode() for r in _records(broker, topics.output)}


def _finished_ids(broker: KafkaBroker, topics: Topics) -> set[str]:
    """Ids with a result or a dead letter."""
    return _result_ids(broker, topics) | {r.key.decode() for r in _records(broker, topics.dead)}


def _results(broker: KafkaBroker, topics: Topics) -> dict[str, list[tuple[dict[str, Any], dict[str, bytes]]]]:
    """The output topic's results by id, in topic order: (value, headers)."""
    by_id: dict[str, list[tuple[dict[str, Any], dict[str, bytes]]]] = defaultdict(list)
    for record in _records(broker, topics.output):
        value = json.loads(record.value)
        assert value["id"] == record.key.decode()
        by_id[record.key.decode()].append((value, dict(record.headers)))
    return by_id


def _duplicates(broker: KafkaBroker, topics: Topics, ids: list[str]) -> dict[str, int]:
    """Check the output topic: every id has a result and nothing else has, and every further result of
    an id re-publishes its first one (same input, model, prompt, config, headers). Returns the ids with
    more than one result and how many more."""
    by_id = _results(broker, topics)
    assert set(by_id) == set(ids), f"missing {set(ids) - set(by_id)}, unexpected {set(by_id) - set(ids)}"
    extra: dict[str, int] = {}
    same_text = 0
    for doc_id, results in sorted(by_id.items()):
        first, first_headers = results[0]
        for again, headers in results[1:]:
            for field in STABLE_FIELDS:
                assert again[field] == first[field], (doc_id, field, first[field], again[field])
            assert headers == first_headers, (doc_id, first_headers, headers)
            same_text += again["summary"] == first["summary"]
        if len(results) > 1:
            extra[doc_id] = len(results) - 1
            where = f"{first['metadata']['partition']}/{first['metadata']['offset']}"
            print(f"duplicate: {doc_id} (partition/offset {where}) x{len(results)}")
    if extra:
        print(
            f"duplicates with the same summary text: {same_text} of {sum(extra.values())} "
            "(not asserted: sampling is random)"
        )
    return extra


def _samples(daemon: DaemonProcess, name: str) -> list[tuple[dict[str, str], float]]:
    """The samples of metric ``name`` on the daemon's /metrics: (labels, value)."""
    status, text = daemon.http_get("/metrics")
    assert status == 200, f"/metrics answered {status}"
    samples = []
    for line in text.splitlines():
        match = re.fullmatch(r"(\w+)\{(.*)\} (\S+)", line)
        if match is not None and match[1] == name:
            samples.append((dict(re.findall(r'(\w+)="([^"]*)"', match[2])), float(match[3])))
    return samples


def _kafka_ok(daemon: DaemonProcess) -> float:
    """docsumd_documents_total{outcome="ok",source="kafka"} (0 when absent)."""
    wanted = {"outcome": "ok", "source": "kafka"}
    return sum(value for labels, value in _samples(daemon, "docsumd_documents_total") if labels == wanted)


def _owned_by_lag_metric(daemon: DaemonProcess) -> set[str]:
    """Partitions the daemon reports lag for now (the ones it owns), as TOPIC-PARTITION."""
    lag = _samples(daemon, "docsumd_kafka_consumer_lag")
    return {f"{labels['topic']}-{labels['partition']}" for labels, _ in lag}


def _assignments(daemon: DaemonProcess) -> list[set[str]]:
    """Every assignment the daemon logged, in order (eager rebalancing: each replaces the last)."""
    return [set(e["partitions"]) for e in daemon.log_events() if e.get("event") == "partitions assigned"]


def _revocations(daemon: DaemonProcess) -> int:
    """How many times the daemon logged partitions revoked (a rebalance took what it owned)."""
    return sum(1 for e in daemon.log_events() if e.get("event") == "partitions revoked")


def _assert_running(daemon: DaemonProcess, name: str) -> None:
    assert daemon.proc is not None
    code = daemon.proc.poll()
    assert code is None, f"{name} exited with {code}:\n{daemon.log_tail()}"


def _listening(broker: KafkaBroker) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", broker.port)) == 0


@contextlib.contextmanager
def _broker_up_afterwards(broker: KafkaBroker) -> Iterator[None]:
    """The broker is the session's: whatever happens in the test, it is running again afterwards."""
    try:
        yield
    finally:
        if not _listening(broker):
            broker.up()


def _restart_broker(broker: KafkaBroker, downtime: float = 0.0) -> None:
    """Stop and start the broker, with ``downtime`` seconds between."""
    broker.down()
    wait_for(lambda: not _listening(broker), 30, "the broker to stop listening")
    time.sleep(downtime)
    broker.up()
    wait_for(lambda: _listening(broker), 30, "the broker to listen again")


SETTLE_SECONDS = 2.0
"""How long a frozen daemon's requests already sent get to be answered before the broker stops."""


def _restart_broker_under(daemon: DaemonProcess, broker: KafkaBroker, downtime: float) -> tuple[float, float]:
    """Restart the broker under a running daemon without letting the broker lose what it acknowledged
    (see the module doc): the daemon's main process is frozen (SIGSTOP) from before the broker is told
    to stop until it has stopped listening, after :data:`SETTLE_SECONDS` for the answers to requests
    it had sent; then it runs on with the broker gone for ``downtime`` seconds, and back. Returns when
    the broker was told to stop and when it stopped listening (``time.time()``)."""
    daemon.signal(signal.SIGSTOP)
    try:
        time.sleep(SETTLE_SECONDS)
        stopping = time.time()
        broker.down()
        wait_for(lambda: not _listening(broker), 30, "the broker to stop listening")
        stopped = time.time()
    finally:
        daemon.signal(signal.SIGCONT)
    time.sleep(downtime)
    broker.up()
    wait_for(lambda: _listening(broker), 30, "the broker to listen again")
    return stopping, stopped


def _logged_between(daemon: DaemonProcess, start: float, end: float) -> list[str]:
    """The daemon's log events timestamped from ``start`` to ``end`` (``time.time()``)."""
    found = []
    for event in daemon.log_events():
        at = datetime.fromisoformat(str(event["timestamp"]).replace("Z", "+00:00")).timestamp()
        if start <= at <= end:
            found.append(str(event.get("event")))
    return found


def test_two_daemons_in_one_group_split_partitions_and_finish_everything(
    tmp_path: Path,
    tiny_model: Path,
    daemons: Callable[[Layout], DaemonProcess],
    corpus: Path,
    kafka_broker: KafkaBroker,
) -> None:
    """A starts alone; B joins the group once A has results; the rest of the documents arrive then.

    Not all twelve up front: A would either finish them all before B is up (short summaries take a
    fraction of a second) or, given long ones, keep both cores so busy that B's engine takes minutes
    to start (measured here: 33 s beside an idle daemon, 338 s beside a busy one).
    """
    partitions = 4
    topics = Topics()
    asyncio.run(create_topics(kafka_broker.bootstrap, [topics.input], partitions=partitions))
    asyncio.run(create_topics(kafka_broker.bootstrap, [topics.output, topics.dead]))
    short = _short_docs(corpus)
    docs = [short[i % len(short)] for i in range(12)]
    # One document at a time on each daemon: a rebalance can leave at most one to be done again.
    layout_a = Layout(root=tmp_path / "a", model=tiny_model, metrics_port=free_port())
    layout_b = Layout(root=tmp_path / "b", model=tiny_model, metrics_port=free_port())
    for layout in (layout_a, layout_b):
        layout.root.mkdir()
        _configure(layout, kafka_broker, topics, **{"service.max_inflight_documents": "1"})

    first = partitions  # one per partition for A alone
    ids = _produce_docs(kafka_broker, topics, docs[:first], partitions)
    a = daemons(layout_a)
    a.wait_ready()
    wait_for(lambda: len(_result_ids(kafka_broker, topics)) >= 1, 240, "A's first result", interval=0.5)
    assert _assignments(a)[-1] == {f"{topics.input}-{p}" for p in range(partitions)}, _assignments(a)
    b = daemons(layout_b)
    b.wait_ready(timeout=300)  # ready: B's consumer has joined and has its partitions
    _assert_running(a, "A")

    # Both own partitions at once, none twice: their lag metrics (refreshed every second).
    seen: dict[str, set[str]] = {}

    def both_own_partitions() -> bool:
        seen["a"], seen["b"] = _owned_by_lag_metric(a), _owned_by_lag_metric(b)
        return bool(seen["a"]) and bool(seen["b"])

    wait_for(both_own_partitions, 60, "both daemons to report lag for partitions they own")
    assert not seen["a"] & seen["b"], seen
    ok_a_alone = _kafka_ok(a)
    assert ok_a_alone >= 1, ok_a_alone

    ids += _produce_docs(kafka_broker, topics, docs[first:], partitions, first=first)
    wait_for(
        lambda: _result_ids(kafka_broker, topics) >= set(ids), 300, "every document's result", interval=1.0
    )
    wait_for(
        lambda: all_committed(kafka_broker, topics), 60, "the group to commit every offset", interval=0.5
    )

    # The split as the daemons logged it: each one's latest assignment; disjoint, together all.
    last_a, last_b = _assignments(a)[-1], _assignments(b)[-1]
    assert last_a, last_a
    assert last_b, last_b
    assert not last_a & last_b, (last_a, last_b)
    assert last_a | last_b == {f"{topics.input}-{p}" for p in range(partitions)}, (last_a, last_b)
    ok_a, ok_b = _kafka_ok(a), _kafka_ok(b)
    assert ok_b > 0, f"B finished no Kafka document:\n{b.log_tail()}"
    assert ok_a > ok_a_alone, f"A finished no Kafka document after the split:\n{a.log_tail()}"
    revocations = _revocations(a) + _revocations(b)

    a.signal(signal.SIGTERM)
    b.signal(signal.SIGTERM)
    assert a.wait_exit() == 0, a.log_tail()
    assert b.wait_exit() == 0, b.log_tail()

    assert _records(kafka_broker, topics.dead) == []
    duplicates = _duplicates(kafka_broker, topics, ids)
    extra = sum(duplicates.values())
    # Each daemon works on one document at a time: a rebalance leaves at most that one to be done
    # again by the partition's next owner.
    assert extra <= revocations, (duplicates, revocations)
    assert ok_a + ok_b == len(ids) + extra, (ok_a, ok_b, len(ids), extra)
    print(
        f"two daemons: A owns {sorted(last_a)}, {ok_a:.0f} ok ({ok_a_alone:.0f} alone); "
        f"B owns {sorted(last_b)}, {ok_b:.0f} ok; revocations {revocations}; duplicates {extra}"
    )
    assert all_committed(kafka_broker, topics)


def test_kill_9_mid_batch_then_restart_loses_nothing(
    layout: Layout, daemons: Callable[[Layout], DaemonProcess], corpus: Path, kafka_broker: KafkaBroker
) -> None:
    topics = Topics()
    asyncio.run(create_topics(kafka_broker.bootstrap, [topics.input], partitions=2))
    asyncio.run(create_topics(kafka_broker.bootstrap, [topics.output, topics.dead]))
    short = _short_docs(corpus)
    ids = _produce_docs(kafka_broker, topics, [short[i % len(short)] for i in range(10)], 2)
    # Two documents at a time with 512-token summaries (seconds each), and commits 30 s apart: the
    # first results are committed at once, later ones wait, so the kill after the third result lands
    # with documents in flight and with results published whose offsets are not committed yet.
    _configure(
        layout,
        kafka_broker,
        topics,
        **{
            "service.max_inflight_documents": "2",
            "summary.max_summary_tokens": "512",
            "sources.kafka.commit_interval_seconds": "30",
        },
    )
    with _broker_up_afterwards(kafka_broker):
        first = daemons(layout)
        first.wait_ready()
        wait_for(lambda: len(_result_ids(kafka_broker, topics)) >= 3, 240, "the first results", interval=0.3)
        first.kill_group()
        assert first.group_processes() == []
        assert first.proc is not None
        assert first.proc.returncode == -signal.SIGKILL
        before = _results(kafka_broker, topics)
        committed = asyncio.run(committed_offsets(kafka_broker.bootstrap, topics.group, topics.input))
        assert len(before) < len(ids), "the daemon finished everything before the kill: it proved nothing"
        # The new daemon starts at the committed offsets: exactly the results published past them
        # are published again.
        assert all(len(results) == 1 for results in before.values()), before.keys()
        first_results = [results[0][0] for results in before.values()]
        expected = {
            value["id"]
            for value in first_results
            if value["metadata"]["offset"] >= (committed[value["metadata"]["partition"]] or 0)
        }
        # The killed member stays in its group on noida-db, and a new one would wait for it forever.
        _restart_broker(kafka_broker)

        second = daemons(layout)
        second.wait_ready()
        wait_for(
            lambda: _finished_ids(kafka_broker, topics) >= set(ids),
            300,
            "every document to have a result or a dead letter after the restart",
            interval=1.0,
        )
        wait_for(
            lambda: all_committed(kafka_broker, topics), 60, "the group to commit every offset", interval=0.5
        )
        revocations = _revocations(second)
        second.signal(signal.SIGTERM)
        assert second.wait_exit() == 0, second.log_tail()

    assert _records(kafka_broker, topics.dead) == []
    duplicates = _duplicates(kafka_broker, topics, ids)
    extra = sum(duplicates.values())
    print(
        f"kill -9: {len(before)} of {len(ids)} had results at the kill, committed {committed}; "
        f"duplicates {extra} {sorted(duplicates)} (expected from the kill: {sorted(expected)}; "
        f"rebalances after the restart: {revocations})"
    )
    # Every result published past the committed offsets is published again, and nothing else is,
    # unless a rebalance of the new daemon left its documents in flight (two at most, each time).
    assert expected <= set(duplicates), (expected, duplicates)
    assert extra - len(expected) <= 2 * revocations, (expected, duplicates, revocations)
    assert all_committed(kafka_broker, topics)


def test_broker_restart_mid_stream_daemon_reconnects_and_finishes(
    layout: Layout, daemons: Callable[[Layout], DaemonProcess], corpus: Path, kafka_broker: KafkaBroker
) -> None:
    topics = Topics()
    asyncio.run(create_topics(kafka_broker.bootstrap, [topics.input], partitions=2))
    asyncio.run(create_topics(kafka_broker.bootstrap, [topics.output, topics.dead]))
    short = _short_docs(corpus)
    ids = _produce_docs(kafka_broker, topics, [short[i % len(short)] for i in range(24)], 2)
    # Two documents at a time with 512-token summaries: the stream outlasts the outage (10 documents
    # did not on a fast CI machine, where all were done by the time the broker was back).
    _configure(
        layout,
        kafka_broker,
        topics,
        **{"service.max_inflight_documents": "2", "summary.max_summary_tokens": "512"},
    )
    with _broker_up_afterwards(kafka_broker):
        daemon = daemons(layout)
        daemon.wait_ready()
        wait_for(lambda: len(_result_ids(kafka_broker, topics)) >= 2, 240, "the first results", interval=0.3)
        # Counted before the broker goes down: what is missing now is what the outage can interrupt.
        done_at_restart = _result_ids(kafka_broker, topics)
        assert len(done_at_restart) < len(ids), "the daemon finished everything before the outage"
        stopping, stopped = _restart_broker_under(daemon, kafka_broker, downtime=3.0)
        _assert_running(daemon, "the daemon")
        # Nothing was written while the broker shut down: what it acknowledged before, it keeps.
        assert _logged_between(daemon, stopping, stopped) == [], "the daemon was not frozen"

        def results() -> int:
            _assert_running(daemon, "the daemon")
            return len(_result_ids(kafka_broker, topics) & set(ids))

        # Progress, not a total: under a full CI machine's load the stream once needed over 300 s.
        wait_for_progress(results, len(ids), 180, "every document's result after the broker restart")
        print(f"broker restart: stopping took {stopped - stopping:.1f} s")
        wait_for(
            lambda: all_committed(kafka_broker, topics), 60, "the group to commit every offset", interval=0.5
        )
        daemon.signal(signal.SIGTERM)
        assert daemon.wait_exit() == 0, daemon.log_tail()

    assert _records(kafka_broker, topics.dead) == []
    duplicates = _duplicates(kafka_broker, topics, ids)
    # The broker forgot the group: the consumer rejoined (a second assignment at least).
    assert len(_assignments(daemon)) >= 2, _assignments(daemon)
    replaced = sum(1 for e in daemon.log_events() if e.get("event", "").startswith("kafka producer replaced"))
    print(
        f"broker restart: {len(done_at_restart)} of {len(ids)} had results at the restart; "
        f"rebalances {_revocations(daemon)}; producer replaced {replaced}x; "
        f"duplicates {sum(duplicates.values())}"
    )
    assert all_committed(kafka_broker, topics)
