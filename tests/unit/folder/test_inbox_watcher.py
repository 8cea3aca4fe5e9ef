"""Unit tests for daemon.folder.inbox.InboxWatcher: discovery and settling on a fake clock (no sleeps)."""

from __future__ import annotations

import os
from pathlib import Path

from daemon.config import FolderSourceConfig
from daemon.folder.inbox import InboxWatcher
from daemon.fs.blocking_io import file_io
from daemon.fs.dirs import Dir
from tests.doubles.clock import FakeClock

SETTLE = 1.0
RESCAN = 60.0


def make_watcher(tmp_path: Path, clock: FakeClock) -> InboxWatcher:
    config = FolderSourceConfig(
        inbox=tmp_path / "inbox",
        outbox=tmp_path / "outbox",
        done=tmp_path / "done",
        failed=tmp_path / "failed",
        settle_seconds=SETTLE,
        rescan_seconds=RESCAN,
    )
    inbox = Dir(config.inbox, key="sources.folder.inbox")
    inbox.open()
    return InboxWatcher(config, inbox, file_io(), clock=clock, wall_clock=clock.time)


def write_at(path: Path, data: bytes, clock: FakeClock, *, append: bool = False) -> None:
    """Write ``path`` with its mtime at the fake clock's wall time."""
    with path.open("ab" if append else "wb") as stream:
        stream.write(data)
    stamp = int(clock.time() * 1e9)
    os.utime(path, ns=(stamp, stamp))


async def test_a_file_settles_settle_seconds_after_its_last_change(tmp_path: Path) -> None:
    clock = FakeClock(1000.0)
    watcher = make_watcher(tmp_path, clock)
    path = tmp_path / "inbox" / "grow.txt"
    write_at(path, b"part one\n", clock)
    await watcher.scan()
    assert (watcher.settling, watcher.ready) == (1, 0)
    assert await watcher.next_ready(10) == []
    clock.advance(0.6)
    write_at(path, b"part two\n", clock, append=True)  # a change restarts the wait
    assert await watcher.next_ready(10) == []
    clock.advance(SETTLE - 0.1)
    assert await watcher.next_ready(10) == []
    clock.advance(0.2)
    assert await watcher.next_ready(10) == ["grow.txt"]
    assert watcher.pending == 0


async def test_files_old_at_first_look_are_ready_at_once_oldest_first(tmp_path: Path) -> None:
    clock = FakeClock(1000.0)
    watcher = make_watcher(tmp_path, clock)
    for name in ("b.txt", "a.txt", "c.txt"):
        write_at(tmp_path / "inbox" / name, b"text\n", clock)
        clock.advance(1.0)
    clock.advance(SETTLE)
    await watcher.scan()
    assert await watcher.next_ready(2) == ["b.txt", "a.txt"]
    assert await watcher.next_ready(2) == ["c.txt"]


async def test_names_that_are_not_documents_are_never_watched(tmp_path: Path) -> None:
    clock = FakeClock(1000.0)
    watcher = make_watcher(tmp_path, clock)
    for name in (".hidden.txt", "doc.txt.tmp", "doc.txt.part"):
        write_at(tmp_path / "inbox" / name, b"text\n", clock)
    (tmp_path / "inbox" / "folder.txt").mkdir()
    await watcher.scan()
    watcher.add("doc.txt.swp")
    assert watcher.pending == 0


async def test_a_name_handed_out_is_not_found_again_until_forgotten(tmp_path: Path) -> None:
    clock = FakeClock(1000.0)
    watcher = make_watcher(tmp_path, clock)
    write_at(tmp_path / "inbox" / "a.txt", b"text\n", clock)
    clock.advance(SETTLE)
    await watcher.scan()
    assert await watcher.next_ready(1) == ["a.txt"]
    await watcher.scan()
    watcher.add("a.txt")
    assert watcher.pending == 0  # still the same input, being claimed
    watcher.forget(["a.txt"])  # claimed: a file of the name now is a new input
    watcher.add("a.txt")
    assert watcher.pending == 1


async def test_a_name_that_could_not_be_claimed_waits_for_a_rescan_period(tmp_path: Path) -> None:
    clock = FakeClock(1000.0)
    watcher = make_watcher(tmp_path, clock)
    write_at(tmp_path / "inbox" / "stuck.txt", b"text\n", clock)
    clock.advance(SETTLE)
    await watcher.scan()
    assert await watcher.next_ready(1) == ["stuck.txt"]
    watcher.forget(["stuck.txt"])
    watcher.retry_later("stuck.txt")
    await watcher.scan()
    assert watcher.pending == 0
    clock.advance(RESCAN - 1.0)
    watcher.add("stuck.txt")
    assert watcher.pending == 0
    clock.advance(1.0)
    assert await watcher.next_ready(1) == ["stuck.txt"]  # the rescan, due now, found it


async def test_a_file_gone_while_settling_is_forgotten(tmp_path: Path) -> None:
    clock = FakeClock(1000.0)
    watcher = make_watcher(tmp_path, clock)
    path = tmp_path / "inbox" / "brief.txt"
    write_at(path, b"fresh\n", clock)
    await watcher.scan()
    path.unlink()
    assert await watcher.next_ready(1) == []
    assert watcher.pending == 0
    write_at(path, b"again\n", clock)
    await watcher.scan()
    assert watcher.pending == 1


def test_check_in_is_short_while_files_settle(tmp_path: Path) -> None:
    clock = FakeClock(1000.0)
    watcher = make_watcher(tmp_path, clock)
    assert watcher.check_in() == RESCAN
    watcher.add("doc.txt")
    assert watcher.check_in() == SETTLE / 4


async def test_start_and_stop_are_idempotent(tmp_path: Path) -> None:
    clock = FakeClock(1000.0)
    watcher = make_watcher(tmp_path, clock)
    await watcher.stop()
    await watcher.start()
    task = watcher.task
    await watcher.start()
    assert watcher.task is task
    await watcher.stop()
    await watcher.stop()
    assert watcher.task is None
