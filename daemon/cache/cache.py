"""The summary cache as the summarizer uses it: keys, lookups and writes that never fail a document.

:class:`SummaryCache` wraps one store (:mod:`daemon.cache.sqlite` or :mod:`daemon.cache.redis`) with
what every store needs: entries encoded and checked (:mod:`daemon.cache.store`), metrics by kind,
and a circuit breaker. A store call that fails or times out is a miss (a warning once per outage),
and the store is then skipped for ``cache.retry_seconds``, every lookup a miss at no cost, before it
is tried again: a slow or dead store costs one timeout per ``retry_seconds``, never a stall.

How a summarizer uses it (one document)::

    keys = cache.keys
    # the whole-document shortcut, before extraction: same bytes, same settings -> the same summary
    doc_key = keys.document(sha256_of([raw]), settings=..., options=...)
    if (hit := await cache.get(doc_key)) is not None: ...      # a new result from hit.text, hit.fields
    # the map step: every part's key, one lookup for all
    part_keys = [keys.part(chunk.token_ids, step) for chunk in chunks]
    found = await cache.get_many(part_keys)                   # None where the engine must run
    ...                                                       # run the misses
    await cache.put_many([(key, CachedSummary(...)) for each new output])
    # each combine step: its children's keys, its labels and settings
    key = keys.combine(child_keys, step, labels=labels, verbatim=opening_ids)

Only what the engine made is written; which outputs to leave out (one cut short under sampling, a
structured step's invalid output, a retry's) is the caller's choice.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from daemon.cache.keys import KINDS, CacheKey, KeyMaker, KeyScope, model_revision
from daemon.cache.store import (
    CachedSummary,
    CacheStore,
    CacheStoreError,
    InvalidEntry,
    ManagedStore,
    decode_entry,
    encode_entry,
)
from daemon.config import CacheConfig
from daemon.lifecycle import Lifecycle
from daemon.ops.logging import get_logger
from daemon.ops.metrics import (
    CACHE_EVICTIONS,
    CACHE_LOOKUPS,
    CACHE_REUSED_TOKENS,
    CACHE_SECONDS,
    CACHE_STORE_BYTES,
    CACHE_UP,
    CACHE_WRITES,
)

log = get_logger(__name__)

MAINTENANCE_SECONDS: Final = 15.0
"""How often the store's upkeep runs (access times written, size read, a skipped store retried)."""


