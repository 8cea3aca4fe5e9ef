"""What the ``docsumd cache`` commands do (daemon.cache.admin) on real SQLite files and a real
redis-server: what a store holds, emptying it, and the paths and URLs they refuse or never show."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import redis as redis_sync
from pydantic import SecretStr, ValidationError

from daemon.cache import admin
from daemon.cache.admin import CacheReport
from daemon.cache.sqlite import SqliteStore
from daemon.cache.store import CacheStoreError, Removed
from daemon.config import CacheConfig, RedisCacheConfig
from daemon.errors import ConfigError
from tests.redis_server import RedisServer

PASSWORD = "s3cr/et:p@ss"


async def filled(path: Path, entries: int = 30) -> None:
    """A store as a daemon leaves it: ``entries`` entries of each kind."""
    store = SqliteStore(path, max_bytes=64 << 20, timeout=5.0)
    await store.start()
    try:
        for kind in ("part", "combine", "document"):
            await store.put_many([(f"{kind}-{i}", kind, b"{" + b"x" * 900) for i in range(entries)])
    finally:
        await store.stop()


def entries_in(path: Path) -> int:
    db = sqlite3.connect(path)
    try:
        return int(db.execute("SELECT count(*) FROM entries").fetchone()[0])
    finally:
        db.close()


def never_asked(report: CacheReport) -> bool:
    raise AssertionError(f"asked to confirm: {report}")


async def test_info_and_clear_make_no_file_where_there_is_none(tmp_path: Path) -> None:
    config = CacheConfig(path=tmp_path / "not" / "yet" / "summaries.sqlite3")
    report = await admin.inspect(config)
    assert report.stats is None
    assert "no cache file yet" in report.lines()[-1]
    assert report.as_json()["exists"] is False
    assert await admin.clear(config, never_asked) == (report, None)
    assert not (tmp_path / "not").exists()


async def test_a_link_to_nothing_and_an_empty_file_are_no_cache_yet(tmp_path: Path) -> None:
    link = tmp_path / "link.sqlite3"
    link.symlink_to(tmp_path / "elsewhere" / "target.sqlite3")
    assert (await admin.inspect(CacheConfig(path=link))).stats is None
    assert not (tmp_path / "elsewhere").exists()
    assert link.is_symlink()
    empty = tmp_path / "empty.sqlite3"
    empty.touch()  # a daemon that made its file and is writing its table now
    assert (await admin.inspect(CacheConfig(path=empty))).stats is None
    assert empty.stat().st_size == 0


@pytest.mark.parametrize("kind", ["FIFO", "folder", "device", "link to a FIFO"])
async def test_a_path_that_is_not_a_regular_file_is_refused_unopened(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "summaries.sqlite3"
    if kind == "FIFO":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    elif kind == "device":
        path = Path("/dev/null")
    else:
        os.mkfifo(tmp_path / "fifo")
        path.symlink_to(tmp_path / "fifo")
    config = CacheConfig(path=path)
    started = time.monotonic()
    with pytest.raises(ConfigError, match="not a cache file: left alone"):
        await admin.inspect(config)
    with pytest.raises(ConfigError, match="not a cache file: left alone"):
        await admin.clear(config, never_asked)
    assert time.monotonic() - started < 5.0, "never blocks on a FIFO"
    made = {"device": [], "link to a FIFO": ["fifo", "summaries.sqlite3"]}.get(kind, ["summaries.sqlite3"])
    assert sorted(os.listdir(tmp_path)) == made, "nothing made beside it"


async def test_info_counts_what_a_daemon_stored(tmp_path: Path) -> None:
    path = tmp_path / "summaries.sqlite3"
    before = time.time()
    await filled(path)
    config = CacheConfig(path=path, namespace="team-a")
    report = await admin.inspect(config)
    stats = report.stats
    assert stats is not None
    assert stats.entries == 90
    assert dict(stats.kinds) == {"combine": 30, "document": 30, "part": 30}
    assert stats.first_used is not None
    assert int(before) <= stats.first_used <= time.time()
    shown = report.as_json()
    assert shown["store"] == {
        "backend": "sqlite",
        "namespace": "team-a",
        "path": str(path),
        "link_target": None,
        "default_path": False,
    }
    assert shown["bounds"] == {"max_bytes": 1 << 30, "max_value_bytes": 1 << 20}
    assert shown["contents"]["entries"] == 90
    assert shown["contents"]["first_used"].endswith("+00:00")
    text = "\n".join(report.lines())
    assert "entries: 90 (combine 30, document 30, part 30)" in text
    assert "namespace: 'team-a' (the file is shared by every namespace)" in text
    assert entries_in(path) == 90, "looking changes nothing"


async def test_a_cache_turned_off_is_said_so_and_its_store_still_shown(tmp_path: Path) -> None:
    path = tmp_path / "summaries.sqlite3"
    await filled(path, entries=2)
    report = await admin.inspect(CacheConfig(enabled=False, path=path))
    assert report.lines()[0] == "summary cache: off in this config (enabled = false)"
    assert report.as_json()["enabled"] is False
    assert report.stats is not None
    assert report.stats.entries == 6


async def test_clear_asks_with_what_the_store_holds_and_a_no_keeps_it(tmp_path: Path) -> None:
    path = tmp_path / "summaries.sqlite3"
    await filled(path, entries=5)
    asked: list[int] = []

    def no(report: CacheReport) -> bool:
        assert report.stats is not None
        asked.append(report.stats.entries)
        return False

    _, removed = await admin.clear(CacheConfig(path=path), no)
    assert (asked, removed) == ([15], None)
    assert entries_in(path) == 15
    _, removed = await admin.clear(CacheConfig(path=path), lambda report: True)
    assert removed is not None
    assert removed.entries == 15
    assert removed.bytes > 15 * 900
    assert entries_in(path) == 0
    # An empty store is not asked about (its clear still runs: a daemon may have written meanwhile).
    assert (await admin.clear(CacheConfig(path=path), never_asked))[1] == Removed(entries=0, bytes=0)


async def test_clear_through_a_link_empties_the_file_it_points_to(tmp_path: Path) -> None:
    target = tmp_path / "fast-disk" / "summaries.sqlite3"
    await filled(target, entries=4)
    link = tmp_path / "summaries.sqlite3"
    link.symlink_to(target)
    report = await admin.inspect(CacheConfig(path=link))
    assert report.location.link_target == str(target)
    assert "(a link to " in report.lines()[1]
    _, removed = await admin.clear(CacheConfig(path=link), lambda report: True)
    assert removed is not None
    assert removed.entries == 12
    assert entries_in(target) == 0
    assert link.is_symlink()
    assert stat.S_IMODE(target.stat().st_mode) == 0o600


async def test_a_clear_that_a_daemons_write_holds_up_fails_within_its_time_and_deletes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(admin, "COMMAND_TIMEOUT_SECONDS", 0.5)
    path = tmp_path / "summaries.sqlite3"
    await filled(path, entries=3)
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    try:
        started = time.monotonic()
        with pytest.raises(CacheStoreError, match="locked"):
            await admin.clear(CacheConfig(path=path, timeout_seconds=0.1), lambda report: True)
        assert time.monotonic() - started < 5.0
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    await asyncio.sleep(0.5)  # nothing lands later either
    assert entries_in(path) == 9


def redis_config(url: str, prefix: str = "docsumd-admin:", **cache: Any) -> CacheConfig:
    return CacheConfig(backend="redis", redis=RedisCacheConfig(url=url, key_prefix=prefix), **cache)  # type: ignore[arg-type]


@pytest.mark.redis
async def test_a_redis_store_is_shown_without_its_password_and_cleared_by_its_prefix_only(
    make_redis_server: Callable[..., RedisServer],
) -> None:
    server = make_redis_server(maxmemory="64mb", policy="allkeys-lru")
    client = redis_sync.Redis.from_url(server.url)
    client.config_set("requirepass", PASSWORD)
    client.close()
    url = f"redis://:{quote(PASSWORD, safe='')}@127.0.0.1:{server.port}/0"
    client = redis_sync.Redis.from_url(url)
    try:
        client.set("someone-else:key", "kept")
        client.set("docsumd-admin-other:key", "kept: another prefix")
        for i in range(40):
            client.set(f"docsumd-admin:k{i}", "{" + "v" * 99, ex=3600)
        config = redis_config(url, namespace="team-a")
        report = await admin.inspect(config)
        shown = f"{report.as_json()}\n" + "\n".join(report.lines())
        assert PASSWORD not in shown
        assert quote(PASSWORD, safe="") not in shown
        assert "s3cr" not in shown
        assert report.location.where == f"redis://127.0.0.1:{server.port}/0"
        assert report.as_json()["store"]["key_prefix"] == "docsumd-admin:"
        assert report.as_json()["bounds"] == {"ttl_seconds": 30 * 24 * 3600, "max_value_bytes": 1 << 20}
        assert report.stats is not None
        assert report.stats.entries == 40
        assert report.stats.server["maxmemory_policy"] == "allkeys-lru"
        assert "policy allkeys-lru" in shown
        _, removed = await admin.clear(config, lambda report: True)
        assert removed is not None
        assert removed.entries == 40
        assert sorted(client.keys("*")) == [b"docsumd-admin-other:key", b"someone-else:key"]
    finally:
        client.close()


@pytest.mark.redis
async def test_a_redis_server_that_refuses_the_password_is_an_error_that_does_not_show_it(
    make_redis_server: Callable[..., RedisServer],
) -> None:
    server = make_redis_server()
    client = redis_sync.Redis.from_url(server.url)
    client.config_set("requirepass", PASSWORD)
    client.close()
    with pytest.raises(CacheStoreError) as failed:
        await admin.inspect(redis_config(f"redis://:wrong-s3cret@127.0.0.1:{server.port}/0"))
    assert "s3cret" not in str(failed.value)


def test_a_redis_url_that_cannot_be_read_is_a_config_error_without_its_text() -> None:
    # The config refuses such a url as it loads; a config built without that check meets this guard.
    url = "redis://:pa/s3cret@cache.internal:6379/0"
    with pytest.raises(ValidationError, match="not a valid URL"):
        RedisCacheConfig(url=url)  # type: ignore[arg-type]
    unchecked = RedisCacheConfig.model_construct(url=SecretStr(url), key_prefix="docsumd-admin:")
    with pytest.raises(ConfigError, match="not shown") as refused:
        admin.locate(CacheConfig.model_construct(backend="redis", redis=unchecked))
    assert "s3cret" not in str(refused.value)
    assert "'pa'" not in str(refused.value)


def test_sizes_are_written_in_binary_units() -> None:
    assert [admin.size_text(n) for n in (0, 1023, 1024, 5 << 20, 3 << 30, 2 << 40)] == [
        "0 bytes",
        "1,023 bytes",
        "1.0 KiB",
        "5.0 MiB",
        "3.0 GiB",
        "2.0 TiB",
    ]


async def test_a_default_path_is_said_to_be_this_environment_s(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CACHE_DIRECTORY", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    report = await admin.inspect(CacheConfig())
    assert report.location.where == str(tmp_path / "docsumd" / "summaries.sqlite3")
    assert report.as_json()["store"]["default_path"] is True
    assert "cache.path is not set" in report.lines()[2]
    assert not (tmp_path / "docsumd").exists()
