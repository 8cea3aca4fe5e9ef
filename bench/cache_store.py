"""The summary cache's own cost per part: keys, encoding, and the stores' lookups and writes.

Issue 41's goal: on a cold run (every lookup a miss, every output written) the cache costs at most 2%
of throughput. A cold run adds, per engine request: its key, one lookup (batched with the other parts
of its document) and one encoded write (batched too). This measures each, on the real stores:

* ``keys``: a part key over a part's token ids (4,000 by default) and its template; a combine key over
  8 children; a document key over a 600 KB input (its SHA-256 included).
* ``codec``: encoding and decoding one entry (a part summary of about 1,200 characters, real text
  cut from the corpus) as plain JSON, zlib at levels 1 and 6, and zstd (cramjam, already a dependency):
  the time and the stored size, which decided the store's encoding.
* ``sqlite`` and ``redis`` (a ``redis-server`` this script starts on a free loopback port, if installed):
  the async API the summarizer calls (:class:`daemon.cache.cache.SummaryCache`: threads, timeouts,
  metrics included), per part, in batches of ``--batch`` parts (one document's lookups or writes) and
  of 1: ``put``, ``get_miss``, ``get_hit``; and a cold-run round (a miss, then a write) with 8
  documents at once. Wall time on an idle event loop, and CPU time of the whole process (every
  thread), which is what the cache takes from the engine's own process.
* ``diskcache`` (``--diskcache``, if the package is importable): its ``set``/``get`` on the same
  values, directly (no thread hop), for the choice of store.

The overhead per part on a cold run is the key, a miss and a write (per part, batched) plus encoding;
it is set against an engine request's time: the H200 corpus run's (119.6 s for 473 requests,
``bench/results/2026-12-01_h200_compare_corpus-final.json``: 0.25 s per request, amortized over
the batch), 0.1 s,
and 1 s. Five repeats by default; figures are medians with their spread.

    PYTHONPATH=. .venv/bin/python -m bench.cache_store [--repeats 5] [--json FILE] [--diskcache]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

from bench.lib import REPO
from bench.lib.results import result_path, write_result

CORPUS = REPO.parent / "shared" / "corpus" / "docs"
ENGINE_SECONDS_PER_REQUEST = {"h200_corpus_amortized": 119.613 / 473, "fast_0.1s": 0.1, "slow_1s": 1.0}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--parts", type=int, default=2048, help="entries per measurement")
    parser.add_argument("--batch", type=int, default=32, help="parts per store call (one document)")
    parser.add_argument("--part-tokens", type=int, default=4000)
    parser.add_argument("--diskcache", action="store_true", help="also measure diskcache, if importable")
    parser.add_argument("--json", type=Path, default=result_path("cache-store"))
    args = parser.parse_args()
    result = asyncio.run(run(args))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    write_result(args.json, result)
    print(json.dumps(result["summary"], indent=2))
    print(f"written to {args.json}", file=sys.stderr)
    return 0


def texts(count: int, chars: int = 1200) -> list[str]:
    """``count`` stand-ins for part summaries: real English cut from the corpus (or the samples)."""
    folder = CORPUS if CORPUS.is_dir() else REPO / "daemon" / "samples"
    source = " ".join(path.read_text(errors="replace") for path in sorted(folder.glob("*.txt")))
    words = source.split()
    rng = random.Random(7)
    out = []
    for _ in range(count):
        start = rng.randrange(0, max(1, len(words) - 400))
        out.append(" ".join(words[start : start + 400])[:chars])
    return out


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def timed(function: Callable[[], Any], repeats: int, count: int) -> dict[str, float]:
    """Seconds per item of ``function`` (which handles ``count`` items), over ``repeats`` runs."""
    runs = []
    for _ in range(repeats):
        started = time.perf_counter()
        function()
        runs.append((time.perf_counter() - started) / count)
    return spread(runs)


def bench_keys(args: argparse.Namespace) -> dict[str, Any]:
    from daemon.cache.keys import KeyMaker, KeyScope, ModelRevision, Step, sha256_of
    from daemon.config import EngineConfig
    from daemon.contracts import Sampling
    from daemon.engine.vllm_args import engine_kwargs

    keys = KeyMaker(
        KeyScope.create(engine_kwargs(EngineConfig(model="/m")), model=ModelRevision("0" * 16, "folder", 5))
    )
    rng = random.Random(1)
    ids = [rng.randrange(50_000) for _ in range(args.part_tokens)]
    step = Step(
        template=(list(range(60)), list(range(30))),
        sampling=Sampling(max_tokens=256, temperature=0.3, top_p=0.9, repetition_penalty=1.1),
        prompt_version="summary-v4",
        profile_version="0123456789ab",
    )
    children = [keys.part([i], step) for i in range(8)]
    labels = [f"[Part {i}: pages {i}-{i + 1}]" for i in range(8)]
    document = os.urandom(600_000)
    n = 200
    return {
        "part_key_s": timed(lambda: [keys.part(ids, step) for _ in range(n)], args.repeats, n),
        "combine_key_s": timed(
            lambda: [keys.combine(children, step, labels=labels) for _ in range(n)], args.repeats, n
        ),
        "document_key_s": timed(
            lambda: [keys.document(sha256_of([document]), settings={"p": 1}, options={}) for _ in range(n)],
            args.repeats,
            n,
        ),
        "part_tokens": args.part_tokens,
        "document_bytes": len(document),
    }


def _compress_all(codec: Callable[[bytes], bytes], values: list[bytes]) -> None:
    for value in values:
        codec(value)


def bench_codec(args: argparse.Namespace, samples: list[str]) -> dict[str, Any]:
    import cramjam

    from daemon.cache.keys import CacheKey
    from daemon.cache.store import CachedSummary, decode_entry, encode_entry

    key = CacheKey("part", "a" * 64, {"model_revision": "0" * 16, "profile_version": "0" * 12})
    entries = [CachedSummary(text, 4000, 256, "stop", time.time(), key.parts) for text in samples]
    plain = [
        json.dumps(
            {
                "format": 1,
                "key": key.id,
                "kind": "part",
                "text": e.text,
                "prompt_tokens": 4000,
                "generated_tokens": 256,
                "finish_reason": "stop",
                "created": e.created,
                "key_parts": dict(key.parts),
                "fields": {},
            },
            ensure_ascii=False,
            separators=(",", ":"),
        ).encode()
        for e in entries
    ]
    raw_bytes = sum(map(len, plain))
    codecs: dict[str, Callable[[bytes], bytes]] = {
        "none": lambda b: b,
        "zlib1": lambda b: zlib.compress(b, 1),
        "zlib6": lambda b: zlib.compress(b, 6),
        "zstd3": lambda b: bytes(cramjam.zstd.compress(b, 3)),
    }
    out: dict[str, Any] = {"entry_json_bytes_mean": raw_bytes / len(plain)}
    for name, codec in codecs.items():
        packed = [codec(b) for b in plain]
        out[name] = {
            "ratio": sum(map(len, packed)) / raw_bytes,
            "compress_s": timed(functools.partial(_compress_all, codec, plain), args.repeats, len(plain)),
        }
    encoded = [encode_entry(key, e) for e in entries]
    out["store_encoding"] = {
        "ratio": sum(map(len, encoded)) / raw_bytes,
        "encode_s": timed(lambda: [encode_entry(key, e) for e in entries], args.repeats, len(entries)),
        "decode_s": timed(
            lambda: [decode_entry(key, v, max_bytes=1 << 20) for v in encoded], args.repeats, len(encoded)
        ),
    }
    return out


async def bench_store(
    make_store: Callable[[], Any], args: argparse.Namespace, samples: list[str]
) -> dict[str, Any]:
    """The summarizer's calls on one store, through :class:`SummaryCache`."""
    from daemon.cache.cache import SummaryCache
    from daemon.cache.keys import CacheKey, KeyMaker, KeyScope, ModelRevision
    from daemon.cache.store import CachedSummary

    keys = KeyMaker(KeyScope.create({}, model=ModelRevision("0" * 16, "folder", 1)))
    runs: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}
    for repeat in range(args.repeats):
        store = make_store()
        cache = SummaryCache(store, keys, max_value_bytes=1 << 20, retry_seconds=30)
        await cache.start()
        try:
            prefix = f"r{repeat}-{os.getpid()}-{time.time_ns()}"
            items = [
                (CacheKey("part", f"{prefix}-{i:06d}"), CachedSummary(text, 4000, 256, "stop", time.time()))
                for i, text in enumerate(samples)
            ]
            batches = [items[i : i + args.batch] for i in range(0, len(items), args.batch)]
            for name, (wall, used, count) in (
                await _calls(cache, batches, samples, args.batch, prefix)
            ).items():
                runs.setdefault(name, []).append(wall / count)
                cpu.setdefault(name, []).append(used / count)
            if hasattr(store, "maintain"):
                await cache.maintain()
        finally:
            with contextlib.suppress(Exception):
                await store.delete_all()
            await cache.stop()
    return {
        "per_part_wall_s": {name: spread(values) for name, values in runs.items()},
        "per_part_cpu_s": {name: spread(values) for name, values in cpu.items()},
        "batch": args.batch,
        "parts": len(samples),
    }


