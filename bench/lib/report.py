"""A pass's statistics: throughput, latency percentiles overall and for short and long documents,
strategies, failures, cached tokens, peak RSS; a pass as a point of the throughput/latency curve."""

from __future__ import annotations

import os
import platform
import statistics
from datetime import UTC, datetime
from typing import Any

from bench.lib.daemon_pass import DaemonRun
from bench.lib.workloads import SHORT_MAX_TOKENS
from daemon.config import Config
from daemon.engine.vllm_args import engine_kwargs


def engine_report(config: Config) -> dict[str, Any]:
    """The engine arguments a pass ran with (the daemon's mapping; the raw run's too)."""
    return {
        key: value
        for key, value in engine_kwargs(config.engine).items()
        if key not in ("tokenizer", "trust_remote_code", "served_model_name")
    }


def curve_point(
    stats: dict[str, Any], fifo: dict[str, Any] | None, raw_docs_per_s: float | None
) -> dict[str, Any]:
    """One pass as a point of the throughput/latency trade-off, against FIFO and raw vLLM."""

    def ratio(value: float | None, base: float | None, digits: int = 2) -> float | None:
        return None if value is None or not base else round(value / base, digits)

    point: dict[str, Any] = {
        "label": stats["label"],
        "docs_per_s": stats["docs_per_s"],
        "vs_raw": ratio(stats["docs_per_s"], raw_docs_per_s, 3),
        "short_p50_s": stats["short"]["p50_latency_s"],
        "short_p95_s": stats["short"]["p95_latency_s"],
        "long_p95_s": stats["long"]["p95_latency_s"],
    }
    if fifo is not None:
        point["vs_fifo"] = ratio(stats["docs_per_s"], fifo["docs_per_s"], 3)
        point["short_p50_vs_fifo"] = ratio(point["short_p50_s"], fifo["short"]["p50_latency_s"])
        point["short_p95_vs_fifo"] = ratio(point["short_p95_s"], fifo["short"]["p95_latency_s"])
        point["long_p95_vs_fifo"] = ratio(point["long_p95_s"], fifo["long"]["p95_latency_s"])
    return point


def run_stats(run: DaemonRun, lengths: dict[str, int]) -> dict[str, Any]:
    """One pass's figures; ``lengths``: each document's tokens (short up to ``SHORT_MAX_TOKENS``)."""
    elapsed = max(run.finished_at.values()) - run.start
    latencies = {doc: finished - run.start for doc, finished in run.finished_at.items()}
    short = [latency for doc, latency in latencies.items() if lengths[doc] <= SHORT_MAX_TOKENS]
    long = [latency for doc, latency in latencies.items() if lengths[doc] > SHORT_MAX_TOKENS]
    strategies: dict[str, int] = {}
    for record in run.results.values():
        strategies[record["strategy"]] = strategies.get(record["strategy"], 0) + 1
    failures = {doc: outcome for doc, outcome in run.outcomes.items() if outcome != "ok"}
    prompt_tokens = sum(len(request.prompt_ids) for request in run.requests)
    return {
        "label": run.label,
        "seconds": round(elapsed, 3),
        "docs_per_s": round(len(run.finished_at) / elapsed, 3),
        "prompt_tok_per_s": round(prompt_tokens / elapsed, 1),
        "engine_start_s": None if run.engine_start_s is None else round(run.engine_start_s, 2),
        "kv_cache_tokens": run.kv_cache_tokens,
        "p50_latency_s": percentile(list(latencies.values()), 0.50),
        "p95_latency_s": percentile(list(latencies.values()), 0.95),
        "short": {
            "docs": len(short),
            "p50_latency_s": percentile(short, 0.50),
            "p95_latency_s": percentile(short, 0.95),
        },
        "long": {
            "docs": len(long),
            "p50_latency_s": percentile(long, 0.50),
            "p95_latency_s": percentile(long, 0.95),
        },
        "strategies": strategies,
        "parts_max": max((record["parts"] for record in run.results.values()), default=0),
        "depth_max": max((record["depth"] for record in run.results.values()), default=0),
        "failures": failures,
        "cached_prompt_tokens": sum(record["cached_prompt_tokens"] for record in run.results.values()),
        "peak_rss_mib": round(run.peak_rss / 2**20, 1),
        "light_waves": int(run.light_waves),
        "light_wave_seconds": round(run.light_wave_seconds, 1),
        "generated_tokens": sum(request.output_tokens for request in run.requests),
        "spec_decoding": run.spec_decoding,
    }


def percentile(values: list[float], q: float) -> float | None:
    """The ``q`` quantile of ``values`` (inclusive method), rounded to ms; None when empty."""
    if not values:
        return None
    if len(values) == 1:
        return round(values[0], 3)
    return round(statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1], 3)


def environment() -> dict[str, Any]:
    """When, and on which device and versions (imports torch and vLLM)."""
    import torch
    import vllm

    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else platform.processor() or "cpu"
    return {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "host_cpus": os.cpu_count(),
        "device": device,
        "vllm": vllm.__version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
    }


def format_pass_stats(run: DaemonRun, lengths: dict[str, int], pages: int) -> dict[str, Any]:
    """A pass's figures, with pages/s, the daemon's peak RSS apart from the extraction workers', and
    (when it extracted anything) how much of the wall time extraction took."""
    stats = run_stats(run, lengths)
    wall = stats["seconds"]
    stats["pages_per_s"] = round(pages / wall, 3)
    stats["peak_daemon_rss_mib"] = round(run.peak_daemon_rss / 2**20, 1)
    if run.extractions:
        stats["extraction"] = {
            "extractions": int(run.extractions),
            "pages": int(run.extracted_pages),
            "worker_cpu_s": round(run.worker_cpu_s, 2),
            "worker_cpu_share_of_wall": round(run.worker_cpu_s / wall, 4),
            "pages_per_worker_cpu_s": round(run.extracted_pages / run.worker_cpu_s, 1)
            if run.worker_cpu_s
            else None,
            "seconds_sum": round(run.extraction_seconds, 2),
            "seconds_sum_share_of_wall": round(run.extraction_seconds / wall, 4),
            "peak_workers_rss_mib": round(run.peak_workers_rss / 2**20, 1),
            "peak_worker_rss_mib": round(run.peak_worker_rss / 2**20, 1),
        }
    return stats
