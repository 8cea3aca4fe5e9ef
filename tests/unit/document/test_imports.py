"""The daemon process never loads the extractors nor an XML parser: they run only in the sandboxed
worker (which loads :mod:`daemon.document.extract` by name), and what the daemon's process needs of
the text convention lives outside that package."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]

DAEMON_MODULES = (
    "daemon.document.formats",
    "daemon.document.reader",
    "daemon.document.sandbox.pool",
    "daemon.pipeline",
    "daemon.service",
    "daemon.cli",
)
"""What the daemon's process imports: its entry point, the service, the pipeline, the document
reader with format detection, and the pool (which imports the worker module for its options)."""


def _loaded_after_import(prefixes: tuple[str, ...]) -> list[str]:
    """The modules under ``prefixes`` that a fresh interpreter holds after importing
    :data:`DAEMON_MODULES`."""
    code = (
        "import importlib, json, sys\n"
        f"for name in {DAEMON_MODULES!r}:\n"
        "    importlib.import_module(name)\n"
        f"prefixes = {prefixes!r}\n"
        "print(json.dumps(sorted(name for name in sys.modules\n"
        "    if any(name == prefix or name.startswith(prefix + '.') for prefix in prefixes))))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    loaded: list[str] = json.loads(proc.stdout.splitlines()[-1])
    return loaded


def test_importing_the_daemon_and_format_detection_does_not_load_lxml() -> None:
    assert _loaded_after_import(("lxml",)) == []


def test_importing_the_daemon_and_format_detection_does_not_load_the_extractors() -> None:
    assert _loaded_after_import(("daemon.document.extract", "pypdfium2", "pdfminer")) == []


def test_the_check_sees_what_is_loaded() -> None:
    loaded = _loaded_after_import(("daemon.document",))
    assert "daemon.document.headings" in loaded
    assert "daemon.document.sandbox.worker" in loaded
