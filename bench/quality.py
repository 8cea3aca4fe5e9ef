"""Summary quality: ROUGE of docsumd's summaries against human references, per strategy and profile.

For each strategy (``--strategies``) and profile (``--profiles``), one ``docsumd summarize`` run (the
real command, in a subprocess, on the real vLLM engine) over the documents that have a human
reference summary; its result files are read back and each summary scored with ROUGE-1/2/L
(``rouge-score``, Porter stemming on, F1) against the reference, and with **ROUGE-Lsum** over
newline-split sentences (one splitter, :mod:`daemon.summary.sentences`, for summary and reference:
what papers report as ROUGE-L; ``rougeL`` on unsplit text is not). Beside them, per document:

* a **lead-N baseline**: the document's first N words, N being the reference's length in words. A
  summarizer that does not beat copying the start of the document has not earned its tokens;
* a **LexRank baseline**: the document's most central sentences (:mod:`daemon.summary.extractive`)
  up to N words, in document order (no model);
* an **extractive oracle**: the source sentences chosen greedily to maximise ROUGE-1 + ROUGE-2 F1
  against the reference, up to its length: what copying sentences could reach at best.

Each summary is also checked against its document (:mod:`daemon.summary.grounding`): its checkable
items (numbers, dates, names, ...), how many the source holds (**grounding precision**: supported /
all, per strategy and group), and whether it has at least one unsupported item.

The ``extractive`` strategy is run from here, not from docsumd: for a document longer than the context,
its most central sentences up to the document prompt's room (counted with the model's tokenizer) are
written, in document order, to a file that ``docsumd summarize`` then summarizes in one request;
a document that fits is summarized whole, as by every strategy.

Nothing here re-implements the summarizer: strategies and profiles are chosen the way a user chooses
them (``DOCSUMD_SUMMARY__STRATEGY``, ``--profile``), so the figures are of docsumd as shipped.

    .venv/bin/python -m bench.quality [--model DIR] [--max-model-len N] [--strategies LIST]
        [--profiles LIST|all] [--limit N] [--dataset corpus|aclsum] [--out FILE]

Datasets: ``corpus`` (default) is the shared corpus's documents with a reference (``reference_summary``
in ``../shared/corpus/docs/manifest.jsonl``: licence descriptions from choosealicense.com, and for
papers the authors' abstract, which was removed from the text; ACLSum papers also have human
challenge/approach/outcome summaries, scored as the secondary reference ``aspects``). ``aclsum`` is
the ACLSum dataset's papers (``pip download --no-deps aclsum==0.1.2``: the wheel carries the papers'
S2ORC parses and the summaries; ``--aclsum-split``), the text built from the parse's title, section
headings and paragraphs as the corpus's ACLSum documents were, abstract left out.

Figures per run and document group (``all``, ``paper``, ``licence``, ``fits`` and ``over_context``:
the documents that fit in one request at this context and those that did not, where strategies
differ, counted with the model's tokenizer): mean ROUGE of
the summaries and of the lead baseline on the same documents, mean summary length in words, how many
summaries ended at EOS (``finish_reason`` ``stop``) or ran out of tokens (``length``), and how many
contain a chat-template token such as ``<|im_end|>``. ``--reading N`` prints N references next to
every run's summary of the same document (also in the JSON), so a person can judge what ROUGE cannot.

The JSON file is rewritten after every run: a stopped benchmark keeps what it measured.
``--runs-from FILE`` takes the runs of an earlier JSON (its summaries, scored again with today's
metrics) and adds the ``--strategies`` run here (none: ``--strategies ''``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import tomllib
import zipfile
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from bench.lib import REPO
from bench.lib.results import result_path, write_result
from daemon.summary.extractive import select_sentences
from daemon.summary.grounding import check_summary
from daemon.summary.sentences import sentence_per_line, split_sentences

CORPUS_DOCS: Final = REPO.parent / "shared" / "corpus" / "docs"
DEFAULT_MODEL: Final = REPO / "models" / "smollm2"
STRATEGIES: Final = ("map_reduce", "head", "head_tail", "extractive")
METRICS: Final = ("rouge1", "rouge2", "rougeL", "rougeLsum")
BASELINES: Final = ("lead", "lexrank", "oracle")
ACLSUM_REQUIREMENT: Final = "aclsum==0.1.2"
ACLSUM_ASPECTS: Final = ("challenge", "approach", "outcome")
# ChatML's markers and their kin (<|endoftext|>, <|eot_id|>): none belongs in a summary.
TEMPLATE_TOKEN: Final = re.compile(r"<\|[A-Za-z_]+\|>")
RUN_TIMEOUT_S: Final = 4 * 3600


@dataclass(frozen=True)
class Doc:
    """A document with its human reference summaries (the first is the one scored in aggregates)."""

    id: str  # the input file's name: result files are ID.summary.json
    path: Path
    group: str  # "paper", "licence" or the domain's first word
    domain: str
    references: dict[str, str]

    @property
    def reference(self) -> str:
        """The primary reference summary."""
        return next(iter(self.references.values()))

    def text(self) -> str:
        """The document's text."""
        return self.path.read_text(encoding="utf-8")


