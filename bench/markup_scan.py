"""Scans of hostile text: what they cost the process that runs them.

Three sets of inputs, each scanned once in a fresh process (CPU seconds, the growth of the peak RSS
over the process's RSS just before the scan, the outcome):

* ``lines`` (the default): 16 MiB (``limits.max_input_bytes``) of very short lines, the Markdown /
  reST heading scan's worst case per line, with the line cap
  (:data:`~daemon.document.headings.MAX_SCAN_LINES`) and without it (``max_lines=None``, as
  before the cap). Markdown and reST inputs are not extracted in a worker:
  :func:`daemon.document.headings.text_layout` finds their headings in the daemon's process (a thread
  of it). The ratio is capped over uncapped, in the same run.
* ``screen``: the PDF screen (what runs before PDFium reads a file) over every PDF of ``--folder``
  (``bench/fetch_pdfs.sh`` fills ``bench/data/pdf``), and over the fixtures' decompression bombs:
  its CPU seconds, and which bombs it refuses.
* ``hostile``: the inputs of issue 36 and the shapes found with them, each through the function the
  daemon (or an extraction worker) runs on it: a reST title underlined with 15 M ``=``, a 16 MiB
  Markdown line of ``- - - ... x``, ATX headings whose closing ``#`` follow a long run of spaces or
  whose title is millions of words, 300,000 and 60,000 ``<img>`` siblings in an HTML page, a PDF
  page line of millions of letters that does not end a hyphenated word. A case that runs past
  ``--timeout`` seconds is killed and recorded as such.

``--tree`` imports ``daemon`` from another checkout (e.g. ``git archive 86f0068 daemon | tar -x -C
/tmp/before``) to measure the code before a change with the same inputs.

    .venv/bin/python -m bench.markup_scan [--mib 16] [--json FILE]
    .venv/bin/python -m bench.markup_scan --cases hostile [--tree DIR] [--timeout 300] [--json FILE]
    .venv/bin/python -m bench.markup_scan --cases screen [--folder bench/data/pdf] [--tree DIR] [--json FILE]
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from bench.lib import REPO
from bench.lib.results import write_result

FIXTURE_PDFS: Final = REPO / "tests" / "fixtures" / "documents" / "pdf" / "generated"
LINES: Final = {"a-lines": "a\n", "dash-lines": "-\n"}
MIB: Final = 2**20


def _status_mib(field: str) -> float:
    """A memory figure of this process from /proc/self/status (``VmRSS``, ``VmHWM``), in MiB."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise LookupError(field)


def _reset_peak() -> None:
    """Start the peak resident memory (``VmHWM``) again from the memory now (Linux)."""
    with open("/proc/self/clear_refs", "w", encoding="ascii") as clear:
        clear.write("5")


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _heading_scans() -> Any:
    """The module of the Markdown and reST heading scans in the tree under test:
    :mod:`daemon.document.headings`, or ``daemon.document.extract.markup`` in a tree from before
    they had a module of their own."""
    try:
        return importlib.import_module("daemon.document.headings")
    except ImportError:
        return importlib.import_module("daemon.document.extract.markup")


