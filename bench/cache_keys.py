"""Does a change keep the summary cache's keys? Every cache key (whole document, part, combine) and
every engine request (prompt ids, length, sampling) of a fixed set of summaries, in this checkout
and in another, compared.

A key that differs turns every summary stored before into a miss; a request that differs is a
behaviour change. The summaries: a short and a long document under the default profile, with and
without options (a style and length, the ``head`` and ``head_tail`` strategies, the default profile
named explicitly), a long one that needs intermediate combine levels, and a structured profile's
short and long ones; each over a fresh SQLite cache, the default profile's twice (the second time
its whole-document entry is found). The tokenizer is the tiny model's; the engine is the fake of
``tests/doubles`` (what is asked of an engine, not what it answers), so this runs in seconds.

``--against DIR`` runs the same summaries with ``daemon`` and ``tests`` imported from DIR (a checkout
of another commit: ``git archive COMMIT | tar -x -C DIR``), in a child process, and compares; the
exit status is 1 when anything differs.

    PYTHONPATH=. .venv/bin/python -m bench.cache_keys --against DIR [--json FILE]
    PYTHONPATH=. .venv/bin/python -m bench.cache_keys --dump FILE
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REQUEST_ID_SUFFIX = ":"
"""An engine request id ends in ``:`` and a random tag (records.request_id): not compared."""


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--against", type=Path, help="another checkout to compare this one with")
    what.add_argument("--dump", type=Path, help="write this checkout's keys and requests to FILE")
    parser.add_argument("--json", type=Path, default=None, help="the comparison's result file")
    args = parser.parse_args()
    if args.dump is not None:
        args.dump.write_text(json.dumps(asyncio.run(fingerprint()), indent=0) + "\n", encoding="utf-8")
        return 0
    from bench.lib.results import result_path, write_result

    with tempfile.TemporaryDirectory(prefix="docsumd-keys-") as work:
        other = _dump_in(args.against, Path(work) / "other.json")
        here = json.loads(json.dumps(asyncio.run(fingerprint())))  # tuples as the other's, read back
    result = compare(here, other)
    result["what"] = (
        "cache keys and engine requests of a fixed set of summaries, here and in another checkout"
    )
    result["against"] = str(args.against)
    print(json.dumps({key: value for key, value in result.items() if key != "differences"}, indent=2))
    for line in result["differences"][:20]:
        print("differs:", line)
    write_result(args.json or result_path("cache-keys"), result)
    return 0 if result["identical"] else 1


def _dump_in(tree: Path, out: Path) -> dict[str, Any]:
    """This module's fingerprint with ``daemon`` and ``tests`` from ``tree``, in a child process."""
    env = {**os.environ, "PYTHONPATH": str(tree.resolve())}
    subprocess.run(
        [sys.executable, "-P", str(Path(__file__).resolve()), "--dump", str(out)],
        cwd=tree,
        env=env,
        check=True,
        stderr=subprocess.DEVNULL,
    )
    loaded: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    return loaded


