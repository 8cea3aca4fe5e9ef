"""PDF text extraction: pypdfium2, pdfminer.six and pypdf compared on real PDFs, and docsumd's own
extractor (pypdfium2 plus its clean-up, :func:`daemon.document.extract.pdf.extract_pdf`).

What it measures, per library, on every PDF of a folder (``bench/fetch_pdfs.sh`` fills one with 56
PDFs from Debian documentation packages):

* **speed**: pages per second per core, total pages over total CPU time (``time.process_time`` in
  the one process that extracts: opening the file and reading every page's text; imports excluded),
  and peak resident memory of that process;
* **quality**, on the text as the library gives it (``raw``), and for pdfminer.six and pypdf also
  after docsumd's clean-up (:func:`~daemon.document.extract.pdf.assemble`, ``+clean`` rows), so the
  libraries are compared both as they come and as docsumd would use them:

  - ``splits/10kw`` and ``splits left``: dictionary-looking words split by a hyphen at a line end
    in the library's raw text (``head-`` ends a line, or PDFium's U+FFFE mark joins the lines, and the
    document also writes ``headtail``), per 10,000 words; and the share of them still split (a hyphen
    between the halves) in the text measured: 1.0 for raw text, what the clean-up missed after it;
  - ``running_left``: the share of pages that still show a running header or footer: a line found
    at the top or bottom edge (first or last two lines) of at least 3 pages (and 2% of them) of the
    library's raw text, digits read as ``#``, on at least 30% of the pages from the first of them to
    the last (a section label such as ``Examples`` that often starts a page of a reference manual is
    not one), and found again near that page's edge;
  - ``page_numbers``: lines that are nothing but a page number (``12``, ``- 12 -``, ``Page 3 of 9``,
    ``xiv``), per page;
  - ``chars_page``: non-space characters per page;
  - ``words_vs_base``: the share of the baseline library's distinct words (per document) that this
    one finds too (low: text missed or garbled);
  - ``midsentence``: the share of paragraph breaks (blank lines) that fall inside a sentence (the
    paragraph ends in a lower-case letter or a comma and the next starts with a lower-case letter);
  - ``failures``: PDFs the library raised on.

Each (library, PDF) pair runs in a fresh process (``--jobs`` of them at once); ratios are against
the ``--baseline`` library measured in the same run.

    bench/fetch_pdfs.sh                       # once: bench/data/pdf/
    .venv/bin/python -m bench.extract bench/data/pdf [--jobs 2] [--json FILE]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import io
import itertools
import json
import logging
import os
import platform
import re
import resource
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from datetime import UTC, datetime
from multiprocessing import get_context
from pathlib import Path
from typing import Any, Final

from bench.lib.results import write_result

LIBRARIES: Final = ("pypdfium2", "pdfminer", "pypdf", "docsumd")
CLEANED: Final = ("pdfminer", "pypdf")  # also measured after docsumd's clean-up
LONG_DOCUMENT_PAGES: Final = 30
DOCUMENTS_PER_SECOND: Final = 2.2

# -- extracting -------------------------------------------------------------------------------------


def pages_pypdfium2(data: bytes) -> list[str]:
    """Each page's text as PDFium gives it (``get_text_range``)."""
    pypdfium2: Any = importlib.import_module("pypdfium2")  # untyped

    pdf = pypdfium2.PdfDocument(data)
    try:
        texts = []
        for index in range(len(pdf)):
            page = pdf[index]
            textpage = page.get_textpage()
            texts.append(str(textpage.get_text_range()))
            textpage.close()
            page.close()
        return texts
    finally:
        pdf.close()


def pages_pdfminer(data: bytes) -> list[str]:
    """Each page's text as pdfminer.six's ``extract_text`` gives it (default layout analysis)."""
    from pdfminer.high_level import extract_text

    text = str(extract_text(io.BytesIO(data)))
    pages = text.split("\f")
    return pages[:-1] if pages and not pages[-1].strip() else pages  # a form feed ends every page


def pages_pypdf(data: bytes) -> list[str]:
    """Each page's text as pypdf's ``extract_text`` gives it (default mode)."""
    from pypdf import PdfReader

    reader = PdfReader(io.BytesIO(data))
    return [page.extract_text() for page in reader.pages]


