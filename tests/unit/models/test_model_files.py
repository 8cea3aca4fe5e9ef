"""The model folder and tokenizer the config names (daemon/models/files.py), broken in every way
an operator's folder can be: each is exit 2 with one line naming the problem, through the real
command line, never a hang, a traceback or a tokenizer that silently turns text into nothing.

``run`` and a model id (Hugging Face reads ``HF_HUB_OFFLINE`` at import) run in a child killed after
120 s; the other cases call ``check-config`` in this process (a hang there meets pytest's timeout).
A missing tokenizer.json used to be replaced by transformers with a three-token tokenizer that
encodes every text to no tokens: ``check-config`` passed and ``run`` started the engine with it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from daemon.cli import main
from daemon.config import EngineConfig
from daemon.errors import ConfigError
from daemon.models.files import (
    MAX_TOKENIZER_FILE_BYTES,
    check_model_path,
    load_tokenizer,
)
from tests.config_files import config_file

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def model(tmp_path: Path, tiny_model: Path) -> Path:
    """A copy of the tiny model for one test to break."""
    return Path(shutil.copytree(tiny_model, tmp_path / "model"))


def _config(tmp_path: Path, model: str) -> Path:
    return config_file(
        tmp_path,
        f'[engine]\nmodel = "{model}"\nmax_model_len = 1024\n[metrics]\nenabled = false\n'
        '[sources.folder]\ninbox = "in"\noutbox = "out"\ndone = "done"\nfailed = "failed"\n',
    )


def _child(args: list[str]) -> subprocess.CompletedProcess[str]:
    """``docsumd ARGS`` in a child with no hub to reach, killed after its time: a hang fails the test."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DOCSUMD_")}
    return subprocess.run(
        [sys.executable, "-m", "daemon", *args],
        check=False,
        cwd=REPO,
        env={**env, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def _error_line(stderr: str) -> str:
    """The one line a refused command ends with (``run`` logs its start and stop before it)."""
    lines = [line for line in stderr.splitlines() if line.startswith("docsumd: ")]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr, stderr
    return lines[0]


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def _device(path: Path) -> None:
    path.unlink()
    path.symlink_to("/dev/zero")


def test_run_refuses_a_fifo_tokenizer_before_the_engine_starts(tmp_path: Path, model: Path) -> None:
    # It used to start the engine with transformers' stand-in for a missing tokenizer.json.
    _fifo(model / "tokenizer.json")
    result = _child(["run", "--config", str(_config(tmp_path, str(model)))])
    assert result.returncode == 2, result.stderr
    assert "tokenizer.json' is a FIFO (named pipe)" in _error_line(result.stderr)
    assert "engine starting" not in result.stderr


def _folder(path: Path) -> None:
    path.unlink()
    path.mkdir()


def _dangling(path: Path) -> None:
    path.unlink()
    path.symlink_to(path.parent / "gone")


def _garbage(path: Path) -> None:
    path.write_bytes(b"garbage{\n")


def _array(path: Path) -> None:
    path.write_text("[1, 2]", encoding="utf-8")


def _no_kind(path: Path) -> None:
    path.write_text('{"hidden_size": 8}', encoding="utf-8")


def _huge(path: Path) -> None:
    with path.open("r+b") as file:  # sparse: no disk used
        file.truncate(MAX_TOKENIZER_FILE_BYTES + 1)


def _removed(path: Path) -> None:
    path.unlink()


@pytest.mark.parametrize(
    ("name", "break_it", "expected"),
    [
        ("tokenizer.json", _fifo, "tokenizer.json' is a FIFO (named pipe), not a regular file"),
        ("config.json", _fifo, "config.json' is a FIFO (named pipe), not a regular file"),
        ("tokenizer_config.json", _fifo, "tokenizer_config.json' is a FIFO (named pipe)"),
        ("model.safetensors", _fifo, "model.safetensors' is a FIFO (named pipe)"),
        ("tokenizer.json", _device, "tokenizer.json' is a character device, not a regular file"),
        ("tokenizer.json", _folder, "tokenizer.json' is a folder, not a file"),
        ("tokenizer.json", _dangling, "tokenizer.json' is a symbolic link to nothing"),
        ("tokenizer.json", _removed, "the tokenizer of '{model}' turns text into no tokens"),
        ("tokenizer.json", _garbage, "cannot load the tokenizer of '{model}': "),
        ("tokenizer.json", _huge, f"tokenizer.json' is {MAX_TOKENIZER_FILE_BYTES + 1} bytes, larger than"),
        ("config.json", _garbage, "config.json' is not JSON: Expecting value"),
        ("config.json", _array, "config.json' must hold a JSON object, not list"),
        ("config.json", _no_kind, "config.json' is not a model's config: it has no model_type"),
        ("generation_config.json", _garbage, "generation_config.json' is not JSON: Expecting value"),
        ("tokenizer_config.json", _array, "tokenizer_config.json' must hold a JSON object, not list"),
    ],
)
def test_a_broken_model_folder_is_exit_2_with_one_line(
    tmp_path: Path,
    model: Path,
    *,
    name: str,
    break_it: Callable[[Path], None],
    expected: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # check-config sets it for a local model: undone after
    break_it(model / name)
    assert main(["check-config", str(_config(tmp_path, str(model)))]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    line = _error_line(captured.err)
    assert line.startswith("docsumd: engine.model: "), line
    assert expected.format(model=model) in line


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("{tmp}/no-such-model", "model folder '{tmp}/no-such-model' does not exist"),
        ("{tmp}/empty", "cannot load the tokenizer of '{tmp}/empty': "),
        ("{tmp}/a-file", "cannot load the tokenizer of '{tmp}/a-file': "),
    ],
)
def test_a_model_that_is_not_there_is_exit_2_with_one_line(
    tmp_path: Path,
    *,
    name: str,
    expected: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # check-config sets it for a local model: undone after
    (tmp_path / "empty").mkdir()
    (tmp_path / "a-file").write_bytes(b"not a model\n")
    assert main(["check-config", str(_config(tmp_path, name.format(tmp=tmp_path)))]) == 2
    line = _error_line(capsys.readouterr().err)
    assert line.startswith("docsumd: engine.model: "), line
    assert expected.format(tmp=tmp_path) in line


def test_a_model_id_the_hub_cannot_give_is_exit_2_with_one_line(tmp_path: Path) -> None:
    # A child: Hugging Face reads HF_HUB_OFFLINE once, at import (no hub is reachable here anyway).
    result = _child(["check-config", str(_config(tmp_path, "no-such-org/no-such-model"))])
    assert result.returncode == 2, result.stderr
    line = _error_line(result.stderr)
    assert line.startswith(
        "docsumd: engine.model: cannot load the tokenizer of 'no-such-org/no-such-model': "
    )
    assert line.endswith("(a model id needs the Hugging Face hub, or its local cache)")


def test_a_separate_tokenizer_folder_is_checked_under_its_own_key(tmp_path: Path, model: Path) -> None:
    _fifo(model / "tokenizer.json")
    with pytest.raises(ConfigError, match=r"^engine\.tokenizer: .*tokenizer\.json' is a FIFO"):
        load_tokenizer(EngineConfig(model=str(model.parent), tokenizer=str(model)))


def test_an_unreadable_model_file_is_refused_naming_it(model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Root reads every file whatever its mode, so the refusal of the open is simulated here.
    real_open = os.open

    def refuse(path: object, flags: int, *args: object, **kwargs: object) -> int:
        if str(path).endswith("tokenizer_config.json"):
            raise PermissionError(13, "Permission denied")
        return real_open(path, flags, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", refuse)
    with pytest.raises(ConfigError, match=r"cannot read '.*tokenizer_config\.json': Permission denied"):
        check_model_path(str(model), "engine.model")


def test_links_into_a_cache_are_followed_and_the_model_loads(tmp_path: Path, model: Path) -> None:
    """The Hugging Face cache's layout: every file of a snapshot is a link into blobs/."""
    blobs, snapshot = tmp_path / "blobs", tmp_path / "snapshots" / "rev"
    blobs.mkdir()
    snapshot.mkdir(parents=True)
    for path in model.iterdir():
        target = blobs / f"blob-{path.name}"
        path.rename(target)
        (snapshot / path.name).symlink_to(target)
    tokenizer = load_tokenizer(EngineConfig(model=str(snapshot)))
    assert tokenizer.encode("hello world", add_special_tokens=False)
    assert json.loads((snapshot / "config.json").read_text(encoding="utf-8"))["model_type"]
