"""The summary cache's metrics exist from the start, with every label the dashboard uses (the
end-to-end dashboard test checks every panel against a live daemon; this one needs no engine)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import prometheus_client

import daemon.ops.metrics  # noqa: F401 - registers the families

DASHBOARD = Path(__file__).resolve().parents[3] / "deploy" / "grafana" / "docsumd.json"


def test_every_cache_series_exists_before_any_lookup() -> None:
    scrape = prometheus_client.generate_latest(prometheus_client.REGISTRY).decode()
    for kind in ("part", "combine", "document"):
        for outcome in ("hit", "miss", "error", "skipped"):
            assert f'docsumd_cache_lookups_total{{kind="{kind}",outcome="{outcome}"}}' in scrape
        for outcome in ("ok", "error", "skipped", "too_large"):
            assert f'docsumd_cache_writes_total{{kind="{kind}",outcome="{outcome}"}}' in scrape
        assert f'docsumd_cache_evictions_total{{kind="{kind}"}}' in scrape
        assert f'docsumd_cache_reused_tokens_total{{kind="{kind}"}}' in scrape
    assert "docsumd_cache_store_bytes " in scrape
    assert "docsumd_cache_up " in scrape
    assert 'docsumd_cache_operation_seconds_bucket{le="0.001",operation="get"}' in scrape


def test_the_dashboards_cache_queries_name_exported_metrics() -> None:
    scrape = prometheus_client.generate_latest(prometheus_client.REGISTRY).decode()
    exported = set(re.findall(r"^(docsumd_cache_[a-z_]+)", scrape, re.MULTILINE))
    panels = json.loads(DASHBOARD.read_text())["panels"]
    queries = [target["expr"] for panel in panels for target in panel.get("targets", [])]
    used = {name for query in queries for name in re.findall(r"docsumd_cache_[a-z_]+", query)}
    assert used, "the dashboard has a summary cache row"
    assert used <= exported
