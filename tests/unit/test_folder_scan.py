"""Unit tests for the folder source's inbox listing: a large inbox is listed off the event loop.

A real temporary inbox; "large" is forced by setting the size limit for listing on the loop to zero,
so no test needs thousands of files. Waits are bounded; nothing depends on the machine's speed.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from daemon.config import FolderSourceConfig
from daemon.sinks.folder import FolderSink
from daemon.sources import folder as folder_module
from daemon.sources.folder import FolderSource, list_new_files

WAIT = 10.0


def make_source(tmp_path: Path, *, settle: float = 1.0) -> FolderSource:
    config = FolderSourceConfig(
        inbox=tmp_path / "inbox",
        outbox=tmp_path / "outbox",
        done=tmp_path / "done",
        failed=tmp_path / "failed",
        settle_seconds=settle,
        rescan_seconds=3600.0,
    )
    config.inbox.mkdir(parents=True)
    return FolderSource(config, FolderSink(config.outbox, config.failed), max_input_bytes=1 << 20)


def write(path: Path, *, age: float) -> None:
    path.write_text("text\n", encoding="utf-8")
    stamp = time.time() - age
    os.utime(path, (stamp, stamp))


def test_listing_splits_settled_from_fresh_files_oldest_first(tmp_path: Path) -> None:
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    write(inbox / "b.txt", age=300)
    write(inbox / "a.txt", age=600)
    write(inbox / "fresh.txt", age=0)
    write(inbox / "known.txt", age=900)
    write(inbox / ".hidden", age=900)
    (inbox / "folder").mkdir()
    settled, fresh = list_new_files(inbox, {"known.txt"}, settle_seconds=1.0)
    assert (settled, fresh) == (["a.txt", "b.txt"], ["fresh.txt"])


async def test_a_large_inbox_is_listed_in_a_thread_and_handed_out_oldest_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(folder_module, "SYNC_SCAN_DIR_BYTES", 0)  # every inbox counts as large
    monkeypatch.setattr(folder_module, "SCAN_ADD_CHUNK", 2)  # and is added in several loop turns
    source = make_source(tmp_path)
    names = [f"doc{number}.txt" for number in range(5)]
    for age, name in zip(range(500, 0, -100), names, strict=True):
        write(source.config.inbox / name, age=age)
    source._scan()
    assert source.backlog == 0  # the listing runs in a worker thread: nothing added yet
    source._scan()  # a second scan while the first lists: no second listing
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT
    while source.backlog < len(names) and loop.time() < deadline:  # noqa: ASYNC110 - no event for "all added"
        await asyncio.sleep(0.01)
    assert [source._next_ready() for _ in names] == names
    assert source._next_ready() is None


async def test_the_startup_scan_of_a_large_inbox_does_not_hold_up_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(folder_module, "SYNC_SCAN_DIR_BYTES", 0)
    source = make_source(tmp_path)
    write(source.config.inbox / "old.txt", age=600)
    await source.start()
    try:
        items = source.items()
        item = await asyncio.wait_for(anext(items), WAIT)
        assert item.id == "old.txt"
        await items.aclose()  # type: ignore[attr-defined]
    finally:
        await source.stop()
