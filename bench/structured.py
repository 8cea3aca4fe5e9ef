"""Structured summaries with a real model: how often the final step's JSON validates, and what the
constraint costs.

The corpus's licences go through the shipped ``contract`` profile and its papers through ``paper``
(docsumd's own path: the real :class:`~daemon.summary.summarizer.Summarizer`, its prompts, map-reduce,
admission, the final step constrained by vLLM's xgrammar backend, parsed strictly and validated, one
retry), all documents submitted at once. Then the same documents again under the **same profiles
without their schema** (same instructions and length; the final step in prose, unconstrained), on a
fresh engine too, so that neither pass finds the other's prompts in the prefix cache.

Figures: per profile and overall, documents whose first try validated, valid after the retry, and
ended ``invalid_output`` (and that none was lost: every document ends one way or the other); the
wall time, documents per second and generated tokens per second of each pass, their ratio
(constrained / unconstrained), and the final steps alone (their seconds and tokens per second);
characters per token of the valid outputs (the check at start counts 3, ``CHARS_PER_TOKEN``).

    .venv/bin/python -m bench.structured [--model DIR] [--max-model-len 2048] [--licences 8]
        [--papers 3] [--out FILE]

The documents are the smallest ``--licences`` licences (``legal-*``) and ``--papers`` papers
(``paper-*``) of ``../shared/corpus/docs``: on 2 CPU cores both passes take about 10-15 minutes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from bench.lib import REPO
from bench.lib.results import result_path, write_result

CORPUS_DOCS: Final = REPO.parent / "shared" / "corpus" / "docs"
PROFILE_OF: Final = {"legal": "contract", "paper": "paper"}


def main() -> int:
    """Run both passes and write the JSON."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", type=Path, default=None, help="model folder (default: the demo model)")
    parser.add_argument("--max-model-len", type=int, default=2048)
    parser.add_argument(
        "--dtype",
        default=None,
        help="engine dtype (default: docsumd.toml's); float32 is faster on AVX2-only CPUs",
    )
    parser.add_argument("--licences", type=int, default=8)
    parser.add_argument("--papers", type=int, default=3)
    parser.add_argument("--docs", type=Path, default=CORPUS_DOCS)
    parser.add_argument("--out", type=Path, default=result_path("structured"))
    args = parser.parse_args()
    for key, value in (("HF_HUB_OFFLINE", "1"), ("TRANSFORMERS_OFFLINE", "1"), ("VLLM_NO_USAGE_STATS", "1")):
        os.environ.setdefault(key, value)
    model = args.model or _demo_model()
    docs = _documents(args.docs, "legal", args.licences) + _documents(args.docs, "paper", args.papers)
    report: dict[str, Any] = {
        "bench": "structured",
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "model": str(model),
        "max_model_len": args.max_model_len,
        "dtype": args.dtype or "docsumd.toml's",
        "documents": [doc.name for doc in docs],
        "passes": {},
    }
    for schema in (True, False):
        name = "constrained" if schema else "unconstrained"
        print(f"pass {name}: {len(docs)} documents", flush=True)
        config = _config(model, args.max_model_len, schema=schema, dtype=args.dtype)
        report["passes"][name] = asyncio.run(_pass(config, docs))
        args.out.parent.mkdir(parents=True, exist_ok=True)
        write_result(args.out, report)
    constrained, free = report["passes"]["constrained"], report["passes"]["unconstrained"]
    report["constrained_vs_unconstrained"] = {
        key: round(constrained[key] / free[key], 3)
        for key in ("wall_s", "documents_per_s", "generated_tokens_per_s", "final_tokens_per_s")
        if free.get(key)
    }
    write_result(args.out, report)
    print(json.dumps({"outcomes": constrained["outcomes"], "ratio": report["constrained_vs_unconstrained"]}))
    return 0


def _demo_model() -> Path:
    from daemon.models import demo

    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "docsumd-tests"
    target = cache / f"smollm2-{demo.GGUF_SHA256[:12]}-{demo.SAFETENSORS_SHA256[:12]}"
    demo.build_demo_model(target)
    return target


def _documents(folder: Path, prefix: str, count: int) -> list[Path]:
    """The ``count`` smallest ``PREFIX-*.txt`` documents of ``folder``."""
    return sorted(folder.glob(f"{prefix}-*.txt"), key=lambda path: path.stat().st_size)[:count]


def _config(model: Path, context: int, *, schema: bool, dtype: str | None = None) -> Any:
    """The repository's engine settings for ``model`` at ``context`` tokens, with the shipped
    ``contract`` and ``paper`` profiles on, with their schema or (``schema`` false) without it."""
    import tomllib

    from daemon.config import Config, EngineConfig, ProfileConfig, SummaryConfig

    raw = tomllib.loads((REPO / "docsumd.toml").read_text(encoding="utf-8"))
    engine = EngineConfig(
        **{
            **raw["engine"],
            "model": str(model),
            "max_model_len": context,
            **({"dtype": dtype} if dtype else {}),
            "max_num_batched_tokens": max(context, raw["engine"].get("max_num_batched_tokens", 0)),
        }
    )
    section = ProfileConfig() if schema else ProfileConfig(json_schema_file=None)
    return Config(
        engine=engine,
        summary=SummaryConfig(temperature=0.0),
        profiles=dict.fromkeys(PROFILE_OF.values(), section),
    )


