"""What the ``docsumd cache`` commands do: say which store a config names and what it holds
(:func:`inspect`), and empty it (:func:`clear`).

A command opens the store as the daemon does (:func:`~daemon.cache.cache.create_store`), with two
differences: an SQLite file is opened only if it is there and already docsumd's cache
(``existing_only``: a command never makes, rebuilds or converts a file, so a config whose file does
not exist yet gets none), and one call may take :data:`COMMAND_TIMEOUT_SECONDS` (waiting for a
daemon's write to the same file, or over a slow link). ``cache.path`` is checked first as a daemon's
SQLite would find it (links followed): a FIFO, a folder or a device is refused without being opened.

A daemon may use the store meanwhile: a clear deletes a batch of entries at a time (SQLite: a
transaction per batch, so a daemon's write waits for one batch at most; Redis: a ``SCAN`` batch at a
time); the daemon then finds the entries gone, and an entry it writes during the clear may stay.

**What a clear deletes**: every entry of the store, whichever daemon or namespace wrote it: the
SQLite file's entries, or every key under ``[cache.redis] key_prefix`` (and no other key of the
server). ``cache.namespace`` is part of each key's hash, not a partition of the store: give a team a
file or a key prefix of its own to clear its entries alone.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from daemon.cache.cache import create_store
from daemon.cache.store import CacheStoreError, ManagedStore, Removed, StoreStats
from daemon.config import CacheConfig
from daemon.errors import ConfigError
from daemon.fs.safe_read import describe_mode

COMMAND_TIMEOUT_SECONDS: Final = 10.0
"""The least time one store call of a command has (``cache.timeout_seconds`` if longer)."""


@dataclass(frozen=True, slots=True)
class StoreLocation:
    """Where a config's cache is, as it may be shown (no secret)."""

    backend: str
    where: str
    """SQLite: the file's path; Redis: the server's URL without user, password or options."""
    namespace: str
    key_prefix: str | None = None
    """Redis: the prefix of every key the store holds."""
    link_target: str | None = None
    """SQLite: the file a link at the path points to (SQLite follows it)."""
    default_path: bool = False
    """SQLite: ``cache.path`` is not set, so the path is the default of this process's environment
    (``$CACHE_DIRECTORY``, ``$XDG_CACHE_HOME``, ``$HOME``), which a daemon's may not share."""

    @property
    def what(self) -> str:
        """What a clear empties, in words."""
        if self.backend == "redis":
            return f"the keys under {self.key_prefix!r} on {self.where}"
        return self.where


@dataclass(frozen=True, slots=True)
class CacheReport:
    """What ``docsumd cache info`` says."""

    enabled: bool
    location: StoreLocation
    bounds: dict[str, Any]
    """The config's limits on the store (``max_bytes``, ``max_value_bytes``, ``ttl_seconds``)."""
    stats: StoreStats | None
    """None when there is no cache file yet (nothing was opened)."""

    def as_json(self) -> dict[str, Any]:
        """The report as JSON values (``--json``); times as ISO 8601 in UTC."""
        location = self.location
        store: dict[str, Any] = {"backend": location.backend, "namespace": location.namespace}
        if location.backend == "redis":
            store |= {"url": location.where, "key_prefix": location.key_prefix}
        else:
            store |= {
                "path": location.where,
                "link_target": location.link_target,
                "default_path": location.default_path,
            }
        return {
            "enabled": self.enabled,
            "store": store,
            "bounds": self.bounds,
            "exists": self.stats is not None,
            "contents": None if self.stats is None else _stats_json(self.stats),
        }

    def lines(self) -> list[str]:
        """The report as text, a line per fact."""
        location = self.location
        lines = [f"summary cache: {'on' if self.enabled else 'off in this config (enabled = false)'}"]
        if location.backend == "redis":
            lines.append(f"store: Redis at {location.where}, keys under {location.key_prefix!r}")
        else:
            link = f" (a link to {location.link_target})" if location.link_target else ""
            lines.append(f"store: SQLite file {location.where}{link}")
            if location.default_path:
                lines.append(
                    "  (cache.path is not set: the default of this environment; a daemon under systemd "
                    "uses its $CACHE_DIRECTORY)"
                )
        shared = (
            "keys under the prefix are shared by every namespace"
            if location.backend == "redis"
            else "the file is shared by every namespace"
        )
        namespace = f"{location.namespace!r} ({shared})" if location.namespace else "none"
        lines.append(f"namespace: {namespace}")
        lines.append("bounds: " + ", ".join(_bound_text(name, value) for name, value in self.bounds.items()))
        if self.stats is None:
            lines.append("no cache file yet: nothing stored")
            return lines
        lines += _stats_lines(self.stats, self.bounds)
        return lines


async def inspect(config: CacheConfig) -> CacheReport:
    """What the store ``config`` names holds (nothing is created or changed). :class:`ConfigError`
    for a path that is not a regular file or a URL that cannot be read;
    :class:`~daemon.cache.store.CacheStoreError` for a store that cannot be read."""
    location = locate(config)
    async with opened(config) as store:
        stats = None if store is None else await store.stats()
    return CacheReport(config.enabled, location, bounds_of(config), stats)


async def clear(
    config: CacheConfig, confirm: Callable[[CacheReport], bool]
) -> tuple[CacheReport, Removed | None]:
    """Empty the store ``config`` names, once ``confirm`` (given what it holds, asked only if it
    holds something) says yes: what it held, and what was removed (None: no cache file yet, or not
    confirmed). Errors as :func:`inspect`."""
    location = locate(config)
    async with opened(config) as store:
        if store is None:
            return CacheReport(config.enabled, location, bounds_of(config), None), None
        report = CacheReport(config.enabled, location, bounds_of(config), await store.stats())
        assert report.stats is not None
        if report.stats.entries and not confirm(report):
            return report, None
        return report, await store.delete_all()