async def _calls(
    cache: Any, batches: list[list[Any]], samples: list[str], batch: int, prefix: str
) -> dict[str, tuple[float, float, int]]:
    """(wall seconds, CPU seconds, parts) of each call pattern on ``cache``."""
    from daemon.cache.keys import CacheKey
    from daemon.cache.store import CachedSummary

    parts = sum(map(len, batches))

    async def lookups() -> None:
        for group in batches:
            await cache.get_many([key for key, _ in group])

    async def writes() -> None:
        for group in batches:
            await cache.put_many(group)

    async def single_lookups() -> None:
        for group in batches:
            await cache.get(group[0][0])

    # A cold run's round for 8 documents at once: a miss for every part, then its write.
    cold = [
        [
            (
                CacheKey("part", f"{prefix}-cold-{d}-{i}"),
                CachedSummary(samples[i], 4000, 256, "stop", time.time()),
            )
            for i in range(batch)
        ]
        for d in range(8)
    ]

    async def document(group: list[tuple[CacheKey, CachedSummary]]) -> None:
        await cache.get_many([key for key, _ in group])
        await cache.put_many(group)

    async def cold_round() -> None:
        await asyncio.gather(*(document(group) for group in cold))

    out: dict[str, tuple[float, float, int]] = {}
    for name, call, count in (
        ("get_miss", lookups, parts),
        ("put", writes, parts),
        ("get_hit", lookups, parts),
        ("get_hit_single", single_lookups, len(batches)),
        ("cold_round_8_documents", cold_round, 8 * batch),
    ):
        wall, used = await _timed_async(call)
        out[name] = (wall, used, count)
    return out


