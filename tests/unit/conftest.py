"""Fixtures of the unit tests: the tiny model's tokenizer, a clean environment, the structlog events a
test logged (see tests/conftest.py; the doubles are in tests/doubles/)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from structlog.typing import EventDict

from tests.doubles.logs import captured_logs


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


@pytest.fixture
def logs() -> Iterator[list[EventDict]]:
    """Every structlog event the test logs, at every level, as ``structlog.testing.capture_logs``
    records them, whatever logging configuration earlier tests in this process left
    (:func:`tests.doubles.logs.captured_logs`); nothing is printed meanwhile."""
    with captured_logs() as entries:
        yield entries
