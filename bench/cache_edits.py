"""An edited contract costs only its edits: the summary cache end to end (issue 41).

A long contract (about 150k tokens of the served model's tokenizer) is built from the corpus's legal
and regulatory texts, each an article of its own (``ARTICLE N``), and summarized with the real
``docsumd summarize`` on the real vLLM engine, with the summary cache on (a SQLite store of its own,
in a temp folder). Then, against the same store:

1. **edited**: the contract with three clauses edited (a sentence added to a numbered clause at a
   quarter, half and three quarters of the way through) is summarized: its engine tokens (prompt +
   generated, the result's ``prompt_tokens`` + ``generated_tokens``, which leave reused work out)
   against the first run's. Goal: at most 15%.
2. **identical**: the first contract again under another name: goal 0 engine tokens and a summary
   byte-identical to the first run's.
3. **cold, cache on against off**: the contract summarized with a fresh, empty store (the first run
   is the first of these), and with ``cache.enabled = false``, alternately, ``--repeats`` times
   each: the document's time (``timings.total_s``, from intake to its result written: the engine's
   start-up left out) and its throughput (document tokens per second). Goal: the cache costs at
   most 2% of throughput (median against median; the spread of each is reported).

The first, edited and identical runs are one ``docsumd summarize`` process, one document at a time
(``service.max_inflight_documents = 1``); each cold run is a process of its own. Sampling is
greedy (``temperature = 0``, ``--temperature``) so that the off and on runs do the same work; a
greedy profile stores outputs cut off at their length limit too (the same output would come again).
The tiny model's random text rarely ends on its own, so by default ``summary.stop = [" "]`` ends its
outputs at their first space (``--stop``; give ``--stop ''`` for none, as for a real model).

    .venv/bin/python -m bench.cache_edits --model DIR [--max-model-len 2048] [--tokens 150000]
        [--repeats 3] [--temperature 0] [--max-part-tokens N] [--out FILE]

With the tiny model (``docsumd make-tiny-model DIR``) tokens are what counts: its context is small, so
a long contract makes many parts. Wrap it as the other engine benchmarks (one engine at a time).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

from bench.lib.results import result_path, write_result

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO.parent / "shared" / "corpus" / "docs"
EDIT = " The parties amended this clause by a written agreement dated 1 March 2026."


def build_contract(tokenizer: Any, target_tokens: int) -> str:
    """Articles from the corpus's legal and regulatory texts, in name order, round after round (a
    later round's articles renamed, so none repeats another word for word) until ``target_tokens``."""
    sources = sorted(CORPUS.glob("legal-*.txt")) + sorted(CORPUS.glob("reg-*.txt"))
    articles: list[str] = []
    tokens = 0
    for round_number in range(1, 100):
        for path in sources:
            text = path.read_text(encoding="utf-8").strip()
            if round_number > 1:
                text = text.replace("License", f"Licence R{round_number}").replace(
                    "Software", f"Software R{round_number}"
                )
            article = f"ARTICLE {len(articles) + 1}\n\n{text}\n"
            articles.append(article)
            tokens += len(tokenizer.encode(article, add_special_tokens=False))
            if tokens >= target_tokens:
                return "\n\n".join(articles)
    raise SystemExit("the corpus is too small for the contract asked for")


def edit_clauses(text: str, at: tuple[float, ...] = (0.25, 0.5, 0.75)) -> tuple[str, list[int]]:
    """``text`` with a sentence added to the numbered clause nearest each share of its length; where."""
    clauses = [m.start() for m in re.finditer(r"(?m)^[ \t]*\d+\.[ \t]+\S", text)]
    offsets: list[int] = []
    for share in at:
        start = min(clauses, key=lambda offset: abs(offset - share * len(text)))
        end = text.index(".", text.index(".", start) + 1) + 1  # after the clause's first sentence
        offsets.append(end)
    for offset in sorted(offsets, reverse=True):
        text = text[:offset] + EDIT + text[offset:]
    return text, sorted(offsets)


