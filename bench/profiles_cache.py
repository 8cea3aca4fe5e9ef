"""Prefix-cache hit rate with two summary profiles interleaved, against one profile at a time.

Each profile's prompts start with its own instruction, so vLLM's prefix cache has one shared prefix
per profile and kind of request instead of one per kind. This measures what that costs: the same
documents are summarized in three passes, each on a freshly started engine (an empty cache):

* ``A``: every document under profile A (``default``);
* ``B``: every document under profile B (``brief``, a longer instruction);
* ``AB``: the same documents in the same order, alternating A and B.

Documents go through docsumd's own path (the real :class:`~daemon.summary.summarizer.Summarizer` with its
prompts, map-reduce and admission, on the real vLLM engine), all submitted at once as a backlog
would be. vLLM reports the prompt tokens it served from its prefix cache per request
(``Generation.cached_prompt_tokens``), in whole KV blocks. Per pass:

* ``hit_rate``: cached / prompt tokens, everything counted. It includes text that documents share
  after the template (the corpus has licences that quote each other), which is shared only between
  documents of the same profile.
* ``instruction_hit_rate``: of the instruction prefixes that can be cached (each request's template
  prefix, up to the text, in whole blocks), the part the cache served. This is what profiles change.
* ``ratio_*``: AB's rate over the mean of A's and B's (AB does half of the documents under each):
  1.0 means interleaving two profiles costs nothing.

    PYTHONPATH=. .venv/bin/python -m bench.profiles_cache [--docs DIR] [--count N] [--json FILE]

Defaults: the tiny model (built in a temporary folder unless ``--model``), the shared corpus
(``../shared/corpus/docs``, else ``daemon/samples``), the engine settings of ``docsumd.toml``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.lib import REPO
from bench.lib.results import result_path, write_result

PROFILE_A = "default"
PROFILE_B = "brief"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", type=Path, default=None, help="model folder (default: a fresh tiny model)")
    parser.add_argument("--docs", type=Path, default=None, help="folder of .txt documents")
    parser.add_argument("--count", type=int, default=24, help="documents per pass (default: %(default)s)")
    parser.add_argument("--max-bytes", type=int, default=40_000, help="skip larger documents")
    parser.add_argument("--summary-tokens", type=int, default=48, help="summary length (short: fast)")
    parser.add_argument("--json", type=Path, default=result_path("profiles-cache"))
    args = parser.parse_args()

    docs = _documents(args.docs, args.count, args.max_bytes)
    with tempfile.TemporaryDirectory(prefix="docsumd-profiles-") as work:
        model = args.model or _tiny_model(Path(work) / "tiny")
        config = _config(model, args.summary_tokens)
        from daemon.cli import prepare_process

        prepare_process(config)
        passes = {
            name: asyncio.run(_pass(config, docs, profiles))
            for name, profiles in (
                ("A", [PROFILE_A]),
                ("B", [PROFILE_B]),
                ("AB", [PROFILE_A, PROFILE_B]),
            )
        }

    def ratio(key: str) -> float:
        mean_alone = (passes["A"][key] + passes["B"][key]) / 2
        return round(float(passes["AB"][key] / mean_alone), 4)

    report = {
        "what": "prefix-cache hit rate, two profiles interleaved (AB) against one profile (A, B)",
        "model": str(args.model or "tiny (daemon/models/tiny.py)"),
        "documents": [doc.name for doc in docs],
        "engine": {
            key: getattr(config.engine, key)
            for key in ("max_model_len", "max_num_seqs", "max_num_batched_tokens", "enable_prefix_caching")
        },
        "summary_tokens": args.summary_tokens,
        "passes": passes,
        "ratio_instruction_hit_rate": ratio("instruction_hit_rate"),
        "ratio_hit_rate": ratio("hit_rate"),
        "cpu_count": os.cpu_count(),
    }
    print(json.dumps(report, indent=2))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    write_result(args.json, report)
    return 0


def _documents(folder: Path | None, count: int, max_bytes: int) -> list[Path]:
    if folder is None:
        shared = REPO.parent / "shared" / "corpus" / "docs"
        folder = shared if shared.is_dir() else REPO / "daemon" / "samples"
    docs = sorted(p for p in folder.glob("*.txt") if p.stat().st_size <= max_bytes)
    if not docs:
        raise SystemExit(f"no .txt documents of at most {max_bytes} bytes in {folder}")
    return docs[:count]


def _tiny_model(folder: Path) -> Path:
    from daemon.models.tiny import build_tiny_model

    return build_tiny_model(folder)


def _config(model: Path, summary_tokens: int) -> Any:
    """docsumd.toml's engine settings for ``model``, with profiles A and B turned on."""
    import tomllib

    from daemon.config import Config, EngineConfig, ProfileConfig, SummaryConfig

    raw = tomllib.loads((REPO / "docsumd.toml").read_text(encoding="utf-8"))
    engine = EngineConfig(**{**raw["engine"], "model": str(model)})
    return Config(
        engine=engine,
        summary=SummaryConfig(max_summary_tokens=summary_tokens),
        profiles={PROFILE_B: ProfileConfig()},
    )