async def _timed_async(call: Callable[[], Awaitable[None]]) -> tuple[float, float]:
    wall, used = time.perf_counter(), time.process_time()
    await call()
    return time.perf_counter() - wall, time.process_time() - used


def bench_diskcache(args: argparse.Namespace, samples: list[str], folder: Path) -> dict[str, Any] | None:
    try:
        import diskcache  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return None
    values = [s.encode() for s in samples]
    runs: dict[str, list[float]] = {}
    for repeat in range(args.repeats):
        cache = diskcache.Cache(
            str(folder / f"diskcache-{repeat}"), size_limit=1 << 30, eviction_policy="least-recently-used"
        )
        keys = [f"r{repeat}-{i}" for i in range(len(values))]
        for name in ("get_miss", "put", "get_hit"):
            started = time.perf_counter()
            if name == "put":
                for key, value in zip(keys, values, strict=True):
                    cache.set(key, value)
            else:
                for key in keys:
                    cache.get(key)
            runs.setdefault(name, []).append((time.perf_counter() - started) / len(keys))
        cache.close()
    return {"version": diskcache.__version__, "per_part_wall_s": {n: spread(v) for n, v in runs.items()}}


@contextlib.contextmanager
def redis_server(folder: Path) -> Iterator[str | None]:
    from tests.redis_server import RedisServer, free_port, redis_binary

    if redis_binary() is None:
        yield None
        return
    server = RedisServer(port=free_port(), folder=folder / "redis", maxmemory="1gb", policy="allkeys-lru")
    server.up()
    try:
        yield server.url
    finally:
        server.down()


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from daemon.cache.redis import RedisStore
    from daemon.cache.sqlite import SqliteStore

    samples = texts(args.parts)
    result: dict[str, Any] = {
        "benchmark": "cache_store",
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "host": {"machine": platform.machine(), "cpus": os.cpu_count(), "python": platform.python_version()},
        "sqlite_version": __import__("sqlite3").sqlite_version,
        "repeats": args.repeats,
        "keys": bench_keys(args),
        "codec": bench_codec(args, samples),
    }
    with tempfile.TemporaryDirectory(prefix="docsumd-cache-bench-") as tmp:
        folder = Path(tmp)
        counter = iter(range(1_000_000))
        result["sqlite"] = await bench_store(
            lambda: SqliteStore(folder / f"s{next(counter)}.sqlite3", max_bytes=1 << 30, timeout=5.0),
            args,
            samples,
        )
        with redis_server(folder) as url:
            if url is not None:
                result["redis"] = await bench_store(
                    lambda: RedisStore(
                        url, timeout=1.0, ttl_seconds=3600, key_prefix="bench:", max_value_bytes=1 << 20
                    ),
                    args,
                    samples,
                )
                result["redis_server"] = await asyncio.to_thread(_redis_version)
        if args.diskcache:
            result["diskcache"] = bench_diskcache(args, samples, folder)
    result["summary"] = summarize(result)
    return result


