"""The chart checker's own logic (scripts/check_helm_chart.py), on small manifests: that it refuses what
it should. The chart itself is rendered and checked by scripts/check-helm.sh (CI's deploy checks), which
needs helm."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]


def _checker() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "check_helm_chart", REPO / "scripts" / "check_helm_chart.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["check_helm_chart"] = module
    spec.loader.exec_module(module)
    return module


checker = _checker()

SCALED: dict[str, Any] = {
    "apiVersion": "keda.sh/v1alpha1",
    "kind": "ScaledObject",
    "metadata": {"name": "docsumd"},
    "spec": {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "docsumd"},
        "pollingInterval": 30,
        "triggers": [
            {
                "type": "prometheus",
                "metricType": "AverageValue",
                "metadata": {"serverAddress": "http://p:9090", "query": "sum(x)", "threshold": "2000000"},
            }
        ],
    },
}


def _check(tmp_path: Path, *docs: dict[str, Any]) -> list[str]:
    path = tmp_path / "rendered.yaml"
    path.write_text(yaml.safe_dump_all(docs), encoding="utf-8")
    errors: list[str] = checker.check_crs([path])
    return errors


def _with(doc: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    changed: dict[str, Any] = yaml.safe_load(yaml.safe_dump(doc))
    node = changed
    *path, last = dotted.split(".")
    for part in path:
        node = node[int(part)] if part.isdigit() else node[part]  # type: ignore[index]
    node[last] = value
    return changed


def test_a_valid_scaled_object_passes(tmp_path: Path) -> None:
    assert _check(tmp_path, SCALED) == []


@pytest.mark.parametrize(
    ("dotted", "value", "problem"),
    [
        ("spec.pollingInterval", "often", "is not of type 'integer'"),
        ("spec.pollingIntervall", 30, "'pollingIntervall' was unexpected"),
        ("spec.triggers.0.metadata.threshold", 2000000, "is not of type 'string'"),
        ("spec.scaleTargetRef", {"kind": "StatefulSet"}, "'name' is a required property"),
    ],
)
def test_what_the_crd_refuses_is_refused(tmp_path: Path, dotted: str, value: Any, problem: str) -> None:
    errors = _check(tmp_path, _with(SCALED, dotted, value))
    assert len(errors) == 1
    assert problem in errors[0]


def test_a_custom_kind_without_a_vendored_crd_is_an_error(tmp_path: Path) -> None:
    unknown = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}
    builtin = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "s"}}
    assert _check(tmp_path, builtin, unknown) == [
        "example.com/v1/Widget: no vendored CRD to validate it against"
    ]


def test_the_shipped_alert_rules_pass_as_a_prometheus_rule(tmp_path: Path) -> None:
    rules = yaml.safe_load((REPO / "deploy" / "prometheus" / "alerts.yml").read_text(encoding="utf-8"))
    rule = {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule", "metadata": {"name": "r"}}
    assert _check(tmp_path, {**rule, "spec": rules}) == []
    broken = yaml.safe_load(yaml.safe_dump(rules))
    broken["groups"][0]["rules"][0]["for"] = "2 minutes"
    assert len(_check(tmp_path, {**rule, "spec": broken})) == 1


def test_the_charts_alert_rules_are_a_link_to_the_one_file() -> None:
    link = REPO / "deploy" / "helm" / "docsumd" / "files" / "alerts.yml"
    assert link.is_symlink()
    assert link.resolve() == (REPO / "deploy" / "prometheus" / "alerts.yml").resolve()


def test_the_values_table_reads_every_described_key() -> None:
    text = """
# -- Top.
top: 1
group:
  # -- A nested one,
  # on two lines.
  inner: "x"
  undocumented: 2
  deeper:
    # -- Deepest.
    leaf: [1, 2]
# -- A block.
block: |
  many
  lines
"""
    assert checker.values_rows(text) == [
        ("top", "`1`", "Top."),
        ("group.inner", '`"x"`', "A nested one, on two lines."),
        ("group.deeper.leaf", "`[1, 2]`", "Deepest."),
        ("block", "(see values.yaml)", "A block."),
    ]


def test_the_charts_values_table_is_current() -> None:
    assert checker.check_values(write=False) == []
