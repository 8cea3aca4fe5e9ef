"""The shipped alert rules, evaluated by a real Prometheus server scraping a real daemon.

promtool's rule tests (deploy/prometheus/alerts_test.yml) show the rules' logic on made-up series;
this shows them on the daemon's own series. One daemon (real vLLM engine, tiny model, the watched
folder) and one Prometheus server (Debian's ``prometheus`` package, installed by
scripts/install-prometheus.sh) on a free loopback port, loading ``deploy/prometheus/alerts.yml``
unmodified (not a copy: every ``for:`` is as shipped). Only the test's own Prometheus config differs
from deploy/prometheus/prometheus.yml: scrapes and rule evaluations every 250 ms, so that states
appear in seconds, not minutes. Pending is what the test shows for the two alerts it provokes (their
``for:`` durations, 1 and 5 minutes, are not waited out; a pending alert becomes firing by time alone).

1. Healthy: once scraped, no alert is pending or firing, and every rule evaluates without error.
2. A stuck backlog: the engine's processes are stopped (SIGSTOP: a hung engine) while documents wait,
   one in flight (``service.max_inflight_documents = 1``): ``DocsumdBacklogStuck`` goes pending.
   After SIGCONT the documents finish and nothing is active again.
3. Every query of the Grafana dashboard (panels and the instance variable) runs against this
   Prometheus without error; the test prints which return data. (No Grafana server: Debian's
   registry has none, so the dashboard itself is not rendered.)
4. The engine dies (``kill -9`` of EngineCore): ``DocsumdEngineDown`` goes pending. The daemon exits
   1 about half a second after it notices, so the test polls the alerts API and also reads the
   ``ALERTS`` series, which Prometheus writes at every evaluation of an active alert.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import REPO, DaemonProcess, Layout, drop_file, free_port, wait_for

pytestmark = pytest.mark.engine

ALERTS = REPO / "deploy" / "prometheus" / "alerts.yml"
DASHBOARD = REPO / "deploy" / "grafana" / "docsumd.json"
INTERVAL = "250ms"
# Scrapes are less frequent than rule evaluations: a scrape that takes over its timeout reads as the
# daemon down (up == 0, DocsumdDown pending), and on a loaded 2-core machine a scrape of vLLM's
# metrics took longer than 250 ms.
SCRAPE_INTERVAL = "1s"
# What Grafana puts in place of its variables; the rate window is short because the server's history
# is only minutes long.
GRAFANA_VARS = {"$__rate_interval": "30s", "$__interval": "1s", "$__range": "5m", "$instance": ".*"}
SMALL_DOCUMENT = "legal-cal-ms-rl.txt"  # about 3 KB: one engine request


class Prometheus:
    """A Prometheus server on 127.0.0.1:``port`` with its data under ``root``; stopped by :meth:`stop`."""

    def __init__(self, binary: str, root: Path, target_port: int) -> None:
        self.port = free_port()
        self.root = root
        config = root / "prometheus.yml"
        config.write_text(
            json.dumps(  # JSON is YAML
                {
                    "global": {
                        "scrape_interval": SCRAPE_INTERVAL,
                        "scrape_timeout": SCRAPE_INTERVAL,
                        "evaluation_interval": INTERVAL,
                    },
                    "rule_files": [str(ALERTS)],
                    "scrape_configs": [
                        {"job_name": "docsumd", "static_configs": [{"targets": [f"127.0.0.1:{target_port}"]}]}
                    ],
                }
            ),
            encoding="utf-8",
        )
        self.log = root / "prometheus.log"
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [
                    binary,
                    f"--config.file={config}",
                    f"--storage.tsdb.path={root / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        wait_for(self._ready, 60, "Prometheus to be ready")

    def _ready(self) -> bool:
        if self.proc.poll() is not None:
            tail = self.log.read_text(errors="replace")[-3000:]
            raise AssertionError(f"prometheus exited with {self.proc.returncode}:\n{tail}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2) as response:
                return int(response.status) == 200
        except OSError:
            return False

    def api(self, path: str, **params: str) -> Any:
        """The ``data`` of a successful API answer (fails the test on an error answer)."""
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                answer = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            answer = json.loads(exc.read())
        assert answer.get("status") == "success", f"{path} {params}: {answer}"
        return answer["data"]

    def active_alerts(self) -> dict[str, str]:
        """Alert name -> state ("pending" or "firing") of every active alert."""
        return {alert["labels"]["alertname"]: alert["state"] for alert in self.api("alerts")["alerts"]}

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def prometheus_binary() -> str:
    binary = shutil.which("prometheus")
    if binary is None:
        # A failure, not a skip: a skipped alerts test in CI would pass without testing anything.
        pytest.fail("no prometheus server: run scripts/install-prometheus.sh (Debian package prometheus)")
    return binary


@contextlib.contextmanager
def running_prometheus(binary: str, root: Path, target_port: int) -> Iterator[Prometheus]:
    root.mkdir(parents=True, exist_ok=True)
    server = Prometheus(binary, root, target_port)
    try:
        yield server
    finally:
        server.stop()


def engine_processes(daemon: DaemonProcess) -> list[int]:
    """Pids of vLLM's engine processes (EngineCore, workers) of the daemon."""
    return [int(p.split(":")[0]) for p in daemon.group_processes() if "EngineCor" in p or "Worker" in p]


