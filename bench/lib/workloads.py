"""The workloads: the real corpus (shuffled copies), mixed lengths cut from it, and PDFs with their
extracted text, chosen by options that every benchmark spells the same way."""

from __future__ import annotations

import argparse
import dataclasses
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.lib import REPO, SHARED
from daemon.config import Config

SHORT_MAX_TOKENS = 2000
"""Documents up to this many tokens count as short in the latency split."""

CORPUS_DOCS = SHARED / "corpus" / "docs"
"""The real documents (plain text) every workload is made of, unless ``--docs`` says otherwise."""


def add_workload_arguments(parser: argparse.ArgumentParser, *, default_workload: str) -> None:
    """The options that choose a workload and where results go (bench.compare, bench.scale)."""
    parser.add_argument("--workload", choices=("corpus", "mixed", "pdf"), default=default_workload)
    parser.add_argument("--docs", type=Path, default=CORPUS_DOCS)
    parser.add_argument("--config", type=Path, default=REPO / "docsumd.toml")
    parser.add_argument(
        "--json",
        type=Path,
        default=None,
        help="write the result here (default: print only); bench/results/ names files "
        "DATE_MACHINE_EXPERIMENT[_LABEL].json (bench.lib.results.result_path)",
    )
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


def workload(args: argparse.Namespace, tokenizer: Any) -> list[tuple[str, str]]:
    """The documents (name, text) that ``--workload``, ``--docs``, ``--copies``, ``--count``,
    ``--seed`` and ``--max-bytes`` name."""
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
    return mixed(texts, tokenizer, args.count, random.Random(args.seed))


def shuffled_copy(text: str, copy: int, name: str, seed: int) -> str:
    """Copy ``copy`` of a document: its paragraphs in an order of its own, after a line naming it.

    Copies that differed only in their first line shared every later part of a long document, so
    vLLM's prefix cache served those parts and the benchmark looked faster than a real stream.
    """
    paragraphs = [paragraph for paragraph in text.split("\n\n") if paragraph.strip()]
    random.Random(f"{seed}:{copy}:{name}").shuffle(paragraphs)
    return f"Copy {copy} of {name}.\n" + "\n\n".join(paragraphs)


def mixed(
    texts: list[tuple[str, str]], tokenizer: Any, count: int, rng: random.Random
) -> list[tuple[str, str]]:
    """``count`` documents of 500-20,000 tokens cut from the corpus text, in shuffled order (70%
    short: 500-1,500 tokens; 30% long: 5,000-20,000)."""
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


@dataclass(frozen=True)
class Pdf:
    """One PDF of the workload, and the text docsumd's extractor gives for it."""

    stem: str
    data: bytes
    text: str
    pages: int


def pdf_documents(
    folder: Path, config: Config, *, count: int, max_pages: int
) -> tuple[list[Pdf], dict[str, str]]:
    """The PDFs of ``folder`` that docsumd reads, of at most ``max_pages`` pages, the first ``count``
    by name, each with its text as a worker extracts it (the same function, here); and the ones left
    out, with why."""
    from daemon.document.extract.pdf import extract_pdf
    from daemon.errors import DocumentError
    from daemon.service import extract_limits

    limits = dataclasses.replace(extract_limits(config.limits, config.extract), max_pages=max_pages)
    pdfs: list[Pdf] = []
    left_out: dict[str, str] = {}
    for path in sorted(folder.glob("*.pdf")):
        if len(pdfs) == count:
            break
        data = path.read_bytes()
        try:
            extracted = extract_pdf(data, limits)
        except DocumentError as exc:
            left_out[path.name] = str(exc)[:200]
            continue
        pages = int(extracted.details["pages"])
        pdfs.append(Pdf(path.stem, data, extracted.text, pages))
    return pdfs, left_out