# -- datasets ---------------------------------------------------------------------------------------


def load_corpus(docs_dir: Path) -> list[Doc]:
    """The shared corpus's documents that have a reference summary, in manifest order."""
    docs = []
    for line in (docs_dir / "manifest.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        reference = row.get("reference_summary")
        if not reference:
            continue
        if isinstance(reference, str):
            references = {"description": reference}
        else:
            # The authors' abstract first: it is what summarization datasets score papers against.
            references = {key: reference[key] for key in ("abstract",) if reference.get(key)}
            aspects = _aspects_text(reference)
            if aspects:
                references["aspects"] = aspects
        domain = str(row["domain"])
        docs.append(
            Doc(
                id=str(row["file"]),
                path=docs_dir / str(row["file"]),
                group=_group_of(domain),
                domain=domain,
                references=references,
            )
        )
    return docs


def load_aclsum(wheel: Path, split: str, into: Path) -> list[Doc]:
    """ACLSum's ``split`` papers, their text written to ``into`` (summarize reads files)."""
    into.mkdir(parents=True, exist_ok=True)
    docs = []
    with zipfile.ZipFile(wheel) as archive:
        rows = archive.read(f"aclsum/dataset/{split}.jsonl").decode("utf-8").splitlines()
        for line in rows:
            row = json.loads(line)
            paper = json.loads(archive.read(f"aclsum/dataset/paper_jsons/{row['id']}.json"))
            path = into / f"paper-aclsum-{str(row['id']).lower()}.txt"
            path.write_text(_aclsum_text(paper), encoding="utf-8")
            references = {"abstract": paper["abstract"]} if paper.get("abstract") else {}
            references["aspects"] = _aspects_text(row["summary"])
            docs.append(
                Doc(id=path.name, path=path, group="paper", domain="paper/nlp", references=references)
            )
    return docs


def download_aclsum(into: Path) -> Path:
    """``pip download`` the ACLSum wheel (it carries the data) into ``into``; exits if pip cannot."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--quiet",
            "--dest",
            str(into),
            ACLSUM_REQUIREMENT,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    wheels = sorted(into.glob("aclsum-*.whl"))
    if done.returncode != 0 or not wheels:
        raise SystemExit(
            f"cannot download {ACLSUM_REQUIREMENT}: pass --aclsum-wheel PATH ({done.stderr.strip()})"
        )
    return wheels[0]


def _aclsum_text(paper: dict[str, Any]) -> str:
    """Title, then each section's heading and paragraphs, as the corpus's ACLSum documents are."""
    parts = [str(paper.get("title") or "").strip()]
    section = None
    for paragraph in paper["pdf_parse"]["body_text"]:
        if paragraph.get("section") and paragraph["section"] != section:
            section = paragraph["section"]
            parts.append(f"\n{section}")
        parts.append(str(paragraph["text"]).strip())
    return "\n\n".join(part for part in parts if part) + "\n"


def _aspects_text(reference: dict[str, Any]) -> str:
    return " ".join(str(reference[key]) for key in ACLSUM_ASPECTS if reference.get(key))


def _group_of(domain: str) -> str:
    head = domain.split("/", 1)[0]
    return "licence" if domain == "legal/licence" else head


# -- running docsumd --------------------------------------------------------------------------------


def shipped_profile_names() -> list[str]:
    """The profiles docsumd ships, in file order (``default`` first)."""
    with (REPO / "daemon" / "profiles.toml").open("rb") as stream:
        return list(tomllib.load(stream))


def base_config(model: Path, max_model_len: int, profiles: Iterable[str]) -> str:
    """A config for a CPU run: the engine settings the CPU benchmarks use, docsumd's defaults for
    [summary], the shipped ``profiles`` turned on. ``--config`` replaces it (a GPU user's file)."""
    sections = "".join(f"[profiles.{name}]\n" for name in profiles if name != "default")
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

        [logging]
        format = "json"

        """
        )
        + sections
    )


@dataclass(frozen=True)
class RunSpec:
    """One ``docsumd summarize`` run: a strategy under a profile, at a context length."""

    strategy: str
    profile: str
    model: Path
    max_model_len: int
    config: Path

    @property
    def name(self) -> str:
        return f"{self.strategy}-{self.profile}"


def extractive_inputs(docs: Sequence[Doc], context: Context, into: Path) -> list[Path]:
    """The ``extractive`` strategy's inputs: for a document over the context its selection
    (:meth:`Context.extract`), written under its own name so that results keep their ids; else itself."""
    into.mkdir(parents=True, exist_ok=True)
    paths = []
    for doc in docs:
        text = doc.text()
        if context.count(text) <= context.room:
            paths.append(doc.path)
            continue
        path = into / doc.id
        path.write_text(context.extract(text), encoding="utf-8")
        paths.append(path)
    return paths


def run_summarize(
    spec: RunSpec, docs: Sequence[Doc], work: Path, context: Context | None = None
) -> dict[str, Any]:
    """Summarize ``docs`` with the real ``docsumd summarize``; the result records by document id,
    the exit code and the wall time (engine start included)."""
    outbox = work / spec.name / "outbox"
    tmp = work / spec.name / "tmp"  # vLLM's sockets, one folder per run
    shutil.rmtree(outbox.parent, ignore_errors=True)
    tmp.mkdir(parents=True)
    inputs = [doc.path for doc in docs]
    strategy = spec.strategy
    if spec.strategy == "extractive":
        if context is None:
            raise SystemExit("the extractive strategy needs the model's tokenizer")
        inputs = extractive_inputs(docs, context, work / spec.name / "inputs")
        strategy = "head"  # every input fits one request now: what docsumd does with it is "single"
    env = {
        **os.environ,
        "TMPDIR": str(tmp),
        "PYTHONUNBUFFERED": "1",
        # docsumd's own overrides: the strategy as a user would set it, over the config's engine.
        "DOCSUMD_SUMMARY__STRATEGY": strategy,
        "DOCSUMD_ENGINE__MODEL": str(spec.model),
        "DOCSUMD_ENGINE__MAX_MODEL_LEN": str(spec.max_model_len),
    }
    command = [sys.executable, "-m", "daemon", "summarize", *(str(path) for path in inputs)]
    command += [
        "--config",
        str(spec.config),
        "--outbox",
        str(outbox),
        "--profile",
        spec.profile,
        "--no-progress",
    ]
    started = time.monotonic()
    with (work / spec.name / "docsumd.log").open("wb") as log:
        # Its own process group: on Ctrl-C here the engine's processes go too.
        proc = subprocess.Popen(
            command, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            code = proc.wait(timeout=RUN_TIMEOUT_S)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    wall_s = time.monotonic() - started
    records: dict[str, dict[str, Any]] = {}
    for doc in docs:
        for suffix in ("summary", "error"):
            path = outbox / f"{doc.id}.{suffix}.json"
            if path.is_file():
                records[doc.id] = json.loads(path.read_text(encoding="utf-8"))
    shutil.rmtree(tmp, ignore_errors=True)
    return {
        "exit_code": code,
        "wall_s": round(wall_s, 1),
        "log": str(work / spec.name / "docsumd.log"),
        "records": records,
    }


# -- scoring ----------------------------------------------------------------------------------------


class Scorer:
    """ROUGE-1/2/L/Lsum F1 with Porter stemming, as the summarization literature reports it; both texts
    one sentence a line (``rougeLsum`` reads the lines; the others ignore them)."""

    def __init__(self) -> None:
        from rouge_score import rouge_scorer, tokenizers

        self._scorer = rouge_scorer.RougeScorer(list(METRICS), use_stemmer=True)
        self._tokenizer = tokenizers.DefaultTokenizer(use_stemmer=True)

    def score(self, reference: str, candidate: str) -> dict[str, float]:
        """F1 of each metric, rounded to 4 places."""
        scores = self._scorer.score(sentence_per_line(reference), sentence_per_line(candidate))
        return {metric: round(scores[metric].fmeasure, 4) for metric in METRICS}

    def tokens(self, text: str) -> list[str]:
        """The stemmed tokens ROUGE compares."""
        return list(self._tokenizer.tokenize(text))


def lead_baseline(text: str, reference: str) -> str:
    """The document's first N words, N the reference's length in words."""
    return " ".join(text.split()[: len(reference.split())])


def lexrank_baseline(text: str, reference: str) -> str:
    """The document's most central sentences up to N words (N the reference's), in document order."""
    chosen = select_sentences(
        split_sentences(text), lambda sentence: len(sentence.split()), len(reference.split())
    )
    return "\n".join(sentence.text for sentence in chosen)


def oracle_summary(text: str, reference: str, scorer: Scorer) -> str:
    """The extractive oracle: source sentences added greedily while they raise ROUGE-1 + ROUGE-2 F1
    against ``reference`` (computed here on the stemmed tokens), up to the reference's length."""
    sentences = split_sentences(text)
    tokens = [scorer.tokens(sentence.text) for sentence in sentences]
    wanted = _ngrams(scorer.tokens(reference))
    limit = len(reference.split())
    chosen: list[int] = []
    best = 0.0
    words = 0
    while words < limit:
        pick, pick_score = None, best
        for index, sentence_tokens in enumerate(tokens):
            if index in chosen or not sentence_tokens:
                continue
            candidate = [t for i in sorted([*chosen, index]) for t in tokens[i]]
            value = _rouge12(_ngrams(candidate), wanted)
            if value > pick_score:
                pick, pick_score = index, value
        if pick is None:
            break
        chosen.append(pick)
        best = pick_score
        words += len(sentences[pick].text.split())
    return "\n".join(sentences[i].text for i in sorted(chosen))


def _ngrams(tokens: list[str]) -> tuple[Counter[str], Counter[str]]:
    return Counter(tokens), Counter(f"{a} {b}" for a, b in itertools.pairwise(tokens))


def _rouge12(
    candidate: tuple[Counter[str], Counter[str]], reference: tuple[Counter[str], Counter[str]]
) -> float:
    total = 0.0
    for ours, theirs in zip(candidate, reference, strict=True):
        overlap = sum((ours & theirs).values())
        if overlap:
            precision, recall = overlap / sum(ours.values()), overlap / sum(theirs.values())
            total += 2 * precision * recall / (precision + recall)
    return total


def document_row(doc: Doc, scorer: Scorer, context: Context | None) -> dict[str, Any]:
    """What the benchmark knows of a document before any run: sizes, whether it fits one request,
    references, the baselines."""
    text = doc.text()
    row: dict[str, Any] = {
        "id": doc.id,
        "group": doc.group,
        "domain": doc.domain,
        "chars": len(text),
        "words": len(text.split()),
        "references": list(doc.references),
        "reference_words": len(doc.reference.split()),
    }
    if context is not None:
        row["tokens"] = context.count(text)
        row["fits"] = row["tokens"] <= context.room
    row["lead"] = {name: scorer.score(ref, lead_baseline(text, ref)) for name, ref in doc.references.items()}
    row["lexrank"] = {
        name: scorer.score(ref, lexrank_baseline(text, ref)) for name, ref in doc.references.items()
    }
    row["oracle"] = {
        name: scorer.score(ref, oracle_summary(text, ref, scorer)) for name, ref in doc.references.items()
    }
    return row


@dataclass(frozen=True)
class Context:
    """The model's tokenizer and the room of a document request of the default profile: what decides
    whether a document fits one request, and what the extractive strategy selects up to."""

    tokenizer: Any
    room: int

    @classmethod
    def of(cls, config: Path, model: Path, max_model_len: int) -> Context:
        from transformers import AutoTokenizer

        from daemon.config import load_config
        from daemon.summary.profiles import build_profiles
        from daemon.summary.prompts import PromptKind

        settings = load_config(config)
        settings = settings.model_copy(
            update={
                "engine": settings.engine.model_copy(
                    update={"model": str(model), "max_model_len": max_model_len}
                )
            }
        )
        tokenizer: Any = AutoTokenizer.from_pretrained(str(model))
        profile = build_profiles(settings, tokenizer).default
        style = profile.output.style(profile.summary.style)
        room = profile.budget.room(PromptKind.DOCUMENT, style, profile.budget.summary_tokens)
        return cls(tokenizer, room)

    def count(self, text: str) -> int:
        """Tokens of ``text`` as document content."""
        from daemon.summary.chunking import tokenize_text

        return len(tokenize_text(self.tokenizer, text))

    def extract(self, text: str) -> str:
        """The document's most central sentences that fit the room together, in document order."""
        budget = self.room
        while True:
            chosen = select_sentences(
                split_sentences(text), lambda sentence: self.count(sentence) + 1, budget
            )
            selection = "\n".join(sentence.text for sentence in chosen) + "\n"
            if self.count(selection) <= self.room:
                return selection
            budget -= max(8, budget // 50)


def summary_row(doc: Doc, record: dict[str, Any] | None, scorer: Scorer) -> dict[str, Any]:
    """One document's result in one run: its shape, its scores, its text (or why it failed)."""
    if record is None:
        return {"id": doc.id, "failed": "no result (run stopped early?)"}
    if "summary" not in record:
        return {"id": doc.id, "failed": f"{record.get('reason')}: {record.get('error', '')}"[:300]}
    text = str(record["summary"])
    return {
        "id": doc.id,
        "strategy": record.get("strategy"),
        "parts": record.get("parts"),
        "depth": record.get("depth"),
        "document_tokens": record.get("document_tokens"),
        "dropped_tokens": record.get("dropped_tokens"),
        "summary_tokens": record.get("summary_tokens"),
        "max_summary_tokens": record.get("max_summary_tokens"),
        "summary_words": len(text.split()),
        "finish_reason": record.get("finish_reason"),
        "template_tokens": sorted(set(TEMPLATE_TOKEN.findall(text))),
        "profile_version": record.get("profile_version"),
        "prompt_version": record.get("prompt_version"),
        "engine_s": (record.get("timings") or {}).get("engine_s"),
        "rouge": {name: scorer.score(ref, text) for name, ref in doc.references.items()},
        "grounding": grounding_of(text, doc.text()),
        "summary": text,
    }


def grounding_of(summary: str, source: str) -> dict[str, Any]:
    """The grounding check of a summary: its items, how many the source holds, the unsupported ones."""
    checks = check_summary(summary, source)
    return {
        "items": len(checks.items),
        "supported": checks.supported_count,
        "by_kind": checks.by_kind(),
        "unsupported": [f"{item.kind.value}: {item.text}" for item in checks.unsupported],
    }


def aggregate(rows: Sequence[dict[str, Any]], documents: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Means per document group, the lead baseline over the same documents beside them."""
    groups: dict[str, list[dict[str, Any]]] = {"all": []}
    for row in rows:
        if "failed" in row:
            continue
        groups["all"].append(row)
        document = documents[row["id"]]
        groups.setdefault(document["group"], []).append(row)
        fits = document["fits"] if "fits" in document else row["strategy"] == "single"
        groups.setdefault("fits" if fits else "over_context", []).append(row)
    result = {name: _group_figures(members, documents) for name, members in groups.items()}
    result["all"]["failed"] = sum(1 for row in rows if "failed" in row)
    return result


def _group_figures(rows: Sequence[dict[str, Any]], documents: dict[str, dict[str, Any]]) -> dict[str, Any]:
    def mean(values: Iterable[float]) -> float | None:
        values = list(values)
        return round(statistics.fmean(values), 4) if values else None

    primary = [documents[row["id"]]["references"][0] for row in rows]
    return {
        "documents": len(rows),
        "rouge": {
            m: mean(row["rouge"][ref][m] for row, ref in zip(rows, primary, strict=True)) for m in METRICS
        },
        **{
            baseline: {
                m: mean(
                    documents[row["id"]][baseline][ref][m] for row, ref in zip(rows, primary, strict=True)
                )
                for m in METRICS
            }
            for baseline in BASELINES
        },
        "grounding_precision": _precision(rows),
        "with_unsupported": sum(1 for row in rows if row["grounding"]["unsupported"]),
        "summary_words": mean(row["summary_words"] for row in rows),
        "reference_words": mean(documents[row["id"]]["reference_words"] for row in rows),
        "summary_tokens": mean(row["summary_tokens"] or 0 for row in rows),
        "finish_reason": dict(Counter(str(row["finish_reason"]) for row in rows)),
        "with_template_tokens": sum(1 for row in rows if row["template_tokens"]),
        "strategies_used": dict(Counter(str(row["strategy"]) for row in rows)),
    }


# -- reporting --------------------------------------------------------------------------------------


def _precision(rows: Sequence[dict[str, Any]]) -> float | None:
    items = sum(row["grounding"]["items"] for row in rows)
    return round(sum(row["grounding"]["supported"] for row in rows) / items, 4) if items else None


def table(runs: Sequence[dict[str, Any]]) -> str:
    """The aggregate figures as a fixed-width table, one line per run and group."""
    head = f"{'strategy':<11} {'profile':<8} {'group':<12} {'n':>3} {'R-1':>6} {'R-2':>6} {'R-L':>6} "
    head += f"{'R-Lsum':>6} {'lead':>6} {'lexr':>6} {'oracle':>6} {'words':>5} {'ref':>4} "
    head += f"{'stop/len':>9} {'ground':>6} {'unsup':>5}"
    lines = [head, "(R-Lsum of the baselines beside the run's)", "-" * len(head)]
    for run in runs:
        for group, figures in run["aggregate"].items():
            if not figures["documents"]:
                continue
            rouge, finish = figures["rouge"], figures["finish_reason"]
            scores = " ".join(f"{rouge[metric]:>6.3f}" for metric in METRICS)
            baselines = " ".join(f"{figures[name]['rougeLsum']:>6.3f}" for name in BASELINES)
            precision = figures["grounding_precision"]
            name = run.get("label", run["strategy"])  # a run merged from an earlier file may carry one
            lines.append(
                f"{name:<11} {run['profile']:<8} {group:<12} {figures['documents']:>3} "
                f"{scores} {baselines} "
                f"{figures['summary_words']:>5.0f} {figures['reference_words']:>4.0f} "
                f"{finish.get('stop', 0):>4}/{finish.get('length', 0):<4} "
                f"{precision if precision is not None else 0:>6.3f} {figures['with_unsupported']:>5}"
            )
    return "\n".join(lines)


def reading_check(docs: Sequence[Doc], runs: Sequence[dict[str, Any]], count: int) -> list[dict[str, Any]]:
    """``count`` documents, spread over the groups, each reference beside every run's summary."""
    by_group: dict[str, list[Doc]] = {}
    for doc in docs:
        by_group.setdefault(doc.group, []).append(doc)
    chosen: list[Doc] = []
    while len(chosen) < min(count, len(docs)):
        for members in by_group.values():
            if members and len(chosen) < count:
                chosen.append(members.pop(0))
    check = []
    for doc in chosen:
        summaries = {}
        for run in runs:
            row = next((row for row in run["documents"] if row["id"] == doc.id), None)
            if row is not None:
                summaries[f"{run['strategy']}/{run['profile']}"] = row.get("summary", row.get("failed"))
        check.append({"id": doc.id, "reference": doc.reference, "summaries": summaries})
    return check


def print_reading_check(check: Sequence[dict[str, Any]]) -> None:
    for entry in check:
        print(f"\n=== {entry['id']}")
        print(textwrap.fill(f"REFERENCE: {entry['reference']}", 110, subsequent_indent="    "))
        for name, text in entry["summaries"].items():
            shown = " ".join(str(text).split())
            shown = shown if len(shown) <= 900 else shown[:900] + " […]"
            print(textwrap.fill(f"{name}: {shown}", 110, subsequent_indent="    "))


# -- main -------------------------------------------------------------------------------------------


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--model", type=Path, default=DEFAULT_MODEL, help="model folder (default: %(default)s)"
    )
    parser.add_argument(
        "--max-model-len", type=int, default=2048, help="context length (default: %(default)s)"
    )
    parser.add_argument("--config", type=Path, default=None, help="base config (default: a CPU config)")
    parser.add_argument("--strategies", default=",".join(STRATEGIES), help="comma-separated (default: all)")
    parser.add_argument(
        "--profiles", default="default", help="comma-separated, or 'all' (default: %(default)s)"
    )
    parser.add_argument("--dataset", choices=("corpus", "aclsum"), default="corpus")
    parser.add_argument("--docs", type=Path, default=CORPUS_DOCS, help="corpus folder (default: %(default)s)")
    parser.add_argument(
        "--aclsum-wheel", type=Path, default=None, help="aclsum wheel (default: pip download)"
    )
    parser.add_argument("--aclsum-split", choices=("train", "val", "test"), default="test")
    parser.add_argument("--limit", type=int, default=None, help="only the first N documents")
    parser.add_argument("--reading", type=int, default=3, help="documents in the reading check (default: 3)")
    parser.add_argument("--work", type=Path, default=None, help="where run folders go (default: a temp dir)")
    parser.add_argument("--out", type=Path, default=result_path("quality"))
    parser.add_argument(
        "--runs-from", type=Path, default=None, help="score an earlier JSON's runs again and add to them"
    )
    args = parser.parse_args(argv)
    args.strategies = [name for name in args.strategies.split(",") if name]
    unknown = sorted(set(args.strategies) - set(STRATEGIES))
    if unknown:
        parser.error(f"unknown strategies: {', '.join(unknown)} (known: {', '.join(STRATEGIES)})")
    shipped = shipped_profile_names()
    args.profiles = shipped if args.profiles == "all" else [name for name in args.profiles.split(",") if name]
    if args.config is None and set(args.profiles) - set(shipped):
        parser.error(
            f"unknown profiles without --config: {', '.join(sorted(set(args.profiles) - set(shipped)))}"
        )
    if not (args.model / "config.json").is_file():
        parser.error(f"no model at {args.model} (build one: .venv/bin/docsumd make-demo-model {args.model})")
    return args


def _load_docs(args: argparse.Namespace, work: Path) -> list[Doc]:
    if args.dataset == "corpus":
        docs = load_corpus(args.docs)
    else:
        wheel = args.aclsum_wheel or download_aclsum(work / "aclsum-wheel")
        docs = load_aclsum(wheel, args.aclsum_split, work / "aclsum-docs")
    return docs[: args.limit] if args.limit else docs


def _model_facts(model: Path) -> dict[str, Any]:
    """What identifies the model: its folder, and the demo model's marker hashes when it has one."""
    facts: dict[str, Any] = {"path": str(model)}
    marker = model / "docsumd-demo-model.json"
    if marker.is_file():
        data = json.loads(marker.read_text(encoding="utf-8"))
        facts.update({key: data.get(key) for key in ("model", "source", "gguf_sha256", "safetensors_sha256")})
    return facts


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="docsumd-quality-"))
    work.mkdir(parents=True, exist_ok=True)
    config = args.config
    if config is None:
        config = work / "docsumd.toml"
        config.write_text(
            base_config(args.model, args.max_model_len, shipped_profile_names()), encoding="utf-8"
        )
    docs = _load_docs(args, work)
    scorer = Scorer()
    context = Context.of(config, args.model.absolute(), args.max_model_len)
    documents = {doc.id: document_row(doc, scorer, context) for doc in docs}
    output: dict[str, Any] = {
        "benchmark": "quality",
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "model": _model_facts(args.model),
        "max_model_len": args.max_model_len,
        "dataset": args.dataset if args.dataset == "corpus" else f"aclsum-{args.aclsum_split}",
        "rouge": "rouge-score 0.1.2, Porter stemmer, F1; aggregates use each document's first reference",
        "host": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
        },
        "documents": list(documents.values()),
        "runs": [],
    }
    print(f"{len(docs)} documents; work folder {work}", file=sys.stderr)
    if args.runs_from is not None:
        earlier = json.loads(args.runs_from.read_text(encoding="utf-8"))
        for run in earlier["runs"]:
            rows = [summary_row(doc, _record_of(run, doc.id), scorer) for doc in docs]
            output["runs"].append({**run, "aggregate": aggregate(rows, documents), "documents": rows})
        output["runs_from"] = {"file": str(args.runs_from), "created_at": earlier.get("created_at")}
        _write(args.out, output)
    for profile in args.profiles:
        for strategy in args.strategies:
            spec = RunSpec(strategy, profile, args.model.absolute(), args.max_model_len, config)
            print(f"running {spec.name} at max_model_len {args.max_model_len} ...", file=sys.stderr)
            outcome = run_summarize(spec, docs, work, context)
            rows = [summary_row(doc, outcome["records"].get(doc.id), scorer) for doc in docs]
            output["runs"].append(
                {
                    "strategy": strategy,
                    "profile": profile,
                    "exit_code": outcome["exit_code"],
                    "wall_s": outcome["wall_s"],
                    "aggregate": aggregate(rows, documents),
                    "documents": rows,
                }
            )
            print(
                f"  exit {outcome['exit_code']}, {outcome['wall_s']} s (log: {outcome['log']})",
                file=sys.stderr,
            )
            output["reading_check"] = reading_check(docs, output["runs"], args.reading)
            _write(args.out, output)
    print(table(output["runs"]))
    print_reading_check(output.get("reading_check", []))
    print(f"\nwritten to {args.out}", file=sys.stderr)
    return 0


def _record_of(run: dict[str, Any], doc_id: str) -> dict[str, Any] | None:
    """A result record as far as an earlier run's row of ``doc_id`` keeps it (for scoring again)."""
    row = next((row for row in run["documents"] if row["id"] == doc_id), None)
    if row is None:
        return None
    if "failed" in row:
        return {"reason": "failed", "error": row["failed"]}
    kept: tuple[str, ...] = (
        "strategy",
        "parts",
        "depth",
        "document_tokens",
        "dropped_tokens",
        "summary_tokens",
    )
    kept += ("max_summary_tokens", "finish_reason", "profile_version", "prompt_version", "summary")
    return {**{key: row.get(key) for key in kept}, "timings": {"engine_s": row.get("engine_s")}}


def _write(path: Path, data: dict[str, Any]) -> None:
    write_result(path, data)


if __name__ == "__main__":
    sys.exit(main())