def _one_lines(pattern: str, fmt: str, mib: int, capped: bool) -> dict[str, Any]:
    """In this (fresh) process: build the text, scan it once, report CPU time and peak RSS."""
    from daemon.document.types import Format

    markup = _heading_scans()

    line = LINES[pattern]
    text = line * (mib * MIB // len(line))
    rss_before = _peak_mib()
    started = time.process_time()
    max_lines = markup.MAX_SCAN_LINES if capped else None
    if fmt == "markdown":
        headings = markup.scan_markdown(text, counts=False, max_lines=max_lines).headings
    else:
        headings = markup.scan_rst(text, counts=False, max_lines=max_lines).headings
    cpu = time.process_time() - started
    layout = markup.markup_layout(text, Format(fmt)) if capped else None
    return {
        "cpu_s": round(cpu, 3),
        "peak_rss_mib": round(_peak_mib(), 1),
        "rss_before_scan_mib": round(rss_before, 1),
        "headings": len(headings),
        "layout_headings": None if layout is None else len(layout.headings),
    }


# -- the hostile inputs ----------------------------------------------------------------------------


def _text_layout(fmt: str, text: str) -> Callable[[], object]:
    from daemon.document.types import Format

    # Before the scans had a module of their own, text_layout was in daemon.document.extract.
    home = _heading_scans()
    if not hasattr(home, "text_layout"):
        home = importlib.import_module("daemon.document.extract")
    text_layout = home.text_layout

    return lambda: len(text_layout(text, Format(fmt)).headings)


def _detect(data: bytes, hint: str | None) -> Callable[[], object]:
    from daemon.document.formats import detect_format

    return lambda: str(detect_format(data, hint))


def _html(data: bytes) -> Callable[[], object]:
    from daemon.document.extract.html import extract_html
    from daemon.document.types import ExtractLimits

    return lambda: len(extract_html(data, ExtractLimits()).text)


def _pdf_lines(lines: list[str]) -> Callable[[], object]:
    from daemon.document.extract.pdf import Vocabulary, join_lines

    return lambda: len(join_lines(lines, Vocabulary.of([lines])))


def _md_dashes(mib: int) -> str:
    return "- " * (mib * MIB // 2 - 1) + "x\n"


HOSTILE: Final[dict[str, tuple[str, Callable[[int], Callable[[], object]]]]] = {
    "rst-underline-15M": (
        "text_layout(reST): 'Title' underlined with 15,000,000 '='",
        lambda mib: _text_layout("rst", "Title\n" + "=" * 15_000_000 + "\n"),
    ),
    "md-dash-space-line": (
        "text_layout(Markdown): one line of '- ' repeated, then 'x' (--mib MiB)",
        lambda mib: _text_layout("markdown", _md_dashes(mib)),
    ),
    "md-atx-close-32k": (
        "text_layout(Markdown): '# a', 32,768 spaces, '#x'",
        lambda mib: _text_layout("markdown", "# a" + " " * 32_768 + "#x\n"),
    ),
    "md-atx-close-line": (
        "text_layout(Markdown): '# a', spaces to --mib MiB, '#x'",
        lambda mib: _text_layout("markdown", "# a" + " " * (mib * MIB - 6) + "#x\n"),
    ),
    "sniff-atx-close-64k": (
        "detect_format, no hint: '# a', 65,000 spaces, '#x' (what detection reads: 64 KiB)",
        lambda mib: _detect(("# a" + " " * 65_000 + "#x\n").encode(), None),
    ),
    "md-atx-title-of-words": (
        "text_layout(Markdown): '# ' and 'ab ' repeated to --mib MiB",
        lambda mib: _text_layout("markdown", "# " + "ab " * (mib * MIB // 3)),
    ),
    "rst-title-of-words": (
        "text_layout(reST): 'ab ' repeated to --mib MiB, underlined '===='",
        lambda mib: _text_layout("rst", "ab " * (mib * MIB // 3) + "\n====\n"),
    ),
    "html-img-siblings-60k": (
        "extract_html: 60,000 '<img>' siblings, each followed by a line break",
        lambda mib: _html(b"<html><body><p>text " + b"<img>\n" * 60_000 + b"</p></body></html>"),
    ),
    "html-img-siblings-300k": (
        "extract_html: 300,000 '<img>' siblings, each followed by a line break (1.8 MB)",
        lambda mib: _html(b"<html><body><p>text " + b"<img>\n" * 300_000 + b"</p></body></html>"),
    ),
    "pdf-letters-line-40k": (
        "join_lines (PDF clean-up): a line of 40,000 letters and a digit, then another line",
        lambda mib: _pdf_lines(["a" * 40_000 + "1", "next"]),
    ),
    "pdf-letters-line": (
        "join_lines (PDF clean-up): a line of letters to --mib MiB and a digit, then another line",
        lambda mib: _pdf_lines(["a" * (mib * MIB) + "1", "next"]),
    ),
}


def _one_hostile(case: str, mib: int) -> dict[str, Any]:
    """In this (fresh) process: build the input, run its scan once, report its CPU time and how far
    its resident memory rose over what it was just before (the input built)."""
    scan = HOSTILE[case][1](mib)
    _reset_peak()
    rss_before = _status_mib("VmRSS")
    started = time.process_time()
    outcome = scan()
    cpu = time.process_time() - started
    return {
        "cpu_s": round(cpu, 3),
        "rss_before_scan_mib": round(rss_before, 1),
        "peak_growth_mib": round(_status_mib("VmHWM") - rss_before, 1),
        "outcome": outcome,
    }


def _one_screen(folder: Path) -> dict[str, Any]:
    """In this (fresh) process: the PDF screen over every PDF of ``folder`` and over the hostile
    PDFs of the test fixtures: CPU seconds, and each hostile file's outcome."""
    from daemon.document.types import ExtractLimits
    from daemon.errors import DocumentError

    try:
        screen = importlib.import_module("daemon.document.extract.pdf_screen").screen
    except ImportError:  # a tree from before the screen had a module of its own
        screen = importlib.import_module("daemon.document.extract.pdf").screen
    limits = ExtractLimits()

    def outcome(data: bytes) -> str:
        try:
            screen(data, limits)
        except DocumentError as error:
            return error.reason
        return "passed"

    files = sorted(folder.glob("*.pdf"))
    started = time.process_time()
    refused = [path.name for path in files if outcome(path.read_bytes()) != "passed"]
    cpu = time.process_time() - started
    hostile = {}
    for path in sorted(FIXTURE_PDFS.glob("*bomb*.pdf")):
        begun = time.process_time()
        hostile[path.name] = {
            "outcome": outcome(path.read_bytes()),
            "cpu_s": round(time.process_time() - begun, 3),
        }
    return {
        "folder": str(folder),
        "files": len(files),
        "bytes": sum(path.stat().st_size for path in files),
        "cpu_s": round(cpu, 3),
        "refused": refused,
        "hostile": hostile,
    }


def _child(args: list[str], tree: Path, timeout: float | None) -> dict[str, Any]:
    command = [sys.executable, "-m", "bench.markup_scan", "--tree", str(tree), "--one", *args]
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=True, timeout=timeout, cwd=REPO)
    except subprocess.TimeoutExpired:
        return {"timed_out_after_s": timeout}
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def _lines_rows(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    for pattern in LINES:
        for fmt in ("markdown", "rst"):
            row: dict[str, Any] = {
                "input": pattern,
                "format": fmt,
                "lines": args.mib * MIB // len(LINES[pattern]),
            }
            for capped in (False, True):
                one = ["lines", pattern, fmt, str(args.mib), str(int(capped))]
                row["capped" if capped else "uncapped"] = _child(one, args.tree, None)
            row["cpu_ratio"] = round(row["capped"]["cpu_s"] / max(row["uncapped"]["cpu_s"], 1e-3), 3)
            print(json.dumps(row), file=sys.stderr)
            rows.append(row)
    return rows


def _hostile_rows(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    for case in args.only or HOSTILE:
        row = {"case": case, "what": HOSTILE[case][0]}
        row.update(_child(["hostile", case, str(args.mib)], args.tree, args.timeout))
        print(json.dumps(row), file=sys.stderr)
        rows.append(row)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cases", choices=("lines", "hostile", "screen"), default="lines")
    parser.add_argument(
        "--folder", type=Path, default=REPO / "bench" / "data" / "pdf", help="PDFs to screen (screen)"
    )
    parser.add_argument("--only", nargs="*", choices=sorted(HOSTILE), help="hostile cases to run")
    parser.add_argument("--mib", type=int, default=16)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds a hostile case may run")
    parser.add_argument("--tree", type=Path, default=REPO, help="the checkout to import daemon from")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--one", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    # The one deliberate path edit: ``daemon`` from the checkout measured (``bench`` itself was
    # imported from this one already).
    sys.path.insert(0, str(args.tree.resolve()))
    if args.one:
        if args.one[0] == "lines":
            pattern, fmt, mib, capped = args.one[1:]
            print(json.dumps(_one_lines(pattern, fmt, int(mib), capped == "1")))
        elif args.one[0] == "screen":
            print(json.dumps(_one_screen(Path(args.one[1]))))
        else:
            print(json.dumps(_one_hostile(args.one[1], int(args.one[2]))))
        return 0

    if args.cases == "screen":
        rows = [_child(["screen", str(args.folder)], args.tree, None)]
    else:
        rows = _lines_rows(args) if args.cases == "lines" else _hostile_rows(args)
    result = {
        "benchmark": "bench/markup_scan.py",
        "cases": args.cases,
        "tree": str(args.tree),
        "mib": args.mib,
        "max_scan_lines": _heading_scans().MAX_SCAN_LINES,
        "rows": rows,
        "environment": {
            "when": datetime.now(UTC).isoformat(timespec="seconds"),
            "host_cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_average_1m": round(os.getloadavg()[0], 2),
        },
    }
    print(json.dumps(result, indent=2))
    if args.json is not None:
        write_result(args.json, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
