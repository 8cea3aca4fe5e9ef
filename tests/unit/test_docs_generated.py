"""The documentation generated from the code is current, and the code holds what it documents.

``scripts/gen_docs.py`` writes the reference pages (configuration, command line, metrics, records,
reason codes, the package tree) from the code; a page that differs from what it writes now is stale.
"""

from __future__ import annotations

import importlib.util
import re
import sys
import typing
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from daemon import cli
from daemon.config import load_config
from daemon.errors import REASONS, Reason

ROOT = Path(__file__).resolve().parents[2]


def _script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


gen_docs = _script("gen_docs")


def test_the_generated_pages_are_current() -> None:
    stale = gen_docs.stale_pages(ROOT / "docs")
    assert stale == [], f"stale generated pages {stale}: run `python scripts/gen_docs.py` and commit them"


def test_a_stale_or_missing_page_is_found(tmp_path: Path) -> None:
    pages = gen_docs.generated_pages()
    for relative, text in pages.items():
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text(text, encoding="utf-8")
    assert gen_docs.stale_pages(tmp_path) == []
    config_page = tmp_path / "reference/configuration.md"
    config_page.write_text(config_page.read_text().replace("`max_model_len`", "`max_len`"))
    (tmp_path / "reference/schemas/result.schema.json").unlink()
    assert gen_docs.stale_pages(tmp_path) == [
        "reference/configuration.md",
        "reference/schemas/result.schema.json",
    ]
    assert gen_docs.main(["--check", "--docs", str(tmp_path)]) == 1


def test_every_configuration_key_and_section_is_described() -> None:
    undescribed = []
    for path, model, _ in gen_docs.config_sections():
        if not (model.__doc__ or "").strip():
            undescribed.append(".".join(path))
        for name, field in model.model_fields.items():
            if gen_docs._is_section(field.annotation) is None and not field.description:
                undescribed.append(".".join([*path, name]))
    assert undescribed == [], "give these keys a description in daemon/config.py"


@pytest.mark.parametrize(
    ("key", "value", "read"),
    [
        ("engine.max_model_len", "8192", lambda c: c.engine.max_model_len == 8192),
        ("sources.folder.settle_seconds", "2.5", lambda c: c.sources.folder.settle_seconds == 2.5),
        ("sources.kafka.max_key_bytes", "2048", lambda c: c.sources.kafka.max_key_bytes == 2048),
        ("sources.kafka.input_topics", '["a", "b"]', lambda c: c.sources.kafka.input_topics == ["a", "b"]),
        ("summary.stop", '["\\n\\n"]', lambda c: c.summary.stop == ("\n\n",)),
        ("profiles.NAME.temperature", "0.5", lambda c: c.profiles["memo"].temperature == 0.5),
        (
            "engine.extra",
            '{"async_scheduling": true}',
            lambda c: c.engine.extra == {"async_scheduling": True},
        ),
    ],
)
def test_the_documented_environment_variables_set_their_keys(
    key: str,
    value: str,
    read: typing.Callable[[typing.Any], bool],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = tmp_path / "c.toml"
    config.write_text(
        '[engine]\nmodel = "m"\n[sources.folder]\ninbox = "i"\noutbox = "o"\ndone = "d"\nfailed = "f"\n'
        '[sources.kafka]\nbootstrap_servers = "b:9092"\ninput_topics = ["x"]\ngroup_id = "g"\n'
        'output_topic = "out"\ndead_letter_topic = "dead"\n'
    )
    name = gen_docs.env_name(key.replace("NAME", "memo").split("."))
    assert re.fullmatch(r"DOCSUMD_[A-Z_]+", name)
    assert name in (ROOT / "docs/reference/configuration.md").read_text() or "NAME" in key
    monkeypatch.setenv(name, value)
    assert read(load_config(config))


def test_every_reason_is_described_and_only_those() -> None:
    assert list(REASONS) == list(typing.get_args(Reason))


def test_every_exit_code_is_described() -> None:
    codes = {
        value for name, value in vars(cli).items() if name.startswith("EXIT_") and isinstance(value, int)
    }
    assert set(cli.EXIT_CODES) == codes


def test_every_alert_has_a_runbook_entry() -> None:
    rules = yaml.safe_load((ROOT / "deploy/prometheus/alerts.yml").read_text())
    alerts = [rule["alert"] for group in rules["groups"] for rule in group["rules"] if "alert" in rule]
    runbook = (ROOT / "docs/operations/alerts.md").read_text()
    sections = re.findall(r"^## (\w+)$", runbook, re.MULTILINE)
    assert sorted(sections) == sorted(alerts), (
        "one '## AlertName' section per alert in deploy/prometheus/alerts.yml"
    )
    for alert in alerts:
        assert f"[{alert}](#{alert.lower()})" in runbook, f"{alert} is missing from the runbook's table"
        section = runbook.split(f"## {alert}\n", 1)[1].split("\n## ", 1)[0]
        for part in ("**Means**", "**Check**", "**Do**"):
            assert part in section, f"{alert}'s runbook entry has no {part}"


def test_every_docs_page_is_in_the_nav_and_every_nav_entry_exists() -> None:
    nav_files: list[str] = []

    def walk(node: typing.Any) -> None:
        if isinstance(node, str):
            nav_files.append(node)
        elif isinstance(node, list):
            for child in node:
                walk(child)
        elif isinstance(node, dict):
            for child in node.values():
                walk(child)

    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)
    walk(config["nav"])
    pages = {p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")}
    assert sorted(nav_files) == sorted(pages)