async def _pass(config: Any, docs: Sequence[Path]) -> dict[str, Any]:
    """One pass on a fresh engine: every document at once under its profile."""
    from bench.lib.engine import RecordingEngine
    from daemon.document.decode import decode_document
    from daemon.engine.admission import admission_for_engine
    from daemon.errors import DocumentError
    from daemon.models.files import load_tokenizer
    from daemon.records import parse_request_id
    from daemon.summary.profiles import build_profiles
    from daemon.summary.summarizer import Summarizer

    tokenizer = load_tokenizer(config.engine)
    profiles = build_profiles(config, tokenizer)
    engine = RecordingEngine(config.engine)
    await engine.start()
    try:
        admission = admission_for_engine(
            config.admission, config.engine, kv_cache_tokens=engine.kv_cache_tokens
        )
        summarizer = Summarizer(engine, tokenizer, config.summary, profiles=profiles, admission=admission)
        documents = [
            decode_document(doc.read_bytes(), doc_id=doc.name, source="bench", max_input_bytes=1 << 24)
            for doc in docs
        ]
        chosen = {doc.id: PROFILE_OF[doc.id.split("-", 1)[0]] for doc in documents}

        async def one(document: Any) -> dict[str, Any]:
            profile = profiles.get(chosen[document.id])
            try:
                summary = await summarizer.summarize(document, summarizer.plan(profile=profile))
            except DocumentError as exc:
                return {
                    "id": document.id,
                    "profile": profile.name,
                    "reason": exc.reason,
                    "output": exc.output,
                }
            return {
                "id": document.id,
                "profile": profile.name,
                "strategy": summary.strategy,
                "parts": summary.parts,
                "summary_tokens": summary.summary_tokens,
                "summary_chars": len(summary.text),
                "structured": summary.structured,
                "summary": summary.text,
                "generated_tokens": summary.generated_tokens,
            }

        started = time.monotonic()
        results = await asyncio.gather(*(one(document) for document in documents))
        wall = time.monotonic() - started
    finally:
        await engine.stop()
    requests: list[dict[str, Any]] = [
        {
            "doc": parse_request_id(request.request_id).doc_id,
            "constrained": request.sampling.json_schema is not None,
            "max_tokens": request.sampling.max_tokens,
            "output_tokens": request.generation.output_tokens,
            "total_s": request.generation.total_s,
            "finish_reason": request.generation.finish_reason,
        }
        for request in engine.requests
    ]
    return _figures(results, requests, wall, structured=any(p.output.schema for p in profiles))


def _figures(
    results: list[dict[str, Any]], requests: list[dict[str, Any]], wall: float, *, structured: bool
) -> dict[str, Any]:
    generated = sum(request["output_tokens"] for request in requests)
    # The final step: the constrained requests; unconstrained, each document's last request.
    last = {request["doc"]: request for request in requests}
    finals = [r for r in requests if r["constrained"]] if structured else list(last.values())
    final_tokens = sum(request["output_tokens"] for request in finals)
    final_s = sum(request["total_s"] for request in finals)
    figures: dict[str, Any] = {
        "documents": len(results),
        "requests": len(requests),
        "wall_s": round(wall, 2),
        "documents_per_s": round(len(results) / wall, 4),
        "generated_tokens": generated,
        "generated_tokens_per_s": round(generated / wall, 2),
        "final_requests": len(finals),
        "final_tokens": final_tokens,
        "final_request_s": round(final_s, 2),
        "final_tokens_per_s": round(final_tokens / final_s, 2) if final_s else None,
        "final_finish_reasons": {
            reason: sum(1 for r in finals if r["finish_reason"] == reason)
            for reason in sorted({str(r["finish_reason"]) for r in finals})
        },
        "results": results,
    }
    if structured:
        tries = {doc: sum(1 for r in requests if r["doc"] == doc and r["constrained"]) for doc in last}
        outcomes: dict[str, dict[str, int]] = {}
        for result in results:
            result["tries"] = tries.get(result["id"], 0)  # constrained requests: 2 means retried
            counts = outcomes.setdefault(
                result["profile"], {"valid_first": 0, "valid_retry": 0, "invalid": 0}
            )
            if result.get("structured") is not None:
                counts["valid_first" if tries[result["id"]] == 1 else "valid_retry"] += 1
            else:
                counts["invalid"] += 1
        total = {
            key: sum(c[key] for c in outcomes.values()) for key in ("valid_first", "valid_retry", "invalid")
        }
        figures["outcomes"] = {
            **outcomes,
            "all": total,
            "lost": len(results) - sum(total.values()),
            "share_valid_first": round(total["valid_first"] / len(results), 3),
            "share_valid_after_retry": round((total["valid_first"] + total["valid_retry"]) / len(results), 3),
        }
        ratios = [
            r["summary_chars"] / r["summary_tokens"]
            for r in results
            if r.get("structured") and r["summary_tokens"]
        ]
        figures["chars_per_token_of_valid_outputs"] = {
            "min": round(min(ratios), 2) if ratios else None,
            "mean": round(statistics.mean(ratios), 2) if ratios else None,
        }
    return figures


if __name__ == "__main__":
    sys.exit(main())
