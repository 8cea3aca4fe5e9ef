"""Structural checks of the deployment files, run by scripts/check-deploy.sh (which adds promtool's).

    python scripts/check_deploy_files.py dashboard RULES_OUT   # the Grafana dashboard and provisioning
    python scripts/check_deploy_files.py compose               # the compose file's safe defaults

``dashboard`` validates deploy/grafana/docsumd.json (titles, descriptions, ids, grid, queries,
variables, the provisioning files) and writes every panel query as a recording rule to RULES_OUT, so
that promtool parses the PromQL. ``compose`` checks deploy/compose/docker-compose.yml: the four
services, every mounted file present, every published port on 127.0.0.1, Grafana's admin password
from a required variable. Each prints ``SUCCESS``/``FAILED`` lines and exits 1 on a failure.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml

DASHBOARD = Path("deploy/grafana/docsumd.json")
DATASOURCES = Path("deploy/grafana/provisioning/datasources/prometheus.yml")
PROVIDERS = Path("deploy/grafana/provisioning/dashboards/docsumd.yml")
COMPOSE = Path("deploy/compose/docker-compose.yml")
COMPOSE_SERVICES = ("kafka", "docsumd", "prometheus", "grafana")
GRID_COLUMNS = 24
# Grafana's own variables, replaced by what they look like at query time.
GRAFANA_VARS = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "6h", "$instance": ".*"}

Panel = dict[str, Any]


def _where(panel: Panel) -> str:
    return f"panel {panel.get('id')} ({panel.get('title')!r})"


def check_dashboard_top(dashboard: dict[str, Any]) -> list[str]:
    """The dashboard's own keys and variables (one ``instance``, one datasource variable)."""
    keys = ("title", "uid", "schemaVersion", "panels", "templating")
    errors = [f"dashboard: no {key!r}" for key in keys if key not in dashboard]
    variables = {v.get("name"): v for v in dashboard.get("templating", {}).get("list", [])}
    if "instance" not in variables:
        errors.append("dashboard: no 'instance' variable")
    if len(datasource_variables(dashboard)) != 1:
        errors.append("dashboard: expected one datasource variable")
    return errors


