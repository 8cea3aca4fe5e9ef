"""Unit tests for daemon.folder.source.FolderSource with real temporary folders (no engine).

Waits are bounded (``WAIT`` seconds) so a hang fails instead of blocking CI; no assertion depends on how
fast the machine is. Settling is tested with a fake clock where exact timing matters.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from daemon.config import FolderSourceConfig
from daemon.errors import DocumentError
from daemon.folder import inbox as inbox_module
from daemon.folder.inbox import InboxWatcher
from daemon.folder.sink import FolderSink
from daemon.folder.source import FolderSource, is_candidate_name
from tests.doubles.clock import FakeClock
from tests.doubles.sources import WAIT, Collector

SETTLE = 0.2


def make_config(tmp_path: Path, *, settle: float = SETTLE, rescan: float = 3600.0) -> FolderSourceConfig:
    return FolderSourceConfig(
        inbox=tmp_path / "inbox",
        outbox=tmp_path / "outbox",
        done=tmp_path / "done",
        failed=tmp_path / "failed",
        settle_seconds=settle,
        rescan_seconds=rescan,
    )


def make_source(
    config: FolderSourceConfig, *, max_input_bytes: int = 1 << 20, clock: FakeClock | None = None
) -> FolderSource:
    sink = FolderSink(config.outbox, config.failed)
    if clock is None:
        return FolderSource(config, sink, max_input_bytes=max_input_bytes)
    return FolderSource(config, sink, max_input_bytes=max_input_bytes, clock=clock, wall_clock=clock.time)


def write_old(path: Path, data: bytes = b"some text\n", *, age: float = 600.0) -> Path:
    """Write ``path`` with an mtime ``age`` seconds in the past (settled at first look)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    stamp = time.time() - age
    os.utime(path, (stamp, stamp))
    return path


def tmp_files(root: Path) -> list[Path]:
    return sorted(root.rglob("*.tmp"))


# -- names -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "candidate"),
    [
        ("report.txt", True),
        ("contract", True),
        ("notes.tmp.txt", True),
        (".hidden.txt", False),
        (".report.txt.tmp", False),
        ("report.txt.tmp", False),
        ("report.txt.part", False),
        ("report.txt.partial", False),
        ("report.txt.crdownload", False),
        ("report.txt.swp", False),
    ],
)
def test_is_candidate_name(name: str, candidate: bool) -> None:
    assert is_candidate_name(name) is candidate


# -- start-up scan ---------------------------------------------------------------------------------


