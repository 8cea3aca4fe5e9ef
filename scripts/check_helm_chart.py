"""Checks of the Helm chart (deploy/helm/docsumd) beyond ``helm lint`` and ``kubernetes-validate``, run by
scripts/check-helm.sh on manifests ``helm template`` rendered:

    python scripts/check_helm_chart.py crs RENDERED...      # custom resources against the vendored CRDs
    python scripts/check_helm_chart.py chart RENDERED       # what the chart promises, and the config loads
    python scripts/check_helm_chart.py values [--write]     # the values table in the chart's README

``crs`` validates every ServiceMonitor, PrometheusRule and ScaledObject against the CRDs in
deploy/helm/validation-crds (strict: unknown fields refused). ``chart`` checks one rendering with every
feature on: the PrometheusRule holds exactly deploy/prometheus/alerts.yml's groups; the StatefulSet
probes /readyz and /healthz on the metrics port, asks for a GPU, gives the drain and the stop their
time, and carries the config's checksum; the Service, ServiceMonitor, PodDisruptionBudget and
ScaledObject select and name what they should (the scaled metric is docsumd_prompt_tokens_pending of
this release's service); and the ConfigMap's docsumd.toml, with the chart's environment overrides,
loads with docsumd's own config loader. ``values`` checks (or, with ``--write``, rewrites) the table
of values in deploy/helm/docsumd/README.md from values.yaml's ``# --`` comments. Each prints what it
found wrong and exits 1 on a failure.
"""

from __future__ import annotations

import copy
import json
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import yaml

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "deploy" / "helm" / "docsumd"
CRDS = REPO / "deploy" / "helm" / "validation-crds"
ALERTS = REPO / "deploy" / "prometheus" / "alerts.yml"
README = CHART / "README.md"
TABLE_START, TABLE_END = "<!-- values:start -->", "<!-- values:end -->"
GPU = "nvidia.com/gpu"
STOP_MARGIN_SECONDS = 30
"""A pod's grace period must exceed its drain by at least this: the engine's shutdown (vLLM's, then up to
10 s reaping its processes), the last offset commit and the producer's flush."""

Doc = dict[str, Any]


def documents(paths: list[Path]) -> list[Doc]:
    """Every YAML document of the rendered files."""
    docs: list[Doc] = []
    for path in paths:
        docs += [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]
    return docs


# -- crs ----------------------------------------------------------------------------------------------


def _strict(schema: Any) -> Any:
    """Refuse unknown fields where a schema lists an object's properties (in place)."""
    if isinstance(schema, dict):
        lists_properties = schema.get("type") == "object" and "properties" in schema
        if lists_properties and not schema.get("x-kubernetes-preserve-unknown-fields"):
            schema.setdefault("additionalProperties", False)
        for value in schema.values():
            _strict(value)
    elif isinstance(schema, list):
        for value in schema:
            _strict(value)
    return schema


def crd_schemas() -> dict[str, Any]:
    """``GROUP/VERSION/KIND`` -> the JSON Schema of that version of each vendored CRD."""
    schemas: dict[str, Any] = {}
    for path in sorted(CRDS.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text(encoding="utf-8"))
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            schema = copy.deepcopy(version["schema"]["openAPIV3Schema"])
            schema["properties"]["metadata"] = {"type": "object"}  # the API server's own part
            schemas[f"{group}/{version['name']}/{kind}"] = _strict(schema)
    return schemas


def check_crs(paths: list[Path]) -> list[str]:
    """Every custom resource of a vendored kind, against its CRD; an unknown custom kind is an error."""
    schemas, errors, checked = crd_schemas(), [], 0
    for doc in documents(paths):
        api, kind = str(doc.get("apiVersion", "")), str(doc.get("kind", ""))
        group = api.split("/", maxsplit=1)[0] if "/" in api else ""
        if not group or group.endswith(".k8s.io") or group in ("apps", "policy", "batch", "autoscaling"):
            continue  # a built-in kind: kubernetes-validate's
        key = f"{api}/{kind}"
        if key not in schemas:
            errors.append(f"{key}: no vendored CRD to validate it against")
            continue
        checked += 1
        validator = jsonschema.Draft7Validator(schemas[key])
        for error in sorted(validator.iter_errors(doc), key=lambda e: list(e.path)):
            where = "/".join(map(str, error.path))
            errors.append(f"{key} {doc['metadata'].get('name')}: {where}: {error.message[:200]}")
    print(f"custom resources checked against their CRDs: {checked}")
    return errors


# -- chart --------------------------------------------------------------------------------------------


def _one(docs: list[Doc], kind: str) -> Doc:
    found = [doc for doc in docs if doc.get("kind") == kind]
    if len(found) != 1:
        raise AssertionError(f"expected one {kind}, rendered {len(found)}")
    return found[0]


