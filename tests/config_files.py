"""Config files for tests of loading and validation: write one, load it, read the error it gives."""

from __future__ import annotations

from pathlib import Path

import pytest

from daemon.cli import load_checked_config
from daemon.errors import ConfigError


def config_file(tmp_path: Path, text: str) -> Path:
    """``text`` as ``docsumd.toml`` in ``tmp_path``."""
    path = tmp_path / "docsumd.toml"
    path.write_text(text, encoding="utf-8")
    return path


def config_error(path: Path) -> str:
    """The message of the :class:`ConfigError` that loading ``path`` as every command does (the
    schema, then the profile checks that need no tokenizer) must raise."""
    with pytest.raises(ConfigError) as caught:
        load_checked_config(path)
    return str(caught.value)
