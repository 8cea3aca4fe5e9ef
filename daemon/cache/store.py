"""What a cache store is (:class:`CacheStore`), and what it holds (:class:`CachedSummary`, encoded by
:func:`encode_entry` and checked by :func:`decode_entry`).

A store maps key ids (:attr:`daemon.cache.keys.CacheKey.id`) to encoded entries, bytes it does not
look into. Two implementations: :class:`daemon.cache.sqlite.SqliteStore` (embedded, the default)
and :class:`daemon.cache.redis.RedisStore` (shared); both can also say what they hold and empty
themselves (:class:`ManagedStore`, for the ``docsumd cache`` commands). A store bounds its own
time: each call returns or raises :class:`CacheStoreError` within its timeout;
:class:`daemon.cache.cache.SummaryCache` turns every failure into a miss.

An entry is JSON, compressed with zlib when that makes it smaller by a useful margin (the first
byte tells: ``{`` plain, ``z`` zlib). Read back, it must be well-formed, of the format this code
writes, and carry the key it was asked for (a store returning another entry's value, or a damaged
one, is a miss, never someone else's summary).
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from daemon.cache.keys import KINDS, CacheKey

ENTRY_FORMAT: Final = 1
"""The stored value's format; a value of another format is a miss."""

COMPRESS_FROM_BYTES: Final = 256
"""Entries whose JSON is at least this long are compressed (shorter ones gain too little)."""
_COMPRESSED: Final = b"z"
_PLAIN: Final = b"{"
_ZLIB_LEVEL: Final = 6


class CacheStoreError(Exception):
    """A store could not answer (unreachable, timed out, unreadable, read-only, rebuilt): a miss."""


class InvalidEntry(ValueError):
    """A stored value that is not an entry this code wrote for the key asked for."""


@dataclass(frozen=True, slots=True)
class CachedSummary:
    """One entry: an engine request's output (part, combine) or a whole document's summary."""

    text: str
    prompt_tokens: int
    """Prompt tokens the engine read to make it (what a hit saves)."""
    generated_tokens: int
    """Tokens the engine generated to make it."""
    finish_reason: str | None
    created: float
    """Unix time it was made."""
    key_parts: Mapping[str, Any] = field(default_factory=dict)
    """What its key held, readably (:attr:`CacheKey.parts`)."""
    fields: Mapping[str, Any] = field(default_factory=dict)
    """A document entry's other result fields (JSON values); empty for requests."""


@dataclass(frozen=True, slots=True)
class PutOutcome:
    """What a write did besides storing."""

    evicted: Mapping[str, int] = field(default_factory=dict)
    """Entries the store evicted to stay within its bound, by kind."""


@dataclass(frozen=True, slots=True)
class StoreStats:
    """What a store holds now (``docsumd cache info``); None where the store does not record it."""

    entries: int
    """Entries (Redis: keys under the store's prefix)."""
    bytes: int
    """What they take: SQLite, the file's pages in use (index included: what ``cache.max_bytes``
    bounds); Redis, the lengths of their keys and values (the server's own overhead not counted)."""
    kinds: Mapping[str, int] = field(default_factory=dict)
    """Entries by kind (``part``, ``combine``, ``document``); empty where not recorded (Redis)."""
    first_used: float | None = None
    """Unix time of the least recently used entry's last use (SQLite: a read or a write, noted to
    within the store's ``touch_seconds``)."""
    last_used: float | None = None
    """Unix time of the most recently used entry's last use."""
    file_bytes: int | None = None
    """SQLite: the file and its ``-wal`` and ``-shm`` files on disk (freed pages are reused, so a
    file does not shrink when entries go)."""
    expiring: tuple[float, float] | None = None
    """Redis: the soonest and the latest expiry (Unix times) among entries with a TTL."""
    without_expiry: int = 0
    """Redis: entries without a TTL."""
    server: Mapping[str, Any] = field(default_factory=dict)
    """Redis: the server's ``used_memory``, ``maxmemory`` and ``maxmemory_policy`` (empty if ``INFO``
    is refused)."""


@dataclass(frozen=True, slots=True)
class Removed:
    """What emptying a store removed (``docsumd cache clear``)."""

    entries: int
    bytes: int
    """As :attr:`StoreStats.bytes`: SQLite, the pages freed (reused by later entries); Redis, the
    keys' and values' lengths."""


