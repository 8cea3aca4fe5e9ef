"""Measure the demo's sample run: engine start time, documents per second, peak memory.

Runs ``docsumd run`` (the real service, real vLLM engine) on a copy of the given documents in a
fresh folder, samples the RSS of the daemon's whole process tree (front end, EngineCore, worker)
every 0.2 s, waits until every input is acknowledged, stops it with SIGTERM, and prints and writes
a JSON object. Figures come from the daemon's own logs and files, not from timers in this script
around things it cannot see.

    .venv/bin/python -m bench.sample_run [--docs DIR] [--config FILE] [--json FILE]

This is a measurement of one configuration, not a comparison: the throughput comparison against
raw vLLM is a separate benchmark.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import psutil

from bench.lib import REPO
from bench.lib.results import result_path, write_result


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--docs", type=Path, default=REPO / "daemon" / "samples", help="folder of .txt files")
    parser.add_argument(
        "--config", type=Path, default=REPO / "docsumd.toml", help="config to take the engine from"
    )
    parser.add_argument("--json", type=Path, default=result_path("sample-run"))
    parser.add_argument("--log", type=Path, default=None, help="keep a copy of the daemon's log here")
    args = parser.parse_args()

    docs = sorted(args.docs.glob("*.txt"))
    if not docs:
        parser.error(f"no .txt files in {args.docs}")
    work = Path(tempfile.mkdtemp(prefix="docsumd-bench-"))
    config = _config_for(args.config, work)
    for doc in docs:
        shutil.copy(doc, work / "inbox" / doc.name)

    env = {**os.environ, "TMPDIR": str(work), "PYTHONUNBUFFERED": "1", "DOCSUMD_LOGGING__FORMAT": "json"}
    log_path = work / "daemon.log"
    started = time.monotonic()
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "daemon", "run", "--config", str(config)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    peak_rss = 0
    try:
        while len(list((work / "done").glob("*"))) + len(list((work / "failed").glob("*.txt"))) < len(docs):
            if proc.poll() is not None:
                raise SystemExit(f"daemon exited with {proc.returncode}; see {log_path}")
            peak_rss = max(peak_rss, _tree_rss(proc.pid))
            if time.monotonic() - started > 1800:
                raise SystemExit("gave up after 30 minutes")
            time.sleep(0.2)
        peak_rss = max(peak_rss, _tree_rss(proc.pid))
        proc.send_signal(signal.SIGTERM)
        exit_code = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        if args.log is not None:
            shutil.copy(log_path, args.log)

    events = [json.loads(line) for line in log_path.read_text().splitlines() if line.startswith("{")]
    results = [json.loads(p.read_text()) for p in sorted((work / "outbox").glob("*.summary.json"))]
    report = _report(events, results, len(docs), peak_rss, exit_code)
    report["docs_dir"] = str(args.docs)
    print(json.dumps(report, indent=2))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    write_result(args.json, report)
    shutil.rmtree(work, ignore_errors=True)
    return 0


def _config_for(base: Path, work: Path) -> Path:
    """The base config with its folders moved under ``work`` (model path kept absolute)."""
    import tomllib

    raw = tomllib.loads(base.read_text())
    model = Path(raw["engine"]["model"])
    if not model.is_absolute():
        model = (base.parent / model).resolve()
    lines = [f"[engine]\nmodel = {json.dumps(str(model))}"]
    lines += [f"{k} = {json.dumps(v)}" for k, v in raw["engine"].items() if k != "model"]
    lines += ["[summary]"] + [f"{k} = {json.dumps(v)}" for k, v in raw.get("summary", {}).items()]
    lines += ["[sources.folder]"]
    for name in ("inbox", "outbox", "done", "failed"):
        (work / name).mkdir()
        lines.append(f"{name} = {json.dumps(str(work / name))}")
    lines += ["[metrics]", "enabled = false"]
    path = work / "docsumd.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def _tree_rss(pid: int) -> int:
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for proc in procs:
        try:
            total += proc.memory_info().rss
        except psutil.NoSuchProcess:
            continue
    return total


def _timestamp(event: dict[str, Any]) -> float:
    return datetime.fromisoformat(event["timestamp"].replace("Z", "+00:00")).timestamp()


def _report(
    events: list[dict[str, Any]], results: list[dict[str, Any]], docs: int, peak_rss: int, exit_code: int
) -> dict[str, Any]:
    ready = next(e for e in events if e.get("event") == "docsumd ready")
    engine = next(e for e in events if e.get("event") == "engine ready")
    finished = [e for e in events if e.get("event") in {"document summarized", "document failed"}]
    last = max(_timestamp(e) for e in finished)
    busy_s = last - _timestamp(ready)
    return {
        "docs": docs,
        "summarized": len(results),
        "failed": docs - len(results),
        "engine_start_s": engine["start_s"],
        "processing_s": round(busy_s, 3),
        "docs_per_s": round(docs / busy_s, 3),
        "truncated": sum(1 for r in results if r["truncated"]),
        "prompt_tokens": sum(r["prompt_tokens"] for r in results),
        "summary_tokens": sum(r["summary_tokens"] for r in results),
        "prompt_tokens_per_s": round(sum(r["prompt_tokens"] for r in results) / busy_s, 1),
        "p50_latency_s": _percentile([r["timings"]["total_s"] for r in results], 0.5),
        "p95_latency_s": _percentile([r["timings"]["total_s"] for r in results], 0.95),
        "peak_rss_mib": round(peak_rss / 2**20, 1),
        "exit_code_after_sigterm": exit_code,
        "cpu_count": os.cpu_count(),
    }


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


if __name__ == "__main__":
    raise SystemExit(main())
