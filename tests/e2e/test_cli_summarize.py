"""``docsumd summarize``: the service's pipeline once over a few files, with the real engine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.harness import Layout

pytestmark = pytest.mark.engine


def test_summarize_files_once(layout: Layout, corpus: Path, tmp_path: Path) -> None:
    layout.write_config()
    files = [
        corpus / "docs" / "legal-cal-ms-rl.txt",
        corpus / "docs" / "paper-aclsum-w99-0615.txt",
        corpus / "bad" / "binary_garbage.txt",
    ]
    before = {f: f.stat().st_mtime_ns for f in files}
    outbox = tmp_path / "results"
    env = {**os.environ, "TMPDIR": str(layout.root), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "daemon",
            "summarize",
            "--config",
            str(layout.config),
            "--outbox",
            str(outbox),
            *map(str, files),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
        start_new_session=True,
        check=False,
    )
    assert proc.returncode == 3, proc.stderr[-3000:]  # 3: finished, some documents failed
    assert "2 summarized, 1 failed" in proc.stderr
    assert "summarizing" in proc.stderr  # the progress bar
    assert sorted(p.name for p in outbox.iterdir()) == [
        "binary_garbage.txt.error.json",
        "legal-cal-ms-rl.txt.summary.json",
        "paper-aclsum-w99-0615.txt.summary.json",
    ]
    result = json.loads((outbox / "legal-cal-ms-rl.txt.summary.json").read_text())
    assert result["source"] == "files"
    assert result["summary_tokens"] > 0
    assert json.loads((outbox / "binary_garbage.txt.error.json").read_text())["reason"] == "binary"
    assert {f: f.stat().st_mtime_ns for f in files} == before  # inputs untouched
