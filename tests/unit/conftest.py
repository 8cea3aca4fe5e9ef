"""Fixtures of the unit tests: the tiny model's tokenizer, a clean environment (see tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(autouse=True)
def _no_docsumd_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """DOCSUMD_* variables from the caller's shell must not change what a config test sees."""
    import os

    for name in list(os.environ):
        if name.startswith("DOCSUMD_"):
            monkeypatch.delenv(name)


@pytest.fixture(scope="session")
def tokenizer(tiny_model: Path) -> Any:
    """The tiny model's tokenizer, loaded the way the daemon loads it."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_model))
