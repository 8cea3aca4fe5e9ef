"""The shared store: a Redis or Valkey server, for daemons on several hosts (redis-py's asyncio client).

Every call is one round trip (a pipeline of up to :data:`PIPELINE_KEYS` keys, more for more keys)
bounded by ``timeout`` seconds, connecting included, with no retry inside it: a slow, stopped or
unreachable server costs one timeout, then
:class:`~daemon.cache.cache.SummaryCache` skips the store for ``cache.retry_seconds`` (misses at no
cost) before trying again.

**Reads** take at most ``max_value_bytes + 1`` bytes of a value (``GETRANGE``), so a damaged or
hostile server cannot make the daemon read a huge value; each hit renews the entry's TTL
(``EXPIRE``), so ``ttl_seconds`` is "not read for that long". **Writes** are ``SET`` with the TTL;
two daemons writing one key write equivalent values, the last one stays.

**The bound** is the server's: docsumd cannot evict on a server it shares. At start the store reads
``INFO memory`` and warns when nothing bounds it (no ``maxmemory``), when a full server would refuse
writes (``noeviction``), or when only keys with a TTL are evicted and docsumd's have none.

**Commands** (``docsumd cache info``, ``clear``) walk the keys under the prefix with ``SCAN`` (never
``KEYS``, never ``FLUSHDB``: a shared server's other keys are never read or touched), a batch per
round trip, each round trip bounded by :data:`COMMAND_TIMEOUT_SECONDS` at least. The URL is shown
only as :func:`public_url` writes it: it may hold a password.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any, Final

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.connection import parse_url
from redis.exceptions import RedisError, ResponseError

from daemon.cache.store import CacheStoreError, PutOutcome, Removed, StoreStats
from daemon.ops.logging import get_logger

log = get_logger(__name__)

CLIENT_NAME: Final = "docsumd-cache"
PIPELINE_KEYS: Final = 128
"""Keys per round trip: each round trip has the whole timeout (a document's thousand parts are
several, and the first that fails ends the call)."""
SCAN_KEYS: Final = 1000
"""Keys per round trip of the commands' walk over the prefix (``SCAN ... COUNT``, then one pipeline)."""
COMMAND_TIMEOUT_SECONDS: Final = 10.0
"""The least time one round trip of :meth:`RedisStore.stats` or :meth:`RedisStore.delete_all` has
(a command may wait longer on a slow link than a daemon's lookup should)."""