def _selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(key) == value for key, value in selector.items())


def check_chart(paths: list[Path]) -> list[str]:
    """What the chart promises, on a rendering with every feature on."""
    docs = documents(paths)
    try:
        return list(_chart_problems(docs))
    except (AssertionError, KeyError, TypeError, ValueError) as exc:
        return [f"chart: {type(exc).__name__}: {exc}"]


def _chart_problems(docs: list[Doc]) -> Iterator[str]:
    config_map, service = _one(docs, "ConfigMap"), _one(docs, "Service")
    statefulset, pdb = _one(docs, "StatefulSet"), _one(docs, "PodDisruptionBudget")
    monitor, rule, scaled = (
        _one(docs, "ServiceMonitor"),
        _one(docs, "PrometheusRule"),
        _one(docs, "ScaledObject"),
    )
    pod = statefulset["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    env = {item["name"]: item.get("value") for item in container.get("env", [])}
    port = int(env["DOCSUMD_METRICS__PORT"])
    ports = {item["name"]: item["containerPort"] for item in container["ports"]}

    if rule["spec"] != yaml.safe_load(ALERTS.read_text(encoding="utf-8")):
        yield "PrometheusRule: its spec is not deploy/prometheus/alerts.yml's groups"
    if ports.get("metrics") != port:
        yield f"StatefulSet: container port 'metrics' {ports.get('metrics')} is not metrics.port {port}"
    probes = {"readinessProbe": "/readyz", "livenessProbe": "/healthz"}
    for probe, path in probes.items():
        http = container.get(probe, {}).get("httpGet", {})
        if (http.get("path"), http.get("port")) != (path, "metrics"):
            yield f"StatefulSet: {probe} is {http}, not GET {path} on the metrics port"
    if GPU not in container.get("resources", {}).get("limits", {}):
        yield f"StatefulSet: no {GPU} limit"
    drain = float(env["DOCSUMD_SERVICE__DRAIN_SECONDS"])
    grace = pod["spec"]["terminationGracePeriodSeconds"]
    if grace < drain + STOP_MARGIN_SECONDS:
        yield f"StatefulSet: terminationGracePeriodSeconds {grace} < drain {drain} + {STOP_MARGIN_SECONDS}"
    if not re.fullmatch(r"[0-9a-f]{64}", str(pod["metadata"].get("annotations", {}).get("checksum/config"))):
        yield "StatefulSet: no checksum/config annotation"
    if statefulset["spec"]["serviceName"] != service["metadata"]["name"]:
        yield "StatefulSet: serviceName is not the chart's Service"
    pod_labels = pod["metadata"]["labels"]
    for name, selector in (
        ("StatefulSet", statefulset["spec"]["selector"]["matchLabels"]),
        ("Service", service["spec"]["selector"]),
        ("PodDisruptionBudget", pdb["spec"]["selector"]["matchLabels"]),
    ):
        if not _selects(selector, pod_labels):
            yield f"{name}: its selector {selector} does not select the pods {pod_labels}"
    if not _selects(monitor["spec"]["selector"]["matchLabels"], service["metadata"]["labels"]):
        yield "ServiceMonitor: its selector does not select the Service"
    if service["metadata"]["labels"].get(monitor["spec"].get("jobLabel")) != "docsumd":
        yield "ServiceMonitor: the job label would not be 'docsumd' (the alert rules select job=\"docsumd\")"
    endpoint_ports = {endpoint["port"] for endpoint in monitor["spec"]["endpoints"]}
    if endpoint_ports != {item["name"] for item in service["spec"]["ports"]}:
        yield f"ServiceMonitor: endpoints {endpoint_ports} are not the Service's ports"
    yield from _scaled_object_problems(scaled, statefulset, service)
    yield from _config_problems(config_map, env)


def _scaled_object_problems(scaled: Doc, statefulset: Doc, service: Doc) -> Iterator[str]:
    target = scaled["spec"]["scaleTargetRef"]
    if (target.get("kind"), target.get("name")) != ("StatefulSet", statefulset["metadata"]["name"]):
        yield f"ScaledObject: scaleTargetRef {target} is not the StatefulSet"
    if "replicas" in statefulset["spec"]:
        yield "StatefulSet: sets replicas although KEDA scales it (each upgrade would reset the count)"
    prometheus = [trigger for trigger in scaled["spec"]["triggers"] if trigger["type"] == "prometheus"]
    if len(prometheus) != 1:
        yield "ScaledObject: expected one prometheus trigger"
        return
    (trigger,) = prometheus
    query = trigger["metadata"]["query"]
    if (
        "docsumd_prompt_tokens_pending" not in query
        or f'service="{service["metadata"]["name"]}"' not in query
    ):
        yield f"ScaledObject: the query {query!r} is not this release's docsumd_prompt_tokens_pending"
    if trigger.get("metricType") != "AverageValue":
        yield "ScaledObject: the prometheus trigger's metricType is not AverageValue (tokens per pod)"
    behavior = scaled["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"]
    if behavior["stabilizationWindowSeconds"] < 300:
        yield "ScaledObject: a scale-down stabilization window shorter than the static session timeout"


def _config_problems(config_map: Doc, env: dict[str, str | None]) -> Iterator[str]:
    """The ConfigMap's docsumd.toml, with the chart's DOCSUMD_* environment, loads as docsumd's config."""
    sys.path.insert(0, str(REPO))
    from daemon.config import load_config
    from daemon.errors import ConfigError

    text = config_map["data"]["docsumd.toml"]
    folder = Path(os.environ.get("TMPDIR", "/tmp")) / f"docsumd-chart-{os.getpid()}"
    folder.mkdir(exist_ok=True)
    path = folder / "docsumd.toml"
    path.write_text(text, encoding="utf-8")
    saved = dict(os.environ)
    try:
        for name in [name for name in os.environ if name.startswith("DOCSUMD_")]:
            del os.environ[name]
        os.environ.update({k: v for k, v in env.items() if k.startswith("DOCSUMD_") and v is not None})
        config = load_config(path)
    except ConfigError as exc:
        yield f"ConfigMap: docsumd.toml does not load with the chart's environment: {exc}"
        return
    finally:
        os.environ.clear()
        os.environ.update(saved)
        path.unlink()
        folder.rmdir()
    if (config.metrics.host, config.metrics.port) != ("0.0.0.0", int(env["DOCSUMD_METRICS__PORT"] or 0)):
        yield "ConfigMap: metrics do not listen on the pod's address and port"
    kafka = config.sources.kafka
    if kafka is not None and not kafka.static_membership:
        yield "ConfigMap: the chart's example joins Kafka as a dynamic member"


# -- values -------------------------------------------------------------------------------------------


def values_rows(text: str) -> list[tuple[str, str, str]]:
    """(dotted key, default, description) of every key values.yaml describes with a ``# --`` comment."""
    values = yaml.safe_load(text)
    rows: list[tuple[str, str, str]] = []
    stack: list[tuple[int, str]] = []
    comment: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        if stripped.startswith("# --"):
            comment = [stripped[4:].strip()]
            continue
        if stripped.startswith("#") and comment:
            comment.append(stripped[1:].strip())
            continue
        match = re.match(r"^(\s*)([A-Za-z][\w.-]*):", line)
        if not match:
            if stripped and not line.startswith(" "):
                comment = []
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        key = ".".join([*(name for _, name in stack), match[2]])
        stack.append((indent, match[2]))
        if comment:
            rows.append((key, _default(values, key), " ".join(comment)))
            comment = []
    return rows


def _default(values: Any, key: str) -> str:
    for part in key.split("."):
        values = values[part]
    if isinstance(values, str) and "\n" in values:
        return "(see values.yaml)"
    return f"`{json.dumps(values)}`"


def values_table() -> str:
    rows = values_rows((CHART / "values.yaml").read_text(encoding="utf-8"))
    lines = ["| key | default | description |", "|---|---|---|"]
    lines += [f"| `{key}` | {default} | {_cell(text)} |" for key, default, text in rows]
    return "\n".join(lines)


def _cell(text: str) -> str:
    """Text as a Markdown table cell (a ``|`` would end it)."""
    return text.replace("|", "\\|")


def check_values(write: bool) -> list[str]:
    readme = README.read_text(encoding="utf-8")
    start, end = readme.index(TABLE_START) + len(TABLE_START), readme.index(TABLE_END)
    current, wanted = readme[start:end].strip(), values_table()
    if current == wanted:
        return []
    if write:
        README.write_text(readme[:start] + "\n" + wanted + "\n" + readme[end:], encoding="utf-8")
        print(f"rewrote the values table of {README.relative_to(REPO)}")
        return []
    return [f"{README.relative_to(REPO)}: the values table is not values.yaml's (run: {_WRITE})"]


_WRITE = "python scripts/check_helm_chart.py values --write"


def main(argv: list[str]) -> int:
    """Run the check named by ``argv[0]``; 0 if it passed, 1 if not, 2 on bad usage."""
    if argv[:1] == ["crs"] and len(argv) > 1:
        errors = check_crs([Path(arg) for arg in argv[1:]])
    elif argv[:1] == ["chart"] and len(argv) > 1:
        errors = check_chart([Path(arg) for arg in argv[1:]])
    elif argv in (["values"], ["values", "--write"]):
        errors = check_values(write=argv[1:] == ["--write"])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    for error in errors:
        print(f"FAILED: {error}")
    print("SUCCESS" if not errors else f"{len(errors)} problem(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