def locate(config: CacheConfig) -> StoreLocation:
    """Where ``config``'s store is, with nothing secret in it."""
    if config.backend == "redis":
        from daemon.cache.redis import public_url  # redis-py is imported only where it is used

        redis = config.redis
        if redis is None:  # pragma: no cover - the config's own check
            raise ConfigError('backend "redis" needs [cache.redis]')
        try:
            where = public_url(redis.url.get_secret_value())
        except ValueError as exc:
            raise ConfigError(f"cache.redis.url: {exc}") from None
        return StoreLocation("redis", where, config.namespace, key_prefix=redis.key_prefix)
    path = Path(config.path)
    target = None
    if path.is_symlink():
        target = os.path.realpath(path)
    return StoreLocation(
        "sqlite",
        str(path),
        config.namespace,
        link_target=target,
        default_path="path" not in config.model_fields_set,
    )


def bounds_of(config: CacheConfig) -> dict[str, Any]:
    """The config's limits on its store."""
    if config.backend == "redis" and config.redis is not None:
        return {"ttl_seconds": config.redis.ttl_seconds, "max_value_bytes": config.max_value_bytes}
    return {"max_bytes": config.max_bytes, "max_value_bytes": config.max_value_bytes}


@contextlib.asynccontextmanager
async def opened(config: CacheConfig) -> AsyncIterator[ManagedStore | None]:
    """The store ``config`` names, started, and stopped at the end; None when it is an SQLite file
    that does not exist yet (or is empty: a daemon made it and wrote nothing yet)."""
    if config.backend == "sqlite" and not _sqlite_file_exists(Path(config.path)):
        yield None
        return
    store = create_store(
        config, existing_only=True, timeout=max(config.timeout_seconds, COMMAND_TIMEOUT_SECONDS)
    )
    await store.start()
    try:
        yield store
    finally:
        await store.stop()


def _sqlite_file_exists(path: Path) -> bool:
    """Whether ``path`` (links followed, as SQLite follows them) is a file with something in it;
    :class:`ConfigError` if it is something else than a regular file (never opened),
    :class:`~daemon.cache.store.CacheStoreError` if it cannot be looked at."""
    try:
        info = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as exc:
        raise CacheStoreError(f"cache.path {path}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(info.st_mode):
        raise ConfigError(f"cache.path {path} is {describe_mode(info.st_mode)}, not a cache file: left alone")
    return info.st_size > 0


def _stats_json(stats: StoreStats) -> dict[str, Any]:
    contents: dict[str, Any] = {"entries": stats.entries, "bytes": stats.bytes}
    if stats.kinds:
        contents["kinds"] = dict(stats.kinds)
    if stats.file_bytes is not None:
        contents |= {
            "file_bytes": stats.file_bytes,
            "first_used": _iso(stats.first_used),
            "last_used": _iso(stats.last_used),
        }
    else:
        soonest, latest = stats.expiring or (None, None)
        contents |= {
            "expiring": {"soonest": _iso(soonest), "latest": _iso(latest)},
            "without_expiry": stats.without_expiry,
            "server": dict(stats.server),
        }
    return contents


def _stats_lines(stats: StoreStats, bounds: dict[str, Any]) -> list[str]:
    kinds = ", ".join(f"{kind} {count:,}" for kind, count in stats.kinds.items())
    lines = [f"entries: {stats.entries:,}" + (f" ({kinds})" if kinds else "")]
    if stats.file_bytes is None:  # Redis
        lines.append(f"held: {size_text(stats.bytes)} of keys and values")
        server = stats.server
        if server:
            maxmemory = server.get("maxmemory")
            bound = f"maxmemory {size_text(maxmemory)}" if maxmemory else "no maxmemory"
            lines.append(
                f"server: {size_text(server.get('used_memory', 0))} in use (all its keys), {bound}, "
                f"policy {server.get('maxmemory_policy', '?')}"
            )
        if stats.expiring is not None:
            soonest, latest = stats.expiring
            lines.append(f"expiry (unless read again): soonest {_iso(soonest)}, latest {_iso(latest)}")
        if stats.without_expiry:
            lines.append(f"entries without expiry: {stats.without_expiry:,}")
        return lines
    share = f", {stats.bytes / bounds['max_bytes']:.1%} of max_bytes" if bounds.get("max_bytes") else ""
    lines.append(
        f"held: {size_text(stats.bytes)} of pages in use{share}; {size_text(stats.file_bytes)} on disk "
        "with its -wal and -shm files"
    )
    if stats.first_used is not None:
        lines.append(
            f"last used: least recently {_iso(stats.first_used)}, most recently {_iso(stats.last_used)}"
        )
    return lines


def _bound_text(name: str, value: Any) -> str:
    if name == "ttl_seconds":
        return f"{name} {value} ({'no expiry' if not value else 'an entry not read for that long expires'})"
    return f"{name} {size_text(value)}"


def size_text(count: int) -> str:
    """``count`` bytes, readably (binary units)."""
    if count < 1024:
        return f"{count:,} bytes"
    size, unit = count / 1024, "KiB"
    for bigger in ("MiB", "GiB", "TiB"):
        if size < 1024:
            break
        size, unit = size / 1024, bigger
    return f"{size:.1f} {unit}"


def _iso(when: float | None) -> str | None:
    return None if when is None else datetime.fromtimestamp(when, UTC).isoformat(timespec="seconds")
