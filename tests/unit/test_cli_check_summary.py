"""``docsumd check-summary``: any summary against any source the service can read; JSON out, exit 0;
exit 2 for an input it cannot read. Sources of the extracted formats go through the sandboxed workers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from daemon import cli

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "documents"
SOURCE = (
    "1. Term. The agreement runs for thirty-six (36) months from 1 January 2024.\n\n"
    "2. Notice. Either party may end it on thirty (30) days' notice to the Free Software Foundation.\n"
)


@pytest.fixture(autouse=True)
def _logging_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    # The command configures logging for its process; in this one it would change what later tests see.
    monkeypatch.setattr("daemon.ops.logging.configure_logging", lambda *args, **kwargs: None)


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any] | None, str]:
    code = cli.main(["check-summary", *args])
    out, err = capsys.readouterr()
    # Only a report is parsed: with logging left unconfigured here, the workers' logs reach stdout.
    return code, (json.loads(out) if code == cli.EXIT_OK else None), err


def files(tmp_path: Path, summary: str | bytes, source: str | bytes = SOURCE) -> tuple[str, str]:
    paths = []
    for name, content in (("source.txt", source), ("summary.txt", summary)):
        path = tmp_path / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
        paths.append(str(path))
    return paths[0], paths[1]


def test_checks_and_evidence_of_a_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source, summary = files(tmp_path, "It runs for 3 years from January 1, 2024.\n- Notice is 60 days.")
    code, report, _ = run(capsys, "--source", source, "--summary", summary)
    assert code == cli.EXIT_OK
    assert report is not None
    assert report["source"]["format"] == "text"
    assert report["summary"]["sentences"] == 2
    assert report["parts"]["by"] == "paragraphs"
    checks = report["checks"]
    assert checks["counts"] == {"supported": 2, "unsupported": 1, "unchecked": 0}
    assert checks["unsupported"] == [
        {"text": "60 days", "kind": "duration", "sentence": 1, "chars": [54, 61]}
    ]
    # A short source is one part; both sentences draw on it (60 is in no part: it does not count).
    assert report["parts"]["count"] == 1
    evidence = report["evidence"]
    assert [entry["sentence"] for entry in evidence] == [0, 1]
    assert [entry["parts"][0]["part"] for entry in evidence] == [1, 1]


def test_a_pdf_source_is_extracted_in_the_sandbox(tmp_path: Path) -> None:
    # The real entry point in its own process: stdout must be the report alone (the extraction
    # workers' logs go to stderr).
    summary = tmp_path / "summary.txt"
    summary.write_text("Compound Text is a format for multi-lingual text, by the Moon Institute.")
    source = FIXTURES / "pdf" / "ctext.pdf"
    done = subprocess.run(
        [sys.executable, "-m", "daemon", "check-summary", "--source", str(source), "--summary", str(summary)],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert done.returncode == cli.EXIT_OK, done.stderr
    report = json.loads(done.stdout)
    assert report["source"]["format"] == "pdf"
    assert report["source"]["pages"] == 8
    assert [item["text"] for item in report["checks"]["unsupported"]] == ["Moon Institute"]
    (entry,) = report["evidence"]
    assert entry["parts"]
    assert "pages" in entry["parts"][0]


@pytest.mark.parametrize(
    ("summary", "reason"),
    [
        (b"", "empty"),
        (b"  \n\t ", "whitespace_only"),
        (b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4, "binary"),
        (b"caf\xe9 au lait", "invalid_utf8"),
        (b"x" * ((1 << 20) + 1), "too_large"),
    ],
    ids=["empty", "whitespace", "binary", "latin-1", "too-large"],
)
def test_a_bad_summary_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], summary: bytes, reason: str
) -> None:
    source, summary_path = files(tmp_path, summary)
    code, _, err = run(capsys, "--source", source, "--summary", summary_path)
    assert code == cli.EXIT_CONFIG
    assert f"({reason})" in err


@pytest.mark.parametrize(
    ("source", "reason"),
    [
        (b"", "empty"),
        (b"\x1f\x8b\x08\x00" + bytes(range(256)) * 8, "binary"),
        ((FIXTURES / "docx" / "encrypted.docx").read_bytes(), "encrypted"),
        ((FIXTURES / "docx" / "truncated.docx").read_bytes(), "malformed"),
    ],
    ids=["empty", "gzip", "encrypted-docx", "truncated-docx"],
)
def test_a_bad_source_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], source: bytes, reason: str
) -> None:
    source_path, summary = files(tmp_path, "A summary.", source)
    code, _, err = run(capsys, "--source", source_path, "--summary", summary)
    assert code == cli.EXIT_CONFIG
    assert f"({reason})" in err


def test_missing_files_fifos_and_folders_exit_2_without_blocking(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source, summary = files(tmp_path, "A summary.")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for args, reason in (
        (["--source", str(tmp_path / "missing"), "--summary", summary], "unreadable"),
        (["--source", source, "--summary", str(fifo)], "not_regular"),
        (["--source", str(tmp_path), "--summary", summary], "not_regular"),
    ):
        code, _, err = run(capsys, *args)
        assert code == cli.EXIT_CONFIG
        assert f"({reason})" in err


def test_with_a_config_the_parts_are_the_models_chunks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], tiny_model: Path
) -> None:
    config = tmp_path / "docsumd.toml"
    config.write_text(f'[engine]\nmodel = "{tiny_model}"\nmax_model_len = 1024\n', encoding="utf-8")
    source, summary = files(tmp_path, "Notice is 30 days.", SOURCE * 40)
    code, report, _ = run(capsys, "--source", source, "--summary", summary, "--config", str(config))
    assert code == cli.EXIT_OK
    assert report is not None
    assert report["parts"]["by"] == "chunks"
    assert report["parts"]["count"] > 1
    assert report["checks"]["counts"] == {"supported": 1, "unsupported": 0, "unchecked": 0}


def test_an_invalid_config_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "docsumd.toml"
    config.write_text("[engine]\nmax_model_len = -1\n", encoding="utf-8")
    source, summary = files(tmp_path, "A summary.")
    code, _, _ = run(capsys, "--source", source, "--summary", summary, "--config", str(config))
    assert code == cli.EXIT_CONFIG
