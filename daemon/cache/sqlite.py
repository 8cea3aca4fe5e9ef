"""The embedded store: one SQLite file in WAL mode, bounded in bytes, least recently used out first.

Why SQLite through the standard library's ``sqlite3``: no server and no new dependency, one file
that survives restarts, readers that never wait for a writer (WAL), and locking that lets daemons
on one host share the file. (diskcache, the obvious library on SQLite, writes each read's access
time at once, has no bound in bytes of the file, and stops on a damaged file; bench/cache_store.py
measures it beside this store.)

**The table**: ``entries(key, kind, value, used)``, ``used`` being the Unix second of the last read
or write, indexed. A read does not write: a hit whose ``used`` is older than ``touch_seconds`` is
noted in memory, and the notes are written in one statement with the next write, with upkeep
(:meth:`SqliteStore.maintain`), or when enough have gathered.

**The bound**: after each write, the pages in use (``page_count - freelist_count``, times the page
size: the file's real bytes, index included) are compared with ``max_bytes``; past it, the least
recently used entries are deleted in batches until the store is under :data:`LOW_WATER` of the
bound. Freed pages are reused, so the file stays within the bound plus the last write; the ``-wal``
file beside it is checkpointed by SQLite every thousand pages and truncated to
:data:`WAL_LIMIT_BYTES`.

**Faults**: every call runs on threads of the store's own (:class:`~daemon.fs.blocking_io.BlockingIO`)
within ``timeout`` seconds, or raises :class:`~daemon.cache.store.CacheStoreError`. A file that is not
a database or is damaged is deleted and made anew (a warning; it held nothing that cannot be made
again); one that was deleted or replaced while open is reopened at its path; one that cannot be
opened or written (a read-only folder or file, a full disk) fails each call until it can.

**Commands** (``docsumd cache info``, ``clear``) open a store with ``existing_only``: a file that is
not there is not made, and one that is damaged, of another layout or not docsumd's is left as it is
(the call fails with what it is), never rebuilt or converted: looking at a cache does not change it.
:meth:`SqliteStore.delete_all` deletes the entries there were when it began, :data:`CLEAR_BATCH` at a
time, each batch a transaction of its own: a daemon writing to the file meanwhile waits for one batch
at most (a clear's single transaction would hold SQLite's lock for seconds on a large file, the
deleted pages being overwritten with zeros, and fail the daemons' writes meanwhile); an entry a
daemon writes during the clear may stay. A command's full scan (:meth:`SqliteStore.stats`) may take
:data:`COMMAND_SCAN_SECONDS` on top of the timeout: it writes nothing, and waits for no lock.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final, TypeVar

from daemon.cache.store import CacheStoreError, PutOutcome, Removed, StoreStats
from daemon.fs.blocking_io import BlockingIO
from daemon.ops.logging import get_logger

log = get_logger(__name__)

T = TypeVar("T")

STORE_SCHEMA: Final = 1
"""The table layout's version (``PRAGMA user_version``); a cache file of another is emptied."""
APPLICATION_ID: Final = 0x64736364
"""``PRAGMA application_id`` of docsumd's cache files ("dscd"): how a file is known to be one."""
_SQLITE_MAGIC: Final = b"SQLite format 3\0"
LOW_WATER: Final = 0.9
WAL_LIMIT_BYTES: Final = 16 << 20
BUSY_SHARE: Final = 0.75
"""The share of a call's ``timeout`` that SQLite waits for another process's write: the wait ends
before the call's time limit, so a store locked too long fails the call itself (``database is
locked``, rolled back), never leaving a thread given up on that would write later, after its caller
was told the call failed (a clear reported failed that empties the store after all)."""
CLEAR_BATCH: Final = 1000
"""Entries :meth:`SqliteStore.delete_all` deletes per transaction."""
COMMAND_SCAN_SECONDS: Final = 300.0
"""Time a command's read of every entry (:meth:`SqliteStore.stats`) may take beyond ``timeout``."""
TOUCH_BATCH: Final = 512
"""Access times noted in memory that are written at once without waiting for a write."""
_QUERY_BATCH: Final = 500
_MAX_EVICTION_ROUNDS: Final = 10_000
_CORRUPT_CODES: Final = frozenset({sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB})
_REOPEN_CODES: Final = frozenset(
    {sqlite3.SQLITE_READONLY, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_PERM}
)
_SCHEMA: Final = (
    "CREATE TABLE IF NOT EXISTS entries ("
    " key TEXT PRIMARY KEY NOT NULL, kind TEXT NOT NULL, value BLOB NOT NULL, used INTEGER NOT NULL)",
    "CREATE INDEX IF NOT EXISTS entries_used ON entries(used)",
)


