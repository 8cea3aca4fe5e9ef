"""Where each pass of a ``bench/compare.py`` run spent its time, engine step by engine step.

With ``[engine.extra] enable_logging_iteration_details = true`` (``bench/configs/*-steps.toml``) vLLM
logs one line per engine step: its prefill ("context") tokens and its decoding requests. With async
scheduling the line's own "elapsed time" is not the step's duration, so a step's duration here is the
time between two lines' timestamps (when the daemon's process received them). The log is
compare.py's (plain or gzipped): the daemon's JSON lines and compare.py's ``daemon (LABEL): ...``
lines, which name the passes in order.

Per pass:

* ``prefill_steps``: steps with prompt tokens, their seconds and prompt tokens per second; ``full``
  ones (the step's token budget nearly used) apart, with milliseconds per step;
* ``decode_only_seconds``: steps that only decode (a light wave's, the end's tail, and any stretch
  where vLLM's batch is full of decoding requests);
* ``tail_seconds``: from the last full prefill step to the last step (what the run's last
  documents' decoding, and staged documents' combine steps, add after the prefill is done);
* ``stalls``: steps that took over ``--stall`` seconds (a one-time kernel compilation shows as a
  step of several seconds in the first pass that reaches a new batch shape);
* ``short_prefill_steps``: prefill steps before the last full one whose token budget was not full
  (the engine's prefill queue ran dry), and the budget tokens they left unused;
* ``decode_runs``: runs of at least ``--run`` decode-only steps in a row (a light wave decoding
  alone, a batch full of decoding requests, the end's tail), with the requests decoding at their
  first and last step.

Over every pass but the warm-ups of all the logs given, ``prefill_step_fit``: a least-squares fit
of what a prefill step costs, over windows of four consecutive steps that all prefill at least
2,000 tokens (a window, not a step, because single gaps are noisy: a line received late makes one
gap long and the next short): seconds per step, per prompt token and per decoding request.

    .venv/bin/python -m bench.steps LOG [LOG...] [--json FILE] [--budget 16384] [--stall 1.0] [--run 20]
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import re
import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.lib.results import write_result

ITERATION = re.compile(
    r"Iteration\((\d+)\): (\d+) context requests, (\d+) context tokens, "
    r"(\d+) generation requests, (\d+) generation tokens"
)
PASS_LINE = re.compile(r"^daemon \(([^)]+)\): ")
FULL_SHARE = 0.97  # a step whose tokens reach this share of the budget counts as a full prefill step


@dataclass(frozen=True, slots=True)
class Step:
    """One engine step as logged: when the daemon received it, its prefill tokens, its decoders."""

    at: float
    prompt_tokens: int
    decoding: int


def read_passes(path: Path) -> list[tuple[str, list[Step]]]:
    """The steps of each folder pass in ``path``, labelled in order (``pass N`` where unnamed)."""
    opener = gzip.open if path.suffix == ".gz" else open
    labels: list[str] = []
    passes: list[list[Step]] = []
    current: list[Step] | None = None
    with opener(path, "rt", encoding="utf-8", errors="replace") as lines:
        for line in lines:
            if (named := PASS_LINE.match(line)) is not None:
                labels.append(named[1])
                continue
            if not line.startswith("{"):
                continue
            try:
                event = json.loads(line)
            except ValueError:
                continue
            text = str(event.get("event", ""))
            if text == "folder source started":
                current = []
            elif text == "stop requested: draining" and current is not None:
                passes.append(current)
                current = None
            elif current is not None and (found := ITERATION.search(text)) is not None:
                at = datetime.fromisoformat(str(event["timestamp"]).replace("Z", "+00:00")).timestamp()
                current.append(Step(at, int(found[3]), int(found[4])))
    labels += [f"pass {number}" for number in range(len(labels) + 1, len(passes) + 1)]
    return list(zip(labels, passes, strict=False))


def short_prefill_steps(steps: list[Step], *, budget: int) -> dict[str, int]:
    """Prefill steps before the pass's last full one that left part of the token budget unused."""
    full = [index for index, step in enumerate(steps) if _is_full(step, budget)]
    short = [
        step
        for step in steps[: full[-1] if full else 0]
        if step.prompt_tokens > 0 and not _is_full(step, budget)
    ]
    return {"steps": len(short), "unused_tokens": sum(budget - s.prompt_tokens - s.decoding for s in short)}


def decode_runs(steps: list[Step], *, least: int, ended_at: float | None = None) -> list[dict[str, float]]:
    """Runs of at least ``least`` decode-only steps in a row: where each starts (seconds into the
    pass), its steps, its seconds (to the step after it, or for a run that ends the pass to
    ``ended_at``, when the last step ended, where known) and the requests decoding at its ends."""
    runs: list[dict[str, float]] = []
    start = 0
    while start < len(steps):
        if steps[start].prompt_tokens:
            start += 1
            continue
        end = start
        while end < len(steps) and not steps[end].prompt_tokens:
            end += 1
        if end - start >= least:
            until = steps[end].at if end < len(steps) else (ended_at or steps[-1].at)
            runs.append(
                {
                    "at_s": round(steps[start].at - steps[0].at, 2),
                    "steps": end - start,
                    "seconds": round(until - steps[start].at, 2),
                    "decoding_first": steps[start].decoding,
                    "decoding_last": steps[end - 1].decoding,
                }
            )
        start = end
    return runs


