"""A model of vLLM's step scheduler, driven by the daemon's real :class:`~daemon.engine.admission.Admission`.

Device time is scarce, so admission policies are explored here first and only the promising ones
are measured on the GPU (``bench/compare.py``). The model is vLLM v1's scheduler with chunked
prefill: each step serves the running requests in order (a decode is one token, a prefill as much
of the prompt as the step's token budget has left), then admits waiting requests while the budget,
``max_num_seqs`` and the KV cache allow. A step takes::

    overhead + tokens / rate + kv_seconds_per_token * context tokens read by decoding requests

which, with the defaults, puts a 16,384-token prefill step at about 0.45 s and a decode-only step of
256 requests at 15-20 ms, as measured on one H200 with a 7B model (``../shared/gpu/README.md``). The
workload is ``compare.py --workload mixed``'s (70% of 500-1,500 tokens, 30% of 5,000-20,000;
documents over the context are cut into parts and combined). All documents arrive at once; time is
virtual, so a run takes a second whatever the machine.

    .venv/bin/python -m bench.admission_sim [--overhead 0.006] [--max-num-batched-tokens 16384]
        [--kv-tokens 1900000] [--variant NAME:key=value,...]

Each pass also reports ``bench/steps.py``'s ``short_prefill_steps`` and its ``decode_runs`` (of 100
steps or more), as the GPU's step logs give them.

A staged document's parts go to admission with ``follow_up`` (its combine step follows them), as the
summarizer sends them.

Variants take :class:`~daemon.config.AdmissionConfig` keys, as ``compare.py --variant`` does. The
model leaves out what it cannot know (CUDA-graph effects, sampling details, the daemon's own CPU
time), so its figures are for comparing policies with each other, not for predicting the GPU's.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.lib.counters import wave_counters
from bench.lib.results import write_result
from bench.steps import Step, decode_runs, short_prefill_steps
from daemon.config import AdmissionConfig, EngineConfig
from daemon.engine.admission import AdmissionControl, admission_for, admission_limits

SHORT_MAX_TOKENS = 2000
TEMPLATE_TOKENS = 60
OUTPUT_TOKENS = 256


@dataclass
class StepCost:
    """How long one engine step takes (seconds)."""

    overhead: float = 0.006
    tokens_per_s: float = 38_000.0
    kv_s_per_token: float = 12e-9
    sample_s_per_seq: float = 2e-5
    decode_overlap: float = 0.0
    """The share of its decoding requests' cost that a step full of prefill hides (0: none)."""

    def seconds(
        self, tokens: int, decode_context: int, sequences: int, *, prefill_share: float = 0.0
    ) -> float:
        """One step that computes ``tokens`` tokens, reads ``decode_context`` tokens of KV cache for
        its decoding requests and samples ``sequences``; ``prefill_share`` of the step's token budget
        is prefill (a compute-bound step, beside which memory-bound decoding costs less: on the
        H200 a request decoding beside a full prefill step cost 0.037 ms net of the prefill token
        it displaced, about 60% of what this model charged; bench/RESULTS.md)."""
        decoding = decode_context * self.kv_s_per_token + sequences * self.sample_s_per_seq
        hidden = self.decode_overlap * min(1.0, prefill_share) * decoding
        return self.overhead + tokens / self.tokens_per_s + decoding - hidden


@dataclass(eq=False)
class _Request:
    prompt: int
    output: int
    on_prefilled: Any
    done: asyncio.Future[None]
    computed: int = 0
    generated: int = 0


