"""Unit tests for the options sidecars of daemon.folder.source (``NAME.options.json``), with real folders.

Covers which files are documents, which sidecar a document reads, the limits on reading it, and that a
sidecar moves with its document to ``done/`` or ``failed/``. No fakes: a real FolderSource and FolderSink
on temporary folders, the way tests/unit/folder/test_folder_source.py builds them. Waits are bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from pathlib import Path

import pytest

from daemon.config import FolderSourceConfig
from daemon.errors import DocumentError
from daemon.folder.sink import FolderSink
from daemon.folder.source import MAX_OPTIONS_BYTES, FolderSource, is_candidate_name, sidecar_names
from daemon.summary.options import SummaryOptions, parse_options
from daemon.work import WorkItem

WAIT = 10.0


def make_config(tmp_path: Path) -> FolderSourceConfig:
    return FolderSourceConfig(
        inbox=tmp_path / "inbox",
        outbox=tmp_path / "outbox",
        done=tmp_path / "done",
        failed=tmp_path / "failed",
        settle_seconds=0.2,
        rescan_seconds=3600.0,
    )


def make_source(config: FolderSourceConfig) -> FolderSource:
    return FolderSource(config, FolderSink(config.outbox, config.failed), max_input_bytes=1 << 20)


def write_old(path: Path, data: bytes = b"some text\n", *, age: float = 600.0) -> Path:
    """Write ``path`` with an mtime ``age`` seconds in the past (settled at first look)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    stamp = time.time() - age
    os.utime(path, (stamp, stamp))
    return path


async def next_items(source: FolderSource, count: int) -> list[WorkItem]:
    """The next ``count`` items the source hands out (bounded wait)."""
    items: list[WorkItem] = []
    iterator = source.items()
    try:
        for _ in range(count):
            items.append(await asyncio.wait_for(anext(iterator), WAIT))
    finally:
        with contextlib.suppress(RuntimeError):
            await iterator.aclose()  # type: ignore[attr-defined]
    return items


async def load_options(item: WorkItem) -> object:
    assert item.load_options is not None
    return await item.load_options()


# -- names -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "candidate"),
    [
        ("report.txt.options.json", False),
        ("report.options.json", False),
        ("x.options.json", False),
        (".options.json", False),
        ("report.json", True),
        ("options.json", True),
        ("report.options.json.txt", True),
    ],
)
def test_sidecars_are_not_documents(name: str, candidate: bool) -> None:
    assert is_candidate_name(name) is candidate


@pytest.mark.parametrize(
    ("name", "names"),
    [
        ("report.txt", ["report.txt.options.json", "report.options.json"]),
        ("a.b.txt", ["a.b.txt.options.json", "a.b.options.json"]),
        ("contract", ["contract.options.json"]),
        ("trailing.", ["trailing..options.json", "trailing.options.json"]),
    ],
)
def test_sidecar_names_in_order_of_precedence(name: str, names: list[str]) -> None:
    assert sidecar_names(name) == names


