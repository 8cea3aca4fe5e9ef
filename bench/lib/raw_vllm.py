"""The raw-vLLM pass: what a hand-written batch script does with the same engine settings, on exactly
the daemon's prompts, stage by stage, each request generating as many tokens as it did in the daemon."""

from __future__ import annotations

import gc
import sys
import time
from typing import Any

from bench.lib.counters import spec_counters, spec_decoding_stats
from bench.lib.engine import Request
from daemon.config import Config
from daemon.engine.vllm_args import engine_kwargs


def assign_stages(requests: list[Request]) -> None:
    """Stage of a request: 1 + the latest stage of its document finished before it was sent."""
    by_doc: dict[str, list[Request]] = {}
    for request in sorted(requests, key=lambda r: r.submitted):
        earlier = by_doc.setdefault(request.doc, [])
        request.stage = 1 + max((r.stage for r in earlier if r.finished <= request.submitted), default=0)
        earlier.append(request)


def run_raw(config: Config, requests: list[Request]) -> dict[str, Any]:
    """Replay ``requests`` on offline ``LLM.generate``, stage by stage; its seconds, stages, KV cache
    and speculative decoding."""
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    assign_stages(requests)
    summary = config.summary
    # The daemon's own mapping of the engine section (quantization, kv_cache_dtype, speculative,
    # [engine.extra] included): "raw vLLM with the same settings" by construction.
    kwargs = engine_kwargs(config.engine)
    if config.engine.speculative is not None:
        # LLM turns stats off by default; the daemon's engine has them on, and the acceptance
        # counters need them.
        kwargs.setdefault("disable_log_stats", False)
    llm = LLM(**kwargs)
    llm.generate(
        [TokensPrompt(prompt_token_ids=list(range(1, 9)))], SamplingParams(max_tokens=1), use_tqdm=False
    )
    spec_before = spec_counters()
    stages = sorted({request.stage for request in requests})
    started = time.monotonic()
    stage_seconds = []
    for stage in stages:
        batch = [request for request in requests if request.stage == stage]
        stage_started = time.monotonic()
        llm.generate(
            [TokensPrompt(prompt_token_ids=request.prompt_ids) for request in batch],
            [
                SamplingParams(
                    max_tokens=max(1, request.output_tokens),
                    min_tokens=max(1, request.output_tokens),
                    ignore_eos=True,
                    temperature=summary.temperature,
                    top_p=summary.top_p,
                    repetition_penalty=summary.repetition_penalty,
                )
                for request in batch
            ],
            use_tqdm=False,
        )
        stage_seconds.append(round(time.monotonic() - stage_started, 3))
    elapsed = time.monotonic() - started
    spec_decoding = spec_decoding_stats(spec_before, spec_counters())
    cache = getattr(getattr(llm.llm_engine, "vllm_config", None), "cache_config", None)
    blocks, block_size = getattr(cache, "num_gpu_blocks", None), getattr(cache, "block_size", None)
    kv_cache_tokens = blocks * block_size if isinstance(blocks, int) and isinstance(block_size, int) else None
    try:  # frees the engine's processes now rather than at interpreter exit
        llm.llm_engine.engine_core.shutdown()
    except Exception as exc:  # best effort; the process exits soon anyway
        print(f"raw engine shutdown: {exc!r}", file=sys.stderr)
    del llm
    gc.collect()
    return {
        "seconds": elapsed,
        "stages": len(stages),
        "stage_seconds": stage_seconds,
        "requests": len(requests),
        "kv_cache_tokens": kv_cache_tokens,
        "spec_decoding": spec_decoding,
    }
