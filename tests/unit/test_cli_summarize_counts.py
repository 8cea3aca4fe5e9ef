"""``docsumd summarize`` counts its outcomes itself, with the progress bar or without (``--no-progress``
once printed "0 summarized ... N not finished" and exited 1: it read the count from a disabled bar).

The fake engine stands in for vLLM; the real engine runs ``summarize`` in tests/e2e/test_cli_summarize.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from daemon import cli
from daemon.config import Config, EngineConfig, MetricsConfig, ServiceConfig, SummaryConfig
from tests.doubles.engine import FakeEngine


@pytest.mark.parametrize("progress", [True, False], ids=["bar", "no-progress"])
async def test_summarize_counts_outcomes_with_and_without_the_bar(
    tmp_path: Path,
    tokenizer: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    progress: bool,
) -> None:
    monkeypatch.setattr("daemon.service.build_engine", lambda config: FakeEngine())
    monkeypatch.setattr("daemon.service.load_tokenizer", lambda config: tokenizer)
    folder = tmp_path / "in"
    folder.mkdir()
    files = []
    for index in range(3):
        path = folder / f"doc-{index}.txt"
        path.write_text(f"Document number {index}. " * 20)
        files.append(path)
    garbage = folder / "garbage.txt"
    garbage.write_bytes(b"\x00\xff\x13" * 400)
    files.append(garbage)
    config = Config(
        engine=EngineConfig(model=str(tmp_path / "model"), max_model_len=1024),
        summary=SummaryConfig(max_summary_tokens=16),
        metrics=MetricsConfig(enabled=False),
        service=ServiceConfig(status_interval_seconds=60),
    )
    outbox = tmp_path / "out"

    code = await cli._summarize(config, files, outbox, profile=None, progress=progress)

    err = capsys.readouterr().err
    assert code == cli.EXIT_SOME_FAILED, err
    assert "3 summarized, 1 failed" in err
    assert "not finished" not in err
    assert ("summarizing" in err) == progress  # the bar, only when asked for
    assert len(list(outbox.glob("*.summary.json"))) == 3