async def test_sidecar_files_are_never_handed_out(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    # Older than the documents: if they were candidates they would come first.
    write_old(config.inbox / "doc.txt.options.json", b'{"style": "bullets"}', age=900)
    write_old(config.inbox / "orphan.options.json", b'{"style": "prose"}', age=900)
    write_old(config.inbox / "doc.txt", b"first\n", age=300)
    write_old(config.inbox / "other.txt", b"second\n", age=200)
    async with make_source(config) as source:
        assert source.backlog == 2
        items = await next_items(source, 2)
        assert [item.id for item in items] == ["doc.txt", "other.txt"]
        assert source.backlog == 0
        # A sidecar reported later by the watcher is not taken either.
        source.watcher.add("late.options.json")
        assert source.backlog == 0


# -- reading ---------------------------------------------------------------------------------------


async def test_full_name_sidecar_wins_over_the_stem_sidecar(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    write_old(config.inbox / "doc.txt")
    write_old(config.inbox / "doc.txt.options.json", b'{"style": "bullets"}')
    write_old(config.inbox / "doc.options.json", b'{"style": "prose", "max_summary_tokens": 50}')
    async with make_source(config) as source:
        (item,) = await next_items(source, 1)
        raw = await load_options(item)
    assert raw == b'{"style": "bullets"}'
    assert parse_options(raw) == SummaryOptions(style="bullets")


async def test_stem_sidecar_is_used_without_a_full_name_one(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    write_old(config.inbox / "doc.txt")
    write_old(config.inbox / "doc.options.json", b'{"max_summary_tokens": 50}')
    async with make_source(config) as source:
        (item,) = await next_items(source, 1)
        assert parse_options(await load_options(item)) == SummaryOptions(max_summary_tokens=50)


async def test_no_sidecar_means_no_options(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    write_old(config.inbox / "doc.txt")
    # Sidecars of other names only: not this document's.
    for name in ("docs.options.json", "doc.md.options.json", "do.options.json", "other.txt.options.json"):
        write_old(config.inbox / name, b'{"style": "bullets"}')
    async with make_source(config) as source:
        (item,) = await next_items(source, 1)
        assert item.id == "doc.txt"
        assert await load_options(item) is None


async def test_sidecar_at_the_size_limit_is_read(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    write_old(config.inbox / "doc.txt")
    data = b'{"style": "bullets"}' + b" " * (MAX_OPTIONS_BYTES - 20)
    assert len(data) == MAX_OPTIONS_BYTES
    write_old(config.inbox / "doc.txt.options.json", data)
    async with make_source(config) as source:
        (item,) = await next_items(source, 1)
        assert await load_options(item) == data


async def test_oversized_sidecar_is_invalid_options(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    write_old(config.inbox / "doc.txt")
    write_old(config.inbox / "doc.options.json", b"{" + b" " * MAX_OPTIONS_BYTES + b"}")
    async with make_source(config) as source:
        (item,) = await next_items(source, 1)
        with pytest.raises(DocumentError) as caught:
            await load_options(item)
    assert caught.value.reason == "invalid_options"
    assert "doc.options.json" in caught.value.message


async def test_unreadable_sidecar_is_invalid_options(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    write_old(config.inbox / "doc.txt")
    (config.inbox / "doc.txt.options.json").mkdir()  # exists, but cannot be read as a file
    async with make_source(config) as source:
        (item,) = await next_items(source, 1)
        with pytest.raises(DocumentError) as caught:
            await load_options(item)
    assert caught.value.reason == "invalid_options"
    assert "doc.txt.options.json" in caught.value.message


# -- acknowledgement -------------------------------------------------------------------------------


async def test_completion_moves_the_sidecar_with_the_document_to_done(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    write_old(config.inbox / "doc.txt", b"contract\n")
    write_old(config.inbox / "doc.txt.options.json", b'{"style": "bullets"}')
    write_old(config.inbox / "keep.txt.options.json", b"{}")  # another document's: stays
    async with make_source(config) as source:
        (item,) = await next_items(source, 1)
        await item.complete({"id": "doc.txt", "summary": "A contract."})
    assert (config.done / "doc.txt").read_bytes() == b"contract\n"
    assert (config.done / "doc.txt.options.json").read_bytes() == b'{"style": "bullets"}'
    assert sorted(path.name for path in config.inbox.iterdir()) == ["keep.txt.options.json"]
    assert not any(config.failed.iterdir())
    assert json.loads((config.outbox / "doc.txt.summary.json").read_text()) == {
        "id": "doc.txt",
        "summary": "A contract.",
    }


async def test_completion_moves_a_stem_sidecar_too(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    write_old(config.inbox / "doc.txt", b"contract\n")
    write_old(config.inbox / "doc.options.json", b'{"style": "prose"}')
    async with make_source(config) as source:
        (item,) = await next_items(source, 1)
        await item.complete({"id": "doc.txt"})
    assert sorted(path.name for path in config.done.iterdir()) == ["doc.options.json", "doc.txt"]
    assert list(config.inbox.iterdir()) == []


async def test_completing_one_document_keeps_a_stem_sidecar_it_did_not_use(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    write_old(config.inbox / "doc.txt", age=900)
    write_old(config.inbox / "doc.md", age=300)
    write_old(config.inbox / "doc.txt.options.json", b'{"style": "bullets"}')
    write_old(config.inbox / "doc.options.json", b'{"max_summary_tokens": 50}')
    async with make_source(config) as source:
        (first,) = await next_items(source, 1)
        assert first.id == "doc.txt"
        assert await load_options(first) == b'{"style": "bullets"}'
        await first.complete({"id": "doc.txt"})
        (second,) = await next_items(source, 1)
        assert second.id == "doc.md"
        assert await load_options(second) == b'{"max_summary_tokens": 50}'


async def test_failure_moves_the_sidecar_with_the_document_to_failed(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    write_old(config.inbox / "bad.txt", b"\x00\x01")
    write_old(config.inbox / "bad.options.json", b'{"style": "haiku"}')
    async with make_source(config) as source:
        (item,) = await next_items(source, 1)
        await item.fail({"id": "bad.txt", "reason": "invalid_options"})
    assert (config.failed / "bad.txt").read_bytes() == b"\x00\x01"
    assert (config.failed / "bad.options.json").read_bytes() == b'{"style": "haiku"}'
    assert json.loads((config.failed / "bad.txt.error.json").read_text()) == {
        "id": "bad.txt",
        "reason": "invalid_options",
    }
    assert list(config.inbox.iterdir()) == []
    assert not any(config.done.iterdir())


async def test_completion_without_a_sidecar_moves_only_the_document(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    write_old(config.inbox / "doc.txt", b"contract\n")
    async with make_source(config) as source:
        (item,) = await next_items(source, 1)
        await item.complete({"id": "doc.txt"})
    assert sorted(path.name for path in config.done.iterdir()) == ["doc.txt"]
    assert list(config.inbox.iterdir()) == []
