#!/usr/bin/env bash
# Check the observability deployment files in deploy/:
#   - the Prometheus config and alert rules (promtool check config / check rules),
#   - the alert rules' unit tests (promtool test rules deploy/prometheus/alerts_test.yml),
#   - the Grafana dashboard: valid JSON, every panel titled, described and queried, unique panel ids,
#     no overlapping panels, every PromQL expression parseable (promtool), the provisioning files
#     consistent with it.
# Installs promtool (Debian package "prometheus", scripts/install-prometheus.sh) when it is missing.
# Needs no running service.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-prometheus.sh

echo "== promtool check config"
promtool check config deploy/prometheus/prometheus.yml
echo "== promtool check rules"
promtool check rules deploy/prometheus/alerts.yml
echo "== promtool test rules"
promtool test rules deploy/prometheus/alerts_test.yml

echo "== dashboard"
python=python3
if [ -x .venv/bin/python ]; then
    python=.venv/bin/python
fi
exprs=$(mktemp --suffix=.yml)
trap 'rm -f "$exprs"' EXIT
"$python" - "$exprs" <<'EOF'
"""Validate deploy/grafana/docsumd.json; write its PromQL as recording rules for promtool to parse."""

import json
import re
import sys
from pathlib import Path

DASHBOARD = Path("deploy/grafana/docsumd.json")
DATASOURCES = Path("deploy/grafana/provisioning/datasources/prometheus.yml")
PROVIDERS = Path("deploy/grafana/provisioning/dashboards/docsumd.yml")
# Grafana's own variables, replaced by what they look like at query time.
GRAFANA_VARS = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "6h", "$instance": ".*"}

errors: list[str] = []
with DASHBOARD.open(encoding="utf-8") as stream:
    dashboard = json.load(stream)

for key in ("title", "uid", "schemaVersion", "panels", "templating"):
    if key not in dashboard:
        errors.append(f"dashboard: no {key!r}")
variables = {v.get("name"): v for v in dashboard.get("templating", {}).get("list", [])}
if "instance" not in variables:
    errors.append("dashboard: no 'instance' variable")
datasource_vars = [v for v in variables.values() if v.get("type") == "datasource"]
if len(datasource_vars) != 1:
    errors.append("dashboard: expected one datasource variable")

panels = list(dashboard.get("panels", []))
for panel in list(panels):
    panels.extend(panel.get("panels", []))  # panels of collapsed rows

rules = []
seen_ids: set[int] = set()
for panel in panels:
    kind, title = panel.get("type"), panel.get("title")
    where = f"panel {panel.get('id')} ({title!r})"
    if not kind:
        errors.append(f"{where}: no type")
    if not title:
        errors.append(f"{where}: no title")
    if panel.get("id") in seen_ids:
        errors.append(f"{where}: duplicate id")
    seen_ids.add(panel.get("id"))
    grid = panel.get("gridPos", {})
    if not all(k in grid for k in "hwxy") or grid.get("x", 0) + grid.get("w", 0) > 24:
        errors.append(f"{where}: bad gridPos {grid}")
    if kind == "row":
        continue
    if not str(panel.get("description", "")).strip():
        errors.append(f"{where}: no description")
    if kind == "text":
        if not panel.get("options", {}).get("content", "").strip():
            errors.append(f"{where}: text panel without content")
        continue
    targets = panel.get("targets") or []
    if not targets:
        errors.append(f"{where}: no targets")
    for target in targets:
        expr = target.get("expr", "")
        if not expr.strip():
            errors.append(f"{where}: target {target.get('refId')} has no expr")
            continue
        if not target.get("datasource") and not panel.get("datasource"):
            errors.append(f"{where}: target {target.get('refId')} has no datasource")
        for var, value in GRAFANA_VARS.items():
            expr = expr.replace(var, value)
        if "$" in expr:
            errors.append(f"{where}: unknown variable in {expr!r}")
        record = f"dashboard_check:panel_{panel.get('id')}_{target.get('refId')}"
        rules.append({"record": record, "expr": expr})
if not rules:
    errors.append("dashboard: no PromQL at all")

