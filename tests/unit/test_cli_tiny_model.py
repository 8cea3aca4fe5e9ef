"""Unit tests for ``docsumd make-tiny-model``: writes a model once, and leaves an existing one alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from daemon.cli import main
from daemon.models import tiny as tiny_model


def test_make_tiny_model_writes_config_and_tokenizer_then_is_a_no_op(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "tiny"
    assert main(["make-tiny-model", str(target)]) == 0
    config = json.loads((target / "config.json").read_text(encoding="utf-8"))
    assert config["model_type"] == "qwen2"
    assert config["num_hidden_layers"] == 2
    assert (target / "tokenizer.json").is_file()
    tokenizer_config = json.loads((target / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert tokenizer_config["eos_token"] == "<|im_end|>"
    assert f"tiny model written to {target}" in capsys.readouterr().err

    written = {path.name: path.stat().st_mtime_ns for path in target.iterdir()}

    def must_not_build(*args: object, **kwargs: object) -> Path:
        raise AssertionError("make-tiny-model rebuilt an existing model without --force")

    monkeypatch.setattr(tiny_model, "build_tiny_model", must_not_build)
    assert main(["make-tiny-model", str(target)]) == 0
    assert "already holds a model (use --force to rebuild)" in capsys.readouterr().err
    assert {path.name: path.stat().st_mtime_ns for path in target.iterdir()} == written


def test_make_tiny_model_with_force_rebuilds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "tiny"
    target.mkdir()
    (target / "config.json").write_text("{}", encoding="utf-8")
    calls: list[tuple[Path, int]] = []

    def fake_build(output_dir: Path, *, seed: int = 0) -> Path:
        calls.append((output_dir, seed))
        return output_dir

    monkeypatch.setattr(tiny_model, "build_tiny_model", fake_build)
    assert main(["make-tiny-model", str(target), "--force", "--seed", "7"]) == 0
    assert calls == [(target, 7)]