@dataclass
class SimEngine:
    """vLLM's scheduler in miniature, on a virtual clock."""

    step_tokens: int = 16384
    max_seqs: int = 256
    kv_tokens: int = 1_900_000
    cost: StepCost = field(default_factory=StepCost)
    lag_steps: int = 2
    """The first step a request submitted now can run in, counted from the next: 2 with async
    scheduling (vLLM has planned the next step already), 1 without; 3 where the daemon learns of a
    step's outputs only after the engine has planned the step after next."""
    now: float = 0.0
    steps: int = 0
    running: list[_Request] = field(default_factory=list)
    waiting: list[_Request] = field(default_factory=list)
    incoming: list[tuple[int, _Request]] = field(default_factory=list)
    kv_used: int = 0
    log: list[Step] = field(default_factory=list)
    """Every step as vLLM's step log would give it (at its start), for ``bench/steps.py``'s figures."""

    def submit(self, request: _Request) -> None:
        """A new request goes to the back of vLLM's waiting queue, to run ``lag_steps`` from now at
        the earliest."""
        self.incoming.append((self.steps + self.lag_steps, request))

    @property
    def busy(self) -> bool:
        """Whether the engine holds any request."""
        return bool(self.running or self.waiting or self.incoming)

    def step(self) -> list[tuple[str, _Request]]:
        """One engine step: what it scheduled advances, the clock moves on; returns its events."""
        number = self.steps + 1
        self.waiting += [request for first, request in self.incoming if first <= number]
        self.incoming = [(first, request) for first, request in self.incoming if first > number]
        budget, scheduled = self.step_tokens, []
        for request in self.running:
            if budget <= 0:
                break
            tokens = min(max(1, request.prompt - request.computed), budget)
            scheduled.append((request, tokens))
            budget -= tokens
        while self.waiting and budget > 0 and len(self.running) < self.max_seqs:
            request = self.waiting[0]
            if self.running and self.kv_used + request.prompt + request.output > self.kv_tokens:
                break
            self.waiting.pop(0)
            self.running.append(request)
            self.kv_used += request.prompt + request.output
            tokens = min(request.prompt, budget)
            scheduled.append((request, tokens))
            budget -= tokens
        context = sum(r.computed for r, _ in scheduled if r.computed >= r.prompt)
        prefill = sum(tokens for r, tokens in scheduled if r.computed < r.prompt)
        decoding = sum(1 for r, _ in scheduled if r.computed >= r.prompt)
        self.log.append(Step(self.now, prefill, decoding))
        self.now += self.cost.seconds(
            self.step_tokens - budget, context, len(scheduled), prefill_share=prefill / self.step_tokens
        )
        self.steps += 1
        events = []
        for request, tokens in scheduled:
            prefilling = request.computed < request.prompt
            request.computed += tokens
            if request.computed < request.prompt:
                continue
            request.generated += 1
            if prefilling:
                events.append(("prefilled", request))
            if request.generated >= request.output:
                events.append(("done", request))
                self.running.remove(request)
                self.kv_used -= request.prompt + request.output
        return events