def dashboard_queries() -> dict[str, str]:
    """Every PromQL expression of the dashboard's panels, by panel title and refId."""
    panels: list[dict[str, Any]] = list(json.loads(DASHBOARD.read_text(encoding="utf-8"))["panels"])
    for panel in list(panels):
        panels.extend(panel.get("panels", []))
    queries = {}
    for panel in panels:
        for target in panel.get("targets", []):
            expr = str(target["expr"])
            for variable, value in GRAFANA_VARS.items():
                expr = expr.replace(variable, value)
            queries[f"{panel['title']} [{target['refId']}]"] = expr
    return queries


def check_dashboard(prometheus: Prometheus) -> tuple[list[str], list[str]]:
    """Run every dashboard query; (places with data, places without). Fails on a query error."""
    with_data: list[str] = []
    without: list[str] = []
    for where, expr in dashboard_queries().items():
        result = prometheus.api("query", query=expr)["result"]
        (with_data if result else without).append(where)
    # The instance variable: label_values(up{job="docsumd"}, instance) in Grafana's terms.
    instances = prometheus.api("label/instance/values", **{"match[]": 'up{job="docsumd"}'})
    assert instances, "the dashboard's instance variable would be empty"
    return with_data, without


def test_shipped_alerts_on_a_real_prometheus(
    layout: Layout,
    start_daemon: Callable[..., DaemonProcess],
    corpus: Path,
    prometheus_binary: str,
) -> None:
    layout.write_config(**{"service.max_inflight_documents": "1", "summary.max_summary_tokens": "32"})
    # No profile with a JSON schema: the structured series exist at 0 all the same (every profile's),
    # so the dashboard's structured panels have series to query.
    daemon = start_daemon()
    daemon.wait_ready()
    with running_prometheus(prometheus_binary, layout.root / "prometheus", layout.metrics_port) as prometheus:
        # 1. Healthy: scraped, every rule evaluated without error, nothing active for a while.
        def scraped() -> bool:
            targets = prometheus.api("targets")["activeTargets"]
            return bool(targets) and all(t["health"] == "up" for t in targets)

        wait_for(scraped, 60, "the daemon to be scraped")
        wait_for(lambda: not prometheus.active_alerts(), 30, "no active alert")
        quiet_until = time.monotonic() + 5
        while time.monotonic() < quiet_until:  # 20 evaluations with nothing active
            assert prometheus.active_alerts() == {}
            time.sleep(0.5)
        rules = [rule for group in prometheus.api("rules")["groups"] for rule in group["rules"]]
        assert {rule["name"] for rule in rules} >= {"DocsumdEngineDown", "DocsumdBacklogStuck"}
        assert all(rule["health"] == "ok" for rule in rules), [(r["name"], r.get("lastError")) for r in rules]

        # 2. A hung engine with documents waiting: DocsumdBacklogStuck goes pending.
        stopped = engine_processes(daemon)
        assert stopped, daemon.group_processes()
        for pid in stopped:
            os.kill(pid, signal.SIGSTOP)
        try:
            document = (corpus / "docs" / SMALL_DOCUMENT).read_bytes()
            for index in range(3):
                drop_file(layout.inbox, f"doc-{index}.txt", document)
            wait_for(
                lambda: prometheus.active_alerts().get("DocsumdBacklogStuck") == "pending",
                60,
                "DocsumdBacklogStuck to be pending",
            )
            assert prometheus.active_alerts() == {"DocsumdBacklogStuck": "pending"}
        finally:
            for pid in stopped:
                os.kill(pid, signal.SIGCONT)
        wait_for(lambda: len(layout.inputs_in(layout.done)) == 3, 240, "the documents to finish")
        wait_for(lambda: not prometheus.active_alerts(), 30, "the alert to resolve")

        # 3. The dashboard's queries, on real series.
        time.sleep(2)  # a few scrapes after the last document, for the rate() windows
        with_data, without = check_dashboard(prometheus)
        print(f"dashboard: {len(with_data)} queries return data, {len(without)} do not: {without}")
        # No data is expected only where nothing happened: no failure, no Kafka source, no remote engine.
        assert [where for where in without if not where.startswith(("Kafka", "Failure", "Endpoint"))] == []

        # 4. The engine dies: DocsumdEngineDown goes pending before the daemon exits.
        engine_core = [p for p in daemon.group_processes() if "EngineCor" in p]
        assert engine_core, daemon.group_processes()
        killed_at = time.time()
        os.kill(int(engine_core[0].split(":")[0]), signal.SIGKILL)
        seen_by_api = False
        while daemon.proc is not None and daemon.proc.poll() is None and time.time() - killed_at < 60:
            seen_by_api = seen_by_api or prometheus.active_alerts().get("DocsumdEngineDown") == "pending"
            time.sleep(0.05)
        assert daemon.wait_exit(timeout=60) == 1, daemon.log_tail()
        history = prometheus.api(
            "query_range",
            query='ALERTS{alertname="DocsumdEngineDown"}',
            start=f"{killed_at - 1:.3f}",
            end=f"{time.time():.3f}",
            step="0.25",
        )["result"]
        states = {series["metric"]["alertstate"] for series in history}
        print(f"DocsumdEngineDown after kill -9 of EngineCore: {sorted(states)}; API saw it: {seen_by_api}")
        assert "pending" in states, f"DocsumdEngineDown never went pending:\n{daemon.log_tail()}"