def _redis_version() -> str:
    done = subprocess.run(["redis-server", "--version"], capture_output=True, text=True, check=False)
    return done.stdout.strip()


def summarize(result: dict[str, Any]) -> dict[str, Any]:
    """Per part on a cold run: key + miss + write (batched) + encoding; against engine times."""
    key = result["keys"]["part_key_s"]["median"]
    encode = result["codec"]["store_encoding"]["encode_s"]["median"]
    summary: dict[str, Any] = {"part_key_ms": key * 1e3, "encode_ms": encode * 1e3}
    for backend in ("sqlite", "redis"):
        if backend not in result:
            continue
        wall = result[backend]["per_part_wall_s"]
        cpu = result[backend]["per_part_cpu_s"]
        cold_wall = key + wall["get_miss"]["median"] + wall["put"]["median"]
        cold_cpu = key + cpu["get_miss"]["median"] + cpu["put"]["median"]
        summary[backend] = {
            "cold_per_part_wall_ms": cold_wall * 1e3,
            "cold_per_part_cpu_ms": cold_cpu * 1e3,
            "hit_per_part_wall_ms": wall["get_hit"]["median"] * 1e3,
            "single_hit_wall_ms": wall["get_hit_single"]["median"] * 1e3,
            "cold_round_8_documents_per_part_wall_ms": wall["cold_round_8_documents"]["median"] * 1e3,
            "cold_cpu_share_of_engine_time": {
                name: cold_cpu / seconds for name, seconds in ENGINE_SECONDS_PER_REQUEST.items()
            },
        }
    return summary


if __name__ == "__main__":
    raise SystemExit(main())
