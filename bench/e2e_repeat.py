"""End-to-end tests run several times in a row: passes, failures and durations per test.

A flaky test makes landings a lottery, so the tests that restart or kill things (the Kafka tests, the
``kill -9`` test) are run N times in sequence, each run a fresh pytest session (its own test broker),
and counted per test id from pytest's JUnit XML. Durations are each test's call plus set-up and
tear-down as pytest reports them (the session's engine-free fixtures included once per file).

    .venv/bin/python -m bench.e2e_repeat --runs 3 [--nice 10] [--json FILE] -- tests/e2e/test_x.py ...
    .venv/bin/python -m bench.e2e_repeat --junit run1.xml run2.xml ... [--json FILE]

The second form counts runs already made (``pytest --junitxml=FILE``).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.lib import REPO
from bench.lib.results import write_result


def outcomes(junit: Path) -> dict[str, tuple[str, float]]:
    """Test id -> (outcome, seconds) from one JUnit XML file: passed, failed, error or skipped."""
    found: dict[str, tuple[str, float]] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        test_id = f"{case.get('classname', '')}::{case.get('name', '')}"
        seconds = float(case.get("time", "0"))
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed"}.get(child.tag, child.tag)
        found[test_id] = (outcome, seconds)
    return found


def run_once(files: list[str], junit: Path, niceness: int) -> tuple[int, float]:
    """One pytest session over ``files``; returns its exit status and wall seconds."""
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-q"]
    command += [f"--junitxml={junit}", *files]
    if niceness:
        command = ["nice", "-n", str(niceness), *command]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    started = time.monotonic()
    done = subprocess.run(command, cwd=REPO, env=env, check=False)
    return done.returncode, time.monotonic() - started


def summarize(runs: list[dict[str, tuple[str, float]]]) -> dict[str, dict[str, Any]]:
    """Per test id: how many runs it passed, failed (or errored), was skipped, and its durations."""
    tests: dict[str, dict[str, Any]] = {}
    for run in runs:
        for test_id, (outcome, seconds) in run.items():
            entry = tests.setdefault(test_id, {"passed": 0, "failed": 0, "skipped": 0, "seconds": []})
            entry["skipped" if outcome == "skipped" else "passed" if outcome == "passed" else "failed"] += 1
            entry["seconds"].append(round(seconds, 1))
    for entry in tests.values():
        entry["median_s"] = round(statistics.median(entry["seconds"]), 1)
    return tests


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--nice", type=int, default=10, help="niceness of the pytest runs")
    parser.add_argument("--junit", type=Path, nargs="+", default=None, help="count these runs instead")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("files", nargs="*", help="test files or ids (after --)")
    args = parser.parse_args()
    sessions: list[dict[str, Any]] = []
    runs: list[dict[str, tuple[str, float]]] = []
    if args.junit:
        runs = [outcomes(path) for path in args.junit]
    else:
        if not args.files:
            parser.error("name the test files to run (after --), or give --junit")
        with tempfile.TemporaryDirectory(prefix="docsumd-e2e-repeat-") as scratch:
            for index in range(args.runs):
                junit = Path(scratch) / f"run-{index}.xml"
                status, seconds = run_once(args.files, junit, args.nice)
                sessions.append({"run": index + 1, "exit_status": status, "wall_s": round(seconds, 1)})
                runs.append(outcomes(junit) if junit.exists() else {})
                print(f"run {index + 1}: exit {status} after {seconds:.0f} s", flush=True)
    tests = summarize(runs)
    failed = sorted(test_id for test_id, entry in tests.items() if entry["failed"])
    for test_id, entry in sorted(tests.items()):
        print(f"{entry['passed']}/{len(runs)} passed, median {entry['median_s']:6.1f} s  {test_id}")
    if args.json is not None:
        report = {
            "bench": "e2e_repeat",
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
            "files": args.files or [str(path) for path in args.junit],
            "runs": len(runs),
            "sessions": sessions,
            "tests": tests,
            "failed": failed,
        }
        write_result(args.json, report, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