class RedisStore:
    """The shared store at ``url`` (see the module's doc). Safe to call concurrently."""

    backend = "redis"

    def __init__(
        self,
        url: str,
        *,
        timeout: float,
        ttl_seconds: int,
        key_prefix: str,
        max_value_bytes: int,
        max_connections: int = 16,
    ) -> None:
        """``url``: redis-py's form (``redis://``, ``rediss://``, ``unix://``); ``timeout``: the longest
        one call may take; ``ttl_seconds``: 0 for none."""
        self.timeout = timeout
        self.ttl_seconds = ttl_seconds
        self.key_prefix = key_prefix
        self.max_value_bytes = max_value_bytes
        self._url = url
        self._max_connections = max_connections
        self._client: Redis | None = None

    @property
    def where(self) -> str:
        """The server's address without credentials, for logs."""
        pool = self._client.connection_pool if self._client is not None else None
        kwargs = pool.connection_kwargs if pool is not None else {}
        if "path" in kwargs:
            return f"unix:{kwargs['path']}"
        return f"{kwargs.get('host', '?')}:{kwargs.get('port', '?')}/{kwargs.get('db', 0)}"

    async def start(self) -> None:
        """Make the client and look at the server's memory bound (a failure is logged, not raised:
        calls connect when they need to)."""
        if self._client is not None:
            return
        try:
            pool = BlockingConnectionPool.from_url(
                self._url,
                max_connections=self._max_connections,
                timeout=self.timeout,
                socket_timeout=self.timeout,
                socket_connect_timeout=self.timeout,
                retry=Retry(NoBackoff(), 0),
                client_name=CLIENT_NAME,
            )
        except ValueError:
            # redis-py's message may quote part of the url, password included: never passed on.
            raise CacheStoreError(
                "the Redis url cannot be read (not shown: it may hold a password)"
            ) from None
        self._client = Redis(connection_pool=pool, auto_close_connection_pool=True)
        try:
            await self._check_bound()
        except CacheStoreError as exc:
            log.warning(
                "summary cache: the Redis server does not answer now", server=self.where, error=str(exc)
            )

    async def stop(self) -> None:
        """Close the connections."""
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(RedisError, OSError, TimeoutError):
                async with asyncio.timeout(self.timeout):
                    await client.aclose()

    async def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        """The values of ``keys`` (None where absent; a value longer than ``max_value_bytes`` is
        returned cut, one byte over, for the caller to refuse)."""
        values: list[bytes | None] = []
        for start in range(0, len(keys), PIPELINE_KEYS):
            values += await self._get_batch(keys[start : start + PIPELINE_KEYS])
        return values

    async def _get_batch(self, keys: Sequence[str]) -> list[bytes | None]:
        pipe = self._redis().pipeline(transaction=False)
        for key in keys:
            name = self.key_prefix + key
            pipe.getrange(name, 0, self.max_value_bytes)
            if self.ttl_seconds:
                pipe.expire(name, self.ttl_seconds)
        replies = await self._run(pipe.execute(raise_on_error=False))
        step = 2 if self.ttl_seconds else 1
        values: list[bytes | None] = []
        for index in range(len(keys)):
            reply = replies[index * step]
            # GETRANGE of a missing key is b"" (never a stored entry: those are not empty); another
            # type's key under our prefix answers WRONGTYPE: a miss.
            values.append(reply if isinstance(reply, bytes) and reply else None)
        return values

    async def put_many(self, items: Sequence[tuple[str, str, bytes]]) -> PutOutcome:
        """Store ``(key, kind, value)`` items with the TTL."""
        for start in range(0, len(items), PIPELINE_KEYS):
            await self._put_batch(items[start : start + PIPELINE_KEYS])
        return PutOutcome()

    async def _put_batch(self, items: Sequence[tuple[str, str, bytes]]) -> None:
        pipe = self._redis().pipeline(transaction=False)
        for key, _kind, value in items:
            pipe.set(self.key_prefix + key, value, ex=self.ttl_seconds or None)
        replies = await self._run(pipe.execute(raise_on_error=False))
        refused = [reply for reply in replies if isinstance(reply, Exception)]
        if refused:  # e.g. OOM under maxmemory-policy noeviction, or READONLY on a replica
            raise CacheStoreError(f"the server refused {len(refused)} of {len(items)} writes: {refused[0]}")

    async def maintain(self) -> int | None:
        """The server's memory in use (all its keys, not only docsumd's)."""
        info = await self._run(self._redis().info("memory"))
        used = info.get("used_memory")
        return used if isinstance(used, int) else None

    async def stats(self) -> StoreStats:
        """The keys under the prefix, their bytes (keys and values) and expiry times, and the
        server's memory and its bound. Not a snapshot: keys written or expiring during the walk may
        be counted or not (and ``SCAN`` may return a key twice while the server resizes its table)."""
        entries = size = without_expiry = 0
        soonest = latest = None
        now = time.time()
        async for names in self._scan():
            pipe = self._redis().pipeline(transaction=False)
            for name in names:
                pipe.strlen(name)
                pipe.ttl(name)
            replies = await self._run_command(pipe.execute(raise_on_error=False))
            for index, name in enumerate(names):
                length, ttl = replies[2 * index], replies[2 * index + 1]
                if not isinstance(ttl, int) or ttl == -2:  # gone since the scan
                    continue
                entries += 1
                size += _key_bytes(name, length)
                if ttl == -1:
                    without_expiry += 1
                    continue
                soonest = ttl if soonest is None else min(soonest, ttl)
                latest = ttl if latest is None else max(latest, ttl)
        expiring = None if soonest is None or latest is None else (now + soonest, now + latest)
        return StoreStats(
            entries=entries,
            bytes=size,
            expiring=expiring,
            without_expiry=without_expiry,
            server=await self._memory(),
        )

    async def delete_all(self) -> Removed:
        """Delete every key under the prefix (commands and tests; scans, never ``FLUSHDB``); what
        it removed."""
        entries = size = 0
        async for names in self._scan():
            pipe = self._redis().pipeline(transaction=True)  # the lengths of what is deleted
            for name in names:
                pipe.strlen(name)
            pipe.delete(*names)
            replies = await self._run_command(pipe.execute(raise_on_error=False))
            *lengths, deleted = replies
            if isinstance(deleted, Exception):
                raise CacheStoreError(f"{self.where}: DEL refused: {deleted}")
            entries += int(deleted)
            size += sum(_key_bytes(name, length) for name, length in zip(names, lengths, strict=True))
        return Removed(entries=entries, bytes=size)

    async def _scan(self) -> AsyncIterator[list[bytes]]:
        """The key names under the prefix, a batch per ``SCAN`` round trip (a key may come twice,
        as ``SCAN`` promises no more; a batch is never empty)."""
        client = self._redis()
        pattern = _glob_escape(self.key_prefix) + "*"
        cursor = 0
        while True:
            cursor, names = await self._run_command(client.scan(cursor, match=pattern, count=SCAN_KEYS))
            if names:
                yield list(names)
            if cursor == 0:
                return

    async def _memory(self) -> dict[str, Any]:
        """The server's memory in use and its bound (empty if ``INFO`` is refused)."""
        try:
            info = await self._run_command(self._redis().info("memory"))
        except CacheStoreError as exc:
            if isinstance(exc.__cause__, ResponseError):  # INFO refused (ACL)
                return {}
            raise
        names = ("used_memory", "maxmemory", "maxmemory_policy")
        return {name: info[name] for name in names if name in info}

    def _redis(self) -> Redis:
        if self._client is None:
            raise CacheStoreError("the Redis store is not started")
        return self._client

    async def _run(self, call: Any, seconds: float | None = None) -> Any:
        """Await ``call`` within ``seconds`` (default: the store's timeout); any failure as
        :class:`CacheStoreError`."""
        limit = self.timeout if seconds is None else seconds
        try:
            async with asyncio.timeout(limit):
                return await call
        except TimeoutError:
            raise CacheStoreError(f"no answer from {self.where} within {limit:g} s") from None
        except (RedisError, OSError) as exc:
            raise CacheStoreError(f"{self.where}: {exc}") from exc

    async def _run_command(self, call: Any) -> Any:
        """:meth:`_run` with a command's time (:data:`COMMAND_TIMEOUT_SECONDS` at least)."""
        return await self._run(call, max(self.timeout, COMMAND_TIMEOUT_SECONDS))

    async def _check_bound(self) -> None:
        try:
            info = await self._run(self._redis().info("memory"))
        except CacheStoreError as exc:
            if isinstance(exc.__cause__, ResponseError):  # INFO refused (ACL): nothing to check
                return
            raise
        maxmemory = info.get("maxmemory", 0)
        policy = str(info.get("maxmemory_policy", ""))
        if not maxmemory:
            log.warning(
                "summary cache: the Redis server has no maxmemory: only the entries' TTL bounds the store",
                server=self.where,
                ttl_seconds=self.ttl_seconds,
            )
        elif policy == "noeviction":
            log.warning(
                "summary cache: the Redis server's maxmemory-policy is noeviction: once full, every "
                "write fails (set allkeys-lru, or volatile-lru on a shared server)",
                server=self.where,
            )
        elif policy.startswith("volatile") and not self.ttl_seconds:
            log.warning(
                "summary cache: the Redis server evicts only keys with a TTL, and ttl_seconds is 0: "
                "docsumd's entries are never evicted",
                server=self.where,
                policy=policy,
            )