def prefill_step_fit(passes: list[list[Step]], *, window: int = 4, least: int = 2000) -> dict[str, float]:
    """Least squares of a window's seconds on its steps, prompt tokens and decoding requests."""
    rows: list[tuple[float, float, float, float]] = []
    for steps in passes:
        for start in range(len(steps) - window):
            chunk = steps[start : start + window]
            if all(step.prompt_tokens >= least for step in chunk):
                seconds = steps[start + window].at - steps[start].at
                tokens = sum(step.prompt_tokens for step in chunk)
                rows.append((float(window), float(tokens), float(sum(s.decoding for s in chunk)), seconds))
    if len(rows) < 3:
        return {}
    per_step, per_token, per_decoding = _least_squares(rows)
    return {
        "windows": len(rows),
        "ms_per_step": round(per_step * 1e3, 2),
        "us_per_prompt_token": round(per_token * 1e6, 3),
        "ms_per_decoding_request": round(per_decoding * 1e3, 4),
    }


def _least_squares(rows: list[tuple[float, float, float, float]]) -> tuple[float, float, float]:
    """The least-squares ``a, b, c`` of ``y = a*x0 + b*x1 + c*x2`` over rows ``(x0, x1, x2, y)``."""
    import numpy  # vLLM's dependency, so always installed beside it; only this fit needs it

    table = numpy.asarray(rows, dtype=float)
    solution = numpy.linalg.lstsq(table[:, :3], table[:, 3], rcond=None)[0]
    return float(solution[0]), float(solution[1]), float(solution[2])


def _is_full(step: Step, budget: int) -> bool:
    return step.prompt_tokens > 0 and step.prompt_tokens + step.decoding >= FULL_SHARE * budget


def summarize(steps: list[Step], *, budget: int, stall: float, run: int = 20) -> dict[str, Any]:
    """The pass's figures (see the module's doc); a step's duration is the gap before its line."""
    figures: dict[str, float] = dict.fromkeys(
        ("prefill_s", "prefill_tokens", "full_s", "full_steps", "decode_s", "prefill_steps"), 0.0
    )
    stalls: list[dict[str, float]] = []
    last_full = steps[0].at
    for before, step in itertools.pairwise(steps):
        seconds = step.at - before.at
        if seconds > stall:
            stalls.append(
                {
                    "at_s": round(step.at - steps[0].at, 2),
                    "seconds": round(seconds, 2),
                    "decoding": step.decoding,
                }
            )
        if step.prompt_tokens == 0:
            figures["decode_s"] += seconds
            continue
        figures["prefill_steps"] += 1
        figures["prefill_s"] += seconds
        figures["prefill_tokens"] += step.prompt_tokens
        if _is_full(step, budget):
            figures["full_steps"] += 1
            figures["full_s"] += seconds
            last_full = step.at
    return {
        "steps": len(steps),
        "seconds": round(steps[-1].at - steps[0].at, 2),
        "prefill_steps": int(figures["prefill_steps"]),
        "prefill_seconds": round(figures["prefill_s"], 2),
        "prefill_tokens_per_s": round(figures["prefill_tokens"] / max(figures["prefill_s"], 1e-9)),
        "full_prefill_steps": int(figures["full_steps"]),
        "full_prefill_ms_per_step": round(1000 * figures["full_s"] / max(figures["full_steps"], 1)),
        "decode_only_seconds": round(figures["decode_s"], 2),
        "last_full_prefill_s": round(last_full - steps[0].at, 2),
        "tail_seconds": round(steps[-1].at - last_full, 2),
        "stalls": stalls,
        "short_prefill_steps": short_prefill_steps(steps, budget=budget),
        "decode_runs": decode_runs(steps, least=run),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("logs", type=Path, nargs="+", help="compare.py logs (.log or .log.gz)")
    parser.add_argument("--budget", type=int, default=16384, help="the engine's max_num_batched_tokens")
    parser.add_argument("--stall", type=float, default=1.0, help="a step longer than this is a stall")
    parser.add_argument("--run", type=int, default=20, help="decode-only steps in a row that make a run")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()
    report: dict[str, Any] = {"benchmark": "bench/steps.py", "budget": args.budget, "logs": {}}
    measured: list[list[Step]] = []
    for path in args.logs:
        passes = {}
        for label, steps in read_passes(path):
            if len(steps) < 2:
                continue
            if label != "warmup":
                measured.append(steps)
            passes[label] = summarize(steps, budget=args.budget, stall=args.stall, run=args.run)
            print(f"{path.name} {label}: {json.dumps(passes[label])}")
        report["logs"][path.name] = passes
    report["prefill_step_fit"] = prefill_step_fit(measured)
    print(f"prefill step fit: {json.dumps(report['prefill_step_fit'])}")
    if args.json is not None:
        write_result(args.json, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
