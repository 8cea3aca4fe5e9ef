"""Every benchmark runs as ``python -m bench.NAME`` from the repository root and answers ``--help``,
with no edit of ``sys.path`` beyond those that import another checkout's ``daemon`` on purpose."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
EXPERIMENTS = sorted(path.stem for path in (REPO / "bench").glob("*.py") if path.stem != "__init__")
MEASURES_ANOTHER_CHECKOUT = {"memory": 2, "markup_scan": 1}
"""Their ``--code``/``--tree`` option imports ``daemon`` from another checkout (before and after)."""


def test_there_are_experiments() -> None:
    assert {"compare", "quality", "scale", "results_index"} <= set(EXPERIMENTS)


def test_every_experiment_answers_help() -> None:
    """All at once (each starts an interpreter), so that the test stays fast."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    running = {
        name: subprocess.Popen(
            [sys.executable, "-m", f"bench.{name}", "--help"],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in EXPERIMENTS
    }
    failed = {}
    for name, process in running.items():
        out, err = process.communicate(timeout=300)
        if process.returncode != 0 or "usage:" not in out:
            failed[name] = (process.returncode, err[-800:])
    assert failed == {}


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_no_experiment_edits_the_import_path(name: str) -> None:
    text = (REPO / "bench" / f"{name}.py").read_text(encoding="utf-8")
    edits = text.count("sys.path.insert") + text.count("sys.path.append")
    assert edits == MEASURES_ANOTHER_CHECKOUT.get(name, 0)


def test_the_library_edits_no_import_path() -> None:
    for path in (REPO / "bench" / "lib").glob("*.py"):
        assert "sys.path" not in path.read_text(encoding="utf-8"), path
