"""The shared store (daemon.cache.redis.RedisStore) against a real redis-server: values, TTLs, the
server's bound, and a stopped, killed or restarted server costing a miss within the timeout."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Callable
from urllib.parse import quote

import pytest
import redis as redis_sync
from structlog.typing import EventDict

from daemon.cache.redis import RedisStore, public_url
from daemon.cache.store import CacheStoreError, Removed
from tests.redis_server import RedisServer

pytestmark = pytest.mark.redis

TIMEOUT = 0.25
SLACK = 2.0
"""Past ``TIMEOUT``, what a call may take on a loaded machine; one that waited on a dead or paused
server without a timeout would hang."""


def store_for(server: RedisServer, **options: object) -> RedisStore:
    settings: dict[str, object] = {
        "timeout": TIMEOUT,
        "ttl_seconds": 3600,
        "key_prefix": "docsumd-test:",
        "max_value_bytes": 1 << 20,
    }
    settings.update(options)
    return RedisStore(server.url, **settings)  # type: ignore[arg-type]


@contextlib.asynccontextmanager
async def shared_store(redis_server: RedisServer) -> AsyncIterator[RedisStore]:
    """A started store on the session's server, its prefix emptied (an async fixture would run on
    the session's event loop, the test on its own)."""
    store = store_for(redis_server)
    await store.start()
    await store.delete_all()
    try:
        yield store
    finally:
        await store.stop()


async def test_values_read_back_and_misses_are_none(redis_server: RedisServer) -> None:
    async with shared_store(redis_server) as shared:
        await shared.put_many([("k1", "part", b"{one"), ("k2", "combine", b"{two")])
        assert await shared.get_many(["k2", "nope", "k1"]) == [b"{two", None, b"{one"]
        assert await shared.get_many([]) == []
        assert (await shared.put_many([])).evicted == {}


async def test_entries_carry_a_ttl_that_each_hit_renews(redis_server: RedisServer) -> None:
    async with shared_store(redis_server) as shared:
        await shared.put_many([("k", "part", b"{v")])
        client = redis_sync.Redis.from_url(redis_server.url)
        try:
            assert 3500 < client.ttl("docsumd-test:k") <= 3600
            client.expire("docsumd-test:k", 100)
            assert await shared.get_many(["k"]) == [b"{v"]
            assert client.ttl("docsumd-test:k") > 3500
        finally:
            client.close()


async def test_a_store_without_ttl_writes_keys_that_do_not_expire(redis_server: RedisServer) -> None:
    store = store_for(redis_server, ttl_seconds=0, key_prefix="docsumd-nottl:")
    await store.start()
    client = redis_sync.Redis.from_url(redis_server.url)
    try:
        await store.put_many([("k", "part", b"{v")])
        assert await store.get_many(["k"]) == [b"{v"]
        assert client.ttl("docsumd-nottl:k") == -1
    finally:
        client.close()
        await store.delete_all()
        await store.stop()


async def test_a_value_is_read_at_most_one_byte_past_the_limit(redis_server: RedisServer) -> None:
    store = store_for(redis_server, max_value_bytes=1000, key_prefix="docsumd-big:")
    await store.start()
    client = redis_sync.Redis.from_url(redis_server.url)
    try:
        client.set("docsumd-big:huge", b"{" * (8 << 20))
        assert await store.get_many(["huge"]) == [b"{" * 1001]
    finally:
        client.close()
        await store.delete_all()
        await store.stop()


async def test_a_key_of_another_type_under_the_prefix_is_a_miss(redis_server: RedisServer) -> None:
    async with shared_store(redis_server) as shared:
        client = redis_sync.Redis.from_url(redis_server.url)
        try:
            client.lpush("docsumd-test:listy", "x")
            await shared.put_many([("fine", "part", b"{ok")])
            assert await shared.get_many(["listy", "fine"]) == [None, b"{ok"]
        finally:
            client.close()


async def test_delete_all_deletes_only_its_prefix(redis_server: RedisServer) -> None:
    async with shared_store(redis_server) as shared:
        client = redis_sync.Redis.from_url(redis_server.url)
        try:
            client.set("someone-else:key", "kept")
            client.set("docsumd-test*x", "kept too: * is not a wildcard in the prefix")
            await shared.put_many([(f"k{i}", "part", b"{v") for i in range(2500)])
            removed = await shared.delete_all()
            assert removed.entries == 2500
            assert removed.bytes == sum(len(f"docsumd-test:k{i}") + 2 for i in range(2500))
            assert await shared.get_many(["k0", "k2499"]) == [None, None]
            assert client.get("someone-else:key") == b"kept"
            assert client.exists("docsumd-test*x") == 1
        finally:
            client.delete("someone-else:key", "docsumd-test*x")
            client.close()