class CacheStore(Protocol):
    """Encoded entries by key id. Each call returns or raises :class:`CacheStoreError` within the
    store's timeout; ``start()``/``stop()`` are idempotent and never raise for an unusable store (its
    calls then fail until it is usable again)."""

    backend: str
    """``sqlite`` or ``redis``."""

    async def start(self) -> None:
        """Open or connect (failures are logged; calls retry)."""
        ...

    async def stop(self) -> None:
        """Flush what is pending and close."""
        ...

    async def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        """The values of ``keys``, None where absent, in one round trip."""
        ...

    async def put_many(self, items: Sequence[tuple[str, str, bytes]]) -> PutOutcome:
        """Store ``(key id, kind, value)`` items, replacing any (the same key's values are equivalent)."""
        ...

    async def maintain(self) -> int | None:
        """Periodic upkeep (pending access times, the file still in place); the store's size in
        bytes if known."""
        ...


class ManagedStore(CacheStore, Protocol):
    """A store that the ``docsumd cache`` commands can look into and empty (both stores are)."""

    async def stats(self) -> StoreStats:
        """What the store holds now."""
        ...

    async def delete_all(self) -> Removed:
        """Delete every entry of this store (the SQLite file's; the Redis keys under its prefix),
        and only those."""
        ...


def encode_entry(key: CacheKey, entry: CachedSummary) -> bytes:
    """The stored bytes of ``entry`` under ``key``."""
    document = {
        "format": ENTRY_FORMAT,
        "key": key.id,
        "kind": key.kind,
        "text": entry.text,
        "prompt_tokens": entry.prompt_tokens,
        "generated_tokens": entry.generated_tokens,
        "finish_reason": entry.finish_reason,
        "created": entry.created,
        "key_parts": dict(entry.key_parts),
        "fields": dict(entry.fields),
    }
    plain = json.dumps(document, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode(
        "utf-8", "surrogatepass"
    )
    if len(plain) >= COMPRESS_FROM_BYTES:
        packed = _COMPRESSED + zlib.compress(plain, _ZLIB_LEVEL)
        if len(packed) < len(plain) * 0.9:
            return packed
    return plain


def decode_entry(key: CacheKey, value: bytes, *, max_bytes: int) -> CachedSummary:
    """The entry ``value`` holds for ``key``; :class:`InvalidEntry` unless it is one this code wrote
    for that key, decoding to at most ``max_bytes``."""
    if value[:1] == _COMPRESSED:
        try:
            inflater = zlib.decompressobj()
            plain = inflater.decompress(value[1:], max_bytes + 1)
        except zlib.error as exc:
            raise InvalidEntry(f"not zlib data: {exc}") from None
        if len(plain) > max_bytes or inflater.unconsumed_tail:
            raise InvalidEntry(f"inflates past {max_bytes} bytes")
    elif value[:1] == _PLAIN:
        plain = value
    else:
        raise InvalidEntry("unknown encoding")
    try:
        document = json.loads(plain)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise InvalidEntry(f"not JSON: {exc}") from None
    return _entry_of(key, document)


def _entry_of(key: CacheKey, document: Any) -> CachedSummary:
    if not isinstance(document, dict) or document.get("format") != ENTRY_FORMAT:
        raise InvalidEntry("not an entry of this format")
    if document.get("key") != key.id or document.get("kind") not in KINDS:
        raise InvalidEntry("an entry of another key")
    text, finish = document.get("text"), document.get("finish_reason")
    counts = (document.get("prompt_tokens"), document.get("generated_tokens"))
    created = document.get("created")
    parts, fields = document.get("key_parts"), document.get("fields")
    if (
        not isinstance(text, str)
        or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in counts)
        or not (finish is None or isinstance(finish, str))
        or not isinstance(created, int | float)
        or isinstance(created, bool)
        or not isinstance(parts, dict)
        or not isinstance(fields, dict)
    ):
        raise InvalidEntry("a field of the wrong type")
    prompt_tokens, generated_tokens = counts
    assert isinstance(prompt_tokens, int)  # checked above
    assert isinstance(generated_tokens, int)
    return CachedSummary(
        text=text,
        prompt_tokens=prompt_tokens,
        generated_tokens=generated_tokens,
        finish_reason=finish,
        created=float(created),
        key_parts=parts,
        fields=fields,
    )
