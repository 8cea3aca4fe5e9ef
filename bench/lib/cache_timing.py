"""The seconds a pass spends inside the summary cache: its lookups, its writes and its keys.

:func:`timed` wraps one :class:`~daemon.cache.SummaryCache` object's own calls (``get_many`` and
``put_many``, which ``get`` and ``put`` go through, and its key maker's ``part``, ``combine`` and
``document``) with wall-clock timers. A document waits for each of these calls on its path (a level's
lookups before its misses run, its writes after them, its keys before either), so their sum over a
pass is what the cache adds to it; with several documents in flight some of it overlaps another
document's engine work, so the sum is an upper bound of the cost.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class CacheSeconds:
    """Wall seconds inside the cache's calls, by call."""

    seconds: dict[str, float] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)

    def add(self, name: str, elapsed: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + elapsed
        self.calls[name] = self.calls.get(name, 0) + 1

    @property
    def total(self) -> float:
        return sum(self.seconds.values())

    def as_dict(self) -> dict[str, Any]:
        return {
            "total_s": round(self.total, 4),
            "seconds": {name: round(value, 4) for name, value in sorted(self.seconds.items())},
            "calls": dict(sorted(self.calls.items())),
        }


def timed(cache: Any) -> CacheSeconds:
    """Time ``cache``'s store calls and keys from now on (its instance attributes are replaced)."""
    counts = CacheSeconds()
    for name in ("get_many", "put_many"):
        setattr(cache, name, _timed_async(getattr(cache, name), name, counts))
    for name in ("part", "combine", "document"):
        setattr(cache.keys, name, _timed_sync(getattr(cache.keys, name), f"key_{name}", counts))
    return counts


def _timed_async(
    call: Callable[..., Awaitable[Any]], name: str, counts: CacheSeconds
) -> Callable[..., Awaitable[Any]]:
    @functools.wraps(call)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return await call(*args, **kwargs)
        finally:
            counts.add(name, time.perf_counter() - started)

    return wrapper


def _timed_sync(call: Callable[..., Any], name: str, counts: CacheSeconds) -> Callable[..., Any]:
    @functools.wraps(call)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return call(*args, **kwargs)
        finally:
            counts.add(name, time.perf_counter() - started)

    return wrapper