async def test_startup_scan_hands_out_existing_files_oldest_first(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    write_old(config.inbox / "b.txt", age=300)
    write_old(config.inbox / "a.txt", age=200)
    write_old(config.inbox / "c.txt", age=100)
    async with make_source(config) as source:
        assert source.backlog == 3
        collector = Collector(source)
        try:
            ids = [(await collector.next()).id for _ in range(3)]
        finally:
            await collector.close()
    assert ids == ["b.txt", "a.txt", "c.txt"]


async def test_a_large_inbox_is_scanned_and_settled_without_holding_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """/healthz answers on the same loop: the scan and the settling pass must yield to it now and then.
    A ticker records the source's queues at each turn it gets; with a slice of 16 names and 200 files
    it must have run while the scan had added only some names, and while settling had moved only some
    to the ready queue."""
    monkeypatch.setattr(inbox_module, "LOOP_SLICE", 16)
    config = make_config(tmp_path)
    count = 200
    for number in range(count):
        write_old(config.inbox / f"doc-{number:03}.txt", age=1000 - number)
    source = make_source(config)
    seen: list[tuple[int, int]] = []  # names settling, ready

    async def tick() -> None:
        while True:
            seen.append((source.watcher.settling, source.watcher.ready))
            await asyncio.sleep(0)

    ticker = asyncio.create_task(tick())
    try:
        async with source:
            collector = Collector(source)
            try:
                ids = [(await collector.next()).id for _ in range(count)]
            finally:
                await collector.close()
    finally:
        ticker.cancel()
    assert ids == [f"doc-{number:03}.txt" for number in range(count)]
    # Bounds with room: other names (the work folder) may pass through the queues for a moment.
    some, most = count // 10, count - count // 10
    assert any(some < settling < most and not ready for settling, ready in seen), "the scan held the loop"
    assert any(settling > some and ready > some for settling, ready in seen), "settling held the loop"


async def test_settling_looks_at_a_bounded_batch_of_the_oldest_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a backlog larger than SETTLE_BATCH, each settling pass stats at most that many names, the
    oldest first, so the first document is handed out without statting the whole backlog."""
    monkeypatch.setattr(inbox_module, "SETTLE_BATCH", 30)
    config = make_config(tmp_path)
    count = 100
    for number in range(count):
        write_old(config.inbox / f"doc-{number:03}.txt", age=1000 - number)
    statted: list[list[str]] = []
    lstat_all = InboxWatcher.lstat_all

    def spying_lstat_all(self: InboxWatcher, names: list[str]) -> list[Any]:
        statted.append(list(names))
        return lstat_all(self, names)

    monkeypatch.setattr(InboxWatcher, "lstat_all", spying_lstat_all)
    async with make_source(config) as source:
        collector = Collector(source)
        try:
            ids = [(await collector.next()).id for _ in range(count)]
        finally:
            await collector.close()
    assert ids == [f"doc-{number:03}.txt" for number in range(count)]
    assert statted[0] == [f"doc-{number:03}.txt" for number in range(30)]
    assert max(len(names) for names in statted) == 30


async def test_startup_scan_ignores_hidden_temporary_and_folder_entries(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    for name in (".hidden.txt", "x.tmp", "y.part", "z.partial", "d.crdownload", "e.swp"):
        write_old(config.inbox / name, age=900)  # older than doc.txt: they would come first
    (config.inbox / "subdir").mkdir()
    write_old(config.inbox / "doc.txt", age=10)
    async with make_source(config) as source:
        assert source.backlog == 1
        collector = Collector(source)
        try:
            item = await collector.next()
        finally:
            await collector.close()
        assert item.id == "doc.txt"
        assert source.backlog == 0


async def test_a_link_in_the_inbox_is_an_input_refused_unread(tmp_path: Path) -> None:
    # Not followed, not ignored: handed out like a file, its read refuses it (not_regular).
    config = make_config(tmp_path)
    link = config.inbox / "link.txt"
    link.parent.mkdir(parents=True)
    os.symlink(write_old(tmp_path / "elsewhere.txt", age=10), link)
    os.utime(link, (time.time() - 900, time.time() - 900), follow_symlinks=False)
    write_old(config.inbox / "doc.txt", age=10)
    async with make_source(config) as source:
        assert source.backlog == 2
        collector = Collector(source)
        try:
            first, second = await collector.next(), await collector.next()
        finally:
            await collector.close()
        assert (first.id, second.id) == ("link.txt", "doc.txt")  # oldest first, the link's own time
        with pytest.raises(DocumentError, match="symbolic link") as caught:
            await first.load()
        assert caught.value.reason == "not_regular"


async def test_item_loads_the_file_bytes_and_names_the_file(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    write_old(config.inbox / "doc.txt", b"The contract text.\n")
    async with make_source(config) as source:
        collector = Collector(source)
        try:
            item = await collector.next()
        finally:
            await collector.close()
    assert (item.id, item.source, item.metadata) == ("doc.txt", "folder", {"file_name": "doc.txt"})
    assert await item.load() == b"The contract text.\n"


async def test_item_load_refuses_too_large_file(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    write_old(config.inbox / "big.txt", b"x" * 101)
    async with make_source(config, max_input_bytes=100) as source:
        collector = Collector(source)
        try:
            item = await collector.next()
        finally:
            await collector.close()
    with pytest.raises(DocumentError) as caught:
        await item.load()
    assert caught.value.reason == "too_large"


# -- settling --------------------------------------------------------------------------------------


def _write_at(path: Path, data: bytes, clock: FakeClock, *, append: bool = False) -> None:
    with path.open("ab" if append else "wb") as stream:
        stream.write(data)
    os.utime(path, ns=(int(clock.time() * 1e9), int(clock.time() * 1e9)))


async def test_growing_file_is_handed_out_only_after_settle_seconds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock(1000.0)
    config = make_config(tmp_path, settle=1.0, rescan=1e9)
    config.inbox.mkdir()
    source = make_source(config, clock=clock)
    await source.open_folders()
    path = config.inbox / "grow.txt"
    _write_at(path, b"part one\n", clock)  # mtime == now: a fresh file

    await source.watcher.scan()
    assert await source.watcher.next_ready(1) == []
    clock.advance(0.6)
    _write_at(path, b"part two\n", clock, append=True)  # still growing
    assert await source.watcher.next_ready(1) == []
    clock.advance(0.9)  # 0.9 s since the last change: not yet
    assert await source.watcher.next_ready(1) == []
    clock.advance(0.2)  # 1.1 s since the last change
    assert await source.watcher.next_ready(1) == ["grow.txt"]
    assert source.backlog == 0


async def test_old_file_is_ready_at_first_look(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock(1000.0)
    config = make_config(tmp_path, settle=1.0, rescan=1e9)
    config.inbox.mkdir()
    source = make_source(config, clock=clock)
    await source.open_folders()
    _write_at(config.inbox / "old.txt", b"text\n", clock)
    clock.advance(5.0)  # written five seconds before the source first sees it
    await source.watcher.scan()
    assert await source.watcher.next_ready(1) == ["old.txt"]


async def test_growing_file_waits_settle_seconds_after_its_last_write(tmp_path: Path) -> None:
    settle = 0.5
    config = make_config(tmp_path, settle=settle)
    async with make_source(config) as source:
        collector = Collector(source)
        try:
            await collector.wait_until_watching(config.inbox)
            path = config.inbox / "growing.txt"
            write_times: list[float] = []
            for number in range(15):
                with path.open("ab") as stream:
                    stream.write(f"line {number}\n".encode())
                write_times.append(time.monotonic())
                await asyncio.sleep(0.03)
            item, handed_out_at = await collector.next_timed()
        finally:
            await collector.close()
    assert item.id == "growing.txt"
    last_write_before = max(at for at in write_times if at <= handed_out_at)
    # 50 ms of slack: file mtimes come from the kernel's coarse clock.
    assert handed_out_at - last_write_before >= settle - 0.05


async def test_file_removed_while_settling_is_forgotten(tmp_path: Path) -> None:
    config = make_config(tmp_path, settle=1.0)
    config.inbox.mkdir()
    source = make_source(config)
    await source.open_folders()
    path = config.inbox / "brief.txt"
    path.write_text("fresh\n")
    await source.watcher.scan()
    assert source.backlog == 1
    path.unlink()
    assert await source.watcher.next_ready(1) == []
    assert source.backlog == 0
    path.write_text("again\n")  # the same name may come back and must be seen again
    await source.watcher.scan()
    assert source.backlog == 1


# -- watching --------------------------------------------------------------------------------------


async def test_files_dropped_after_start_are_picked_up_by_the_watcher(tmp_path: Path) -> None:
    config = make_config(tmp_path, rescan=3600.0)  # no rescan: only the watcher can find them
    async with make_source(config) as source:
        collector = Collector(source)
        try:
            await collector.wait_until_watching(config.inbox)
            staged = config.inbox / ".renamed.txt.tmp"
            staged.write_bytes(b"renamed into place\n")
            staged.rename(config.inbox / "renamed.txt")
            (config.inbox / "in-place.txt").write_bytes(b"written in place\n")
            items = {item.id: item for item in [await collector.next(), await collector.next()]}
        finally:
            await collector.close()
    assert set(items) == {"renamed.txt", "in-place.txt"}
    assert await items["renamed.txt"].load() == b"renamed into place\n"


async def test_ignored_files_dropped_after_start_are_not_handed_out(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    async with make_source(config) as source:
        collector = Collector(source)
        try:
            await collector.wait_until_watching(config.inbox)
            for name in (".hidden.txt", "upload.txt.part", "copy.txt.tmp"):
                write_old(config.inbox / name)  # old mtimes: they would be ready before real.txt
            (config.inbox / "real.txt").write_bytes(b"real\n")
            item = await collector.next()
        finally:
            await collector.close()
    assert item.id == "real.txt"


async def test_directory_created_after_start_is_not_handed_out(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    async with make_source(config) as source:
        collector = Collector(source)
        try:
            await collector.wait_until_watching(config.inbox)
            subdir = config.inbox / "subdir"
            subdir.mkdir()
            os.utime(subdir, (time.time() - 600, time.time() - 600))  # would be ready before real.txt
            (config.inbox / "real.txt").write_bytes(b"real\n")
            item = await collector.next()
        finally:
            await collector.close()
    assert item.id == "real.txt"


async def test_file_created_right_after_start_is_picked_up(tmp_path: Path) -> None:
    config = make_config(tmp_path, rescan=3600.0)
    async with make_source(config) as source:
        (config.inbox / "early.txt").write_bytes(b"early\n")  # before the watcher task first runs
        collector = Collector(source)
        try:
            item = await collector.next(wait=5.0)
        finally:
            await collector.close()
    assert item.id == "early.txt"


async def test_periodic_rescan_finds_files_without_the_watcher(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def no_watch(self: InboxWatcher) -> None:
        await asyncio.sleep(3600)

    monkeypatch.setattr(InboxWatcher, "_watch", no_watch)
    config = make_config(tmp_path, rescan=0.1)
    async with make_source(config) as source:
        collector = Collector(source)
        try:
            write_old(config.inbox / "late.txt")
            item = await collector.next()
        finally:
            await collector.close()
    assert item.id == "late.txt"


# -- in flight -------------------------------------------------------------------------------------


async def test_rescans_do_not_hand_out_a_file_twice(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    write_old(config.inbox / "a.txt")
    source = make_source(config)
    await source.open_folders()
    await source.watcher.scan()
    assert await source.watcher.next_ready(1) == ["a.txt"]
    await source.watcher.scan()
    await source.watcher.scan()
    assert await source.watcher.next_ready(1) == []
    assert source.backlog == 0


async def test_file_in_flight_is_not_handed_out_again(tmp_path: Path) -> None:
    config = make_config(tmp_path, rescan=0.05)  # rescans all the time
    write_old(config.inbox / "a.txt", b"first\n", age=900)
    async with make_source(config) as source:
        collector = Collector(source)
        try:
            first = await collector.next()
            assert first.id == "a.txt"
            await asyncio.sleep(0.3)  # several rescans: the claimed file is not seen again
            (config.inbox / "b.txt").write_bytes(b"b\n")
            second = await collector.next()
        finally:
            await collector.close()
    assert second.id == "b.txt"
    assert await first.load() == b"first\n"


async def test_file_written_under_an_in_flight_name_is_a_new_input(tmp_path: Path) -> None:
    # Changed with the work folder: the in-flight file was claimed out of the inbox, so a file written
    # under its name is a new input, not a change to the one in flight (which keeps its own bytes).
    config = make_config(tmp_path, rescan=0.05)
    write_old(config.inbox / "a.txt", b"first\n", age=900)
    async with make_source(config) as source:
        collector = Collector(source)
        try:
            first = await collector.next()
            write_old(config.inbox / "a.txt", b"touched while in flight\n", age=800)
            second = await collector.next()
        finally:
            await collector.close()
        await first.complete({"n": 1})
        await second.complete({"n": 2})
    assert (first.id, second.id) == ("a.txt", "a.txt")
    assert inbox_is_empty(config)
    assert (config.done / "a.txt").read_bytes() == b"first\n"
    assert (config.done / "a.txt~2").read_bytes() == b"touched while in flight\n"
    assert json.loads((config.outbox / "a.txt.summary.json").read_text()) == {"n": 1}
    assert json.loads((config.outbox / "a.txt~2.summary.json").read_text()) == {"n": 2}


def inbox_is_empty(config: FolderSourceConfig) -> bool:
    """The inbox holds nothing (the work folder was removed at stop)."""
    return list(config.inbox.iterdir()) == []


async def test_completed_name_can_arrive_again(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    write_old(config.inbox / "a.txt", b"first\n")
    async with make_source(config) as source:
        collector = Collector(source)
        try:
            first = await collector.next()
            await first.complete({"n": 1})
            await collector.wait_until_watching(config.inbox)
            (config.inbox / "a.txt").write_bytes(b"second\n")
            second = await collector.next()
        finally:
            await collector.close()
    assert second.id == "a.txt"
    assert await second.load() == b"second\n"


# -- acknowledgement -------------------------------------------------------------------------------


async def test_complete_writes_result_and_moves_input_to_done(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    write_old(config.inbox / "doc.txt", b"contract\n")
    async with make_source(config) as source:
        collector = Collector(source)
        try:
            item = await collector.next()
        finally:
            await collector.close()
        await item.complete({"id": "doc.txt", "summary": "Ein Vertrag."})
    result = config.outbox / "doc.txt.summary.json"
    assert json.loads(result.read_text(encoding="utf-8")) == {"id": "doc.txt", "summary": "Ein Vertrag."}
    assert (config.done / "doc.txt").read_bytes() == b"contract\n"
    assert not (config.inbox / "doc.txt").exists()
    assert not (config.failed / "doc.txt.error.json").exists()
    assert tmp_files(tmp_path) == []


async def test_fail_writes_error_record_and_moves_input_to_failed(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    write_old(config.inbox / "bad.txt", b"\x00\x01\x02")
    async with make_source(config) as source:
        collector = Collector(source)
        try:
            item = await collector.next()
        finally:
            await collector.close()
        await item.fail({"id": "bad.txt", "reason": "binary"})
    record = config.failed / "bad.txt.error.json"
    assert json.loads(record.read_text(encoding="utf-8")) == {"id": "bad.txt", "reason": "binary"}
    assert (config.failed / "bad.txt").read_bytes() == b"\x00\x01\x02"
    assert not (config.inbox / "bad.txt").exists()
    assert not (config.outbox / "bad.txt.summary.json").exists()
    assert tmp_files(tmp_path) == []


async def test_item_can_be_completed_after_stop(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    write_old(config.inbox / "doc.txt")
    source = make_source(config)
    await source.start()
    collector = Collector(source)
    try:
        item = await collector.next()
    finally:
        await collector.close()
    await source.stop()
    await item.complete({"ok": True})
    assert (config.done / "doc.txt").exists()
    assert (config.outbox / "doc.txt.summary.json").exists()


# -- start and stop --------------------------------------------------------------------------------


async def test_start_creates_the_folders(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    async with make_source(config):
        assert all(path.is_dir() for path in (config.inbox, config.outbox, config.done, config.failed))


async def test_stop_is_idempotent_and_ends_items(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    source = make_source(config)
    await source.start()
    collector = Collector(source)
    await asyncio.sleep(0)  # let the collector start waiting
    await source.stop()
    await source.stop()
    await asyncio.wait_for(collector.task, WAIT)  # the items() loop ended by itself
    assert source.started is False
    assert source.watcher.task is None
    assert collector.queue.empty()


async def test_stop_before_start_is_harmless(tmp_path: Path) -> None:
    source = make_source(make_config(tmp_path))
    await source.stop()
    assert source.started is False


async def test_start_twice_is_harmless(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    write_old(config.inbox / "a.txt")
    source = make_source(config)
    await source.start()
    watcher = source.watcher.task
    await source.start()
    try:
        assert source.watcher.task is watcher
        assert source.backlog == 1
        collector = Collector(source)
        try:
            first = await collector.next()
            write_old(config.inbox / "b.txt", age=1)
            await source.watcher.scan()
            second = await collector.next()
        finally:
            await collector.close()
    finally:
        await source.stop()
    assert [first.id, second.id] == ["a.txt", "b.txt"]


async def test_source_can_be_restarted_after_stop(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    source = make_source(config)
    await source.start()
    await source.stop()
    write_old(config.inbox / "after.txt")
    await source.start()
    try:
        collector = Collector(source)
        try:
            item = await collector.next()
        finally:
            await collector.close()
    finally:
        await source.stop()
    assert item.id == "after.txt"