def mixed_documents(count: int, seed: int, room: int) -> list[list[list[int]]]:
    """Per document, its stages of prompt lengths: one request, or parts and then one combine."""
    rng = random.Random(seed)
    longs = round(count * 0.3)
    lengths = [rng.randint(5000, 20000) for _ in range(longs)]
    lengths += [rng.randint(500, 1500) for _ in range(count - longs)]
    rng.shuffle(lengths)
    documents = []
    for length in lengths:
        if length + TEMPLATE_TOKENS <= room:
            documents.append([[length + TEMPLATE_TOKENS]])
        else:
            parts = math.ceil(length / room)
            documents.append(
                [
                    [length // parts + TEMPLATE_TOKENS] * parts,
                    [parts * (OUTPUT_TOKENS + 16) + TEMPLATE_TOKENS],
                ]
            )
    return documents


async def _simulate(
    admission: AdmissionControl,
    engine: SimEngine,
    documents: list[list[list[int]]],
    arrivals: list[float],
) -> list[float]:
    """Run the documents through ``admission`` and ``engine``; each document arrives at its time in
    ``arrivals`` (virtual seconds). Returns each document's end."""
    loop = asyncio.get_running_loop()
    submitted = asyncio.Event()

    async def request(prompt: int, urgent: bool, arrived_at: float, follow_up: bool) -> None:
        async with admission.slot(
            prompt + OUTPUT_TOKENS,
            urgent=urgent,
            arrived_at=arrived_at,
            prompt_tokens=prompt,
            follow_up=follow_up,
        ) as slot:
            done = loop.create_future()
            engine.submit(_Request(prompt, OUTPUT_TOKENS, slot.prefill_done, done))
            submitted.set()
            await done

    async def document(stages: list[list[int]], arrived_at: float) -> float:
        for number, stage in enumerate(stages):
            follow_up = number < len(stages) - 1
            await asyncio.gather(*(request(prompt, number > 0, arrived_at, follow_up) for prompt in stage))
        return engine.now

    order = sorted(range(len(documents)), key=lambda index: arrivals[index])
    tasks: dict[int, asyncio.Task[float]] = {}
    while len(tasks) < len(documents) or not all(task.done() for task in tasks.values()):
        while len(tasks) < len(order) and arrivals[order[len(tasks)]] <= engine.now:
            index = order[len(tasks)]
            tasks[index] = asyncio.create_task(document(documents[index], arrivals[index]))
        for _ in range(8):  # let every task react to the last step (admission, next stages)
            await asyncio.sleep(0)
        if not engine.busy:
            submitted.clear()
            pending = {task for task in tasks.values() if not task.done()}
            if not pending:
                if len(tasks) < len(order):
                    engine.now = arrivals[order[len(tasks)]]  # idle until the next document arrives
                    continue
                break
            await asyncio.wait(
                {asyncio.create_task(submitted.wait()), *pending}, return_when=asyncio.FIRST_COMPLETED
            )
            continue
        for kind, sim_request in engine.step():
            if kind == "prefilled":
                sim_request.on_prefilled()
            else:
                sim_request.done.set_result(None)
    return [tasks[index].result() - arrivals[index] for index in range(len(documents))]


def run(
    settings: AdmissionConfig,
    cost: StepCost,
    count: int = 400,
    seed: int = 7,
    *,
    arrival_seconds: float = 0.0,
    max_num_seqs: int = 256,
    step_tokens: int = 16384,
    kv_tokens: int = 1_900_000,
    lag_steps: int = 2,
    long_order: str = "random",
) -> dict[str, Any]:
    """One simulated pass of the mixed workload under ``settings``; the documents arrive in random
    order, evenly spread over ``arrival_seconds`` (0: all at once), except that ``long_order``
    ``longest`` or ``shortest`` hands the long documents' arrival times out by their length.
    Latencies count from arrival."""
    engine_config = EngineConfig(
        model="sim", max_model_len=16384, max_num_seqs=max_num_seqs, max_num_batched_tokens=step_tokens
    )
    engine = SimEngine(
        cost=cost, max_seqs=max_num_seqs, step_tokens=step_tokens, kv_tokens=kv_tokens, lag_steps=lag_steps
    )
    limits = admission_limits(settings, engine_config, kv_cache_tokens=engine.kv_tokens)
    clock = lambda: engine.now  # noqa: E731 - admission's clock is the engine's virtual one
    admission = admission_for(settings, limits, clock=clock)
    documents = mixed_documents(count, seed, room=16384 - OUTPUT_TOKENS - TEMPLATE_TOKENS)
    rng = random.Random(seed + 1)
    arrivals = sorted(rng.uniform(0.0, arrival_seconds) for _ in documents)
    rng.shuffle(arrivals)
    if long_order != "random":
        arrivals = _ordered_long(documents, arrivals, longest_first=long_order == "longest")
    waves_before, wave_seconds_before = wave_counters()
    finished = asyncio.run(_simulate(admission, engine, documents, arrivals))
    waves_after, wave_seconds_after = wave_counters()
    sizes = [sum(stage[0] for stage in stages[:1]) for stages in documents]
    short = [t for t, size in zip(finished, sizes, strict=True) if size <= SHORT_MAX_TOKENS]
    long = [t for t, size in zip(finished, sizes, strict=True) if size > SHORT_MAX_TOKENS]
    return {
        "seconds": round(engine.now, 2),
        "short_p50": _q(short, 0.5),
        "short_p95": _q(short, 0.95),
        "long_p95": _q(long, 0.95),
        "steps": engine.steps,
        "light_waves": int(waves_after - waves_before),
        "light_wave_seconds": round(wave_seconds_after - wave_seconds_before, 2),
        "short_prefill_steps": short_prefill_steps(engine.log, budget=step_tokens),
        "decode_runs": decode_runs(engine.log, least=100, ended_at=engine.now),
    }


def _ordered_long(
    documents: list[list[list[int]]], arrivals: list[float], *, longest_first: bool
) -> list[float]:
    """``arrivals`` with the long documents' times handed out again: the earliest to the longest
    document (or the shortest), so admission, which orders heavy requests by arrival, takes them
    in that order."""
    length = [sum(stages[0]) for stages in documents]
    long = [index for index, size in enumerate(length) if size > SHORT_MAX_TOKENS]
    times = sorted(arrivals[index] for index in long)
    by_length = sorted(long, key=lambda index: length[index], reverse=longest_first)
    ordered = list(arrivals)
    for index, at in zip(by_length, times, strict=True):
        ordered[index] = at
    return ordered


def _q(values: list[float], q: float) -> float:
    return round(statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1], 2)