def _key_bytes(name: bytes, length: object) -> int:
    """The bytes of key ``name`` whose ``STRLEN`` answered ``length``: 0 for a key that is gone (a
    string is never empty), its name alone for a key of another type (an error answered)."""
    if isinstance(length, int):
        return len(name) + length if length else 0
    return len(name)


def public_url(url: str) -> str:
    """``url`` as it may be shown: its scheme, host, port and database, or its socket's path, as
    redis-py reads them; never its user, password or other query arguments (``?password=``).
    ValueError if redis-py cannot read it (its message is not passed on: it may quote the password)."""
    scheme = url.partition("://")[0]
    try:
        parts: dict[str, Any] = parse_url(url)  # type: ignore[no-untyped-call]  # redis-py's own reading
    except (ValueError, TypeError):
        raise ValueError("not a URL redis-py can read (not shown: it may hold a password)") from None
    database = parts.get("db", 0)
    if "path" in parts:
        return f"{scheme}://{parts['path']}?db={database}"
    host = str(parts.get("host", "localhost"))
    if ":" in host:
        host = f"[{host}]"
    return f"{scheme}://{host}:{parts.get('port', 6379)}/{database}"


def _glob_escape(text: str) -> str:
    """``text`` matched literally in a Redis glob pattern."""
    return "".join(f"\\{char}" if char in "*?[]\\" else char for char in text)