def config_text(  # noqa: PLR0917 - the run's settings, one call site each
    model: Path,
    max_model_len: int,
    cache: Path | None,
    stop: list[str],
    temperature: float = 0.0,
    max_part_tokens: int | None = None,
) -> str:
    cache_section = (
        f"[cache]\npath = {json.dumps(str(cache))}\n" if cache is not None else "[cache]\nenabled = false\n"
    )
    return (
        textwrap.dedent(
            f"""\
            [engine]
            model = {json.dumps(str(model))}
            max_model_len = {max_model_len}
            max_num_seqs = 64
            max_num_batched_tokens = {max(4096, max_model_len)}
            enable_chunked_prefill = true
            enable_prefix_caching = true
            kv_cache_memory_bytes = 1073741824
            enforce_eager = true

            [summary]
            temperature = {temperature}
            max_parts = 4096
            stop = {json.dumps(stop)}
            {"" if max_part_tokens is None else f"max_part_tokens = {max_part_tokens}"}

            [service]
            max_inflight_documents = 1

            [logging]
            format = "json"

            """
        )
        + cache_section
    )


def summarize(work: Path, name: str, inputs: dict[str, str], config: str) -> dict[str, dict[str, Any]]:
    """One ``docsumd summarize`` process over ``inputs`` (file name -> text); the result records."""
    run = work / name
    shutil.rmtree(run, ignore_errors=True)
    (run / "in").mkdir(parents=True)
    (run / "tmp").mkdir()
    paths = []
    for file_name, text in inputs.items():
        path = run / "in" / file_name
        path.write_text(text, encoding="utf-8")
        paths.append(str(path))
    (run / "docsumd.toml").write_text(config, encoding="utf-8")
    env = {**os.environ, "TMPDIR": str(run / "tmp"), "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "daemon", "summarize", *paths]
    command += ["--config", str(run / "docsumd.toml"), "--outbox", str(run / "out"), "--no-progress"]
    started = time.monotonic()
    with (run / "docsumd.log").open("wb") as log:
        code = subprocess.run(command, env=env, stdout=log, stderr=subprocess.STDOUT, check=False).returncode
    print(f"  {name}: exit {code} in {time.monotonic() - started:.0f} s", flush=True)
    records = {}
    for file_name in inputs:
        path = run / "out" / f"{file_name}.summary.json"
        if not path.is_file():
            raise SystemExit(f"{name}: no result for {file_name} (exit {code}; see {run / 'docsumd.log'})")
        records[file_name] = json.loads(path.read_text(encoding="utf-8"))
    return records


def figures(record: dict[str, Any]) -> dict[str, Any]:
    """What one result says of its work."""
    engine_tokens = record["prompt_tokens"] + record["generated_tokens"]
    total_s = record["timings"]["total_s"]
    return {
        "parts": record["parts"],
        "finish_reason": record["finish_reason"],
        "depth": record["depth"],
        "requests": record["requests"],
        "document_tokens": record["document_tokens"],
        "prompt_tokens": record["prompt_tokens"],
        "generated_tokens": record["generated_tokens"],
        "engine_tokens": engine_tokens,
        "reused": record.get("reused"),
        "total_s": total_s,
        "document_tokens_per_s": round(record["document_tokens"] / total_s, 1),
    }


def spread(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 3),
        "min": round(min(values), 3),
        "max": round(max(values), 3),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", type=Path, required=True, help="model folder (the tiny model's)")
    parser.add_argument("--max-model-len", type=int, default=2048)
    parser.add_argument("--tokens", type=int, default=150_000, help="the contract's length, about")
    parser.add_argument("--repeats", type=int, default=3, help="cold runs with the cache on, and off")
    parser.add_argument(
        "--stop",
        action="append",
        default=None,
        help="summary.stop strings (default: one space, for the tiny model, whose random text repeats one "
        "word and never ends on its own: an output cut off at its length limit is never stored, so "
        "without one nothing is reused; give --stop '' for none)",
    )
    parser.add_argument(
        "--temperature",
        type=float,
        default=0.0,
        help="summary.temperature (default 0: greedy, so that the cold runs with the cache on and off do "
        "the same work; above 0 an output cut at its length limit is not stored)",
    )
    parser.add_argument(
        "--max-part-tokens", type=int, default=None, help="summary.max_part_tokens (default: unset)"
    )
    parser.add_argument("--work", type=Path, default=None, help="run folders (default: a temp folder)")
    parser.add_argument(
        "--out", type=Path, default=None, help="default: bench/results/DATE_MACHINE_cache-edits.json"
    )
    args = parser.parse_args()
    args.stop = [stop for stop in (args.stop or [" "]) if stop]
    args.out = args.out or result_path("cache_edits")

    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(args.model))
    contract = build_contract(tokenizer, args.tokens)
    edited, offsets = edit_clauses(contract)
    work = args.work or Path(tempfile.mkdtemp(prefix="docsumd-cache-edits-"))
    store = work / "store" / "summaries.sqlite3"
    on = config_text(args.model, args.max_model_len, store, args.stop, args.temperature, args.max_part_tokens)
    print(f"contract: {len(contract):,} characters; edits at {offsets}; work folder {work}", flush=True)

    result: dict[str, Any] = {
        "benchmark": "cache_edits",
        "command": " ".join(sys.argv),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
        "model": str(args.model),
        "max_model_len": args.max_model_len,
        "stop": args.stop,
        "temperature": args.temperature,
        "max_part_tokens": args.max_part_tokens,
        "contract_chars": len(contract),
        "edit_offsets": offsets,
        "goals": {"edited_share_max": 0.15, "identical_tokens": 0, "cache_cost_max": 0.02},
    }
    # One process, one document at a time (service.max_inflight_documents = 1), in this order: the
    # first run, the edited contract, the first contract again under another name.
    names = ("1-contract.txt", "2-contract-edited.txt", "3-contract-copy.txt")
    records = summarize(
        work, "first-edited-identical", dict(zip(names, (contract, edited, contract), strict=True)), on
    )
    first, second, third = (records[name] for name in names)
    result["first"] = figures(first)
    result["edited"] = figures(second)
    result["edited_engine_token_share"] = round(
        result["edited"]["engine_tokens"] / result["first"]["engine_tokens"], 4
    )
    result["identical"] = figures(third)
    result["identical_engine_tokens"] = result["identical"]["engine_tokens"]
    result["identical_summary_byte_identical"] = third["summary"].encode() == first["summary"].encode()
    _write(args.out, result)
    # Cold runs, alternately off and on; the first run above is the first cold run with the cache on.
    cold: dict[str, list[dict[str, Any]]] = {"on": [result["first"]], "off": []}
    result["cold"] = cold
    for repeat in range(args.repeats):
        for mode in ("off", "on") if repeat else ("off",):
            fresh = work / f"store-{repeat}" / "summaries.sqlite3"
            config = config_text(
                args.model,
                args.max_model_len,
                fresh if mode == "on" else None,
                args.stop,
                args.temperature,
                args.max_part_tokens,
            )
            record = summarize(work, f"cold-{mode}-{repeat}", {"contract.txt": contract}, config)[
                "contract.txt"
            ]
            cold[mode].append(figures(record))
        throughput = {mode: [run["document_tokens_per_s"] for run in runs] for mode, runs in cold.items()}
        result["cold_throughput_tokens_per_s"] = {mode: spread(values) for mode, values in throughput.items()}
        result["cold_total_s"] = {
            mode: spread([run["total_s"] for run in runs]) for mode, runs in cold.items()
        }
        result["cache_cost_share_of_throughput"] = round(
            1 - statistics.median(throughput["on"]) / statistics.median(throughput["off"]), 4
        )
        _write(args.out, result)
    summary = {
        key: result.get(key)
        for key in (
            "edited_engine_token_share",
            "identical_engine_tokens",
            "identical_summary_byte_identical",
            "cold_throughput_tokens_per_s",
            "cache_cost_share_of_throughput",
        )
    }
    print(json.dumps(summary, indent=2))
    print(f"written to {args.out}")
    return 0


def _write(path: Path, result: dict[str, Any]) -> None:
    """Write ``result`` now, stamped: a stopped benchmark keeps what it measured."""
    write_result(path, result)


if __name__ == "__main__":
    sys.exit(main())