def pages_docsumd(data: bytes) -> list[str]:
    """docsumd's extractor end to end (screening, PDFium, geometry, clean-up), without its page limit:
    the final text's pages."""
    from daemon.document.extract.pdf import extract_pdf
    from daemon.document.types import ExtractLimits

    limits = ExtractLimits(max_pages=1_000_000, max_output_chars=1_000_000_000)
    return extract_pdf(data, limits).text.split("\f")


EXTRACTORS: Final[dict[str, Callable[[bytes], list[str]]]] = {
    "pypdfium2": pages_pypdfium2,
    "pdfminer": pages_pdfminer,
    "pypdf": pages_pypdf,
    "docsumd": pages_docsumd,
}
IMPORTS: Final = {
    "pypdfium2": ["pypdfium2"],
    "pdfminer": ["pdfminer.high_level"],
    "pypdf": ["pypdf"],
    "docsumd": ["pypdfium2", "daemon.document.extract.pdf"],
}


def run_one(library: str, path: str) -> dict[str, Any]:
    """Extracts one PDF with one library in this (fresh) process: its pages' texts, CPU seconds, peak
    memory, or the error it raised."""
    for name in ("pypdf", "pdfminer", "pypdfium2"):
        logging.getLogger(name).setLevel(logging.CRITICAL)  # font warnings by the thousand
    for module in IMPORTS[library]:
        importlib.import_module(module)  # not timed: a worker imports once
    data = Path(path).read_bytes()
    started = time.process_time()
    try:
        pages = EXTRACTORS[library](data)
        error = None
    except Exception as exc:  # a failure is a measurement
        pages, error = [], f"{type(exc).__name__}: {str(exc)[:200]}"
    cpu = time.process_time() - started
    clean_cpu = 0.0
    cleaned: list[str] = []
    if library in CLEANED and pages:
        from daemon.document.extract.pdf import assemble

        clean_started = time.process_time()
        cleaned = assemble(pages)[0].split("\f")
        clean_cpu = time.process_time() - clean_started
    peak_kib = peak_rss_kib()
    return {
        "library": library,
        "file": Path(path).name,
        "pages": len(pages),
        "cpu_s": cpu,
        "clean_cpu_s": clean_cpu,
        "peak_rss_mib": peak_kib / 1024,
        "error": error,
        "texts": pages,
        "cleaned": cleaned,
    }