class SqliteStore:
    """The embedded store at ``path`` (see the module's doc). Safe to call concurrently."""

    backend = "sqlite"

    def __init__(
        self,
        path: Path,
        *,
        max_bytes: int,
        timeout: float,
        touch_seconds: float = 60.0,
        existing_only: bool = False,
        io: BlockingIO | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``timeout``: the longest one call may take, waiting for another process's write included;
        ``touch_seconds``: a hit refreshes its entry's access time only when it is older than this;
        ``existing_only``: open only a file that is already docsumd's cache (see the module's doc)."""
        self.path = path
        self.existing_only = existing_only
        self.max_bytes = max_bytes
        self.timeout = timeout
        self.touch_seconds = touch_seconds
        self._io = io or BlockingIO("docsumd-cache-io", workers=2, max_stuck=4)
        self._clock = clock
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        self._identity: tuple[int, int] | None = None
        self._touched: set[str] = set()
        self._started = False

    # -- the async API (CacheStore) ----------------------------------------------------------------

    async def start(self) -> None:
        """Open (or create) the file; a failure is logged and retried by the next call."""
        if self._started:
            return
        self._started = True
        try:
            await self._call(_nothing)
        except CacheStoreError as exc:
            log.warning("summary cache: the store cannot be used now; lookups are misses", error=str(exc))

    async def stop(self) -> None:
        """Write the access times noted and close."""
        if not self._started:
            return
        self._started = False
        with contextlib.suppress(CacheStoreError):
            await self._call(self._flush_touched)
        with contextlib.suppress(CacheStoreError):
            await self._io.run(self._close_locked, time_limit=self.timeout)

    async def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        """The values of ``keys`` (None where absent)."""
        return await self._call(self._get, keys)

    async def put_many(self, items: Sequence[tuple[str, str, bytes]]) -> PutOutcome:
        """Store ``(key, kind, value)`` items, then evict past the bound."""
        return await self._call(self._put, items)

    async def maintain(self) -> int | None:
        """Write the access times noted; the bytes in use."""
        return await self._call(self._maintain)

    async def stats(self) -> StoreStats:
        """What the store holds: entries by kind, pages in use, the oldest and newest use, the
        files' size (one consistent snapshot; it writes nothing)."""
        return await self._call(self._stats, time_limit=self.timeout + COMMAND_SCAN_SECONDS)

    async def delete_all(self) -> Removed:
        """Delete every entry there was when called, a batch per transaction (``docsumd cache
        clear``, tests; see the module's doc); what it removed. A failure after some batches says
        how many entries went."""
        last = await self._call(self._last_row)
        removed = Removed(entries=0, bytes=0)
        while True:
            try:
                batch = await self._call(self._delete_batch, last)
            except CacheStoreError as exc:
                if removed.entries:
                    raise CacheStoreError(f"{exc} (after deleting {removed.entries} entries)") from None
                raise
            if not batch.entries:
                return removed
            removed = Removed(entries=removed.entries + batch.entries, bytes=removed.bytes + batch.bytes)

    # -- on the store's threads --------------------------------------------------------------------

    async def _call(self, function: Callable[..., T], *args: Any, time_limit: float | None = None) -> T:
        limit = self.timeout if time_limit is None else time_limit
        try:
            return await self._io.run(self._locked, function, *args, time_limit=limit)
        except TimeoutError:
            raise CacheStoreError(f"no answer from {self.path} within {limit:g} s") from None
        except OSError as exc:
            raise CacheStoreError(f"{self.path}: {exc}") from None

    def _locked(self, function: Callable[..., T], *args: Any) -> T:
        if not self._lock.acquire(timeout=self.timeout):
            raise CacheStoreError("the store is busy with an earlier call that does not end")
        try:
            db = self._open_if_needed()
            try:
                return function(db, *args)
            except sqlite3.DatabaseError as exc:
                raise self._failed(exc) from None
        finally:
            self._lock.release()

    def _open_if_needed(self) -> sqlite3.Connection:
        if self._db is not None:
            if self._still_in_place():
                return self._db
            log.warning(
                "summary cache: the store's file was deleted or replaced; reopening it", path=str(self.path)
            )
            self._close()
        try:
            return self._open()
        except sqlite3.DatabaseError as exc:
            if _code(exc) not in _CORRUPT_CODES:
                self._close()
                raise CacheStoreError(f"cannot open {self.path}: {exc}") from None
            if self.existing_only:
                self._close()
                raise CacheStoreError(_LEFT_DAMAGED.format(path=self.path, problem=exc)) from None
            problem = str(exc)
        self._rebuild(f"not a usable database ({problem})")
        try:
            return self._open()
        except sqlite3.DatabaseError as exc:
            self._close()
            raise CacheStoreError(f"cannot open {self.path} after rebuilding it: {exc}") from None

    def _open(self) -> sqlite3.Connection:
        if self.existing_only:
            # mode=rw: SQLite opens the file that is there and makes none (nor its folder).
            target: str | Path = f"{self.path.absolute().as_uri()}?mode=rw"
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            # The entries are summaries of the documents: readable by the daemon's user only (SQLite
            # gives its -wal and -shm files the database file's mode). Made at the link's target when
            # the path is a link: O_EXCL refuses a link, and SQLite would make the target itself,
            # with the umask's mode.
            with contextlib.suppress(FileExistsError):
                os.close(os.open(self.path.resolve(), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            target = self.path
        db = sqlite3.connect(
            target,
            timeout=self.timeout * BUSY_SHARE,
            isolation_level=None,
            check_same_thread=False,
            uri=self.existing_only,
        )
        self._db = db
        try:
            self._prepare(db)
        except BaseException:
            self._close()
            raise
        info = os.stat(self.path)
        self._identity = (info.st_dev, info.st_ino)
        return db

    def _prepare(self, db: sqlite3.Connection) -> None:
        """Settings, and the table: made in a new file, remade in one of another version of ours; a
        database that is not docsumd's cache is refused, never changed (its journal mode included)."""
        db.execute(f"PRAGMA busy_timeout = {int(self.timeout * BUSY_SHARE * 1000)}")
        application = db.execute("PRAGMA application_id").fetchone()[0]
        version = db.execute("PRAGMA user_version").fetchone()[0]
        tables = db.execute("SELECT count(*) FROM sqlite_schema WHERE type = 'table'").fetchone()[0]
        if application != APPLICATION_ID and tables:
            raise CacheStoreError(
                f"{self.path} is a database that is not docsumd's summary cache: left as it is "
                "(set cache.path to a file of its own)"
            )
        current = application == APPLICATION_ID and version == STORE_SCHEMA
        if not current and self.existing_only:
            raise CacheStoreError(
                f"{self.path} was made by another version of docsumd (cache layout {version}): left as "
                "it is (the daemon empties it when it next opens it)"
                if application == APPLICATION_ID
                else f"{self.path} holds no summary cache yet (a database without docsumd's table)"
            )
        if db.execute("PRAGMA journal_mode = WAL").fetchone()[0].lower() != "wal":
            raise CacheStoreError(f"{self.path}: WAL mode refused (a file system without shared memory?)")
        db.execute("PRAGMA synchronous = NORMAL")  # WAL: durable across crashes, not power cuts
        db.execute(f"PRAGMA journal_size_limit = {WAL_LIMIT_BYTES}")
        if current:
            return
        db.execute("BEGIN IMMEDIATE")
        if tables:
            log.warning("summary cache: the store was made by another version; emptying it", version=version)
            db.execute("DROP TABLE IF EXISTS entries")
        for statement in _SCHEMA:
            db.execute(statement)
        db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        db.execute(f"PRAGMA user_version = {STORE_SCHEMA}")
        db.execute("COMMIT")

    def _still_in_place(self) -> bool:
        try:
            info = os.stat(self.path)
        except OSError:
            return False
        return (info.st_dev, info.st_ino) == self._identity

    def _failed(self, exc: sqlite3.DatabaseError) -> CacheStoreError:
        """The error to raise for ``exc``, after rebuilding a damaged file or closing a connection
        the next call should open afresh."""
        code = _code(exc)
        if code in _CORRUPT_CODES and self.existing_only:
            self._close()
            return CacheStoreError(_LEFT_DAMAGED.format(path=self.path, problem=exc))
        if code in _CORRUPT_CODES:
            self._rebuild(f"damaged ({exc})")
            return CacheStoreError(f"{self.path} was damaged and is rebuilt empty")
        if code in _REOPEN_CODES:
            self._close()
        with contextlib.suppress(sqlite3.Error):
            if self._db is not None and self._db.in_transaction:
                self._db.execute("ROLLBACK")
        return CacheStoreError(f"{self.path}: {exc}")

    def _rebuild(self, reason: str) -> None:
        """Start afresh: the damaged file deleted if it is docsumd's (its header says so, or it is
        empty), else moved aside to ``PATH.unusable`` (never deleting a file that may be another's)."""
        self._close()
        self._touched.clear()
        ours = _is_our_file(self.path)
        if ours:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
        else:
            with contextlib.suppress(FileNotFoundError):
                os.replace(self.path, f"{self.path}.unusable")
        for suffix in ("-wal", "-shm", "-journal"):
            with contextlib.suppress(FileNotFoundError):
                Path(f"{self.path}{suffix}").unlink()
        log.warning(
            "summary cache: the store's file is unusable; starting an empty one",
            path=str(self.path),
            reason=reason,
            old_file="deleted" if ours else f"moved to {self.path}.unusable",
        )

    def _close(self) -> None:
        db, self._db, self._identity = self._db, None, None
        if db is not None:
            with contextlib.suppress(sqlite3.Error):
                db.close()

    def _close_locked(self) -> None:
        if self._lock.acquire(timeout=self.timeout):
            try:
                self._close()
            finally:
                self._lock.release()

    def _get(self, db: sqlite3.Connection, keys: Sequence[str]) -> list[bytes | None]:
        found: dict[str, bytes] = {}
        stale = int(self._clock() - self.touch_seconds)
        for start in range(0, len(keys), _QUERY_BATCH):
            batch = list(dict.fromkeys(keys[start : start + _QUERY_BATCH]))
            marks = ",".join("?" * len(batch))
            rows = db.execute(f"SELECT key, value, used FROM entries WHERE key IN ({marks})", batch)
            for key, value, used in rows:
                found[key] = bytes(value)
                if used < stale:
                    self._touched.add(key)
        if len(self._touched) >= TOUCH_BATCH:
            self._flush_touched(db)
        return [found.get(key) for key in keys]

    def _flush_touched(self, db: sqlite3.Connection) -> None:
        if not self._touched:
            return
        db.execute("BEGIN IMMEDIATE")
        self._write_touched(db)
        db.execute("COMMIT")

    def _write_touched(self, db: sqlite3.Connection) -> None:
        touched, self._touched = list(self._touched), set()
        now = int(self._clock())
        for start in range(0, len(touched), _QUERY_BATCH):
            batch = touched[start : start + _QUERY_BATCH]
            marks = ",".join("?" * len(batch))
            db.execute(f"UPDATE entries SET used = ? WHERE key IN ({marks})", [now, *batch])

    def _put(self, db: sqlite3.Connection, items: Sequence[tuple[str, str, bytes]]) -> PutOutcome:
        if not items:
            return PutOutcome()
        now = int(self._clock())
        db.execute("BEGIN IMMEDIATE")
        self._write_touched(db)
        db.executemany(
            "INSERT INTO entries (key, kind, value, used) VALUES (?, ?, ?, ?) ON CONFLICT (key) DO UPDATE"
            " SET kind = excluded.kind, value = excluded.value, used = excluded.used",
            [(key, kind, value, now) for key, kind, value in items],
        )
        db.execute("COMMIT")
        average = sum(len(key) + len(value) + 48 for key, _, value in items) // len(items)
        return PutOutcome(evicted=self._evict(db, average))

    def _evict(self, db: sqlite3.Connection, average_entry_bytes: int) -> dict[str, int]:
        """Delete the least recently used entries while the pages in use exceed the bound, down to
        :data:`LOW_WATER` of it; the counts deleted by kind."""
        evicted: dict[str, int] = {}
        used = _used_bytes(db)
        if used <= self.max_bytes:
            return evicted
        target = int(self.max_bytes * LOW_WATER)
        for _ in range(_MAX_EVICTION_ROUNDS):
            batch = max(16, min(10_000, (used - target) // max(average_entry_bytes, 1) + 1))
            db.execute("BEGIN IMMEDIATE")
            kinds = db.execute(
                "DELETE FROM entries WHERE key IN"
                " (SELECT key FROM entries ORDER BY used LIMIT ?) RETURNING kind",
                (batch,),
            ).fetchall()
            db.execute("COMMIT")
            for (kind,) in kinds:
                evicted[kind] = evicted.get(kind, 0) + 1
            used = _used_bytes(db)
            if not kinds or used <= target:
                break
        return evicted

    def _maintain(self, db: sqlite3.Connection) -> int:
        self._flush_touched(db)
        return _used_bytes(db)

    def _stats(self, db: sqlite3.Connection) -> StoreStats:
        db.execute("BEGIN")  # one snapshot for every count (a reader never waits for a writer)
        kinds = dict(db.execute("SELECT kind, count(*) FROM entries GROUP BY kind ORDER BY kind").fetchall())
        first, last = db.execute("SELECT min(used), max(used) FROM entries").fetchone()
        used = _used_bytes(db)
        db.execute("COMMIT")
        return StoreStats(
            entries=sum(kinds.values()),
            bytes=used,
            kinds=kinds,
            first_used=None if first is None else float(first),
            last_used=None if last is None else float(last),
            file_bytes=_files_bytes(self.path),
        )

    def _last_row(self, db: sqlite3.Connection) -> int:
        """The newest entry's row id (entries written later have higher ones; a rewrite keeps its)."""
        self._touched.clear()
        return int(db.execute("SELECT coalesce(max(rowid), 0) FROM entries").fetchone()[0])

    def _delete_batch(self, db: sqlite3.Connection, last: int) -> Removed:
        """Delete up to :data:`CLEAR_BATCH` entries of row id ``last`` or lower, in one transaction."""
        db.execute("BEGIN IMMEDIATE")
        before = _used_bytes(db)
        deleted = db.execute(
            "DELETE FROM entries WHERE rowid IN"
            " (SELECT rowid FROM entries WHERE rowid <= ? ORDER BY rowid LIMIT ?)",
            (last, CLEAR_BATCH),
        ).rowcount
        freed = before - _used_bytes(db)
        db.execute("COMMIT")
        return Removed(entries=deleted, bytes=max(freed, 0))


_LEFT_DAMAGED: Final = (
    "{path} is not a usable database ({problem}): left as it is (the daemon rebuilds it empty at its "
    "next use, or delete it while no daemon runs)"
)


def _files_bytes(path: Path) -> int:
    """Bytes on disk of the database at ``path`` and its ``-wal`` and ``-shm`` files (beside the
    file a link points to: SQLite puts them there)."""
    real = os.path.realpath(path)
    total = 0
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(OSError):
            total += os.stat(f"{real}{suffix}").st_size
    return total


def _nothing(db: sqlite3.Connection) -> None:
    """A call that only opens the store."""


def _is_our_file(path: Path) -> bool:
    """Whether ``path`` is empty or its SQLite header carries docsumd's application id."""
    try:
        with path.open("rb") as file:
            header = file.read(72)
    except OSError:
        return True  # nothing there to keep
    if not header:
        return True
    return header.startswith(_SQLITE_MAGIC) and int.from_bytes(header[68:72], "big") == APPLICATION_ID


def _used_bytes(db: sqlite3.Connection) -> int:
    """Bytes of the pages in use (the file's pages less its free list)."""
    pages = db.execute("PRAGMA page_count").fetchone()[0]
    free = db.execute("PRAGMA freelist_count").fetchone()[0]
    size = db.execute("PRAGMA page_size").fetchone()[0]
    return int((pages - free) * size)


def _code(exc: sqlite3.Error) -> int:
    """The primary SQLite result code of ``exc`` (-1 if it carries none)."""
    code = getattr(exc, "sqlite_errorcode", None)
    return code & 0xFF if isinstance(code, int) else -1