async def _pass(config: Any, docs: Sequence[Path], names: Sequence[str]) -> dict[str, Any]:
    """One pass on a fresh engine: every document, the i-th under ``names[i % len(names)]``."""
    from bench.lib.engine import RecordingEngine
    from daemon.document.decode import decode_document
    from daemon.engine.admission import admission_for_engine
    from daemon.models.files import load_tokenizer
    from daemon.records import parse_request_id
    from daemon.summary.profiles import build_profiles
    from daemon.summary.prompts import PromptKind
    from daemon.summary.summarizer import Summarizer

    tokenizer = load_tokenizer(config.engine)
    profiles = build_profiles(config, tokenizer)
    engine = RecordingEngine(config.engine)
    await engine.start()
    # vLLM caches whole KV blocks: only the block-aligned part of an instruction prefix can be served.
    block = int(engine.engine._llm.vllm_config.cache_config.block_size)
    try:
        admission = admission_for_engine(
            config.admission, config.engine, kv_cache_tokens=engine.kv_cache_tokens
        )
        summarizer = Summarizer(engine, tokenizer, config.summary, profiles=profiles, admission=admission)
        documents = [
            decode_document(doc.read_bytes(), doc_id=doc.name, source="bench", max_input_bytes=1 << 24)
            for doc in docs
        ]
        chosen = {doc.id: names[i % len(names)] for i, doc in enumerate(documents)}
        started = time.monotonic()
        summaries = await asyncio.gather(
            *(
                summarizer.summarize(doc, summarizer.plan(profile=profiles.get(chosen[doc.id])))
                for doc in documents
            )
        )
        elapsed = time.monotonic() - started
    finally:
        await engine.stop()
    requests: list[dict[str, Any]] = [
        {
            "id": request.request_id,
            "prompt": request.generation.prompt_tokens,
            "cached": request.generation.cached_prompt_tokens,
        }
        for request in engine.requests
    ]

    def cacheable_prefix(request_id: str) -> int:
        """The block-aligned template prefix of a request (the same for any style and length)."""
        parsed = parse_request_id(request_id)
        prefix, _ = profiles.get(chosen[parsed.doc_id]).prompts.template_ids(
            PromptKind(parsed.kind), style="prose", max_tokens=16
        )
        return len(prefix) // block * block

    by_profile: dict[str, dict[str, int]] = {}
    for request in requests:
        name = chosen[parse_request_id(request["id"]).doc_id]
        totals = by_profile.setdefault(
            name, {"requests": 0, "prompt": 0, "cached": 0, "prefix": 0, "prefix_cached": 0}
        )
        prefix = cacheable_prefix(request["id"])
        totals["requests"] += 1
        totals["prompt"] += request["prompt"]
        totals["cached"] += request["cached"]
        totals["prefix"] += prefix
        totals["prefix_cached"] += min(request["cached"], prefix)

    def total(key: str) -> int:
        return sum(t[key] for t in by_profile.values())

    return {
        "profiles": list(names),
        "versions": {name: profiles.get(name).version for name in names},
        "instruction_prefix_tokens": {
            name: len(
                profiles.get(name).prompts.template_ids(PromptKind.DOCUMENT, style="prose", max_tokens=16)[0]
            )
            for name in names
        },
        "block_size": block,
        "documents": len(documents),
        "map_reduce_documents": sum(1 for s in summaries if s.strategy == "map_reduce"),
        "requests": len(requests),
        "prompt_tokens": total("prompt"),
        "cached_prompt_tokens": total("cached"),
        "cacheable_instruction_tokens": total("prefix"),
        "cached_instruction_tokens": total("prefix_cached"),
        "hit_rate": round(total("cached") / total("prompt"), 5),
        "instruction_hit_rate": round(total("prefix_cached") / total("prefix"), 5),
        "by_profile": {
            name: {
                **totals,
                "hit_rate": round(totals["cached"] / totals["prompt"], 5),
                "instruction_hit_rate": round(totals["prefix_cached"] / totals["prefix"], 5),
            }
            for name, totals in by_profile.items()
        },
        "engine_start_s": round(engine.start_seconds or 0.0, 2),
        "summarize_s": round(elapsed, 2),
    }


if __name__ == "__main__":
    raise SystemExit(main())
