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
        corpus / "docs" / "paper-pmc-pone-0000217.txt",  # longer than the context
        corpus / "bad" / "binary_garbage.txt",
    ]
    before = {f: f.stat().st_mtime_ns for f in files}
    outbox = tmp_path / "results"
    # Truncation instead of staged summaries, chosen from the environment.
    env = {
        **os.environ,
        "TMPDIR": str(layout.root),
        "HF_HUB_OFFLINE": "1",
        "DOCSUMD_SUMMARY__STRATEGY": "head_tail",
    }
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
    assert "3 summarized, 1 failed" in proc.stderr
    assert "summarizing" in proc.stderr  # the progress bar
    assert sorted(p.name for p in outbox.iterdir()) == [
        "binary_garbage.txt.error.json",
        "legal-cal-ms-rl.txt.summary.json",
        "paper-aclsum-w99-0615.txt.summary.json",
        "paper-pmc-pone-0000217.txt.summary.json",
    ]
    result = json.loads((outbox / "legal-cal-ms-rl.txt.summary.json").read_text())
    assert result["source"] == "files"
    assert result["summary_tokens"] > 0
    long = json.loads((outbox / "paper-pmc-pone-0000217.txt.summary.json").read_text())
    assert (long["strategy"], long["truncated"], long["requests"]) == ("head_tail", True, 1)
    assert 0 < long["dropped_tokens"] < long["document_tokens"]
    assert long["prompt_tokens"] + long["max_summary_tokens"] <= 4096  # filled to the context, not over
    assert long["prompt_tokens"] > 4096 - 32 - 200
    assert json.loads((outbox / "binary_garbage.txt.error.json").read_text())["reason"] == "binary"
    assert {f: f.stat().st_mtime_ns for f in files} == before  # inputs untouched
