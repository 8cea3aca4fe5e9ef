"""The embedded store (daemon.cache.sqlite.SqliteStore) on real SQLite files: its bound, its order of
eviction, restarts, and every fault degrading to a miss (never an exception past the store's error)."""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from structlog.typing import EventDict

from daemon.cache.sqlite import APPLICATION_ID, LOW_WATER, SqliteStore
from daemon.cache.store import CacheStoreError

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
