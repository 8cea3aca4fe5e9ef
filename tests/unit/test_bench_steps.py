"""bench/steps.py: a compare.py log split into passes, and each pass's prefill, decode-only steps,
tail and stalls (issue 24 item 5)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from bench.steps import Step, decode_runs, prefill_step_fit, read_passes, short_prefill_steps, summarize

BUDGET = 1000


def _event(second: float, event: str) -> str:
    return json.dumps({"event": event, "timestamp": f"2026-12-04T03:00:{second:09.6f}Z"})


def _step(second: float, index: int, prompt: int, decoding: int) -> str:
    text = (
        f"Engine 000: Iteration({index}): 1 context requests, {prompt} context tokens, "
        f"{decoding} generation requests, {decoding} generation tokens, "
        "iteration elapsed time: 0.03 ms, GPU KV cache usage: 1.0%"
    )
    return _event(second, text)


def _log(tmp_path: Path) -> Path:
    lines = [
        "workload mixed: 3 documents",
        _event(0.0, "folder source started"),
        _step(1.0, 0, 990, 5),  # full
        _step(1.3, 1, 990, 5),  # full, 0.3 s
        _step(3.8, 2, 400, 5),  # partial, after a 2.5 s stall
        _step(3.9, 3, 0, 5),  # decode only
        _step(4.0, 4, 0, 4),
        _event(4.5, "stop requested: draining"),
        "daemon (admission): 3 documents in 4.0 s, 0.75 docs/s",
        "not json {",
        _event(5.0, "folder source started"),
        _step(5.1, 5, 995, 0),
        _event(5.2, "stop requested: draining"),
        "daemon (fifo): 3 documents in 0.2 s",
    ]
    path = tmp_path / "run.log.gz"
    with gzip.open(path, "wt", encoding="utf-8") as out:
        out.write("\n".join(lines) + "\n")
    return path


def test_passes_are_read_in_order_with_their_labels(tmp_path: Path) -> None:
    passes = read_passes(_log(tmp_path))
    assert [label for label, _ in passes] == ["admission", "fifo"]
    assert [len(steps) for _, steps in passes] == [5, 1]
    assert passes[0][1][2].prompt_tokens == 400
    assert passes[0][1][2].decoding == 5


def test_a_pass_splits_into_prefill_decode_only_tail_and_stalls(tmp_path: Path) -> None:
    steps = read_passes(_log(tmp_path))[0][1]
    figures = summarize(steps, budget=BUDGET, stall=1.0)
    assert figures["seconds"] == 3.0
    assert figures["prefill_steps"] == 2  # the first step has no gap before it: it is the origin
    assert figures["prefill_seconds"] == 2.8
    assert figures["full_prefill_steps"] == 1
    assert figures["full_prefill_ms_per_step"] == 300
    assert figures["decode_only_seconds"] == 0.2
    assert figures["last_full_prefill_s"] == 0.3
    assert figures["tail_seconds"] == 2.7
    assert figures["stalls"] == [{"at_s": 2.8, "seconds": 2.5, "decoding": 5}]


def test_short_prefill_steps_count_only_those_before_the_last_full_one() -> None:
    steps = [
        Step(0.0, 990, 5),  # full
        Step(0.3, 600, 10),  # short: 390 tokens of the budget unused
        Step(0.5, 985, 10),  # full, the last one
        Step(0.8, 300, 10),  # after the last full step: the end's combine steps, not counted
        Step(0.9, 0, 10),
    ]
    assert short_prefill_steps(steps, budget=BUDGET) == {"steps": 1, "unused_tokens": 390}
    assert short_prefill_steps(steps[3:], budget=BUDGET) == {"steps": 0, "unused_tokens": 0}


def test_decode_runs_are_the_long_stretches_of_decode_only_steps() -> None:
    steps = [Step(0.0, 990, 3)]
    steps += [Step(0.1 + 0.01 * index, 0, 3 - index // 2) for index in range(5)]  # a run of 5
    steps += [Step(0.2, 500, 1), Step(0.3, 0, 1), Step(0.31, 0, 1), Step(0.35, 800, 0)]  # a run of 2
    runs = decode_runs(steps, least=3)
    assert runs == [{"at_s": 0.1, "steps": 5, "seconds": 0.1, "decoding_first": 3, "decoding_last": 1}]
    assert len(decode_runs(steps, least=2)) == 2
    assert summarize(steps, budget=BUDGET, stall=1.0, run=3)["decode_runs"] == runs
    ending = [Step(0.0, 990, 3), Step(0.1, 0, 3), Step(0.2, 0, 2), Step(0.3, 0, 1)]
    assert decode_runs(ending, least=3)[0]["seconds"] == 0.2  # to the last step's line
    assert decode_runs(ending, least=3, ended_at=0.4)[0]["seconds"] == 0.3  # to the pass's end


def test_the_prefill_step_fit_recovers_a_linear_cost() -> None:
    steps, at = [], 0.0
    for index in range(40):
        prompt, decoding = 4000 + 300 * (index % 7), 10 + 13 * (index % 5)
        steps.append(Step(at, prompt, decoding))
        at += 0.02 + prompt * 15e-6 + decoding * 3e-5  # what this step costs: its gap to the next
    steps.append(Step(at, 0, 0))
    fit = prefill_step_fit([steps])
    assert fit["windows"] == 37  # windows of four prefill steps, each with the step after it
    assert fit["ms_per_step"] == 20.0
    assert fit["us_per_prompt_token"] == 15.0
    assert fit["ms_per_decoding_request"] == 0.03
    assert prefill_step_fit([steps[:4]]) == {}