def compare(here: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
    """How many keys and requests each side made, and which differ (in order)."""

    def requests(side: dict[str, Any]) -> list[list[Any]]:
        return [[case, rid.rsplit(REQUEST_ID_SUFFIX, 1)[0], *rest] for case, rid, *rest in side["requests"]]

    differences = [
        f"key {index}: {mine} / {theirs}"
        for index, (mine, theirs) in enumerate(zip(here["keys"], other["keys"], strict=False))
        if mine != theirs
    ]
    differences += [
        f"request {index}: {mine} / {theirs}"
        for index, (mine, theirs) in enumerate(zip(requests(here), requests(other), strict=False))
        if mine != theirs
    ]
    same_counts = len(here["keys"]) == len(other["keys"]) and len(here["requests"]) == len(other["requests"])
    return {
        "identical": same_counts and not differences,
        "keys": len(here["keys"]),
        "distinct_keys": len({key[3] for key in here["keys"]}),
        "keys_kinds": sorted({key[2] for key in here["keys"]}),
        "requests": len(here["requests"]),
        "other_keys": len(other["keys"]),
        "other_requests": len(other["requests"]),
        "cases": sorted({key[0].split("#")[0] for key in here["keys"]}),
        "differences": differences,
    }


async def fingerprint() -> dict[str, Any]:
    """Every cache lookup and write ``(case, get|put, kind, digest)`` and every engine request
    ``(case, request id, max_tokens, SHA-256 of the prompt ids, sampling)`` of the summaries."""
    with tempfile.TemporaryDirectory(prefix="docsumd-keys-") as work:
        return await _summaries(Path(work))


async def _summaries(work: Path) -> dict[str, Any]:
    import hashlib

    from transformers import AutoTokenizer

    from daemon.cache import CachedSummary, CacheKey, KeyMaker, KeyScope, ModelRevision, SummaryCache
    from daemon.cache.sqlite import SqliteStore
    from daemon.config import EngineConfig
    from daemon.engine.vllm_args import engine_kwargs
    from daemon.models.tiny import build_tiny_model
    from daemon.summary.options import SummaryOptions
    from tests.doubles.engine import FakeEngine
    from tests.unit.summary.test_structured import VALID
    from tests.unit.summary.test_structured import _summarizer as structured_summarizer
    from tests.unit.summary.test_summarize import long_text, make_document, make_summarizer, replying_engine

    scope = KeyScope.create(
        engine_kwargs(EngineConfig(model="/m", dtype="bfloat16")), model=ModelRevision("1" * 16, "folder", 1)
    )
    tokenizer = AutoTokenizer.from_pretrained(str(build_tiny_model(work / "tiny")))
    seen: list[tuple[str, str, str, str]] = []
    engines: list[tuple[str, Any]] = []
    case = [""]

    def spied(path: Path) -> Any:
        cache = SummaryCache(
            SqliteStore(path, max_bytes=1 << 26, timeout=5),
            KeyMaker(scope),
            max_value_bytes=1 << 20,
            retry_seconds=30,
        )
        get_many, put_many = cache.get_many, cache.put_many

        async def get(keys: Sequence[CacheKey]) -> list[CachedSummary | None]:
            seen.extend((case[0], "get", key.kind, key.digest) for key in keys)
            return await get_many(keys)

        async def put(items: Sequence[tuple[CacheKey, CachedSummary]]) -> None:
            seen.extend((case[0], "put", key.kind, key.digest) for key, _ in items)
            await put_many(items)

        cache.get_many = get  # type: ignore[method-assign]
        cache.put_many = put  # type: ignore[method-assign]
        return cache

    short, long = "A short lease of a flat.", long_text(120)
    default_cases = [
        ("short", short, SummaryOptions()),
        ("long", long, SummaryOptions()),
        ("long-bullets-80", long, SummaryOptions(style="bullets", max_summary_tokens=80)),
        ("long-levels", long_text(400), SummaryOptions()),
        ("long-head", long, SummaryOptions(strategy="head")),
        ("long-head-tail", long, SummaryOptions(strategy="head_tail")),
        ("short-named-default", short, SummaryOptions(profile="default")),
    ]
    for number, (name, text, options) in enumerate(default_cases):
        engine = replying_engine()
        engines.append((name, engine))
        summarizer = make_summarizer(tokenizer, engine)
        summarizer.cache = cache = spied(work / f"default-{number}.sqlite3")
        await cache.start()
        for repeat in (name, f"{name}#again"):
            case[0] = repeat
            await _summarize(summarizer, make_document(text), options, None)
        await cache.stop()
    for number, (name, text, options) in enumerate(
        [
            ("record-short", "A short licence.", SummaryOptions()),
            ("record-long-200", long, SummaryOptions(max_summary_tokens=200)),
        ]
    ):
        engine = FakeEngine(text=json.dumps(VALID))
        engines.append((name, engine))
        (work / f"schema-{number}").mkdir()
        summarizer = structured_summarizer(work / f"schema-{number}", tokenizer, engine)
        summarizer.cache = cache = spied(work / f"record-{number}.sqlite3")
        await cache.start()
        case[0] = name
        await _summarize(summarizer, make_document(text), options, summarizer.profiles.get("record"))
        await cache.stop()
    requests = [
        (
            name,
            call.request_id,
            call.max_tokens,
            hashlib.sha256(repr(call.prompt).encode()).hexdigest(),
            repr(sampling),
        )
        for name, engine in engines
        for call, sampling in zip(engine.calls, engine.samplings, strict=True)
    ]
    return {"keys": seen, "requests": requests}


async def _summarize(summarizer: Any, document: Any, options: Any, profile: Any) -> Any:
    """``summarizer.summarize`` as this checkout's or another's API has it: with a plan, or (commits
    before plans were made apart, ``daemon.summary.plan``) with options and a profile."""
    if "profile" in inspect.signature(summarizer.summarize).parameters:
        return await summarizer.summarize(document, options, profile=profile)
    return await summarizer.summarize(document, summarizer.plan(options, profile))


if __name__ == "__main__":
    raise SystemExit(main())
