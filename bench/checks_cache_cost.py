"""What the grounding check, the evidence and the summary cache cost on one engine (issue 43 item 3).

One in-process engine (``--config``), started once; passes of docsumd's own pipeline (folder source,
admission) over the long-document corpus (``--copies`` shuffled copies, as ``bench/compare.py
--workload corpus``), every one on the same documents with vLLM's prefix cache emptied before it:

* ``base``: as shipped (grounding check and evidence on), summary cache off;
* ``nochecks``: the same with the check and the evidence skipped (the summarizer's ``check_result``
  and its source index replaced by no-ops in this process: there is no setting for it; the list of
  parts that evidence points to is still made);
* ``base-stop`` and ``cache-cold``: both with ``--stop`` strings (below), the summary cache off and on
  with an empty store: what a cold cache costs (lookups and writes).

Random weights never end an output on their own, and an output cut at its length limit is never
stored, so the cache passes end outputs at ``--stop`` strings (near-uniform sampling over the padded
vocabulary reaches one within tens of tokens): the outputs are shorter than ``base``'s, so the two
pairs are compared within themselves only. Rounds alternate the order of the passes.

Then an **edited contract** (``bench/cache_edits.py``'s: about ``--contract-tokens`` tokens of the
corpus's legal and regulatory texts as articles, three clauses edited), each as one document, with the
``--stop`` strings: ``contract-first`` (empty store), ``contract-edited`` and ``contract-identical``
(the same store), and ``contract-edited-nocache`` (cache off): engine tokens (prompt + generated, the
result's own counts, which leave reused work out) and seconds, against the first run's and the
uncached edited run's.

Every pass and run with the cache also says how long it spent inside it (``inside_cache``: the
wall seconds of its lookups, writes and keys, :mod:`bench.lib.cache_timing`) and that time's share of
its own seconds (``inside_cache_share``), and the CPU seconds of the cache's own code over the same
seconds (``inside_cache_cpu_share``): the cache's cost on a cold run measured in the run itself,
which the machine's noise between passes does not blur (the wall figure is a loose upper bound
with several documents in flight: a call also waits for the interpreter lock while other work runs).

    python3 -m bench.checks_cache_cost --config bench/configs/h200-qwen7b-dummy.toml --docs DOCS --copies 3 \
        --json OUT/costs.json --deadline 540
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import json
import statistics
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from bench.lib import REPO, SHARED
from bench.lib.cache_timing import timed
from bench.lib.results import result_path, write_result
from bench.lib.workloads import shuffled_copy
from bench.remote import Shared, one_pass
from daemon.config import Config, load_config

DEFAULT_STOP = (" ", "e", "t", ".")


@contextlib.contextmanager
def checks_off() -> Iterator[None]:
    """The summarizer without its grounding check and evidence: ``check_result`` returns an empty
    result and the source index is not built."""
    # Imported by name: the check runs in the service only from issue 40's phase 2 on.
    checking = importlib.import_module("daemon.summary.checking")
    from daemon.summary import summarizer
    from daemon.summary.grounding import SourceIndex

    empty = checking.check_result("", None, SourceIndex.of(""), [])

    class NoIndex:
        @staticmethod
        def of(text: str) -> None:
            return None

    saved = vars(summarizer)["check_result"], vars(summarizer)["SourceIndex"]
    # setattr: the names exist from issue 40's phase 2 on (typed code cannot assign them before).
    setattr(summarizer, "check_result", lambda *args, **kwargs: empty)  # noqa: B010
    setattr(summarizer, "SourceIndex", NoIndex)  # noqa: B010
    try:
        yield
    finally:
        setattr(summarizer, "check_result", saved[0])  # noqa: B010
        setattr(summarizer, "SourceIndex", saved[1])  # noqa: B010


def checks_patchable(result: dict[str, Any]) -> bool:
    """Whether this tree's summarizer runs the check (``check_result``), so ``nochecks`` can skip it."""
    try:
        with checks_off():
            return True
    except (ImportError, AttributeError, KeyError) as exc:
        result["nochecks_skipped"] = f"the summarizer runs no check here: {exc!r}"
        return False


def with_cache(config: Config, store: Path | None, stop: Sequence[str] | None) -> Config:
    cache = config.cache.model_copy(
        update={"enabled": store is not None, **({"path": store} if store else {})}
    )
    summary = config.summary.model_copy(update={"stop": tuple(stop)}) if stop else config.summary
    return config.model_copy(update={"cache": cache, "summary": summary})


def records(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(path.read_text()) for path in sorted((folder / "outbox").glob("*.summary.json"))]


def work_of(record: dict[str, Any]) -> dict[str, Any]:
    """What one result says of the engine's work and of what it reused."""
    keys = ("parts", "requests", "finish_reason", "document_tokens", "prompt_tokens", "generated_tokens")
    out = {key: record.get(key) for key in keys}
    out["engine_tokens"] = (record.get("prompt_tokens") or 0) + (record.get("generated_tokens") or 0)
    out.update({key: value for key, value in record.items() if key.startswith("reused")})
    out["total_s"] = (record.get("timings") or {}).get("total_s")
    return out


