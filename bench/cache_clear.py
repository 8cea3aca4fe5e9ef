"""``docsumd cache clear`` beside a daemon writing to the same SQLite file: how long the daemon's
writes wait, with the clear as one transaction or in batches (what ``SqliteStore.delete_all`` does).

A store of ``--entries`` entries (about 0.7 KB each, encoded: a part summary's size) is filled; a
second process opens it as a daemon does (``SqliteStore``, ``--timeout`` seconds a call, as
``cache.timeout_seconds``) and writes 32 entries every 20 ms, timing each write; this process then
clears the store, either

* ``one_transaction``: ``DELETE FROM entries`` in one transaction, as a first version did; or
* ``batched``: :meth:`daemon.cache.sqlite.SqliteStore.delete_all` with ``existing_only`` (the
  command's store): :data:`~daemon.cache.sqlite.CLEAR_BATCH` entries per transaction,

and the daemon writes on for a moment after. Recorded per run: the clear's wall time, the daemon's
slowest write and its writes that failed, by message (SQLite's busy wait ran out, ``database is
locked``, or the call ran past its time limit, ``no answer``: in a daemon a miss and a skipped store,
never a failed document). SQLite as Python's build has it (its ``secure_delete`` default is
reported: when on, every deleted page is overwritten with zeros, which is what makes one large
delete slow). ``--repeats`` runs of each, alternated.

    PYTHONPATH=. .venv/bin/python -m bench.cache_clear [--entries 300000] [--repeats 3] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from bench.lib.results import result_path, write_result
from daemon.cache.sqlite import CLEAR_BATCH, SqliteStore
from daemon.cache.store import CacheStoreError

ENTRY_BYTES = 700
WRITE_EVERY_SECONDS = 0.02
WRITE_ENTRIES = 32


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--entries", type=int, default=300_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=2.0, help="the daemon's cache.timeout_seconds")
    parser.add_argument("--json", type=Path, default=result_path("cache-clear"))
    args = parser.parse_args()
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="docsumd-cache-clear-") as folder:
        path = Path(folder) / "summaries.sqlite3"
        for repeat in range(args.repeats):
            for mode in ("one_transaction", "batched"):
                run = asyncio.run(one_run(path, mode, args.entries, args.timeout))
                run["repeat"] = repeat
                runs.append(run)
                print(json.dumps(run), file=sys.stderr)
    result = {
        "entries": args.entries,
        "entry_bytes": ENTRY_BYTES,
        "daemon_timeout_seconds": args.timeout,
        "clear_batch": CLEAR_BATCH,
        "sqlite": sqlite3.sqlite_version,
        "secure_delete": secure_delete(),
        "runs": runs,
        "summary": summary(runs),
    }
    write_result(args.json, result)
    print(json.dumps(result["summary"], indent=2))
    print(f"written to {args.json}", file=sys.stderr)
    return 0


def secure_delete() -> int:
    db = sqlite3.connect(":memory:")
    try:
        return int(db.execute("PRAGMA secure_delete").fetchone()[0])
    finally:
        db.close()


def remove_store(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(f"{path}{suffix}"):
            os.unlink(f"{path}{suffix}")


async def fill(path: Path, entries: int) -> int:
    remove_store(path)
    store = SqliteStore(path, max_bytes=1 << 40, timeout=60.0)
    await store.start()
    try:
        value = b"z" + os.urandom(ENTRY_BYTES - 1)
        for start in range(0, entries, 10_000):
            await store.put_many(
                [(f"k{i:09d}", "part", value) for i in range(start, min(entries, start + 10_000))]
            )
        size = await store.maintain()
    finally:
        await store.stop()
    return size or 0


async def one_run(path: Path, mode: str, entries: int, daemon_timeout: float) -> dict[str, Any]:
    store_bytes = await fill(path, entries)
    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe()
    daemon = context.Process(target=_daemon, args=(str(path), daemon_timeout, theirs))
    daemon.start()
    try:
        if not ours.poll(120) or ours.recv() != "writing":
            raise RuntimeError("the daemon's process did not start writing")
        await asyncio.sleep(0.5)
        started = time.perf_counter()
        removed = await (clear_in_one_transaction(path) if mode == "one_transaction" else clear_batched(path))
        clear_seconds = time.perf_counter() - started
        await asyncio.sleep(0.5)
        ours.send("stop")
        if not ours.poll(120):
            raise RuntimeError("the daemon's process did not answer")
        latencies, errors = ours.recv()
    finally:
        daemon.join(timeout=60)
        if daemon.is_alive():
            daemon.kill()
    return {
        "mode": mode,
        "store_bytes": store_bytes,
        "removed": removed,
        "clear_seconds": round(clear_seconds, 3),
        "daemon_writes": len(latencies) + sum(errors.values()),
        "daemon_write_errors": sum(errors.values()),
        "daemon_write_error_messages": errors,
        "daemon_write_max_seconds": round(max(latencies, default=0.0), 3),
        "daemon_write_median_seconds": round(statistics.median(latencies), 4) if latencies else None,
    }


async def clear_in_one_transaction(path: Path) -> int:
    def delete() -> int:
        db = sqlite3.connect(path, isolation_level=None, timeout=60.0)
        try:
            db.execute("BEGIN IMMEDIATE")
            deleted = db.execute("DELETE FROM entries").rowcount
            db.execute("COMMIT")
            return int(deleted)
        finally:
            db.close()

    return await asyncio.to_thread(delete)


async def clear_batched(path: Path) -> int:
    store = SqliteStore(path, max_bytes=1 << 40, timeout=10.0, existing_only=True)
    await store.start()
    try:
        return (await store.delete_all()).entries
    finally:
        await store.stop()


def _daemon(path: str, timeout: float, pipe: Connection) -> None:
    """A daemon's store on ``path``: writes until told to stop; sends (write seconds, failed writes
    by message: SQLite's lock waited past its busy limit, or the call past its time limit)."""

    async def run() -> tuple[list[float], dict[str, int]]:
        store = SqliteStore(Path(path), max_bytes=1 << 40, timeout=timeout)
        await store.start()
        latencies: list[float] = []
        errors: dict[str, int] = {}
        round_ = 0
        value = b"z" + os.urandom(ENTRY_BYTES - 1)
        while not pipe.poll():
            started = time.perf_counter()
            try:
                await store.put_many([(f"d{round_}-{i}", "part", value) for i in range(WRITE_ENTRIES)])
                latencies.append(time.perf_counter() - started)
            except CacheStoreError as exc:
                message = str(exc).replace(path, "PATH")
                errors[message] = errors.get(message, 0) + 1
            round_ += 1
            if round_ == 1:
                pipe.send("writing")
            await asyncio.sleep(WRITE_EVERY_SECONDS)
        pipe.recv()
        await store.stop()
        return latencies, errors

    pipe.send(asyncio.run(run()))


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for mode in ("one_transaction", "batched"):
        mine = [run for run in runs if run["mode"] == mode]
        out[mode] = {
            name: [run[name] for run in mine]
            for name in ("clear_seconds", "daemon_write_max_seconds", "daemon_write_errors", "daemon_writes")
        }
    return out


if __name__ == "__main__":
    sys.exit(main())
