"""How many times its input's size the extracted text of a real document is: the figures behind the
default of ``extract.max_expansion_ratio`` and ``extract.expansion_floor_bytes``.

For every file found, the ratio is the size of the text docsumd extracts from it (as UTF-8, after
the daemon's clean-up: :func:`daemon.document.reader.clean_extracted`) over the file's size. The
extraction is docsumd's own (:func:`daemon.document.extract.extract`, run in this process, with the
default limits but no ratio cap, so a real document over the default ratio would show).

Inputs, all reproducible from the repository plus ``/work/shared`` and Debian's package archive:

* PDF: the PDFs ``bench/fetch_pdfs.sh`` fetches (56, from Debian documentation packages) and the
  real PDFs of ``tests/fixtures/documents/pdf``;
* HTML: the real pages of ``tests/fixtures/documents/html`` and the HTML manuals inside the ``.deb``
  files ``bench/fetch_pdfs.sh`` keeps (``--debs``);
* DOCX: every document of the shared corpus (``/work/shared/corpus/docs``) written as a DOCX by
  python-docx (a heading per title-like line, a paragraph per block, Word's default template), and
  the python-docx fixtures of ``tests/fixtures/documents/docx``;
* ODT: the real ODT fixture (there is no ODT writer in the dependencies);
* three synthetic DOCX, apart in the summary: legitimate content that compresses unusually well (a
  log-like table, one clause repeated, near-identical numbered lines), for the headroom the default
  needs above real documents.

    bash bench/fetch_pdfs.sh                      # once: bench/data/pdf, bench/data/debs
    .venv/bin/python -m bench.expansion [--pdfs bench/data/pdf] [--debs bench/data/debs]
        [--corpus ../shared/corpus/docs] [--formats pdf,html,docx,odt]
        [--json FILE]
"""

from __future__ import annotations

import argparse
import io
import json
import platform
import statistics
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.lib import REPO
from bench.lib.results import write_result

FIXTURES = REPO / "tests" / "fixtures" / "documents"
MAX_HTML_PER_PACKAGE = 200


def corpus_folder() -> Path:
    """The shared corpus's documents: ``shared/corpus/docs`` beside the checkout (as the tests find it)."""
    from tests.corpus import CORPUS_DIR

    return CORPUS_DIR / "docs"


def docx_of(text: str) -> bytes:
    """``text`` as python-docx writes it: short title-like lines as headings, blocks as paragraphs."""
    import docx

    document = docx.Document()
    for raw in text.split("\n\n"):
        block = " ".join(raw.split())
        if not block:
            continue
        if len(block) < 80 and not block.endswith((".", ",", ";", ":")):
            document.add_heading(block, level=2)
        else:
            document.add_paragraph(block)
    return _saved(document)


def _saved(document: Any) -> bytes:
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


def repetitive_docx() -> Iterator[tuple[str, str, bytes]]:
    """Legitimate but unusually repetitive documents (what compresses best): a log-like table, one
    clause repeated, numbered near-identical lines. Synthetic: named ``synthetic:...``."""
    import docx

    table_document = docx.Document()
    table = table_document.add_table(rows=0, cols=3)
    for _ in range(3000):
        cells = table.add_row().cells
        cells[0].text, cells[1].text, cells[2].text = "2024-01-01", "OK", "service started normally"
    yield "docx", "synthetic:table-3000-identical-rows", _saved(table_document)
    clause = "The parties agree that this clause applies to every delivery made under this agreement."
    same = docx.Document()
    for _ in range(5000):
        same.add_paragraph(clause)
    yield "docx", "synthetic:one-paragraph-5000-times", _saved(same)
    numbered = docx.Document()
    for index in range(5000):
        numbered.add_paragraph(
            f"Line {index}: the parties agree that this applies to delivery {index * 7919 % 100000}."
        )
    yield "docx", "synthetic:5000-numbered-lines", _saved(numbered)


def html_from_debs(debs: Path) -> Iterator[tuple[str, bytes]]:
    """The HTML files inside the ``.deb`` files of ``debs`` (at most a few hundred per package)."""
    for deb in sorted(debs.glob("*.deb")):
        with tempfile.TemporaryDirectory() as scratch:
            data = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb)], capture_output=True, check=True)
            taken = 0
            with tarfile.open(fileobj=io.BytesIO(data.stdout)) as archive:
                for member in archive:
                    if taken >= MAX_HTML_PER_PACKAGE:
                        break
                    if member.isfile() and member.name.endswith((".html", ".htm")) and member.size > 0:
                        extracted = archive.extractfile(member)
                        if extracted is not None:
                            taken += 1
                            yield f"{deb.name.split('_')[0]}:{member.name}", extracted.read()
            del scratch