# The grid: no two top-level panels may share a cell (panels inside collapsed rows are laid out when
# their row opens, so only the top level is checked).
occupied: dict[tuple[int, int], str] = {}
for panel in dashboard.get("panels", []):
    grid = panel.get("gridPos", {})
    where = f"panel {panel.get('id')} ({panel.get('title')!r})"
    if not all(isinstance(grid.get(k), int) for k in "hwxy"):
        continue  # reported above
    xs, ys = range(grid["x"], grid["x"] + grid["w"]), range(grid["y"], grid["y"] + grid["h"])
    cells = [(x, y) for x in xs for y in ys]
    clashes = sorted({occupied[cell] for cell in cells if cell in occupied})
    if clashes:
        errors.append(f"{where}: gridPos {grid} overlaps {', '.join(clashes)}")
    occupied.update((cell, where) for cell in cells)

# Provisioning: the datasource uid the dashboard defaults to, and a file provider.
default_uid = (datasource_vars[0].get("current", {}) or {}).get("value") if datasource_vars else None
datasources = DATASOURCES.read_text(encoding="utf-8")
if not re.search(rf"^\s*uid:\s*{re.escape(str(default_uid))}\s*$", datasources, re.M):
    errors.append(f"{DATASOURCES}: no datasource with uid {default_uid!r} (the dashboard's default)")
providers = PROVIDERS.read_text(encoding="utf-8")
if not re.search(r"^\s*type:\s*file\s*$", providers, re.M) or "path:" not in providers:
    errors.append(f"{PROVIDERS}: no file provider with a path")

if errors:
    print("\n".join(f"  FAILED: {e}" for e in errors))
    sys.exit(1)
# JSON is YAML: promtool reads this as a rule file.
Path(sys.argv[1]).write_text(json.dumps({"groups": [{"name": "dashboard", "rules": rules}]}), "utf-8")
n_panels = sum(1 for p in panels if p.get("type") != "row")
print(f"  SUCCESS: {DASHBOARD}: {n_panels} panels, {len(rules)} queries")
EOF
echo "== dashboard PromQL (promtool)"
promtool check rules "$exprs"

echo "== compose file (no container runtime here: structure and mounted files only)"
"$python" - <<'EOF'
"""deploy/compose/docker-compose.yml parses, has the four services, every file it mounts exists, every
published port binds to 127.0.0.1, and Grafana's admin password is a required variable (no default)."""

import sys
from pathlib import Path

import yaml

COMPOSE = Path("deploy/compose/docker-compose.yml")
compose = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
errors = []
services = compose.get("services", {})
for name in ("kafka", "docsumd", "prometheus", "grafana"):
    if name not in services:
        errors.append(f"{COMPOSE}: no service {name!r}")
for name, service in services.items():
    for volume in service.get("volumes", []):
        source = str(volume).split(":", 1)[0]
        if source.startswith(".") and not source.endswith("/data"):
            if not (COMPOSE.parent / source).exists():
                errors.append(f"{COMPOSE}: service {name} mounts {source}, which does not exist")
    # Safe defaults: a published port binds to loopback only (HOST_IP:HOST_PORT:CONTAINER_PORT).
    for port in service.get("ports", []):
        if not str(port).startswith("127.0.0.1:"):
            errors.append(f"{COMPOSE}: service {name} publishes {port!r} beyond 127.0.0.1")
grafana_env = services.get("grafana", {}).get("environment", {})
password = str(grafana_env.get("GF_SECURITY_ADMIN_PASSWORD", ""))
if not password.startswith("${") or ":?" not in password:
    errors.append(f"{COMPOSE}: Grafana's admin password must come from a required variable (${{VAR:?...}})")
if errors:
    print("\n".join(f"  FAILED: {e}" for e in errors))
    sys.exit(1)
print(f"  SUCCESS: {COMPOSE}: services {sorted(services)}, mounted files present, ports on loopback only")
EOF
promtool check config --syntax-only deploy/compose/prometheus.yml  # its rule file is mounted at run time

echo "== deploy checks passed"
