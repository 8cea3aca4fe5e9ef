"""The embedded store (daemon.cache.sqlite.SqliteStore) on real SQLite files: its bound, its order of
eviction, restarts, and every fault degrading to a miss (never an exception past the store's error)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import multiprocessing
import os
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import pytest
from structlog.typing import EventDict

from daemon.cache.sqlite import APPLICATION_ID, LOW_WATER, SqliteStore
from daemon.cache.store import CacheStoreError, Removed

MIB = 1 << 20


class Clock:
    """Wall-clock seconds the test sets."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def store_at(path: Path, max_bytes: int = 64 * MIB, **options: Any) -> SqliteStore:
    return SqliteStore(path, max_bytes=max_bytes, timeout=options.pop("timeout", 5.0), **options)


def value(index: int, size: int = 1000) -> bytes:
    return (b"{" + f"{index:08d}".encode() * (size // 8))[:size]


def warnings(logs: list[EventDict]) -> list[str]:
    return [str(event["event"]) for event in logs if event["log_level"] == "warning"]


async def test_values_read_back_in_order_and_misses_are_none(tmp_path: Path) -> None:
    store = store_at(tmp_path / "cache.sqlite3")
    await store.start()
    try:
        await store.put_many([("k1", "part", b"{one"), ("k2", "combine", b"{two")])
        assert await store.get_many(["k2", "nope", "k1", "k2"]) == [b"{two", None, b"{one", b"{two"]
        await store.put_many([("k1", "part", b"{one again")])
        assert await store.get_many(["k1"]) == [b"{one again"]
        assert await store.get_many([]) == []
        assert (
            await store.get_many([f"k{i}" for i in range(1200)])
            == [None, b"{one again", b"{two"] + [None] * 1197
        )
    finally:
        await store.stop()


async def test_a_cache_path_that_is_a_link_to_a_new_file_makes_it_private(tmp_path: Path) -> None:
    # An operator's link to where the cache should live: its target is made, readable by the owner only.
    old = os.umask(0o022)  # the usual shell umask, whatever the test process had
    try:
        target = tmp_path / "real" / "cache.sqlite3"
        target.parent.mkdir()
        link = tmp_path / "cache.sqlite3"
        link.symlink_to(target)
        store = store_at(link)
        await store.start()
        try:
            await store.put_many([("k", "part", b"{kept")])
        finally:
            await store.stop()
        assert link.is_symlink()
        assert (target.stat().st_mode & 0o777) == 0o600
    finally:
        os.umask(old)


async def test_entries_survive_a_restart_and_the_file_is_private(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "folder" / "cache.sqlite3"
    store = store_at(path)
    await store.start()
    await store.put_many([("k", "part", b"{kept")])
    await store.stop()
    await store.stop()  # idempotent
    assert (path.stat().st_mode & 0o777) == 0o600
    again = store_at(path)
    await again.start()
    await again.start()
    try:
        assert await again.get_many(["k"]) == [b"{kept"]
        db = sqlite3.connect(path)
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert db.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
        db.close()
    finally:
        await again.stop()


async def test_the_bound_holds_under_a_flood_of_unique_keys(tmp_path: Path) -> None:
    path = tmp_path / "cache.sqlite3"
    store = store_at(path, max_bytes=2 * MIB)
    await store.start()
    evicted = 0
    try:
        for batch in range(200):  # 10,000 entries of about 1.2 KB: 6 times the bound
            outcome = await store.put_many(
                [(f"v1:part:{batch:04d}-{i:03d}", "part", value(batch * 50 + i, 1200)) for i in range(50)]
            )
            evicted += outcome.evicted.get("part", 0)
            used = await store.maintain()
            assert used is not None
            assert used <= 2 * MIB
        file_bytes = path.stat().st_size
        assert file_bytes <= 2 * MIB + 256 * 1024
        assert evicted > 7000
        assert used is not None
        assert used >= LOW_WATER * 2 * MIB * 0.8  # evicted down to the low water mark, not far below
        # The newest entries are there; the oldest are gone.
        newest = await store.get_many([f"v1:part:0199-{i:03d}" for i in range(50)])
        assert all(found is not None for found in newest)
        assert await store.get_many(["v1:part:0000-000"]) == [None]
    finally:
        await store.stop()


async def test_least_recently_used_entries_go_first(tmp_path: Path) -> None:
    clock = Clock()
    store = store_at(tmp_path / "cache.sqlite3", max_bytes=1 * MIB, clock=clock, touch_seconds=60)
    await store.start()
    try:
        old = [f"old-{i:03d}" for i in range(100)]
        await store.put_many([(key, "part", value(i, 4000)) for i, key in enumerate(old)])
        clock.now += 3600
        assert all(await store.get_many(old[:10]))  # read an hour later: noted, written with the next write
        clock.now += 3600
        new: list[str] = []
        while True:
            batch = [f"new-{len(new) + i:04d}" for i in range(10)]
            outcome = await store.put_many([(key, "part", value(i, 4000)) for i, key in enumerate(batch)])
            new += batch
            clock.now += 1
            if outcome.evicted:
                break
        assert all(found is not None for found in await store.get_many(old[:10])), "read recently: kept"
        assert await store.get_many(old[10:20]) == [None] * 10, "never read: evicted first"
        assert all(found is not None for found in await store.get_many(new))
    finally:
        await store.stop()


async def test_a_hit_within_touch_seconds_writes_nothing(tmp_path: Path) -> None:
    clock = Clock()
    path = tmp_path / "cache.sqlite3"
    store = store_at(path, clock=clock, touch_seconds=60)
    await store.start()
    try:
        await store.put_many([("k", "part", b"{v")])
        clock.now += 30
        await store.get_many(["k"])
        await store.maintain()
        db = sqlite3.connect(path)
        assert db.execute("SELECT used FROM entries WHERE key = 'k'").fetchone()[0] == 1_000_000
        clock.now += 100
        await store.get_many(["k"])
        await store.maintain()
        assert db.execute("SELECT used FROM entries WHERE key = 'k'").fetchone()[0] == 1_000_130
        db.close()
    finally:
        await store.stop()


async def test_a_file_that_is_not_a_database_is_moved_aside_and_rebuilt(
    tmp_path: Path, logs: list[EventDict]
) -> None:
    path = tmp_path / "cache.sqlite3"
    path.write_bytes(b"this was never a database, but someone's file\n" * 100)
    store = store_at(path)
    await store.start()
    try:
        await store.put_many([("k", "part", b"{v")])
        assert await store.get_many(["k"]) == [b"{v"]
    finally:
        await store.stop()
    assert "the store's file is unusable; starting an empty one" in " ".join(warnings(logs))
    assert (tmp_path / "cache.sqlite3.unusable").read_bytes().startswith(b"this was never")


async def test_a_damaged_store_is_rebuilt_with_a_warning(tmp_path: Path, logs: list[EventDict]) -> None:
    path = tmp_path / "cache.sqlite3"
    store = store_at(path)
    await store.start()
    await store.put_many([(f"k{i}", "part", value(i, 2000)) for i in range(500)])
    await store.stop()
    size = path.stat().st_size
    with path.open("r+b") as file:  # pages of the table and its index overwritten
        for offset in range(8192, size, 16384):
            file.seek(offset)
            file.write(os.urandom(4096))
    damaged = store_at(path)
    await damaged.start()
    try:
        outcomes: list[str] = []
        for i in range(0, 500, 50):
            try:
                await damaged.get_many([f"k{j}" for j in range(i, i + 50)])
                outcomes.append("read")
            except CacheStoreError as exc:
                outcomes.append(str(exc))
        assert any("damaged and is rebuilt" in outcome for outcome in outcomes)
        await damaged.put_many([("fresh", "part", b"{new")])
        assert await damaged.get_many(["fresh", "k1"]) == [b"{new", None]
        check = sqlite3.connect(path)
        assert check.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        check.close()
    finally:
        await damaged.stop()
    assert any("unusable" in warning for warning in warnings(logs))
    assert not (tmp_path / "cache.sqlite3.unusable").exists(), "docsumd's own damaged file is deleted"


async def test_another_programs_database_is_left_alone(tmp_path: Path, logs: list[EventDict]) -> None:
    path = tmp_path / "app.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE accounts (id INTEGER, name TEXT)")
    db.execute("INSERT INTO accounts VALUES (1, 'alice')")
    db.commit()
    db.close()
    store = store_at(path)
    await store.start()
    try:
        with pytest.raises(CacheStoreError, match="not docsumd's summary cache"):
            await store.put_many([("k", "part", b"{v")])
    finally:
        await store.stop()
    db = sqlite3.connect(path)
    assert db.execute("SELECT name FROM accounts").fetchall() == [("alice",)]
    assert db.execute("SELECT count(*) FROM sqlite_schema WHERE name = 'entries'").fetchone()[0] == 0
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "delete", "not even its journal mode changed"
    db.close()


async def test_a_store_of_another_layout_version_is_emptied(tmp_path: Path) -> None:
    path = tmp_path / "cache.sqlite3"
    store = store_at(path)
    await store.start()
    await store.put_many([("k", "part", b"{v")])
    await store.stop()
    db = sqlite3.connect(path)
    db.execute("PRAGMA user_version = 99")
    db.close()
    again = store_at(path)
    await again.start()
    try:
        assert await again.get_many(["k"]) == [None]
        await again.put_many([("k", "part", b"{w")])
        assert await again.get_many(["k"]) == [b"{w"]
    finally:
        await again.stop()


async def test_the_file_deleted_while_running_is_reopened(tmp_path: Path, logs: list[EventDict]) -> None:
    path = tmp_path / "cache" / "cache.sqlite3"
    store = store_at(path)
    await store.start()
    try:
        await store.put_many([("k", "part", b"{v")])
        for name in ("cache.sqlite3", "cache.sqlite3-wal", "cache.sqlite3-shm"):
            with contextlib.suppress(FileNotFoundError):
                (path.parent / name).unlink()
        path.parent.rmdir()
        assert await store.get_many(["k"]) == [None]
        await store.put_many([("k2", "part", b"{v2")])
        assert await store.get_many(["k2"]) == [b"{v2"]
        assert path.exists()
    finally:
        await store.stop()
    assert any("deleted or replaced" in warning for warning in warnings(logs))


@contextlib.contextmanager
def immutable(path: Path) -> Iterator[None]:
    """``path`` that its owner cannot change: chmod a-w, or for root (which chmod does not stop)
    the immutable attribute."""
    if os.geteuid() != 0:
        mode = path.stat().st_mode
        path.chmod(mode & 0o555)
        try:
            yield
        finally:
            path.chmod(mode)
        return
    done = subprocess.run(["chattr", "+i", str(path)], capture_output=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot make a read-only file for root here (chattr: {done.stderr.decode().strip()})")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


async def test_a_read_only_folder_gives_misses_and_recovers(tmp_path: Path) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    store = store_at(folder / "cache.sqlite3")
    with immutable(folder):
        await store.start()  # logged, not raised
        with pytest.raises(CacheStoreError):
            await store.get_many(["k"])
        with pytest.raises(CacheStoreError):
            await store.put_many([("k", "part", b"{v")])
    await store.put_many([("k", "part", b"{v")])  # writable again: the next call opens it
    assert await store.get_many(["k"]) == [b"{v"]
    await store.stop()


async def test_a_read_only_file_gives_errors_not_crashes(tmp_path: Path) -> None:
    path = tmp_path / "cache.sqlite3"
    store = store_at(path)
    await store.start()
    await store.put_many([("k", "part", b"{v")])
    await store.stop()
    for suffix in ("-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{path}{suffix}")
    again = store_at(path)
    with immutable(path):
        await again.start()
        with pytest.raises(CacheStoreError):
            await again.put_many([("k2", "part", b"{v2")])
        with contextlib.suppress(CacheStoreError):  # a read may work or fail: never anything else
            assert await again.get_many(["k"]) in ([b"{v"], [None])
    await again.stop()


async def test_a_write_held_up_by_another_writer_times_out(tmp_path: Path) -> None:
    path = tmp_path / "cache.sqlite3"
    store = store_at(path, timeout=0.5)
    await store.start()
    await store.put_many([("k", "part", b"{v")])
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")  # another daemon's write that does not end
    try:
        started = time.monotonic()
        with pytest.raises(CacheStoreError):
            await store.put_many([("k2", "part", b"{v2")])
        assert time.monotonic() - started < 5.0  # the 0.5 s timeout, with room for a loaded machine
        assert await store.get_many(["k"]) == [b"{v"], "readers do not wait for a writer (WAL)"
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
        await store.stop()


def _hammer(path: str, worker: int, rounds: int) -> tuple[int, float, float]:
    """In another process: once both workers are ready, write the same keys as the other worker and
    keys of its own; (errors, start, end)."""

    async def run() -> tuple[int, float, float]:
        store = store_at(Path(path), max_bytes=4 * MIB, timeout=10.0)
        await store.start()
        await asyncio.to_thread(wait_for_go)
        started, errors = time.time(), 0
        for round_ in range(rounds):
            items = [(f"shared-{i}", "part", value(worker * 1000 + i, 800)) for i in range(20)]
            items += [(f"own-{worker}-{round_}-{i}", "combine", value(i, 800)) for i in range(5)]
            try:
                await store.put_many(items)
                await store.get_many([f"shared-{i}" for i in range(20)])
            except CacheStoreError:
                errors += 1
        ended = time.time()
        await store.stop()
        return errors, started, ended

    def wait_for_go() -> None:
        folder = Path(path).parent
        (folder / f"ready-{worker}").touch()
        while not (folder / "go").exists():
            time.sleep(0.001)

    return asyncio.run(run())


def test_two_processes_writing_the_same_keys_are_harmless(tmp_path: Path) -> None:
    path = tmp_path / "cache.sqlite3"
    context = multiprocessing.get_context("spawn")
    with context.Pool(2) as pool:
        pending = pool.starmap_async(_hammer, [(str(path), 1, 300), (str(path), 2, 300)])
        deadline = time.monotonic() + 120
        while not all((tmp_path / f"ready-{worker}").exists() for worker in (1, 2)):
            assert time.monotonic() < deadline, "the workers did not start"
            time.sleep(0.01)
        (tmp_path / "go").touch()
        (errors_1, start_1, end_1), (errors_2, start_2, end_2) = pending.get(timeout=120)
    assert (errors_1, errors_2) == (0, 0)
    assert max(start_1, start_2) < min(end_1, end_2), "the two wrote at the same time"
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    shared = dict(db.execute("SELECT key, value FROM entries WHERE key LIKE 'shared-%'").fetchall())
    assert len(shared) == 20
    for i in range(20):
        assert shared[f"shared-{i}"] in (value(1000 + i, 800), value(2000 + i, 800))
    assert db.execute("SELECT count(*) FROM entries WHERE key LIKE 'own-%'").fetchone()[0] == 2 * 300 * 5
    db.close()


# -- what the `docsumd cache` commands use: stats, delete_all, existing_only --------------------------


def files_bytes(path: Path) -> int:
    return sum(
        os.stat(f"{path}{suffix}").st_size
        for suffix in ("", "-wal", "-shm")
        if os.path.exists(f"{path}{suffix}")
    )


def integrity(path: Path) -> str:
    db = sqlite3.connect(path)
    try:
        return str(db.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        db.close()


async def test_stats_count_entries_by_kind_their_pages_and_their_last_use(tmp_path: Path) -> None:
    clock = Clock()
    path = tmp_path / "cache.sqlite3"
    store = store_at(path, clock=clock)
    await store.start()
    try:
        empty = await store.stats()
        assert (empty.entries, dict(empty.kinds), empty.first_used, empty.last_used) == (0, {}, None, None)
        await store.put_many([(f"p{i}", "part", value(i)) for i in range(30)] + [("c", "combine", value(99))])
        clock.now += 100
        await store.put_many([("d", "document", value(100))])
        stats = await store.stats()
        assert stats.entries == 32
        assert dict(stats.kinds) == {"combine": 1, "document": 1, "part": 30}
        assert (stats.first_used, stats.last_used) == (1_000_000.0, 1_000_100.0)
        assert stats.bytes == await store.maintain(), "the pages in use, as the bound counts them"
        assert stats.bytes > 32 * 1000
        assert stats.file_bytes == files_bytes(path)
    finally:
        await store.stop()


async def test_delete_all_empties_the_store_and_says_what_went(tmp_path: Path) -> None:
    path = tmp_path / "cache.sqlite3"
    store = store_at(path)
    await store.start()
    try:
        await store.put_many([(f"k{i}", "part", value(i, 2000)) for i in range(200)])
        removed = await store.delete_all()
        assert removed.entries == 200
        assert removed.bytes >= 200 * 2000, "the pages freed"
        assert (await store.stats()).entries == 0
        assert await store.get_many(["k0", "k199"]) == [None, None]
        await store.put_many([("again", "part", b"{v")])
        assert await store.get_many(["again"]) == [b"{v"]
        assert (await store.delete_all()).entries == 1
        assert await store.delete_all() == Removed(entries=0, bytes=0)
    finally:
        await store.stop()
    assert integrity(path) == "ok"


async def test_delete_all_goes_a_batch_at_a_time_and_leaves_what_is_written_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("daemon.cache.sqlite.CLEAR_BATCH", 10)
    path = tmp_path / "cache.sqlite3"
    store = store_at(path)
    await store.start()
    await store.put_many([(f"k{i:02d}", "part", value(i)) for i in range(35)])
    # Another daemon's connection, used on the store's thread between two batches.
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    batches: list[int] = []
    delete_batch = store._delete_batch

    def between_batches(db: sqlite3.Connection, last: int) -> Removed:
        batch = delete_batch(db, last)
        batches.append(batch.entries)
        if len(batches) == 1:  # another daemon writes a new entry and rewrites an old one
            other.execute("INSERT INTO entries VALUES ('new', 'part', x'7b', 0)")
            other.execute("UPDATE entries SET value = x'7b7b' WHERE key = 'k30'")
        return batch

    monkeypatch.setattr(store, "_delete_batch", between_batches)
    try:
        removed = await store.delete_all()
        assert batches == [10, 10, 10, 5, 0]
        assert removed.entries == 35
        assert await store.get_many(["new", "k30", "k00"]) == [b"{", None, None]
    finally:
        other.close()
        await store.stop()


async def test_a_command_store_makes_no_file_and_no_folder(tmp_path: Path) -> None:
    path = tmp_path / "not" / "yet" / "cache.sqlite3"
    store = store_at(path, existing_only=True)
    await store.start()
    try:
        with pytest.raises(CacheStoreError, match="unable to open"):
            await store.stats()
        with pytest.raises(CacheStoreError):
            await store.delete_all()
    finally:
        await store.stop()
    assert not (tmp_path / "not").exists()


def damage(path: Path) -> None:
    """Pages of the table and its index overwritten."""
    size = path.stat().st_size
    with path.open("r+b") as file:
        for offset in range(8192, size, 16384):
            file.seek(offset)
            file.write(os.urandom(4096))


async def made_by_daemon(path: Path, entries: int = 500) -> None:
    store = store_at(path)
    await store.start()
    await store.put_many([(f"k{i}", "part", value(i, 2000)) for i in range(entries)])
    await store.stop()


@pytest.mark.parametrize("kind", ["not a database", "damaged", "another program's", "another layout"])
async def test_a_command_store_leaves_a_file_it_cannot_use_as_it_is(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "cache.sqlite3"
    if kind == "not a database":
        path.write_bytes(b"someone's notes\n" * 1000)
    elif kind == "another program's":
        db = sqlite3.connect(path)
        db.execute("CREATE TABLE accounts (id INTEGER)")
        db.commit()
        db.close()
    else:
        await made_by_daemon(path)
        if kind == "damaged":
            damage(path)
        else:
            db = sqlite3.connect(path)
            db.execute("PRAGMA user_version = 99")
            db.close()
    before = path.read_bytes()
    store = store_at(path, existing_only=True)
    await store.start()
    try:
        with pytest.raises(CacheStoreError, match="left as it is"):
            await store.stats()  # it reads every page of the table
        with pytest.raises(CacheStoreError, match="left as it is"):
            await store.delete_all()
    finally:
        await store.stop()
    assert path.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["cache.sqlite3"], "nothing moved aside or made beside it"


async def test_a_command_store_reads_and_empties_what_a_daemon_made(tmp_path: Path) -> None:
    path = tmp_path / "cache.sqlite3"
    await made_by_daemon(path, entries=50)
    store = store_at(path, existing_only=True)
    await store.start()
    try:
        assert (await store.stats()).entries == 50
        assert (await store.delete_all()).entries == 50
    finally:
        await store.stop()
    assert integrity(path) == "ok"


async def test_a_clear_waits_for_a_daemons_write_and_not_for_its_reads(tmp_path: Path) -> None:
    path = tmp_path / "cache.sqlite3"
    await made_by_daemon(path, entries=50)
    command = store_at(path, existing_only=True, timeout=0.5)
    await command.start()
    try:
        writer = sqlite3.connect(path, isolation_level=None)
        writer.execute("BEGIN IMMEDIATE")  # a daemon's write that does not end
        try:
            started = time.monotonic()
            with pytest.raises(CacheStoreError):
                await command.delete_all()
            assert time.monotonic() - started < 5.0  # the 0.5 s timeout, with room for a loaded machine
        finally:
            writer.execute("ROLLBACK")
            writer.close()
        assert (await command.stats()).entries == 50, "nothing deleted"
        reader = sqlite3.connect(path, isolation_level=None)
        reader.execute("BEGIN")  # a daemon's read in progress
        assert reader.execute("SELECT count(*) FROM entries").fetchone()[0] == 50
        try:
            assert (await command.delete_all()).entries == 50
            assert reader.execute("SELECT count(*) FROM entries").fetchone()[0] == 50, "its snapshot"
        finally:
            reader.execute("COMMIT")
        assert reader.execute("SELECT count(*) FROM entries").fetchone()[0] == 0
        reader.close()
    finally:
        await command.stop()
    assert integrity(path) == "ok"


def _daemon_beside_a_clear(path: str, pipe: Connection) -> None:
    """In another process, a daemon's store: fills it, reads it (access times noted, to be written
    later), then writes and reads until told to stop while the test clears the file; sends back
    (errors, rounds, what the first entries read after, what a last write reads back)."""
    ticks = itertools.count()

    def clock() -> float:  # ten seconds a call: every hit is noted as a touch to write later
        return 1_000_000.0 + 10 * next(ticks)

    async def run() -> tuple[int, int, list[bytes | None], list[bytes | None]]:
        store = store_at(Path(path), timeout=10.0, touch_seconds=1, clock=clock)
        await store.start()
        await store.put_many([(f"old-{i}", "part", value(i)) for i in range(100)])
        await store.get_many([f"old-{i}" for i in range(100)])
        pipe.send("filled")
        errors = rounds = 0
        while not pipe.poll():
            try:
                await store.put_many([(f"new-{rounds}-{i}", "combine", value(i, 800)) for i in range(10)])
                await store.get_many([f"new-{rounds}-{i}" for i in range(10)] + ["old-1"])
            except CacheStoreError:
                errors += 1
            rounds += 1
            if rounds == 1:
                pipe.send("writing")
        pipe.recv()
        after = await store.get_many(["old-0", "old-99"])
        await store.put_many([("last", "document", b"{last")])
        last = await store.get_many(["last"])
        await store.stop()
        return errors, rounds, after, last

    pipe.send(asyncio.run(run()))


def test_a_clear_beside_a_running_daemon_leaves_a_sound_store(tmp_path: Path) -> None:
    path = tmp_path / "cache.sqlite3"
    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe()
    daemon = context.Process(target=_daemon_beside_a_clear, args=(str(path), theirs))
    daemon.start()
    try:
        for step in ("filled", "writing"):
            assert ours.poll(120), f"the daemon's store is not {step}"
            assert ours.recv() == step

        async def clear_twice() -> list[Removed]:
            command = store_at(path, existing_only=True, timeout=10.0)
            await command.start()
            try:
                first = await command.delete_all()
                await asyncio.sleep(0.2)  # the daemon writes on meanwhile
                return [first, await command.delete_all()]
            finally:
                await command.stop()

        removed = asyncio.run(clear_twice())
        ours.send("stop")
        assert ours.poll(120)
        errors, rounds, after, last = ours.recv()
    finally:
        daemon.join(timeout=60)
        if daemon.is_alive():
            daemon.kill()
    assert daemon.exitcode == 0
    assert errors == 0, "the daemon's calls all answered"
    assert rounds >= 1
    assert removed[0].entries >= 100
    assert after == [None, None], "the daemon finds the store emptied"
    assert last == [b"{last"], "and writes and reads it on"
    assert integrity(path) == "ok"
