"""Unit tests for daemon.folder.files.FilesSource (``docsumd summarize``): ids, records, inputs untouched."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from daemon.errors import DocumentError
from daemon.folder.files import FilesSource
from daemon.folder.sink import FolderSink
from daemon.work import WorkItem


def _file(path: Path, data: bytes = b"text\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


async def _items(source: FilesSource) -> list[WorkItem]:
    return [item async for item in source.items()]


async def test_one_item_per_file_in_order(tmp_path: Path) -> None:
    paths = [_file(tmp_path / "in" / name) for name in ("b.txt", "a.txt")]
    source = FilesSource(paths, FolderSink(tmp_path / "out", tmp_path / "out"), max_input_bytes=100)
    assert source.backlog == 2
    items = await _items(source)
    assert [item.id for item in items] == ["b.txt", "a.txt"]
    assert [item.metadata["path"] for item in items] == [str(path) for path in paths]
    assert source.backlog == 0


async def test_duplicate_basenames_get_distinct_ids(tmp_path: Path) -> None:
    paths = [_file(tmp_path / folder / "report.txt", folder.encode()) for folder in ("x", "y", "z")]
    source = FilesSource(paths, FolderSink(tmp_path / "out", tmp_path / "out"), max_input_bytes=100)
    items = await _items(source)
    assert [item.id for item in items] == ["report.txt", "report.txt~2", "report.txt~3"]
    assert [await item.load() for item in items] == [b"x", b"y", b"z"]  # each loads its own file


async def test_generated_id_does_not_collide_with_a_real_file_name(tmp_path: Path) -> None:
    paths = [_file(tmp_path / "x" / "a.txt"), _file(tmp_path / "y" / "a.txt"), _file(tmp_path / "a.txt~2")]
    source = FilesSource(paths, FolderSink(tmp_path / "out", tmp_path / "out"), max_input_bytes=100)
    ids = [item.id for item in await _items(source)]
    assert len(set(ids)) == len(ids)


async def test_results_and_errors_land_in_the_sink_folder_and_inputs_stay(tmp_path: Path) -> None:
    outbox = tmp_path / "out"
    good = _file(tmp_path / "in" / "good.txt", b"good\n")
    bad = _file(tmp_path / "in" / "bad.txt", b"")
    source = FilesSource([good, bad], FolderSink(outbox, outbox), max_input_bytes=100)
    await source.start()
    assert outbox.is_dir()
    first, second = await _items(source)
    await first.complete({"id": first.id, "summary": "fine"})
    await second.fail({"id": second.id, "reason": "empty"})
    await source.stop()
    assert json.loads((outbox / "good.txt.summary.json").read_text(encoding="utf-8"))["summary"] == "fine"
    assert json.loads((outbox / "bad.txt.error.json").read_text(encoding="utf-8"))["reason"] == "empty"
    assert sorted(path.name for path in outbox.iterdir()) == ["bad.txt.error.json", "good.txt.summary.json"]
    assert good.read_bytes() == b"good\n"  # inputs are neither moved nor changed
    assert bad.exists()
    assert sorted(path.name for path in (tmp_path / "in").iterdir()) == ["bad.txt", "good.txt"]


async def test_duplicate_names_write_separate_results(tmp_path: Path) -> None:
    outbox = tmp_path / "out"
    paths = [_file(tmp_path / folder / "r.txt") for folder in ("x", "y")]
    source = FilesSource(paths, FolderSink(outbox, outbox), max_input_bytes=100)
    await source.start()
    for item in await _items(source):
        await item.complete({"id": item.id})
    assert json.loads((outbox / "r.txt.summary.json").read_text(encoding="utf-8")) == {"id": "r.txt"}
    assert json.loads((outbox / "r.txt~2.summary.json").read_text(encoding="utf-8")) == {"id": "r.txt~2"}


async def test_load_of_a_missing_file_is_unreadable(tmp_path: Path) -> None:
    source = FilesSource([tmp_path / "gone.txt"], FolderSink(tmp_path, tmp_path), max_input_bytes=100)
    (item,) = await _items(source)
    with pytest.raises(DocumentError) as caught:
        await item.load()
    assert caught.value.reason == "unreadable"


async def test_load_refuses_a_too_large_file(tmp_path: Path) -> None:
    path = _file(tmp_path / "big.txt", b"x" * 11)
    source = FilesSource([path], FolderSink(tmp_path, tmp_path), max_input_bytes=10)
    (item,) = await _items(source)
    with pytest.raises(DocumentError) as caught:
        await item.load()
    assert caught.value.reason == "too_large"
