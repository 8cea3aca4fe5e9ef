"""The daemon process never loads an XML parser: extractors run only in the sandboxed worker."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def test_importing_the_pipeline_and_format_detection_does_not_load_lxml() -> None:
    code = (
        "import sys\n"
        "import daemon.document.formats, daemon.document.reader, daemon.pipeline, daemon.service\n"
        "print(sorted(name for name in sys.modules if name == 'lxml' or name.startswith('lxml.')))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
