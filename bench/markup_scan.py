"""The Markdown / reST heading scan on hostile text: what it costs the daemon's own process.

Markdown and reST inputs are not extracted in a worker: :func:`daemon.document.extract.text_layout`
finds their headings in the daemon's process (a thread of it). This measures that scan on inputs at
``limits.max_input_bytes`` (16 MiB) made of very short lines, the scan's worst case (its cost is per
line), with the line cap (:data:`~daemon.document.extract.markup.MAX_SCAN_LINES`) and without it
(``max_lines=None``, as before the cap): CPU seconds and the peak RSS of a fresh process doing only
that, and the headings found. The ratio is capped over uncapped, in the same run.

    .venv/bin/python bench/markup_scan.py [--mib 16] [--json bench/results/cpu_markup_scan.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

REPO: Final = Path(__file__).resolve().parents[1]
LINES: Final = {"a-lines": "a\n", "dash-lines": "-\n"}


def _one(pattern: str, fmt: str, mib: int, capped: bool) -> dict[str, Any]:
    """In this (fresh) process: build the text, scan it once, report CPU time and peak RSS."""
    sys.path.insert(0, str(REPO))
    from daemon.document.extract import markup
    from daemon.document.layout import Format

    line = LINES[pattern]
    text = line * (mib * 2**20 // len(line))
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
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
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "rss_before_scan_mib": round(rss_before / 1024, 1),
        "headings": len(headings),
        "layout_headings": None if layout is None else len(layout.headings),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mib", type=int, default=16)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument(
        "--one", nargs=4, metavar=("PATTERN", "FORMAT", "MIB", "CAPPED"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.one:
        pattern, fmt, mib, capped = args.one
        print(json.dumps(_one(pattern, fmt, int(mib), capped == "1")))
        return 0
    sys.path.insert(0, str(REPO))
    from daemon.document.extract.markup import MAX_SCAN_LINES

    rows = []
    for pattern in LINES:
        for fmt in ("markdown", "rst"):
            row: dict[str, Any] = {
                "input": pattern,
                "format": fmt,
                "lines": args.mib * 2**20 // len(LINES[pattern]),
            }
            for capped in (False, True):
                command = [sys.executable, __file__, "--one", pattern, fmt, str(args.mib), str(int(capped))]
                done = subprocess.run(command, capture_output=True, text=True, check=True)
                row["capped" if capped else "uncapped"] = json.loads(done.stdout)
            row["cpu_ratio"] = round(row["capped"]["cpu_s"] / max(row["uncapped"]["cpu_s"], 1e-3), 3)
            print(json.dumps(row), file=sys.stderr)
            rows.append(row)
    result = {
        "benchmark": "bench/markup_scan.py",
        "mib": args.mib,
        "max_scan_lines": MAX_SCAN_LINES,
        "rows": rows,
        "environment": {
            "when": datetime.now(UTC).isoformat(timespec="seconds"),
            "host_cpus": os.cpu_count(),
            "python": platform.python_version(),
        },
    }
    print(json.dumps(result, indent=2))
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
