"""Shared fixtures for the unit tests: the shared corpus, a tiny model built once, a clean environment."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.corpus import CORPUS_DIR


@pytest.fixture(autouse=True)
def _no_docsumd_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """DOCSUMD_* variables from the caller's shell must not change what a config test sees."""
    import os

    for name in list(os.environ):
        if name.startswith("DOCSUMD_"):
            monkeypatch.delenv(name)


@pytest.fixture(scope="session")
def corpus_dir() -> Path:
    """The shared test corpus (``shared/corpus`` beside the repository checkout)."""
    if not CORPUS_DIR.is_dir():
        pytest.skip(f"test corpus not found at {CORPUS_DIR} (expected shared/ beside the repository)")
    return CORPUS_DIR


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random-weight model with its tokenizer, built once per session (a few seconds)."""
    from daemon.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture(scope="session")
def tokenizer(tiny_model_dir: Path) -> Any:
    """The tiny model's tokenizer, loaded the way the daemon loads it."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_model_dir))