def reused(record: dict[str, Any], key: str) -> int:
    """A result's ``reused`` count of ``key`` (0 where the record has none)."""
    return int((record.get("reused") or {}).get(key) or 0)


def corpus(docs_dir: Path, copies: int, seed: int) -> list[tuple[str, str]]:
    files = sorted(docs_dir.glob("*.txt"))
    texts = [(path.name, path.read_text(encoding="utf-8", errors="replace")) for path in files]
    return [
        (f"c{copy}-{name}", shuffled_copy(text, copy, name, seed))
        for copy in range(1, copies + 1)
        for name, text in texts
    ]


def summarize(result: dict[str, Any]) -> None:
    passes = result["passes"]

    def rates(label: str) -> list[float]:
        return [p["docs_per_s"] for p in passes if p["label"].split(" ")[0] == label]

    def ratio(top: str, bottom: str) -> dict[str, Any] | None:
        tops, bottoms = rates(top), rates(bottom)
        if not tops or not bottoms:
            return None
        return {
            "median": round(statistics.median(tops) / statistics.median(bottoms), 4),
            "per_round": [round(t / b, 4) for t, b in zip(tops, bottoms, strict=False)],
            f"{top}_docs_per_s": tops,
            f"{bottom}_docs_per_s": bottoms,
        }

    result["checks_on_over_off"] = ratio("base", "nochecks")
    result["cache_cold_over_off"] = ratio("cache-cold", "base-stop")
    for key in ("inside_cache_share", "inside_cache_cpu_share"):
        shares = [p[key] for p in passes if key in p]
        if shares:
            result[f"cache_cold_{key.removeprefix('inside_cache_')}"] = {
                "median": round(statistics.median(shares), 5),
                "min": min(shares),
                "max": max(shares),
            }
    contract = result.get("contract", {})
    first, edited = contract.get("contract-first"), contract.get("contract-edited")
    nocache, identical = contract.get("contract-edited-nocache"), contract.get("contract-identical")
    if first and edited:
        contract["edited_engine_tokens_over_first"] = round(
            edited["engine_tokens"] / first["engine_tokens"], 4
        )
    if edited and nocache and edited.get("total_s") and nocache.get("total_s"):
        contract["edited_seconds_over_nocache"] = round(edited["total_s"] / nocache["total_s"], 4)
        contract["edited_engine_tokens_over_nocache"] = round(
            edited["engine_tokens"] / nocache["engine_tokens"], 4
        )
    if identical:
        contract["identical_engine_tokens"] = identical["engine_tokens"]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", type=Path, default=REPO / "bench" / "configs" / "h200-qwen7b-dummy.toml")
    parser.add_argument("--docs", type=Path, default=SHARED / "corpus" / "docs")
    parser.add_argument("--copies", type=int, default=3)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=20, help="documents of a warm-up pass, not counted")
    parser.add_argument("--stop", action="append", default=None, help="stop strings of the cache passes")
    parser.add_argument("--contract-tokens", type=int, default=150_000)
    parser.add_argument("--no-contract", action="store_true")
    parser.add_argument("--deadline", type=float, default=1e9, help="seconds from now the run must end in")
    parser.add_argument("--json", type=Path, default=result_path("checks-cache-cost", "corpus"))
    args = parser.parse_args()
    end = time.monotonic() + args.deadline
    stop = tuple(args.stop) if args.stop else DEFAULT_STOP
    from transformers import AutoTokenizer

    from daemon.cli import prepare_process
    from daemon.engine.vllm_engine import Engine
    from daemon.factory import build_cache

    config = load_config(args.config)
    prepare_process(config)
    tokenizer = AutoTokenizer.from_pretrained(config.engine.tokenizer or config.engine.model)
    docs = corpus(args.docs, args.copies, args.seed)
    contract = edited = ""
    offsets: list[int] = []
    contract_skipped = None
    if not args.no_contract:
        try:
            cache_edits: Any = importlib.import_module("bench.cache_edits")  # issue 41's phase 2
        except ImportError as exc:
            contract_skipped = f"no edited-contract workload in this tree: {exc!r}"
            args.no_contract = True
        else:
            cache_edits.CORPUS = args.docs  # its articles come from the corpus's legal-* and reg-* texts
            contract = cache_edits.build_contract(tokenizer, args.contract_tokens)
            edited, offsets = cache_edits.edit_clauses(contract)
    result: dict[str, Any] = {
        "what": "grounding check and evidence on against off; summary cache cold against off; an edited "
        "contract against the cache (one in-process engine)",
        "config": str(args.config),
        "documents_per_pass": len(docs),
        "stop": list(stop),
        "contract_tokens": len(tokenizer.encode(contract, add_special_tokens=False)) if contract else None,
        "passes": [],
        "contract": {},
    }
    if contract_skipped:
        result["contract_skipped"] = contract_skipped

    def write() -> None:
        summarize(result)
        write_result(args.json, result, config=args.config, indent=1)

    with tempfile.TemporaryDirectory(prefix="docsumd-costs-") as tmp:
        work = Path(tmp)
        plans = [
            ("base", with_cache(config, None, None), False),
            *([("nochecks", with_cache(config, None, None), True)] if checks_patchable(result) else []),
            ("base-stop", with_cache(config, None, stop), False),
            ("cache-cold", None, False),  # a fresh store each time
        ]

        async def run() -> None:
            engine = Engine(config.engine)
            started = time.monotonic()
            await engine.start()
            result["engine_start_s"] = round(time.monotonic() - started, 1)
            result["kv_cache_tokens"] = engine.kv_cache_tokens
            pass_s = 0.0
            contract_reserve = 0.0 if args.no_contract else 90.0
            try:
                if args.warmup:
                    warm = [(f"w-{name}", text) for name, text in docs[: args.warmup]]
                    await one_pass(
                        with_cache(config, None, None), Shared(engine), warm, work / "warmup", "warmup"
                    )
                for round_ in range(args.rounds):
                    for label, planned, patched in plans if round_ % 2 == 0 else plans[::-1]:
                        if pass_s and end - time.monotonic() < pass_s * 1.1 + contract_reserve:
                            result.setdefault("skipped", []).append(f"{label} round {round_}")
                            continue
                        folder = work / f"{label}-{round_}"
                        store = work / f"store-{round_}.sqlite3"
                        cfg = planned or with_cache(config, store, stop)
                        cache = await build_cache(cfg) if cfg.cache.enabled else None
                        inside = None if cache is None else timed(cache)
                        await engine.reset_prefix_cache()
                        t0 = time.monotonic()
                        with checks_off() if patched else contextlib.nullcontext():
                            outcome = await one_pass(
                                cfg, Shared(engine), docs, folder, f"{label} round {round_}", cache=cache
                            )
                        this_pass_s = time.monotonic() - t0
                        pass_s = max(pass_s, this_pass_s)
                        done = records(folder)
                        outcome["generated_tokens"] = sum(r.get("generated_tokens") or 0 for r in done)
                        outcome["finish_reasons"] = {
                            reason: sum(1 for r in done if r.get("finish_reason") == reason)
                            for reason in {r.get("finish_reason") for r in done}
                        }
                        outcome["reused_requests"] = sum(reused(r, "requests") for r in done)
                        outcome["summary_cache"] = cache is not None
                        if inside is not None:
                            outcome["inside_cache"] = inside.as_dict()
                            outcome["inside_cache_share"] = round(inside.total / this_pass_s, 5)
                            outcome["inside_cache_cpu_share"] = round(inside.total_cpu / this_pass_s, 5)
                        # The check's own seconds per result (off the event loop, beside the engine's).
                        outcome["check_s"] = round(
                            sum((r.get("timings") or {}).get("check_s") or 0.0 for r in done), 3
                        )
                        result["passes"].append(outcome)
                        write()
                    if round_ == 0 and not args.no_contract:
                        await run_contract(engine)
            finally:
                await engine.stop()

        async def run_contract(engine: Any) -> None:
            if end - time.monotonic() < 60:
                result.setdefault("skipped", []).append("contract")
                return
            store = work / "contract.sqlite3"
            runs = [
                ("contract-first", store, "contract.txt", contract),
                ("contract-edited", store, "contract-v2.txt", edited),
                ("contract-identical", store, "contract-copy.txt", contract),
                ("contract-edited-nocache", None, "contract-v2b.txt", edited),
            ]
            summaries: dict[str, str] = {}
            for label, where, name, text in runs:
                cfg = with_cache(config, where, stop)
                cache = await build_cache(cfg) if cfg.cache.enabled else None
                inside = None if cache is None else timed(cache)
                await engine.reset_prefix_cache()
                folder = work / label
                started = time.monotonic()
                await one_pass(cfg, Shared(engine), [(name, text)], folder, label, cache=cache)
                run_s = time.monotonic() - started
                record = records(folder)[0]
                result["contract"][label] = work_of(record)
                if inside is not None:
                    result["contract"][label]["inside_cache"] = inside.as_dict()
                    result["contract"][label]["inside_cache_share"] = round(inside.total / run_s, 5)
                    result["contract"][label]["inside_cache_cpu_share"] = round(inside.total_cpu / run_s, 5)
                summaries[label] = record.get("summary", "")
                write()
            result["contract"]["identical_summary_same_as_first"] = summaries.get(
                "contract-identical"
            ) == summaries.get("contract-first")
            result["contract"]["edit_offsets"] = offsets

        asyncio.run(run())
    write()
    print(json.dumps({k: v for k, v in result.items() if k != "passes"}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