async def test_a_paused_server_costs_a_miss_within_the_timeout(
    make_redis_server: Callable[..., RedisServer],
) -> None:
    server = make_redis_server()
    store = store_for(server)
    await store.start()
    try:
        await store.put_many([("a", "part", b"{a"), ("b", "part", b"{b")])
        assert await store.get_many(["a"]) == [b"{a"]
        server.pause()
        for call in (lambda: store.get_many(["a"]), lambda: store.put_many([("c", "part", b"{c")])):
            started = time.monotonic()
            with pytest.raises(CacheStoreError, match=f"no answer .* within {TIMEOUT:g} s"):
                await call()
            assert time.monotonic() - started < TIMEOUT + SLACK
        server.resume()
        # The replies the paused server owed are not read as later calls' answers.
        for _ in range(3):
            assert await store.get_many(["b", "a"]) == [b"{b", b"{a"]
    finally:
        await store.stop()


async def test_a_killed_server_fails_fast_and_a_restarted_one_is_used_again(
    make_redis_server: Callable[..., RedisServer],
) -> None:
    server = make_redis_server()
    store = store_for(server)
    await store.start()
    try:
        await store.put_many([("a", "part", b"{a")])
        server.kill()
        started = time.monotonic()
        with pytest.raises(CacheStoreError):
            await store.get_many(["a"])
        assert time.monotonic() - started < TIMEOUT + SLACK
        server.up()  # the same port, empty (no persistence)
        assert await store.get_many(["a"]) == [None]
        await store.put_many([("a", "part", b"{a2")])
        assert await store.get_many(["a"]) == [b"{a2"]
    finally:
        await store.stop()


async def test_nothing_listening_fails_fast(tmp_path: object) -> None:
    from tests.redis_server import free_port

    store = RedisStore(
        f"redis://127.0.0.1:{free_port()}/0",
        timeout=TIMEOUT,
        ttl_seconds=0,
        key_prefix="x:",
        max_value_bytes=1000,
    )
    await store.start()  # logged, not raised
    try:
        started = time.monotonic()
        with pytest.raises(CacheStoreError):
            await store.get_many(["a"])
        assert time.monotonic() - started < TIMEOUT + SLACK
    finally:
        await store.stop()


async def test_a_full_server_that_does_not_evict_refuses_writes_with_a_warning(
    make_redis_server: Callable[..., RedisServer], logs: list[EventDict]
) -> None:
    server = make_redis_server(maxmemory="2mb", policy="noeviction")
    store = store_for(server, max_value_bytes=1 << 20)
    await store.start()
    try:
        assert any("noeviction" in str(event["event"]) for event in logs)

        async def fill() -> None:
            for i in range(200):  # 13 MB into 2 MB
                await store.put_many([(f"k{i}", "part", b"{" + bytes(64 * 1024))])

        with pytest.raises(CacheStoreError, match="refused"):
            await fill()
        assert await store.get_many(["k0"]) == [b"{" + bytes(64 * 1024)], "reads still work"
    finally:
        await store.stop()


async def test_a_bounded_lru_server_evicts_and_keeps_answering(
    make_redis_server: Callable[..., RedisServer], logs: list[EventDict]
) -> None:
    server = make_redis_server(maxmemory="4mb", policy="allkeys-lru")
    store = store_for(server)
    await store.start()
    try:
        assert not [event for event in logs if event["log_level"] == "warning"]
        for i in range(400):  # 25 MB into 4 MB
            await store.put_many([(f"k{i}", "part", b"{" + bytes(64 * 1024))])
        used = await store.maintain()
        assert used is not None
        assert used < 6 << 20
        assert await store.get_many(["k399"]) == [b"{" + bytes(64 * 1024)]
        assert await store.get_many(["k0"]) == [None]
    finally:
        await store.stop()


async def test_an_unbounded_server_is_warned_of(redis_server: RedisServer, logs: list[EventDict]) -> None:
    store = store_for(redis_server)
    await store.start()
    await store.stop()
    assert any("no maxmemory" in str(event["event"]) for event in logs)
    assert "127.0.0.1" in store.where or store.where.startswith("?")


