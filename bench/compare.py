"""The daemon's pipeline against raw vLLM on the same prompts, and admission control against FIFO.

One command, three measurements in one process (the machines are noisy, so a ratio is only
meaningful within one run):

1. **daemon**: the real service (folder source, decoding, tokenizing, chunking, admission, the real
   vLLM ``AsyncLLM`` engine, result files) on a fresh inbox holding the whole workload. Every engine
   request it makes is recorded: prompt token ids, and how many tokens came out.
2. **daemon, FIFO** (``--fifo``): the same with ``admission.enabled = false``: requests go to vLLM in
   arrival order, bounded only by the documents in flight.
3. **daemon, Kafka** (``--kafka``): the same documents produced as JSON messages to a topic of a
   local noida-db broker that the script starts; the daemon runs with only the Kafka source and
   writes results to an output topic (read back afterwards). Its throughput over the folder pass's
   is ``kafka_vs_folder``.
4. **raw vLLM**: what a hand-written batch script does with the same engine settings: offline
   ``LLM.generate`` on exactly the daemon's prompts, stage by stage (all single and part prompts at
   once, then each level of combine prompts), each request generating exactly as many tokens as it
   did in the daemon (``ignore_eos``), so both do the same work.

5. **baseline** (``--baseline-config FILE``): before everything else, one daemon pass (admission on)
   with FILE's engine settings, on an engine of its own (``--warmup`` documents first, as for the
   main engine): e.g. bf16 against the ``--config``'s FP8. ``vs_baseline`` is the main pass's
   throughput over it; both files must serve the same model. The raw run uses ``--config``'s engine
   settings, built by the same mapping as the daemon's (``daemon.engine.vllm_args.engine_kwargs``).

**Speculative decoding**: each pass (and the raw run, whose engine then logs stats as the daemon's
does) reports ``spec_decoding``, from vLLM's ``vllm:spec_decode_*`` counters read in this process
when the pass's engine is ready and when it ends: drafts, draft tokens, accepted tokens,
``acceptance_rate``, ``mean_accepted_length`` and ``accepted_per_position``; null without
speculation. With ``--baseline-config``, ``same_summaries_as_baseline`` counts the documents whose
summaries the two passes wrote alike (greedy decoding should give the same text with and without
speculation), and each pass reports its ``generated_tokens``.

The folder passes (1, 2 and the ``--variant`` passes) run one after the other on one engine, started
once (``--warmup N`` first runs N documents through it, not counted: a freshly started GPU runs its
first minute slower, and vLLM 0.26.0 stalls 3-4 s once or twice in an engine's first pass, often
when some 113-142 requests first decode beside a prefill, as ``bench/steps.py`` shows; a warm-up of 20
documents left that to the first measured pass, so give the mixed workload ``--warmup 250``); vLLM's prefix
cache is emptied before each pass, so no pass reuses another's prompts. The JSON file is rewritten
after every pass, so a run stopped early keeps what it measured; ``--deadline S`` skips the passes
that would end later than S seconds after the start (estimated from the previous pass).

Throughput is documents per second from the moment the engine is warm (after start-up and the
warm-up request, in both) to the last result. Latency is per document, from that moment to its
result written: the wait a user sees who dropped the whole workload in at once.

    PYTHONPATH=$PWD .venv/bin/python -m bench.compare [--workload corpus|mixed] [--docs DIR]
        [--config FILE] [--json FILE] [--baseline-config FILE]

**PDF against text** (``--workload pdf``): the folder path with PDFs against the same documents as
text, two passes on one engine. Every PDF of ``--pdfs`` (default: the real Debian PDFs of
tests/fixtures/documents/pdf; ``bench/fetch_pdfs.sh`` fetches 56 into bench/data/pdf), at most
``--count`` of them, of at most ``--pdf-max-pages`` pages, is dropped as it is, so the daemon detects
it and its sandboxed workers extract it; then the text docsumd's own extractor gives for each
(extracted here beforehand, the same function the workers run) is dropped as ``.txt``.
``pdf_vs_text`` is the PDF pass's documents/s over the text pass's; each pass reports documents/s
and pages/s, the extraction's share of the wall time (the workers' CPU seconds, and the daemon's own
``docsumd_extraction_seconds``, which includes waiting for a free worker), and the peak RSS of the
daemon with its engine processes apart from that of the extraction workers. No raw vLLM pass.

Workloads: ``corpus`` is every .txt file in ``--docs`` (``--copies N`` copies of each, each copy with
its paragraphs in its own shuffled order, so copies share no prompt prefix beyond the instruction and
vLLM's prefix cache cannot serve one copy's parts from another's);
``mixed`` is ``--count`` documents cut from that text with lengths from 500 to 20,000 tokens of the
served model's tokenizer (70% short: 500-1,500; 30% long: 5,000-20,000), in shuffled order.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.lib import REPO
from bench.lib.daemon_pass import (
    DaemonRun,
    Deadline,
    Plan,
    folder_passes,
    parse_variant,
    run_kafka,
    same_summaries,
)
from bench.lib.raw_vllm import run_raw
from bench.lib.report import curve_point, engine_report, environment, format_pass_stats, run_stats
from bench.lib.results import write_result
from bench.lib.workloads import add_workload_arguments, pdf_documents, workload
from daemon.cli import prepare_process
from daemon.config import Config, load_config
from daemon.models.files import load_tokenizer


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_workload_arguments(parser, default_workload="corpus")
    parser.add_argument("--fifo", action="store_true", help="also run the daemon with admission off")
    parser.add_argument(
        "--baseline-config",
        type=Path,
        default=None,
        help="first, one daemon pass with this config's engine (same model), for vs_baseline",
    )
    parser.add_argument("--no-raw", action="store_true", help="skip the raw vLLM run")
    parser.add_argument(
        "--warmup", type=int, default=0, help="documents run through the engine first, not counted"
    )
    parser.add_argument(
        "--deadline",
        type=float,
        default=None,
        help="seconds from the start: skip the passes (and the raw run) that would end later",
    )
    parser.add_argument(
        "--kafka",
        action="store_true",
        help="also run the daemon with the Kafka source: the same documents produced to a topic of a "
        "local noida-db broker (started and stopped here), results read back from the output topic",
    )
    parser.add_argument("--partitions", type=int, default=4, help="--kafka: partitions of the input topic")
    parser.add_argument(
        "--kafka-rounds",
        type=int,
        default=1,
        help="--kafka: after the first folder and Kafka passes, this many more pairs in turn (folder, "
        "Kafka, folder, Kafka...), so a drift of the machine's speed shows in the pairs' ratios",
    )
    parser.add_argument(
        "--pdfs",
        type=Path,
        default=REPO / "tests" / "fixtures" / "documents" / "pdf",
        help="--workload pdf: the folder of PDFs (bench/fetch_pdfs.sh fills bench/data/pdf)",
    )
    parser.add_argument(
        "--pdf-max-pages", type=int, default=60, help="--workload pdf: leave out PDFs with more pages"
    )
    parser.add_argument(
        "--text-first", action="store_true", help="--workload pdf: the text pass before the PDF pass"
    )
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME:KEY=VALUE[,KEY=VALUE]",
        help="an extra daemon pass with admission settings changed, e.g. r256:max_inflight_requests=256",
    )
    args = parser.parse_args()

    config = load_config(args.config)
    prepare_process(config)
    work = Path(tempfile.mkdtemp(prefix="docsumd-compare-"))
    os.environ.setdefault("TMPDIR", str(work))
    tokenizer = load_tokenizer(config.engine)
    if args.workload == "pdf":
        return _pdf_against_text(args, config, tokenizer, work)
    docs = workload(args, tokenizer)
    lengths = {name: len(tokenizer.encode(text, add_special_tokens=False)) for name, text in docs}
    print(f"workload {args.workload}: {len(docs)} documents, {sum(lengths.values())} tokens", file=sys.stderr)

    plans = [Plan("admission", admission=True)]
    if args.fifo:
        plans.append(Plan("fifo", admission=False))
    plans += [
        Plan(name, admission=True, overrides=overrides)
        for name, overrides in map(parse_variant, args.variant)
    ]
    budget = Deadline(args.deadline)
    warmup = docs[: args.warmup]
    baseline: tuple[Config, DaemonRun] | None = None
    if args.baseline_config is not None:
        baseline_config = _baseline_config(args.baseline_config, config)
        (baseline_run,) = folder_passes(
            baseline_config,
            docs,
            work / "baseline",
            [Plan("baseline", admission=True)],
            warmup=warmup,
            deadline=Deadline(None),
        )
        baseline = (baseline_config, baseline_run)

    def report(done: list[DaemonRun], raw: dict[str, Any] | None = None) -> dict[str, Any]:
        result = _report(args, config, docs, lengths, done, raw, plans)
        if baseline is not None:
            _add_baseline(result, args.baseline_config, *baseline, lengths, done[0])
        _write_json(args.json, result, args.config)
        return result

    runs = folder_passes(config, docs, work, plans, warmup=warmup, deadline=budget, on_pass=report)
    if not runs:
        raise SystemExit("no daemon pass fit the deadline")
    kafka_run = run_kafka(config, docs, work / "kafka", args.partitions) if args.kafka else None
    kafka_pairs = [(runs[0], kafka_run)] if kafka_run is not None else []
    for round_ in range(2, args.kafka_rounds + 1 if args.kafka else 0):
        (folder_run,) = folder_passes(
            config,
            docs,
            work,
            [Plan(f"folder{round_}", admission=True)],
            warmup=[],
            deadline=Deadline(None),
        )
        kafka_pairs.append((folder_run, run_kafka(config, docs, work / f"kafka{round_}", args.partitions)))
    raw = None
    if not args.no_raw and budget.allows(budget.raw_estimate(runs[0])):
        raw = run_raw(config, runs[0].requests)
    result = report(runs, raw)
    if kafka_run is not None:
        kafka_stats = run_stats(kafka_run, lengths)
        result["kafka"] = kafka_stats
        result["kafka_vs_folder"] = round(kafka_stats["docs_per_s"] / result["daemon_docs_per_s"], 3)
        if result["raw_docs_per_s"]:
            result["kafka_ratio"] = round(kafka_stats["docs_per_s"] / result["raw_docs_per_s"], 3)
        pairs = []
        for folder_run, kafka_pass in kafka_pairs:
            assert kafka_pass is not None
            folder_rate = run_stats(folder_run, lengths)["docs_per_s"]
            kafka_rate = run_stats(kafka_pass, lengths)["docs_per_s"]
            pairs.append(
                {
                    "folder_docs_per_s": folder_rate,
                    "kafka_docs_per_s": kafka_rate,
                    "kafka_vs_folder": round(kafka_rate / folder_rate, 3),
                }
            )
        result["kafka_pairs"] = pairs
        result["kafka_vs_folder_median"] = round(
            statistics.median(pair["kafka_vs_folder"] for pair in pairs), 3
        )
    print(json.dumps(result, indent=2))
    _write_json(args.json, result, args.config)
    shutil.rmtree(work, ignore_errors=True)
    return 0


def _baseline_config(path: Path, config: Config) -> Config:
    """``--baseline-config``'s config, which must serve ``config``'s model (only the engine differs)."""
    baseline = load_config(path)
    if (baseline.engine.model, baseline.engine.tokenizer) != (config.engine.model, config.engine.tokenizer):
        raise SystemExit(f"--baseline-config {path}: serves another model than --config")
    return baseline


def _add_baseline(  # noqa: PLR0917 - one call site
    result: dict[str, Any],
    path: Path,
    config: Config,
    run: DaemonRun,
    lengths: dict[str, int],
    main_run: DaemonRun,
) -> None:
    """The baseline pass and the main pass's throughput over it, into ``result``; and how many
    summaries the two passes wrote alike."""
    stats = run_stats(run, lengths)
    result["baseline"] = {"config": str(path), **stats, "engine": engine_report(config)}
    result["same_summaries_as_baseline"] = same_summaries(run, main_run)
    result["vs_baseline"] = round(result["daemon_docs_per_s"] / stats["docs_per_s"], 3)
    result["vs_baseline_prompt_tok_per_s"] = round(
        result["daemon"]["prompt_tok_per_s"] / stats["prompt_tok_per_s"], 3
    )


def _write_json(path: Path | None, result: dict[str, Any], config: Path) -> None:
    if path is not None:
        write_result(path, result, config=config)


# -- PDF against text -------------------------------------------------------------------------------


def _pdf_against_text(args: argparse.Namespace, config: Config, tokenizer: Any, work: Path) -> int:
    """``--workload pdf``: the PDFs through the folder, then the same documents as text, on one engine."""
    pdfs, left_out = pdf_documents(args.pdfs, config, count=args.count, max_pages=args.pdf_max_pages)
    if not pdfs:
        raise SystemExit(f"no PDF in {args.pdfs} that docsumd reads within {args.pdf_max_pages} pages")
    lengths: dict[str, int] = {}
    for pdf in pdfs:
        tokens = len(tokenizer.encode(pdf.text, add_special_tokens=False))
        lengths[f"{pdf.stem}.pdf"] = lengths[f"{pdf.stem}.txt"] = tokens
    pages = sum(pdf.pages for pdf in pdfs)
    print(
        f"workload pdf: {len(pdfs)} PDFs, {pages} pages, {sum(lengths.values()) // 2} tokens "
        f"({len(left_out)} left out)",
        file=sys.stderr,
    )
    as_text: tuple[tuple[str, str | bytes], ...] = tuple((f"{pdf.stem}.txt", pdf.text) for pdf in pdfs)
    plans = [
        Plan("pdf", admission=True, docs=tuple((f"{pdf.stem}.pdf", pdf.data) for pdf in pdfs)),
        Plan("text", admission=True, docs=as_text),
    ]
    if args.text_first:
        plans.reverse()
    runs = folder_passes(
        config, as_text, work, plans, warmup=as_text[: args.warmup], deadline=Deadline(args.deadline)
    )
    by_label = {run.label: run for run in runs}
    if set(by_label) != {"pdf", "text"}:
        raise SystemExit(f"passes done: {sorted(by_label)}; both pdf and text are needed")
    stats = {label: format_pass_stats(run, lengths, pages) for label, run in by_label.items()}
    result: dict[str, Any] = {
        "benchmark": "bench/compare.py --workload pdf",
        "workload": "pdf",
        "pdfs_dir": str(args.pdfs),
        "config": str(args.config),
        "docs": len(pdfs),
        "pages": pages,
        "document_tokens": sum(lengths.values()) // 2,
        "documents": [
            {
                "file": f"{pdf.stem}.pdf",
                "bytes": len(pdf.data),
                "pages": pdf.pages,
                "chars": len(pdf.text),
                "tokens": lengths[f"{pdf.stem}.pdf"],
            }
            for pdf in pdfs
        ],
        "left_out": left_out,
        "passes_in_order": [run.label for run in runs],
        "pdf_vs_text": round(stats["pdf"]["docs_per_s"] / stats["text"]["docs_per_s"], 3),
        "pdf": stats["pdf"],
        "text": stats["text"],
        "extract_workers": config.extract.workers,
        "engine": engine_report(config),
        "max_summary_tokens": config.summary.max_summary_tokens,
        "environment": environment(),
    }
    print(json.dumps(result, indent=2))
    _write_json(args.json, result, args.config)
    shutil.rmtree(work, ignore_errors=True)
    return 0


# -- the report -----------------------------------------------------------------------------------


def _report(  # noqa: PLR0917 - one call site, every argument a different kind of input
    args: argparse.Namespace,
    config: Config,
    docs: list[tuple[str, str]],
    lengths: dict[str, int],
    runs: list[DaemonRun],
    raw: dict[str, Any] | None,
    plans: list[Plan],
) -> dict[str, Any]:
    main_run = runs[0]
    by_label = {run.label: run_stats(run, lengths) for run in runs}
    stats = by_label[main_run.label]
    prompt_tokens = sum(len(request.prompt_ids) for request in main_run.requests)
    result: dict[str, Any] = {
        "benchmark": "bench/compare.py",
        "workload": args.workload,
        "docs_dir": str(args.docs),
        "config": str(args.config),
        "docs": len(docs),
        "document_tokens": sum(lengths.values()),
        "prompt_tokens": prompt_tokens,
        "generated_tokens": sum(request.output_tokens for request in main_run.requests),
        "engine_requests": len(main_run.requests),
        "daemon_docs_per_s": stats["docs_per_s"],
        "raw_docs_per_s": None,
        "ratio": None,
        "p50_latency_s": stats["p50_latency_s"],
        "p95_latency_s": stats["p95_latency_s"],
        "peak_rss_mib": round(main_run.peak_rss / 2**20, 1),
        "daemon": stats,
        "passes_in_order": [run.label for run in runs],
        "passes_skipped": [plan.label for plan in plans if plan.label not in by_label],
    }
    raw_docs_per_s = None
    if raw is not None:
        raw_docs_per_s = len(docs) / raw["seconds"]
        result["raw_docs_per_s"] = round(raw_docs_per_s, 3)
        result["ratio"] = round(stats["docs_per_s"] / raw_docs_per_s, 3)
        result["raw"] = {**raw, "prompt_tok_per_s": round(prompt_tokens / raw["seconds"], 1)}
    fifo = by_label.get("fifo")
    if fifo is not None:
        result["fifo"] = fifo
        result["admission_vs_fifo"] = {
            "throughput_ratio": round(stats["docs_per_s"] / fifo["docs_per_s"], 3),
            "short_p95_s": [stats["short"]["p95_latency_s"], fifo["short"]["p95_latency_s"]],
            "short_p50_s": [stats["short"]["p50_latency_s"], fifo["short"]["p50_latency_s"]],
            "long_p95_s": [stats["long"]["p95_latency_s"], fifo["long"]["p95_latency_s"]],
        }
    overrides = {plan.label: plan.overrides for plan in plans}
    result["variants"] = {
        label: {**pass_stats, "admission": overrides[label]}
        for label, pass_stats in by_label.items()
        if label not in (main_run.label, "fifo")
    }
    result["curve"] = [curve_point(pass_stats, fifo, raw_docs_per_s) for pass_stats in by_label.values()]
    result["engine"] = engine_report(config)
    result["admission"] = config.admission.model_dump()
    result["environment"] = environment()
    return result


if __name__ == "__main__":
    raise SystemExit(main())
