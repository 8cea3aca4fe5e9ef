"""The Grafana dashboard and the Prometheus alerts query only what the daemon exports.

One real daemon (real vLLM engine, tiny model) summarizes one small corpus document and refuses one
empty file, so that the labelled series (``docsumd_documents_total{outcome=...}``,
``docsumd_engine_requests_total{kind=...}``) exist. Then every metric name used in a PromQL
expression of ``deploy/grafana/docsumd.json`` and ``deploy/prometheus/alerts.yml`` must be a sample
name of the ``/metrics`` scrape, spelled as exposed (``_total``, ``_bucket``, ``_sum``, ``_count``
included: PromQL selects samples by exactly that name), and every label those expressions match on
or group by must be carried by the metrics they use.
"""

from __future__ import annotations

import json
import re
import signal
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]

from tests.e2e.harness import REPO, DaemonProcess, Layout, drop_file, wait_for

pytestmark = pytest.mark.engine

DASHBOARD = REPO / "deploy" / "grafana" / "docsumd.json"
ALERTS = REPO / "deploy" / "prometheus" / "alerts.yml"
SMALL_DOCUMENT = "legal-cal-ms-rl.txt"  # about 3 KB: one engine request

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


def _names(queries: Iterable[str]) -> set[str]:
    names: set[str] = set()
    for expr in queries:
        names |= references(expr).metrics
    return names


def test_dashboard_and_alerts_use_exported_metrics(
    layout: Layout, start_daemon: Callable[..., DaemonProcess], corpus: Path
) -> None:
    queries = {
        **dashboard_queries(json.loads(DASHBOARD.read_text(encoding="utf-8"))),
        **alert_queries(yaml.safe_load(ALERTS.read_text(encoding="utf-8"))),
    }
    used = _names(queries.values())
    # The parsing found the queries: both families, counters, histograms and gauges.
    assert {
        "docsumd_documents_total",
        "docsumd_document_latency_seconds_bucket",
        "docsumd_queued_documents",
        "vllm:kv_cache_usage_perc",
    } <= used, used

    daemon = start_daemon()
    daemon.wait_ready()
    drop_file(layout.inbox, SMALL_DOCUMENT, (corpus / "docs" / SMALL_DOCUMENT).read_bytes())
    drop_file(layout.inbox, "empty.txt", b"")  # refused as "empty": a failure outcome

    def both_counted() -> bool:
        text = daemon.http_get("/metrics")[1]
        return all(
            re.search(rf'^docsumd_documents_total\{{[^}}]*outcome="{outcome}"', text, re.M)
            for outcome in ("ok", "empty")
        )

    wait_for(both_counted, 240, "both documents to be counted in /metrics", interval=1.0)
    status, text = daemon.http_get("/metrics")
    assert status == 200
    exported = exposition(text)

    found = problems(queries, exported)
    assert not found, "\n".join(found)

    daemon.signal(signal.SIGTERM)
    assert daemon.wait_exit() == 0, daemon.log_tail()