async def test_stats_count_only_the_prefix_and_say_when_entries_expire(redis_server: RedisServer) -> None:
    async with shared_store(redis_server) as shared:
        client = redis_sync.Redis.from_url(redis_server.url)
        try:
            client.set("someone-else:key", "not counted")
            assert (await shared.stats()).entries == 0
            before = time.time()
            await shared.put_many([(f"k{i}", "part", b"{" + b"v" * i) for i in range(1500)])
            client.set("docsumd-test:forever", "{f")  # written without a TTL (another daemon's config)
            client.expire("docsumd-test:k0", 60)
            stats = await shared.stats()
            assert stats.entries == 1501
            expected = sum(len(f"docsumd-test:k{i}") + 1 + i for i in range(1500))
            assert stats.bytes == expected + len("docsumd-test:forever") + 2
            assert stats.without_expiry == 1
            assert stats.expiring is not None
            soonest, latest = stats.expiring
            assert before + 55 <= soonest <= time.time() + 60
            assert before + 3500 <= latest <= time.time() + 3600
            assert dict(stats.kinds) == {}, "Redis records no kind"
            assert stats.server["maxmemory"] == 0
            assert stats.server["used_memory"] > stats.bytes
        finally:
            client.delete("someone-else:key")
            client.close()


async def test_delete_all_counts_what_it_deleted_and_an_empty_prefix_is_nothing(
    redis_server: RedisServer,
) -> None:
    async with shared_store(redis_server) as shared:
        assert await shared.delete_all() == Removed(entries=0, bytes=0)
        await shared.put_many([("a", "part", b"{12345")])
        assert await shared.delete_all() == Removed(entries=1, bytes=len("docsumd-test:a") + 6)


async def test_a_password_protected_server_is_used_and_its_password_never_shown(
    make_redis_server: Callable[..., RedisServer],
) -> None:
    server = make_redis_server()
    admin = redis_sync.Redis.from_url(server.url)
    admin.config_set("requirepass", "s3cr/et:p@ss")
    admin.close()
    url = f"redis://:{quote('s3cr/et:p@ss', safe='')}@127.0.0.1:{server.port}/0"
    store = RedisStore(url, timeout=TIMEOUT, ttl_seconds=60, key_prefix="docsumd-pw:", max_value_bytes=1024)
    await store.start()
    try:
        await store.put_many([("k", "part", b"{v")])
        assert (await store.stats()).entries == 1
        assert (await store.delete_all()).entries == 1
    finally:
        await store.stop()
    wrong = RedisStore(
        f"redis://:wrong@127.0.0.1:{server.port}/0",
        timeout=TIMEOUT,
        ttl_seconds=60,
        key_prefix="docsumd-pw:",
        max_value_bytes=1024,
    )
    await wrong.start()
    try:
        with pytest.raises(CacheStoreError) as failed:
            await wrong.stats()
        assert "wrong" not in str(failed.value)
    finally:
        await wrong.stop()


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:s3cret@cache.internal:6380/2", "redis://cache.internal:6380/2"),
        ("redis://user:s3c@ret@cache.internal/1", "redis://cache.internal:6379/1"),
        ("rediss://user:s3cret@[::1]:7000", "rediss://[::1]:7000/0"),
        ("redis://cache.internal?password=s3cret&db=3", "redis://cache.internal:6379/3"),
        ("unix://:s3cret@/run/redis/redis.sock?db=4", "unix:///run/redis/redis.sock?db=4"),
    ],
)
def test_a_url_is_shown_without_its_user_password_or_options(url: str, shown: str) -> None:
    assert public_url(url) == shown
    assert "s3c" not in public_url(url)


def test_a_url_redis_py_cannot_read_is_refused_without_quoting_it() -> None:
    # redis-py's own message would quote the part of the password it took for a port.
    with pytest.raises(ValueError, match="not shown") as refused:
        public_url("redis://:pa/s3cret@cache.internal:6379/0")
    assert "s3cret" not in str(refused.value)
    assert "'pa'" not in str(refused.value)


async def test_a_store_given_a_url_redis_py_cannot_read_fails_without_quoting_it() -> None:
    store = RedisStore(
        "redis://:pa/s3cret@cache.internal:6379/0",
        timeout=1.0,
        ttl_seconds=0,
        key_prefix="docsumd:",
        max_value_bytes=1024,
    )
    with pytest.raises(CacheStoreError, match="not shown") as refused:
        await store.start()
    assert "s3cret" not in str(refused.value)
    assert "'pa'" not in str(refused.value)