def inputs(args: argparse.Namespace) -> Iterator[tuple[str, str, bytes]]:
    """``(format, name, bytes)`` of every input measured, of the formats asked for."""
    for fmt, name, data in _all_inputs(args):
        if fmt in args.formats:
            yield fmt, name, data


def _all_inputs(args: argparse.Namespace) -> Iterator[tuple[str, str, bytes]]:
    wanted = set(args.formats)
    pdfs = sorted(args.pdfs.glob("*.pdf")) if "pdf" in wanted and args.pdfs and args.pdfs.is_dir() else []
    real_fixtures = [
        json.loads(line)["file"]
        for line in (FIXTURES / "pdf" / "manifest.jsonl").read_text().splitlines()
        if line.strip() and json.loads(line).get("origin") != "generated"
    ]
    pdfs += [FIXTURES / "pdf" / name for name in real_fixtures if (FIXTURES / "pdf" / name).is_file()]
    seen: set[str] = set()
    for path in pdfs:
        if path.name not in seen:
            seen.add(path.name)
            yield "pdf", path.name, path.read_bytes()
    for path in sorted((FIXTURES / "html").glob("*.html")):
        if path.stat().st_size > 1000:  # the hand-made hostile or tiny ones are not real pages
            yield "html", path.name, path.read_bytes()
    if "html" in wanted and args.debs and args.debs.is_dir():
        for name, data in html_from_debs(args.debs):
            yield "html", name, data
    for path in sorted(args.corpus.glob("*.txt")) if "docx" in wanted else ():
        yield "docx", f"corpus:{path.name}", docx_of(path.read_text(encoding="utf-8"))
    for name in ("contract.docx",):
        yield "docx", name, (FIXTURES / "docx" / name).read_bytes()
    if "docx" in wanted:
        yield from repetitive_docx()
    yield "odt", "report.odt", (FIXTURES / "odt" / "report.odt").read_bytes()


def measure(args: argparse.Namespace) -> list[dict[str, Any]]:
    """One row per input: its size, its text's size, the ratio (or the reason it was refused)."""
    from daemon.document.extract import extract
    from daemon.document.reader import clean_extracted
    from daemon.document.types import ExtractLimits, Format
    from daemon.errors import DocumentError

    limits = ExtractLimits(max_expansion_ratio=1e9, max_text_bytes=1 << 40)
    rows = []
    for fmt, name, data in inputs(args):
        began = time.process_time()
        try:
            text = clean_extracted(extract(data, Format(fmt), limits).text)
        except DocumentError as error:
            rows.append({"format": fmt, "file": name, "input_bytes": len(data), "refused": error.reason})
            continue
        text_bytes = len(text.encode("utf-8"))
        rows.append(
            {
                "format": fmt,
                "file": name,
                "input_bytes": len(data),
                "text_bytes": text_bytes,
                "ratio": round(text_bytes / len(data), 4),
                "cpu_s": round(time.process_time() - began, 3),
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    return rows


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per format (real documents; ``synthetic`` ones apart): how many, the spread of the ratio, the
    largest and its file."""
    out: dict[str, Any] = {}
    groups = sorted({(row["format"], row["file"].startswith("synthetic:")) for row in rows})
    for fmt, synthetic in groups:
        mine = [
            row for row in rows if row["format"] == fmt and row["file"].startswith("synthetic:") == synthetic
        ]
        ratios = sorted((row["ratio"], row["file"], row["input_bytes"]) for row in mine if "ratio" in row)
        if not ratios:
            continue
        values = [ratio for ratio, _, _ in ratios]
        out[f"{fmt} (synthetic)" if synthetic else fmt] = {
            "files": len(values),
            "refused": sum(1 for row in mine if "refused" in row),
            "min": values[0],
            "median": round(statistics.median(values), 4),
            "p95": values[min(len(values) - 1, round(0.95 * (len(values) - 1)))],
            "max": values[-1],
            "max_file": ratios[-1][1],
            "max_file_bytes": ratios[-1][2],
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pdfs", type=Path, default=REPO / "bench" / "data" / "pdf")
    parser.add_argument("--debs", type=Path, default=REPO / "bench" / "data" / "debs")
    parser.add_argument(
        "--corpus", type=Path, default=None, help="the corpus's docs (default: beside the checkout)"
    )
    parser.add_argument("--formats", default="pdf,html,docx,odt", help="comma-separated (default: all)")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    args.formats = [fmt for fmt in args.formats.split(",") if fmt]
    args.corpus = args.corpus or corpus_folder()
    rows = measure(args)
    report = {
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "python": platform.python_version()},
        "method": "UTF-8 bytes of the text docsumd extracts (after its clean-up) over the input's bytes",
        "summary": summary(rows),
        "rows": rows,
    }
    print(json.dumps(report["summary"], indent=2))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        write_result(args.json, report)


if __name__ == "__main__":
    main()
