"""The time a pass spends inside the summary cache: its lookups, its writes and its keys.

:func:`timed` wraps one :class:`~daemon.cache.SummaryCache` object's own calls with timers, two
kinds of figure each:

* **wall seconds** a document waits for a call (``get_many`` and ``put_many``, which ``get`` and
  ``put`` go through, and its key maker's ``part``, ``combine`` and ``document``). Their sum over
  a pass bounds what the cache adds to it; with several documents in flight it is a loose bound,
  since a call then also waits for the interpreter lock while other documents' work runs.
* **CPU seconds** the cache's own code uses, in the thread that runs it (``time.thread_time``): the
  keys and the entries' encoding and decoding on the event loop, and the store's work on its own
  threads (an embedded store's; a server's work is elsewhere). This is what the cache takes from
  the rest of the process whatever runs beside it.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class CacheSeconds:
    """Seconds inside the cache's calls, by call: wall time waited, CPU time used."""

    seconds: dict[str, float] = field(default_factory=dict)
    cpu: dict[str, float] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)

    def add(self, name: str, elapsed: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + elapsed
        self.calls[name] = self.calls.get(name, 0) + 1

    def add_cpu(self, name: str, used: float) -> None:
        self.cpu[name] = self.cpu.get(name, 0.0) + used

    @property
    def total(self) -> float:
        """Wall seconds waited for the cache's calls."""
        return sum(self.seconds.values())

    @property
    def total_cpu(self) -> float:
        """CPU seconds of the cache's own code."""
        return sum(self.cpu.values())

    def as_dict(self) -> dict[str, Any]:
        return {
            "total_s": round(self.total, 4),
            "cpu_s": round(self.total_cpu, 4),
            "seconds": {name: round(value, 4) for name, value in sorted(self.seconds.items())},
            "cpu": {name: round(value, 4) for name, value in sorted(self.cpu.items())},
            "calls": dict(sorted(self.calls.items())),
        }


def timed(cache: Any) -> CacheSeconds:
    """Time ``cache``'s calls from now on (its instance attributes, and its store's, are replaced;
    the entries' encoding is timed for every cache of this process)."""
    from daemon.cache import cache as cache_module

    counts = CacheSeconds()
    for name in ("get_many", "put_many"):
        setattr(cache, name, _timed_async(getattr(cache, name), name, counts))
    for name in ("part", "combine", "document"):
        setattr(cache.keys, name, _timed_sync(getattr(cache.keys, name), f"key_{name}", counts))
    cache._entry = _cpu_only(cache._entry, "decode", counts)
    _ENCODING[:] = [counts]  # the module's encoder is shared: the latest timed cache counts it
    encode = getattr(cache_module, "encode_entry")  # noqa: B009 - imported there, not exported
    if not hasattr(encode, "__wrapped__"):
        setattr(cache_module, "encode_entry", _encoder(encode))  # noqa: B010
    store = cache.store
    if hasattr(store, "_locked"):  # the embedded store: its work on its own threads
        store._locked = _cpu_only(store._locked, "store", counts)
    return counts


_ENCODING: list[CacheSeconds] = []


def _encoder(encode: Callable[..., bytes]) -> Callable[..., bytes]:
    @functools.wraps(encode)
    def wrapper(*args: Any, **kwargs: Any) -> bytes:
        cpu = time.thread_time()
        try:
            return encode(*args, **kwargs)
        finally:
            for counts in _ENCODING:
                counts.add_cpu("encode", time.thread_time() - cpu)

    return wrapper


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
        started, cpu = time.perf_counter(), time.thread_time()
        try:
            return call(*args, **kwargs)
        finally:
            counts.add_cpu(name, time.thread_time() - cpu)
            counts.add(name, time.perf_counter() - started)

    return wrapper


def _cpu_only(call: Callable[..., Any], name: str, counts: CacheSeconds) -> Callable[..., Any]:
    @functools.wraps(call)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        cpu = time.thread_time()
        try:
            return call(*args, **kwargs)
        finally:
            counts.add_cpu(name, time.thread_time() - cpu)

    return wrapper
