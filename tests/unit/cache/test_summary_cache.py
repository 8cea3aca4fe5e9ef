"""The summary cache as the summarizer calls it (daemon.cache.cache.SummaryCache): entries by key,
metrics by kind, and a failing store costing misses and then nothing until it is tried again."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from prometheus_client import REGISTRY
from structlog.typing import EventDict

from daemon.cache import CachedSummary, KeyMaker, KeyScope, ModelRevision, Step, SummaryCache, create_cache
from daemon.cache.keys import CacheKey
from daemon.cache.redis import RedisStore
from daemon.cache.sqlite import SqliteStore
from daemon.cache.store import CacheStoreError, PutOutcome
from daemon.config import CacheConfig, EngineConfig
from daemon.contracts import Sampling
from daemon.engine.vllm_args import engine_kwargs
from tests.redis_server import RedisServer

SCOPE = KeyScope.create(
    engine_kwargs(EngineConfig(model="/m", dtype="bfloat16")), model=ModelRevision("0" * 16, "folder", 1)
)
KEYS = KeyMaker(SCOPE)
STEP = Step(
    template=([1], [2]),
    sampling=Sampling(max_tokens=128, temperature=0.0, top_p=1.0, repetition_penalty=1.0),
    prompt_version="summary-v4",
    profile_version="abc",
)


def metric(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def summary(text: str = "a part summary", prompt: int = 3000, generated: int = 100) -> CachedSummary:
    return CachedSummary(text, prompt, generated, "stop", time.time(), KEYS.part([1], STEP).parts)


def is_available(cache: SummaryCache) -> bool:
    """``cache.available``, read anew (mypy would keep an earlier assertion's narrowing)."""
    return cache.available


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FailingStore:
    """A store whose calls fail while ``broken``; counts the calls that reached it."""

    backend = "fake"

    def __init__(self) -> None:
        self.broken = True
        self.calls = 0
        self.data: dict[str, bytes] = {}

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    async def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        self.calls += 1
        if self.broken:
            raise CacheStoreError("down")
        return [self.data.get(key) for key in keys]

    async def put_many(self, items: Sequence[tuple[str, str, bytes]]) -> PutOutcome:
        self.calls += 1
        if self.broken:
            raise CacheStoreError("down")
        self.data.update((key, value) for key, _, value in items)
        return PutOutcome(evicted={"part": 2, "unknown-kind": 1})

    async def maintain(self) -> int | None:
        self.calls += 1
        if self.broken:
            raise CacheStoreError("down")
        return 12345


async def test_entries_by_key_and_their_metrics(tmp_path: Path) -> None:
    cache = SummaryCache(
        SqliteStore(tmp_path / "c.sqlite3", max_bytes=1 << 26, timeout=5),
        KEYS,
        max_value_bytes=1 << 20,
        retry_seconds=30,
    )
    part, other = KEYS.part([1, 2, 3], STEP), KEYS.part([4], STEP)
    combine = KEYS.combine([part, other], STEP)
    hits, misses = (
        metric("docsumd_cache_lookups_total", kind="part", outcome="hit"),
        metric("docsumd_cache_lookups_total", kind="part", outcome="miss"),
    )
    reused = metric("docsumd_cache_reused_tokens_total", kind="part")
    writes = metric("docsumd_cache_writes_total", kind="combine", outcome="ok")
    async with cache:
        assert await cache.get(part) is None
        written = summary()
        await cache.put_many([(part, written), (combine, summary("combined", 500, 50))])
        assert await cache.get_many([part, other]) == [written, None]
        assert (await cache.get(combine)) is not None
        assert await cache.get_many([]) == []
        await cache.maintain()
    assert metric("docsumd_cache_lookups_total", kind="part", outcome="hit") == hits + 1
    assert metric("docsumd_cache_lookups_total", kind="part", outcome="miss") == misses + 2
    assert metric("docsumd_cache_reused_tokens_total", kind="part") == reused + 3100
    assert metric("docsumd_cache_writes_total", kind="combine", outcome="ok") == writes + 1
    assert metric("docsumd_cache_store_bytes") > 0
    assert metric("docsumd_cache_up") == 0  # stopped


async def test_an_entry_over_the_size_limit_is_not_stored(tmp_path: Path) -> None:
    cache = SummaryCache(
        SqliteStore(tmp_path / "c.sqlite3", max_bytes=1 << 26, timeout=5),
        KEYS,
        max_value_bytes=2048,
        retry_seconds=30,
    )
    key = KEYS.part([9], STEP)
    too_large = metric("docsumd_cache_writes_total", kind="part", outcome="too_large")
    async with cache:
        await cache.put(key, summary(" ".join(f"word{i}" for i in range(5000))))
        assert await cache.get(key) is None
    assert metric("docsumd_cache_writes_total", kind="part", outcome="too_large") == too_large + 1


async def test_an_unreadable_entry_is_an_error_and_a_miss(tmp_path: Path, logs: list[EventDict]) -> None:
    store = SqliteStore(tmp_path / "c.sqlite3", max_bytes=1 << 26, timeout=5)
    cache = SummaryCache(store, KEYS, max_value_bytes=1 << 20, retry_seconds=30)
    key = KEYS.part([5], STEP)
    errors = metric("docsumd_cache_lookups_total", kind="part", outcome="error")
    async with cache:
        await store.put_many([(key.id, "part", b"{damaged")])
        assert await cache.get(key) is None
        assert is_available(cache), "a damaged entry is not the store's failure"
    assert metric("docsumd_cache_lookups_total", kind="part", outcome="error") == errors + 1
    assert any("unreadable entry" in str(event["event"]) for event in logs)


async def test_a_failing_store_is_skipped_then_tried_again(logs: list[EventDict]) -> None:
    store, clock = FailingStore(), Clock()
    cache = SummaryCache(store, KEYS, max_value_bytes=1 << 20, retry_seconds=30, clock=clock)
    key = KEYS.part([1], STEP)
    errors = metric("docsumd_cache_lookups_total", kind="part", outcome="error")
    skipped = metric("docsumd_cache_lookups_total", kind="part", outcome="skipped")
    skipped_writes = metric("docsumd_cache_writes_total", kind="part", outcome="skipped")
    evicted = metric("docsumd_cache_evictions_total", kind="part")
    async with cache:
        assert await cache.get(key) is None
        assert store.calls == 1
        assert not is_available(cache)
        assert metric("docsumd_cache_up") == 0
        for _ in range(100):
            assert await cache.get(key) is None
        await cache.put(key, summary())
        await cache.maintain()
        assert store.calls == 1, "skipped: no call reaches the store"
        clock.now += 31
        store.broken = False
        await cache.put(key, summary())
        assert is_available(cache)
        assert metric("docsumd_cache_up") == 1
        assert (await cache.get(key)) is not None
        await cache.maintain()
    assert metric("docsumd_cache_lookups_total", kind="part", outcome="error") == errors + 1
    assert metric("docsumd_cache_lookups_total", kind="part", outcome="skipped") == skipped + 100
    assert metric("docsumd_cache_writes_total", kind="part", outcome="skipped") == skipped_writes + 1
    assert metric("docsumd_cache_evictions_total", kind="part") == evicted + 2
    assert metric("docsumd_cache_store_bytes") == 12345
    events = [str(event["event"]) for event in logs]
    assert sum("lookup failed" in event for event in events) == 1, "one warning per outage"
    assert any("answers again" in event for event in events)


async def test_upkeep_runs_in_the_background_and_stops(tmp_path: Path) -> None:
    store = FailingStore()
    store.broken = False
    cache = SummaryCache(store, KEYS, max_value_bytes=1 << 20, retry_seconds=30, maintenance_seconds=0.01)
    await cache.start()
    await cache.start()
    async with asyncio.timeout(10):  # rounds, however slowly a loaded machine runs them
        while store.calls < 3:  # noqa: ASYNC110 - the store has no event for it
            await asyncio.sleep(0.01)
    await cache.stop()
    await cache.stop()
    calls = store.calls
    assert calls >= 3
    await asyncio.sleep(0.05)
    assert store.calls == calls


@pytest.mark.redis
async def test_a_paused_redis_server_costs_one_timeout_then_nothing(
    make_redis_server: Callable[..., RedisServer],
) -> None:
    server = make_redis_server(maxmemory="16mb", policy="allkeys-lru")
    store = RedisStore(server.url, timeout=0.2, ttl_seconds=60, key_prefix="t:", max_value_bytes=1 << 20)
    clock = Clock()  # the retry wait: moved by the test, not by how loaded the machine is
    cache = SummaryCache(store, KEYS, max_value_bytes=1 << 20, retry_seconds=0.5, clock=clock)
    key = KEYS.part([1, 2], STEP)
    async with cache:
        await cache.put(key, summary())
        assert await cache.get(key) is not None
        server.pause()
        started = time.monotonic()
        assert await cache.get(key) is None
        # One timeout (a paused server without one would hang here), with room for a loaded machine.
        assert time.monotonic() - started < 0.2 + 2
        skipped = metric("docsumd_cache_lookups_total", kind="part", outcome="skipped")
        for _ in range(50):
            assert await cache.get(key) is None
        # The store is not asked (it would be a timeout each, counted as an error): they cost nothing.
        assert metric("docsumd_cache_lookups_total", kind="part", outcome="skipped") == skipped + 50
        server.resume()
        clock.now += 0.5
        assert await cache.get(key) is not None
        assert is_available(cache)


async def test_create_cache_from_the_config(tmp_path: Path, logs: list[EventDict]) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    engine = engine_kwargs(EngineConfig(model=str(model)))
    assert await create_cache(CacheConfig(enabled=False), engine, model=str(model)) is None
    config = CacheConfig(path=tmp_path / "c.sqlite3")
    cache = await create_cache(config, engine, model=str(model))
    assert cache is not None
    assert isinstance(cache.store, SqliteStore)
    assert cache.keys.scope.model.how == "folder"
    async with cache:
        key = cache.keys.part([1], STEP)
        await cache.put(key, summary())
        assert await cache.get(key) is not None
    assert (tmp_path / "c.sqlite3").exists()
    missing = str(tmp_path / "no-such-model")
    assert await create_cache(config, engine, model=missing, tokenizer=None) is None
    assert any("revision" in str(event["event"]) for event in logs)
    tokenizer_missing = await create_cache(config, engine, model=str(model), tokenizer=missing)
    assert tokenizer_missing is None


async def test_a_tokenizer_folder_of_its_own_is_in_the_scope(tmp_path: Path) -> None:
    model, tokenizer = tmp_path / "model", tmp_path / "tok"
    for folder, content in ((model, "{}"), (tokenizer, '{"a": 1}')):
        folder.mkdir()
        (folder / "tokenizer.json").write_text(content)
    engine = engine_kwargs(EngineConfig(model=str(model)))
    config = CacheConfig(path=tmp_path / "c.sqlite3")
    alone = await create_cache(config, engine, model=str(model))
    beside = await create_cache(config, engine, model=str(model), tokenizer=str(tokenizer))
    assert alone is not None
    assert beside is not None
    assert beside.keys.scope.tokenizer is not None
    assert alone.keys.part([1], STEP) != beside.keys.part([1], STEP)


def test_a_key_from_another_scope_never_reads_this_scopes_entry() -> None:
    other = KeyMaker(KeyScope.create({"dtype": "float16"}, model=SCOPE.model))
    assert other.part([1], STEP) != KEYS.part([1], STEP)
    assert isinstance(KEYS.part([1], STEP), CacheKey)
