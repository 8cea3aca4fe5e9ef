"""bench.lib.cache_timing: a real SQLite-backed cache, its calls timed (wall and CPU)."""

from __future__ import annotations

from pathlib import Path

from bench.lib.cache_timing import timed
from daemon.cache import KeyMaker, SummaryCache
from daemon.cache.sqlite import SqliteStore
from tests.unit.cache.test_summary_cache import SCOPE, STEP, summary


async def test_lookups_writes_and_keys_are_timed_once_each(tmp_path: Path) -> None:
    cache = SummaryCache(
        SqliteStore(tmp_path / "c.sqlite3", max_bytes=1 << 26, timeout=5),
        KeyMaker(SCOPE),
        max_value_bytes=1 << 20,
        retry_seconds=30,
    )
    inside = timed(cache)
    async with cache:
        part = cache.keys.part([1, 2, 3], STEP)
        combine = cache.keys.combine([part], STEP)
        assert await cache.get(part) is None  # through get_many: counted once
        await cache.put_many([(part, summary()), (combine, summary("combined"))])
        assert [entry is not None for entry in await cache.get_many([part, combine])] == [True, True]
    assert inside.calls == {"get_many": 2, "key_combine": 1, "key_part": 1, "put_many": 1}
    assert all(seconds > 0 for seconds in inside.seconds.values())
    assert set(inside.cpu) == {"decode", "encode", "key_combine", "key_part", "store"}
    assert inside.total_cpu > 0
    report = inside.as_dict()
    assert report["total_s"] == round(inside.total, 4)
    assert inside.total == sum(inside.seconds.values())