class SummaryCache(Lifecycle):
    """Lookups and writes of summaries by key over one store (see the module's doc). Safe to call
    concurrently; no call raises for a store's failure."""

    def __init__(
        self,
        store: CacheStore,
        keys: KeyMaker,
        *,
        max_value_bytes: int,
        retry_seconds: float,
        maintenance_seconds: float = MAINTENANCE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.keys = keys
        self.max_value_bytes = max_value_bytes
        self.retry_seconds = retry_seconds
        self.maintenance_seconds = maintenance_seconds
        self._clock = clock
        self._skip_until: float | None = None
        """Set while the store is skipped after a failure: until when (``clock``)."""
        self._task: asyncio.Task[None] | None = None

    @property
    def available(self) -> bool:
        """False while the store is skipped after a failure."""
        return self._skip_until is None or self._clock() >= self._skip_until

    async def start(self) -> None:
        """Open the store and start its upkeep; idempotent. A store that cannot be used now is not
        an error: lookups are misses until it can."""
        if self._task is not None:
            return
        await self.store.start()
        CACHE_UP.set(1)
        self._task = asyncio.create_task(self._maintain_forever(), name="docsumd-cache-upkeep")

    async def stop(self) -> None:
        """Stop the upkeep and close the store; idempotent."""
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await self.store.stop()
        CACHE_UP.set(0)

    async def get(self, key: CacheKey) -> CachedSummary | None:
        """The entry of ``key``, or None (absent, or the store failed)."""
        return (await self.get_many([key]))[0]

    async def get_many(self, keys: Sequence[CacheKey]) -> list[CachedSummary | None]:
        """The entries of ``keys`` in one store call, None where there is none to use."""
        if not keys:
            return []
        if not self._may_call():
            _count_lookups(keys, "skipped")
            return [None] * len(keys)
        started = time.perf_counter()
        try:
            values = await self.store.get_many([key.id for key in keys])
        except CacheStoreError as exc:
            self._failed(exc, "lookup")
            _count_lookups(keys, "error")
            return [None] * len(keys)
        finally:
            CACHE_SECONDS.labels(operation="get").observe(time.perf_counter() - started)
        self._answered()
        return [self._entry(key, value) for key, value in zip(keys, values, strict=True)]

    async def put(self, key: CacheKey, entry: CachedSummary) -> None:
        """Store ``entry`` under ``key`` (a failure is counted and logged, not raised)."""
        await self.put_many([(key, entry)])

    async def put_many(self, items: Sequence[tuple[CacheKey, CachedSummary]]) -> None:
        """Store each ``(key, entry)`` in one store call."""
        encoded: list[tuple[str, str, bytes]] = []
        for key, entry in items:
            value = encode_entry(key, entry)
            if len(value) > self.max_value_bytes:
                CACHE_WRITES.labels(kind=key.kind, outcome="too_large").inc()
                continue
            encoded.append((key.id, key.kind, value))
        if not encoded:
            return
        kinds = [kind for _, kind, _ in encoded]
        if not self._may_call():
            _count_writes(kinds, "skipped")
            return
        started = time.perf_counter()
        try:
            outcome = await self.store.put_many(encoded)
        except CacheStoreError as exc:
            self._failed(exc, "write")
            _count_writes(kinds, "error")
            return
        finally:
            CACHE_SECONDS.labels(operation="put").observe(time.perf_counter() - started)
        self._answered()
        _count_writes(kinds, "ok")
        for kind, count in outcome.evicted.items():
            if kind in KINDS:
                CACHE_EVICTIONS.labels(kind=kind).inc(count)

    async def maintain(self) -> None:
        """One round of the store's upkeep (run every ``maintenance_seconds`` once started)."""
        if not self._may_call():
            return
        try:
            size = await self.store.maintain()
        except CacheStoreError as exc:
            self._failed(exc, "upkeep")
            return
        self._answered()
        if size is not None:
            CACHE_STORE_BYTES.set(size)

    # -- internals ---------------------------------------------------------------------------------

    def _entry(self, key: CacheKey, value: bytes | None) -> CachedSummary | None:
        if value is None:
            CACHE_LOOKUPS.labels(kind=key.kind, outcome="miss").inc()
            return None
        try:
            entry = decode_entry(key, value, max_bytes=self.max_value_bytes)
        except InvalidEntry as exc:
            log.warning(
                "summary cache: an unreadable entry is ignored (a miss)", key=key.id, problem=str(exc)
            )
            CACHE_LOOKUPS.labels(kind=key.kind, outcome="error").inc()
            return None
        CACHE_LOOKUPS.labels(kind=key.kind, outcome="hit").inc()
        CACHE_REUSED_TOKENS.labels(kind=key.kind).inc(entry.prompt_tokens + entry.generated_tokens)
        return entry

    def _may_call(self) -> bool:
        """Whether to call the store now: yes unless it is skipped after a failure (once the wait
        is over, calls try it again)."""
        return self.available

    def _failed(self, exc: CacheStoreError, doing: str) -> None:
        first = self._skip_until is None
        self._skip_until = self._clock() + self.retry_seconds
        CACHE_UP.set(0)
        if first:
            log.warning(
                f"summary cache: {doing} failed; lookups are misses, the store is tried again every "
                f"{self.retry_seconds:g} s",
                backend=self.store.backend,
                error=str(exc),
            )
        else:
            log.debug("summary cache: the store still fails", backend=self.store.backend, error=str(exc))

    def _answered(self) -> None:
        if self._skip_until is not None:
            self._skip_until = None
            log.info("summary cache: the store answers again", backend=self.store.backend)
        CACHE_UP.set(1)

    async def _maintain_forever(self) -> None:
        while True:
            await asyncio.sleep(self.maintenance_seconds)
            try:
                await self.maintain()
            except Exception:  # never the daemon's end: logged, and the next round runs
                log.exception("summary cache: upkeep failed")


def _count_lookups(keys: Sequence[CacheKey], outcome: str) -> None:
    for key in keys:
        CACHE_LOOKUPS.labels(kind=key.kind, outcome=outcome).inc()


def _count_writes(kinds: Sequence[str], outcome: str) -> None:
    for kind in kinds:
        CACHE_WRITES.labels(kind=kind, outcome=outcome).inc()


def create_store(
    config: CacheConfig, *, existing_only: bool = False, timeout: float | None = None
) -> ManagedStore:
    """The store ``config`` names (not started). ``existing_only``: an SQLite file is opened only if
    it is already docsumd's cache, never made or rebuilt (the ``docsumd cache`` commands; see
    :mod:`daemon.cache.sqlite`); ``timeout``: the longest one call may take (default: the config's)."""
    if config.backend == "redis":
        from daemon.cache.redis import RedisStore  # redis-py is imported only where it is used

        redis = config.redis
        if redis is None:  # pragma: no cover - the config's own check
            raise ValueError('backend "redis" needs [cache.redis]')
        return RedisStore(
            redis.url.get_secret_value(),
            timeout=redis.timeout_seconds if timeout is None else timeout,
            ttl_seconds=redis.ttl_seconds,
            key_prefix=redis.key_prefix,
            max_value_bytes=config.max_value_bytes,
            max_connections=redis.max_connections,
        )
    from daemon.cache.sqlite import SqliteStore

    return SqliteStore(
        Path(config.path),
        max_bytes=config.max_bytes,
        timeout=config.timeout_seconds if timeout is None else timeout,
        existing_only=existing_only,
    )


async def create_cache(
    config: CacheConfig, engine_arguments: Mapping[str, Any], *, model: str, tokenizer: str | None = None
) -> SummaryCache | None:
    """The daemon's cache (not started), or None when ``config`` turns it off or the model's revision
    cannot be known (logged: keys without it could return another model's summaries).

    ``engine_arguments``: the keywords vLLM is given (:func:`daemon.engine.vllm_args.engine_kwargs`);
    ``model``, ``tokenizer``: ``engine.model`` and ``engine.tokenizer``. Reads the model's files for its
    fingerprint (off the event loop)."""
    if not config.enabled:
        CACHE_UP.set(0)
        return None
    revision = await asyncio.to_thread(model_revision, model)
    tokenizer_revision = None
    if tokenizer is not None and tokenizer != model:
        tokenizer_revision = await asyncio.to_thread(model_revision, tokenizer)
    if revision is None or (tokenizer is not None and tokenizer != model and tokenizer_revision is None):
        log.warning(
            "summary cache: off: the model's files cannot be found to identify its revision (use a "
            "local model folder, or a model id already in the local Hugging Face cache)",
            model=model,
            tokenizer=tokenizer,
        )
        CACHE_UP.set(0)
        return None
    scope = KeyScope.create(
        engine_arguments, model=revision, tokenizer=tokenizer_revision, namespace=config.namespace
    )
    log.info(
        "summary cache",
        backend=config.backend,
        where=str(config.path) if config.backend == "sqlite" else "[cache.redis] url",
        model_revision=revision.digest,
        model_files=revision.files,
    )
    return SummaryCache(
        create_store(config),
        KeyMaker(scope),
        max_value_bytes=config.max_value_bytes,
        retry_seconds=config.retry_seconds,
    )
