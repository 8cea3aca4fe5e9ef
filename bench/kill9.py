"""``kill -9`` of the daemon's main process, repeated at every moment: is every process it started gone,
and how soon?

Each round starts the real daemon (real vLLM engine, the tiny model, the real extraction workers),
brings it to a moment (:data:`tests.e2e.kill9.MOMENTS`: idle, engine start, extraction, map-reduce,
both, draining after SIGTERM), reads its whole process tree, kills the main process with SIGKILL and
watches every process until it is gone (:func:`tests.e2e.kill9.kill_9`). Rounds cycle through the
moments. Written as JSON: per round, each process's name and the seconds until it was gone, and
what was left after ``--deadline`` seconds (then killed).

    .venv/bin/python -m bench.kill9 [--rounds 12] [--moments idle,start,...] [--json FILE]
        [--code DIR]

``--code DIR`` runs the daemon from another checkout's package (e.g. an older commit exported with
``git archive COMMIT daemon | tar -x -C DIR``), for a before/after comparison on the same machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.lib.results import write_result
from daemon.models.tiny import build_tiny_model
from tests.e2e.harness import DaemonProcess, Layout, free_port
from tests.e2e.kill9 import MOMENTS, Kill9, kill_9, reach


def one_round(root: Path, model: Path, moment: str, deadline: float, code: Path | None) -> Kill9:
    """One daemon, brought to ``moment`` and killed."""
    layout = Layout(root=root, model=model, metrics_port=free_port())
    layout.write_config(**{"summary.max_summary_tokens": "128"})
    daemon = DaemonProcess(layout, root / "daemon.log")
    daemon.start({"PYTHONPATH": str(code)} if code is not None else None)
    try:
        busy = reach(daemon, moment)
        return kill_9(daemon, moment, busy, deadline_s=deadline)
    finally:
        if daemon.proc is not None and daemon.proc.poll() is None:
            daemon.kill_group()
        shutil.rmtree(daemon.tmpdir, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--moments", default=",".join(MOMENTS))
    parser.add_argument("--deadline", type=float, default=60.0, help="seconds to wait for every process")
    parser.add_argument("--code", type=Path, default=None, help="run the daemon package from this folder")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    moments = args.moments.split(",")
    rounds: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="docsumd-kill9-") as scratch:
        model = build_tiny_model(Path(scratch) / "model")
        for index in range(args.rounds):
            moment = moments[index % len(moments)]
            root = Path(scratch) / f"round-{index}"
            root.mkdir()
            started = time.monotonic()
            try:
                outcome = one_round(root, model, moment, args.deadline, args.code)
            except AssertionError as exc:  # the moment was not reached (the daemon's log says why)
                print(f"round {index} ({moment}): not reached: {exc}", flush=True)
                rounds.append({"moment": moment, "error": str(exc)[:2000]})
                continue
            result = outcome.as_json()
            result["round_s"] = round(time.monotonic() - started, 1)
            rounds.append(result)
            print(
                f"round {index} ({moment}): {len(outcome.processes)} processes, slowest gone after "
                f"{outcome.slowest_s:.2f} s, left {outcome.left or 'none'}, busy {outcome.busy}",
                flush=True,
            )
    killed = [r for r in rounds if "error" not in r]
    slowest = [r["slowest_s"] for r in killed]
    summary = {
        "rounds": len(rounds),
        "killed": len(killed),
        "with_processes_left": sum(1 for r in killed if r["left"]),
        "slowest_s": {
            "min": min(slowest, default=None),
            "median": statistics.median(slowest) if slowest else None,
            "max": max(slowest, default=None),
        },
    }
    print(json.dumps(summary), flush=True)
    if args.json is not None:
        write_result(
            args.json,
            {
                "bench": "kill9",
                "date": datetime.now(UTC).isoformat(timespec="seconds"),
                "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
                "code": str(args.code) if args.code is not None else "this checkout",
                "deadline_s": args.deadline,
                "summary": summary,
                "rounds": rounds,
            },
            indent=1,
        )
    return 1 if summary["with_processes_left"] else 0


if __name__ == "__main__":
    sys.exit(main())