def _variant(text: str) -> tuple[str, dict[str, Any]]:
    name, _, pairs = text.partition(":")
    settings: dict[str, Any] = {}
    for pair in filter(None, pairs.split(",")):
        key, _, value = pair.partition("=")
        settings[key] = float(value) if "." in value else int(value)
    return name, settings


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--overhead", type=float, default=0.006, help="fixed seconds per engine step")
    parser.add_argument(
        "--kv-s-per-token",
        type=float,
        default=StepCost.kv_s_per_token,
        help="seconds per token of KV cache a decoding request reads",
    )
    parser.add_argument(
        "--decode-overlap",
        type=float,
        default=0.0,
        help="share of decoding's cost a full prefill step hides (the H200's step logs: about 0.4)",
    )
    parser.add_argument("--count", type=int, default=400)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--arrival-seconds",
        type=float,
        default=0.0,
        help="documents arrive spread over this long, in random order (0: all at once)",
    )
    parser.add_argument("--max-num-seqs", type=int, default=256, help="the engine's batch size")
    parser.add_argument("--tokens-per-s", type=float, default=StepCost.tokens_per_s, help="prefill rate")
    parser.add_argument(
        "--max-num-batched-tokens", type=int, default=16384, help="the engine's tokens per step"
    )
    parser.add_argument("--kv-tokens", type=int, default=1_900_000, help="the KV cache's size, in tokens")
    parser.add_argument(
        "--lag-steps",
        type=int,
        default=2,
        help="steps from a request's submission to the first step it can run in (2: async scheduling)",
    )
    parser.add_argument(
        "--long-order",
        choices=("random", "longest", "shortest"),
        default="random",
        help="the long documents' arrival order: as drawn, or by length (longest or shortest first)",
    )
    parser.add_argument("--variant", action="append", default=[], metavar="NAME:KEY=VALUE[,KEY=VALUE]")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args()
    cost = StepCost(
        overhead=args.overhead,
        tokens_per_s=args.tokens_per_s,
        kv_s_per_token=args.kv_s_per_token,
        decode_overlap=args.decode_overlap,
    )
    shape = {
        "arrival_seconds": args.arrival_seconds,
        "max_num_seqs": args.max_num_seqs,
        "step_tokens": args.max_num_batched_tokens,
        "kv_tokens": args.kv_tokens,
        "lag_steps": args.lag_steps,
        "long_order": args.long_order,
    }
    fifo = run(AdmissionConfig(enabled=False), cost, args.count, args.seed, **shape)
    print(f"{'fifo':14s} {fifo}")
    report: dict[str, Any] = {
        "benchmark": "bench/admission_sim.py",
        "step_cost": vars(cost),
        "seed": args.seed,
        "arrival_seconds": args.arrival_seconds,
        "max_num_seqs": args.max_num_seqs,
        "max_num_batched_tokens": args.max_num_batched_tokens,
        "kv_tokens": args.kv_tokens,
        "lag_steps": args.lag_steps,
        "long_order": args.long_order,
        "fifo": fifo,
    }
    for name, settings in [("default", {}), *map(_variant, args.variant)]:
        result = run(AdmissionConfig(**settings), cost, args.count, args.seed, **shape)
        ratios = {
            "throughput": round(fifo["seconds"] / result["seconds"], 3),
            "short_p50": round(result["short_p50"] / fifo["short_p50"], 2),
            "short_p95": round(result["short_p95"] / fifo["short_p95"], 2),
            "long_p95": round(result["long_p95"] / fifo["long_p95"], 2),
        }
        print(f"{name:14s} {ratios} {result}")
        report[name] = {"admission": settings, **result, "vs_fifo": ratios}
    if args.json is not None:
        write_result(args.json, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