def peak_rss_kib() -> float:
    """This process's peak resident memory (``VmHWM``: ``ru_maxrss`` would count the parent's memory
    at the fork that started this process)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return float(line.split()[1])
    return float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


# -- quality measures -------------------------------------------------------------------------------

_WORD: Final = re.compile(r"[^\W\d_]+")
_PAGE_NUMBER: Final = re.compile(
    r"\s*(?:page\s*)?[-–—(\[]?\s*(?:(?!0\d)\d{1,5}|[ivxlcdm]{1,8})\s*[-–—)\]]?(?:\s*(?:/|of)\s*\d{1,5})?\s*",
    re.IGNORECASE,
)
_DIGITS: Final = re.compile(r"\d+")
EDGE: Final = 2
RUN_DENSITY: Final = 0.3  # a running line is on this share of the pages of its run, at least
EDGE_CHARS: Final = 300


_LINE_END_SPLIT: Final = re.compile(r"([^\W\d_]{2,})(?:-[ \t]*\r?\n|\ufffe)[ \t]*([^\W\d_]{2,})")
_SPLIT_LEFT: Final = re.compile(r"([^\W\d_]{2,})(?:-\s*|\ufffe\s*)([^\W\d_]{2,})")


def line_end_splits(raw_pages: Sequence[str]) -> Counter[tuple[str, str]]:
    """The dictionary-looking words split by a hyphen at a line end in a library's raw text: ``head-``
    ending a line (or PDFium's U+FFFE mark), ``tail`` starting the next, where the document also
    writes ``headtail`` as one word. Counted per (head, tail), lowercased."""
    text = "\n".join(raw_pages)
    words = Counter(word.lower() for word in _WORD.findall(text))
    splits = Counter((head.lower(), tail.lower()) for head, tail in _LINE_END_SPLIT.findall(text))
    return Counter({pair: count for pair, count in splits.items() if words[pair[0] + pair[1]]})


def splits_left(pages: Sequence[str], splits: Counter[tuple[str, str]]) -> int:
    """How many of ``splits`` are still split in ``pages`` (a hyphen, with or without a line break or
    space after it, between the two halves)."""
    found = Counter((head.lower(), tail.lower()) for head, tail in _SPLIT_LEFT.findall("\n".join(pages)))
    return sum(min(found[pair], count) for pair, count in splits.items())


def _lines(page: str) -> list[str]:
    return [line.strip() for line in page.replace("\r", "\n").split("\n") if line.strip()]


def _key(line: str) -> str:
    return _DIGITS.sub("#", line.lower())


def running_lines(pages: Sequence[str]) -> set[str]:
    """The keys of lines at the edge of many pages, densely (see ``running_left``)."""
    pages_of: dict[str, list[int]] = {}
    for index, page in enumerate(pages):
        lines = _lines(page)
        edges = lines[:EDGE] + lines[-EDGE:] if len(lines) > 2 * EDGE else lines
        for key in {_key(line) for line in edges if sum(c.isalpha() for c in line) >= 3}:
            pages_of.setdefault(key, []).append(index)
    needed = max(3, -(-len(pages) * 2 // 100))
    return {
        key
        for key, found in pages_of.items()
        if len(found) >= needed and len(found) >= RUN_DENSITY * (found[-1] - found[0] + 1)
    }


def running_left(pages: Sequence[str], running: set[str]) -> float:
    """The share of pages with a running line (``running`` keys) still at their edge: one of their
    first or last lines, or what a page starts or ends with (a line joined to a paragraph)."""
    if not pages:
        return 0.0
    left = 0
    for page in pages:
        lines = _lines(page)
        edges = {_key(line) for line in lines[:EDGE] + lines[-EDGE:]}
        head, tail = _key(page.strip()[:EDGE_CHARS]), _key(page.strip()[-EDGE_CHARS:])
        if edges & running or any(head.startswith(key) or tail.endswith(key) for key in running):
            left += 1
    return left / len(pages)


def page_number_lines(pages: Sequence[str]) -> int:
    """Lines that are nothing but a page number."""
    return sum(1 for page in pages for line in _lines(page) if _PAGE_NUMBER.fullmatch(line))


def midsentence_breaks(pages: Sequence[str]) -> tuple[int, int]:
    """Paragraph breaks inside a sentence, and paragraph breaks (blank lines inside a page)."""
    inside = total = 0
    for page in pages:
        parts = re.split(r"\n[ \t]*\n", page.replace("\r", ""))
        paragraphs = [part.strip() for part in parts if part.strip()]
        for before, after in itertools.pairwise(paragraphs):
            total += 1
            if re.search(r"[a-z,]$", before) and after[:1].islower():
                inside += 1
    return inside, total


def quality(pages: Sequence[str], running: set[str], splits: Counter[tuple[str, str]]) -> dict[str, float]:
    """The measures of one document's pages (sums: divided over all documents later); ``running`` and
    ``splits`` are what the library's raw text has (:func:`running_lines`, :func:`line_end_splits`)."""
    inside, breaks = midsentence_breaks(pages)
    return {
        "pages": len(pages),
        "words": len(_WORD.findall("\n".join(pages))),
        "line_end_splits": sum(splits.values()),
        "splits_left": splits_left(pages, splits),
        "running_pages": running_left(pages, running) * len(pages),
        "page_numbers": page_number_lines(pages),
        "chars": sum(len(page) - page.count(" ") - page.count("\n") - page.count("\r") for page in pages),
        "midsentence": inside,
        "breaks": breaks,
    }


def word_set(pages: Sequence[str]) -> set[str]:
    """The document's distinct words, lowercased, hyphenation and PDFium's marks taken out."""
    text = re.sub(r"-[ \t]*\r?\n[ \t]*", "", "\n".join(pages).replace("\ufffe", ""))
    return {word.lower() for word in _WORD.findall(text)}


# -- the run ----------------------------------------------------------------------------------------


def measure(folder: Path, libraries: Sequence[str], jobs: int) -> list[dict[str, Any]]:
    """Every (library, PDF) pair, each in a fresh process."""
    pdfs = sorted(str(path) for path in folder.glob("*.pdf"))
    if not pdfs:
        raise SystemExit(f"no .pdf files in {folder} (run bench/fetch_pdfs.sh)")
    tasks = [(library, pdf) for pdf in pdfs for library in libraries]
    context = get_context("spawn")  # PDFium is not fork-safe: every worker starts clean
    results = []
    with ProcessPoolExecutor(max_workers=jobs, mp_context=context, max_tasks_per_child=1) as pool:
        futures = [pool.submit(run_one, library, pdf) for library, pdf in tasks]
        for done, future in enumerate(futures, 1):
            result = future.result()
            results.append(result)
            status = result["error"] or f"{result['pages']} pages, {result['cpu_s']:.2f} s"
            name = result["file"][:60]
            print(f"[{done}/{len(tasks)}] {result['library']:10} {name:60} {status}", flush=True)
    return results


def summarize(results: list[dict[str, Any]], libraries: Sequence[str], baseline: str) -> dict[str, Any]:
    """Totals and measures per library (and per library after clean-up), from the raw results."""
    by_file: dict[str, dict[str, dict[str, Any]]] = {}
    for result in results:
        by_file.setdefault(result["file"], {})[result["library"]] = result
    rows: dict[str, dict[str, Any]] = {}
    variants = [*libraries, *(f"{library}+clean" for library in CLEANED if library in libraries)]
    for variant in variants:
        library, _, cleaned = variant.partition("+")
        sums: Counter[str] = Counter()
        shared = base_words = 0.0
        failures: list[str] = []
        peak = 0.0
        per_document = []
        for file, runs in sorted(by_file.items()):
            run = runs[library]
            if run["error"]:
                failures.append(f"{file}: {run['error']}")
                continue
            pages = run["cleaned"] if cleaned else run["texts"]
            raw_of = "pypdfium2" if library == "docsumd" else library  # docsumd's raw text is PDFium's
            raw_run = runs.get(raw_of, run)
            raw_texts = raw_run["texts"] or run["texts"]
            measures = quality(pages, running_lines(raw_texts), line_end_splits(raw_texts))
            sums.update(measures)
            sums["cpu_s"] += run["cpu_s"] + (run["clean_cpu_s"] if cleaned else 0.0)
            sums["raw_pages"] += run["pages"]
            peak = max(peak, run["peak_rss_mib"])
            base = runs.get(baseline)
            if base is not None and not base["error"]:
                base_set = word_set(base["texts"])
                shared += len(base_set & word_set(pages))
                base_words += len(base_set)
            per_document.append(
                {
                    "file": file,
                    "pages": run["pages"],
                    "cpu_s": round(run["cpu_s"], 4),
                    "peak_rss_mib": round(run["peak_rss_mib"], 1),
                }
            )
        pages_total = max(sums["raw_pages"], 1)
        rate = sums["raw_pages"] / sums["cpu_s"] if sums["cpu_s"] else 0.0
        rows[variant] = {
            "documents": len(per_document),
            "pages": int(sums["raw_pages"]),
            "cpu_s": round(sums["cpu_s"], 3),
            "pages_per_s_per_core": round(rate, 1),
            "cores_for_target": round(DOCUMENTS_PER_SECOND * LONG_DOCUMENT_PAGES / rate, 3) if rate else None,
            "peak_rss_mib": round(peak, 1),
            "line_end_splits_per_10k_words": round(
                10_000 * sums["line_end_splits"] / max(sums["words"], 1), 2
            ),
            "line_end_splits_left_share": round(sums["splits_left"] / max(sums["line_end_splits"], 1), 4),
            "running_left_share": round(sums["running_pages"] / pages_total, 4),
            "page_number_lines_per_page": round(sums["page_numbers"] / pages_total, 4),
            "chars_per_page": round(sums["chars"] / pages_total, 1),
            "words_vs_baseline": round(shared / base_words, 4) if base_words else None,
            "midsentence_break_share": round(sums["midsentence"] / max(sums["breaks"], 1), 4),
            "paragraph_breaks_per_page": round(sums["breaks"] / pages_total, 2),
            "failures": failures,
            "per_document": per_document,
        }
    return rows


COLUMNS: Final = (
    ("pages/s/core", "pages_per_s_per_core", "{:.1f}"),
    ("cores@2.2x30p", "cores_for_target", "{:.3f}"),
    ("peak MiB", "peak_rss_mib", "{:.0f}"),
    ("splits/10kw", "line_end_splits_per_10k_words", "{:.1f}"),
    ("splits left", "line_end_splits_left_share", "{:.3f}"),
    ("running", "running_left_share", "{:.3f}"),
    ("pgnum/pg", "page_number_lines_per_page", "{:.3f}"),
    ("chars/pg", "chars_per_page", "{:.0f}"),
    ("words~base", "words_vs_baseline", "{:.3f}"),
    ("midsent", "midsentence_break_share", "{:.3f}"),
    ("para/pg", "paragraph_breaks_per_page", "{:.2f}"),
)


def print_table(rows: dict[str, dict[str, Any]], baseline: str) -> None:
    """The comparison, and each library's speed as a ratio of the baseline's."""
    titles = "".join(f"{title:>14}" for title, _, _ in COLUMNS)
    print(f"{'library':16}{titles}{'fail':>6}{'speed/base':>12}")
    base_rate = rows[baseline]["pages_per_s_per_core"] or 1.0
    for variant, row in rows.items():
        cells = "".join(
            f"{(fmt.format(row[key]) if row[key] is not None else '-'):>14}" for _, key, fmt in COLUMNS
        )
        ratio = row["pages_per_s_per_core"] / base_rate
        print(f"{variant:16}{cells}{len(row['failures']):>6}{ratio:>11.3f}x")
    for variant, row in rows.items():
        for failure in row["failures"]:
            print(f"  {variant} failed: {failure}")


def versions() -> dict[str, str]:
    """The measured libraries' versions."""
    found = {}
    for name in ("pypdfium2", "pdfminer.six", "pypdf"):
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = "absent"
    return found


def cpu_model() -> str:
    """This machine's CPU, as /proc/cpuinfo names it."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def main() -> None:
    """Runs the comparison, prints it, writes the JSON."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("folder", type=Path, help="a folder of .pdf files (bench/fetch_pdfs.sh)")
    parser.add_argument(
        "--libraries", default=",".join(LIBRARIES), help="comma-separated, of: " + ", ".join(LIBRARIES)
    )
    parser.add_argument("--baseline", default="pypdfium2")
    parser.add_argument("--jobs", type=int, default=1, help="PDFs extracted at once (one process each)")
    parser.add_argument("--json", type=Path, help="write the figures there")
    args = parser.parse_args()
    libraries = [name for name in args.libraries.split(",") if name]
    unknown = set(libraries) - set(LIBRARIES)
    if unknown or args.baseline not in libraries:
        parser.error(f"unknown libraries {sorted(unknown)} or baseline {args.baseline!r} not among them")
    started = time.monotonic()
    results = measure(args.folder, libraries, args.jobs)
    rows = summarize(results, libraries, args.baseline)
    print()
    print_table(rows, args.baseline)
    manifest = args.folder / "manifest.jsonl"
    report = {
        "bench": "extract_pdf",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"cpu": cpu_model(), "cores": os.cpu_count(), "python": platform.python_version()},
        "versions": versions(),
        "folder": str(args.folder),
        "manifest": [json.loads(line) for line in manifest.read_text().splitlines()]
        if manifest.exists()
        else [],
        "jobs": args.jobs,
        "baseline": args.baseline,
        "target": {"documents_per_second": DOCUMENTS_PER_SECOND, "pages_per_document": LONG_DOCUMENT_PAGES},
        "wall_s": round(time.monotonic() - started, 1),
        "libraries": rows,
    }
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        write_result(args.json, report, indent=1)
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
