"""What the grounding check and the evidence cost per document, against what the engine costs.

For each corpus document (``/work/shared/corpus/docs/*.txt``) the CPU time (``time.thread_time``, so
that other processes on a shared machine count less) of the three steps the service runs for each
result (:mod:`daemon.summary.checking`): the source's index (:meth:`SourceIndex.of`, built while the
engine works), then the check and the evidence of a summary (:func:`check_result`) against the
document's passages. The summaries are the demo model's (``--quality``: a ``bench/quality.py`` JSON,
which also gives each one's engine seconds on this CPU) or, for documents it lacks, the document's
first 1,200 characters. Then hostile shapes at ``--hostile-mib``: a source dense with numbers, dates,
sections and names, and summaries of many numbers, many capitalised words and many sentences.

    .venv/bin/python -m bench.grounding_cost \\
        --quality bench/results/2026-12-05_cpu2_quality_smollm2-2048-issue40.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from bench.lib.results import result_path, write_result
from daemon.document.types import NO_LAYOUT
from daemon.summary.checking import check_result, passages
from daemon.summary.grounding import SourceIndex

T = TypeVar("T")
CORPUS = Path("/work/shared/corpus/docs")


def cpu(function: Callable[[], T], repeats: int = 3) -> tuple[T, float]:
    """``function``'s result and its least CPU time over ``repeats`` calls (seconds)."""
    best = float("inf")
    result: Any = None
    for _ in range(repeats):
        started = time.thread_time()
        result = function()
        best = min(best, time.thread_time() - started)
    return result, best


def demo_summaries(path: Path | None) -> dict[str, tuple[str, float]]:
    """Document id -> (summary, engine seconds) of the first run of a quality JSON that has it."""
    if path is None:
        return {}
    found: dict[str, tuple[str, float]] = {}
    for run in json.loads(path.read_text(encoding="utf-8"))["runs"]:
        for document in run.get("documents", []):
            if document.get("summary") and document["id"] not in found:
                found[document["id"]] = (document["summary"], float(document.get("engine_s") or 0.0))
    return found


def measure(text: str, summary: str, repeats: int) -> dict[str, Any]:
    index, index_s = cpu(lambda: SourceIndex.of(text), repeats)
    parts = passages(text, NO_LAYOUT, [(0, len(text))])
    result, check_s = cpu(lambda: check_result(summary, None, index, parts), repeats)
    return {
        "chars": len(text),
        "summary_chars": len(summary),
        "parts": len(parts),
        "items": len(result.checks.items),
        "unsupported": result.unsupported,
        "index_cpu_s": round(index_s, 4),
        "check_cpu_s": round(check_s, 4),
    }


def hostile(mib: float, repeats: int) -> dict[str, Any]:
    """The worst shapes found: a source that is all items, and summaries that are."""
    line = "On 1 March 2024 Acme Holdings paid $1,250 (12.5%) for 30 days under Section 4.2(b) of the GPL. "
    source = line * int(mib * (1 << 20) / len(line))
    shapes = {
        "numbers": " ".join(str(n) for n in range(20_000)),
        "capitalised": " ".join(f"Zeta{n} Omega{n}" for n in range(10_000)),
        "sentences": " ".join(f"Clause {n} applies." for n in range(10_000)),
    }
    index, index_s = cpu(lambda: SourceIndex.of(source), 1)
    parts = passages(source, NO_LAYOUT, [(0, len(source))])
    out: dict[str, Any] = {"source_chars": len(source), "parts": len(parts), "index_cpu_s": round(index_s, 3)}
    for name, summary in shapes.items():
        result, seconds = cpu(lambda s=summary: check_result(s, None, index, parts), repeats)  # type: ignore[misc]
        out[f"summary_{name}"] = {
            "summary_chars": len(summary),
            "items_checked": len(result.checks.items),
            "unchecked": result.checks.unchecked,
            "check_cpu_s": round(seconds, 3),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--quality", type=Path, default=None)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--hostile-mib", type=float, default=2.0)
    parser.add_argument(
        "--json", type=Path, default=None, help="default: bench/results/DATE_MACHINE_grounding-cost.json"
    )
    args = parser.parse_args()

    demo = demo_summaries(args.quality)
    rows = []
    for path in sorted(args.corpus.glob("*.txt")):
        text = path.read_text(encoding="utf-8", errors="replace")
        summary, engine_s = demo.get(path.name, (text[:1200], 0.0))
        row = {
            "id": path.stem,
            "summary": "demo" if path.name in demo else "opening",
            **measure(text, summary, args.repeats),
        }
        if engine_s:
            row["engine_s"] = round(engine_s, 2)
        rows.append(row)
        print(row, flush=True)
    total_chars = sum(row["chars"] for row in rows)
    index_s = sum(row["index_cpu_s"] for row in rows)
    check_s = sum(row["check_cpu_s"] for row in rows)
    demo_rows = [row for row in rows if "engine_s" in row]
    aggregate = {
        "documents": len(rows),
        "chars": total_chars,
        "index_cpu_s_per_mb": round(index_s / (total_chars / 1e6), 3),
        "index_cpu_s_median": statistics.median(row["index_cpu_s"] for row in rows),
        "check_cpu_s_median": statistics.median(row["check_cpu_s"] for row in rows),
        "check_and_index_cpu_s_per_document": round((index_s + check_s) / len(rows), 4),
        "demo_documents": len(demo_rows),
        "demo_share_of_engine_s": round(
            sum(row["index_cpu_s"] + row["check_cpu_s"] for row in demo_rows)
            / max(1e-9, sum(row["engine_s"] for row in demo_rows)),
            5,
        ),
    }
    print(aggregate, flush=True)
    worst = hostile(args.hostile_mib, 1)
    print(worst, flush=True)
    write_result(
        args.json or result_path("grounding_cost"),
        {
            "benchmark": "grounding_cost",
            "host": {"cpus": os.cpu_count(), "load": os.getloadavg()},
            "aggregate": aggregate,
            "documents": rows,
            "hostile": worst,
        },
    )


if __name__ == "__main__":
    main()
