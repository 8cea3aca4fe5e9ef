"""Unit tests for daemon.folder.sink: atomic JSON records and the FolderSink paths."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from daemon.errors import SinkError
from daemon.folder.sink import FolderSink, write_json_atomic


def test_write_json_atomic_writes_valid_utf8_json(tmp_path: Path) -> None:
    path = tmp_path / "r.summary.json"
    write_json_atomic(path, {"summary": "Übersicht — 要約", "tokens": 12})
    raw = path.read_bytes()
    assert raw.endswith(b"\n")
    assert "Übersicht — 要約".encode() in raw  # not \u-escaped
    assert json.loads(raw) == {"summary": "Übersicht — 要約", "tokens": 12}
    assert os.listdir(tmp_path) == ["r.summary.json"]


def test_write_json_atomic_replaces_an_existing_file(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    write_json_atomic(path, {"v": 1})
    write_json_atomic(path, {"v": 2})
    assert json.loads(path.read_text(encoding="utf-8")) == {"v": 2}
    assert os.listdir(tmp_path) == ["r.json"]


def test_write_json_atomic_leaves_nothing_if_serialization_fails(tmp_path: Path) -> None:
    with pytest.raises(TypeError):
        write_json_atomic(tmp_path / "r.json", {"bad": object()})
    assert os.listdir(tmp_path) == []


def test_write_json_atomic_removes_its_temp_file_if_the_rename_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "r.json"
    path.write_text('{"old": true}\n', encoding="utf-8")

    def failing_replace(src: str, dst: str, **dir_fds: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", failing_replace)  # the module calls os.replace
    with pytest.raises(OSError, match="No space left"):
        write_json_atomic(path, {"new": True})
    assert os.listdir(tmp_path) == ["r.json"]
    assert json.loads(path.read_text(encoding="utf-8")) == {"old": True}  # old record intact


def test_sink_paths() -> None:
    sink = FolderSink(Path("/o"), Path("/f"))
    assert sink.result_path("a.txt") == Path("/o/a.txt.summary.json")
    assert sink.error_path("a.txt") == Path("/f/a.txt.error.json")


async def test_sink_start_creates_folders_and_is_idempotent(tmp_path: Path) -> None:
    sink = FolderSink(tmp_path / "out" / "deep", tmp_path / "failed")
    await sink.start()
    await sink.start()
    assert (tmp_path / "out" / "deep").is_dir()
    assert (tmp_path / "failed").is_dir()


async def test_write_result_and_failure_return_their_paths(tmp_path: Path) -> None:
    sink = FolderSink(tmp_path / "out", tmp_path / "failed")
    await sink.start()
    result = await sink.write_result("a.txt", {"ok": True})
    failure = await sink.write_failure("b.txt", {"reason": "empty"})
    assert result == tmp_path / "out" / "a.txt.summary.json"
    assert failure == tmp_path / "failed" / "b.txt.error.json"
    assert json.loads(result.read_text(encoding="utf-8")) == {"ok": True}
    assert json.loads(failure.read_text(encoding="utf-8")) == {"reason": "empty"}


async def test_write_to_a_removed_folder_raises_sink_error(tmp_path: Path) -> None:
    sink = FolderSink(tmp_path / "outbox", tmp_path / "failed")
    await sink.start()
    (tmp_path / "outbox").rmdir()  # held by descriptor: the write fails, it does not go elsewhere
    with pytest.raises(SinkError, match="cannot write"):
        await sink.write_result("a.txt", {"ok": True})