def datasource_variables(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    """The dashboard's variables of type datasource."""
    variables = dashboard.get("templating", {}).get("list", [])
    return [v for v in variables if v.get("type") == "datasource"]


def all_panels(dashboard: dict[str, Any]) -> list[Panel]:
    """Every panel, those inside collapsed rows included."""
    panels = list(dashboard.get("panels", []))
    for panel in list(panels):
        panels.extend(panel.get("panels", []))
    return panels


def check_panel(panel: Panel, seen_ids: set[Any]) -> list[str]:
    """One panel's type, title, unique id, grid position and description."""
    where, errors = _where(panel), []
    if not panel.get("type"):
        errors.append(f"{where}: no type")
    if not panel.get("title"):
        errors.append(f"{where}: no title")
    if panel.get("id") in seen_ids:
        errors.append(f"{where}: duplicate id")
    seen_ids.add(panel.get("id"))
    grid = panel.get("gridPos", {})
    if not all(k in grid for k in "hwxy") or grid.get("x", 0) + grid.get("w", 0) > GRID_COLUMNS:
        errors.append(f"{where}: bad gridPos {grid}")
    if panel.get("type") != "row" and not str(panel.get("description", "")).strip():
        errors.append(f"{where}: no description")
    if panel.get("type") == "text" and not panel.get("options", {}).get("content", "").strip():
        errors.append(f"{where}: text panel without content")
    return errors


def panel_rules(panel: Panel) -> tuple[list[dict[str, str]], list[str]]:
    """A query panel's targets as recording rules (Grafana variables replaced), and its errors."""
    where, rules, errors = _where(panel), [], []
    targets = panel.get("targets") or []
    if not targets:
        errors.append(f"{where}: no targets")
    for target in targets:
        expr = str(target.get("expr", ""))
        if not expr.strip():
            errors.append(f"{where}: target {target.get('refId')} has no expr")
            continue
        if not target.get("datasource") and not panel.get("datasource"):
            errors.append(f"{where}: target {target.get('refId')} has no datasource")
        for var, value in GRAFANA_VARS.items():
            expr = expr.replace(var, value)
        if "$" in expr:
            errors.append(f"{where}: unknown variable in {expr!r}")
        rules.append(
            {"record": f"dashboard_check:panel_{panel.get('id')}_{target.get('refId')}", "expr": expr}
        )
    return rules, errors


def check_grid(dashboard: dict[str, Any]) -> list[str]:
    """No two top-level panels share a cell (panels of collapsed rows are laid out when it opens)."""
    occupied: dict[tuple[int, int], str] = {}
    errors = []
    for panel in dashboard.get("panels", []):
        grid = panel.get("gridPos", {})
        if not all(isinstance(grid.get(k), int) for k in "hwxy"):
            continue  # reported by check_panel
        xs, ys = range(grid["x"], grid["x"] + grid["w"]), range(grid["y"], grid["y"] + grid["h"])
        cells = [(x, y) for x in xs for y in ys]
        clashes = sorted({occupied[cell] for cell in cells if cell in occupied})
        if clashes:
            errors.append(f"{_where(panel)}: gridPos {grid} overlaps {', '.join(clashes)}")
        occupied.update((cell, _where(panel)) for cell in cells)
    return errors


def check_provisioning(dashboard: dict[str, Any]) -> list[str]:
    """The datasource uid the dashboard defaults to is provisioned, and a file provider exists."""
    variables = datasource_variables(dashboard)
    default_uid = (variables[0].get("current", {}) or {}).get("value") if variables else None
    errors = []
    datasources = DATASOURCES.read_text(encoding="utf-8")
    if not re.search(rf"^\s*uid:\s*{re.escape(str(default_uid))}\s*$", datasources, re.MULTILINE):
        errors.append(f"{DATASOURCES}: no datasource with uid {default_uid!r} (the dashboard's default)")
    providers = PROVIDERS.read_text(encoding="utf-8")
    if not re.search(r"^\s*type:\s*file\s*$", providers, re.MULTILINE) or "path:" not in providers:
        errors.append(f"{PROVIDERS}: no file provider with a path")
    return errors


def check_dashboard(rules_out: Path) -> list[str]:
    """Every dashboard check; on success the queries are written to ``rules_out`` for promtool."""
    with DASHBOARD.open(encoding="utf-8") as stream:
        dashboard = json.load(stream)
    errors = check_dashboard_top(dashboard)
    rules: list[dict[str, str]] = []
    seen_ids: set[Any] = set()
    panels = all_panels(dashboard)
    for panel in panels:
        errors += check_panel(panel, seen_ids)
        if panel.get("type") not in ("row", "text"):
            panel_queries, panel_errors = panel_rules(panel)
            rules += panel_queries
            errors += panel_errors
    if not rules:
        errors.append("dashboard: no PromQL at all")
    errors += check_grid(dashboard) + check_provisioning(dashboard)
    if not errors:
        # JSON is YAML: promtool reads this as a rule file.
        rules_out.write_text(json.dumps({"groups": [{"name": "dashboard", "rules": rules}]}), "utf-8")
        count = sum(1 for panel in panels if panel.get("type") != "row")
        print(f"  SUCCESS: {DASHBOARD}: {count} panels, {len(rules)} queries")
    return errors


def check_compose() -> list[str]:
    """The compose file's services, mounted files, loopback-only ports and required Grafana password."""
    compose = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    services: dict[str, Any] = compose.get("services", {})
    errors = [f"{COMPOSE}: no service {name!r}" for name in COMPOSE_SERVICES if name not in services]
    for name, service in services.items():
        for volume in service.get("volumes", []):
            source = str(volume).split(":", 1)[0]
            mounted = COMPOSE.parent / source
            if source.startswith(".") and not source.endswith("/data") and not mounted.exists():
                errors.append(f"{COMPOSE}: service {name} mounts {source}, which does not exist")
        # Safe defaults: a published port binds to loopback only (HOST_IP:HOST_PORT:CONTAINER_PORT).
        errors += [
            f"{COMPOSE}: service {name} publishes {port!r} beyond 127.0.0.1"
            for port in service.get("ports", [])
            if not str(port).startswith("127.0.0.1:")
        ]
    grafana_env = services.get("grafana", {}).get("environment", {})
    password = str(grafana_env.get("GF_SECURITY_ADMIN_PASSWORD", ""))
    if not password.startswith("${") or ":?" not in password:
        errors.append(
            f"{COMPOSE}: Grafana's admin password must come from a required variable (${{VAR:?...}})"
        )
    if not errors:
        names = sorted(services)
        print(f"  SUCCESS: {COMPOSE}: services {names}, mounted files present, ports on loopback only")
    return errors


def main(argv: list[str]) -> int:
    """Run the check named by ``argv[0]``; 0 if it passed, 1 if not, 2 on bad usage."""
    if argv[:1] == ["dashboard"] and len(argv) == 2:
        errors = check_dashboard(Path(argv[1]))
    elif argv == ["compose"]:
        errors = check_compose()
    else:
        print(__doc__, file=sys.stderr)
        return 2
    for error in errors:
        print(f"  FAILED: {error}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
