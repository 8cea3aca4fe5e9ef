"""The multi-daemon Kafka benchmark (bench/scale.py), test-sized: two real daemons (real vLLM engine,
tiny model) in one consumer group, a handful of short documents over four partitions.

The bench starts its own broker and daemons and stops them (also on SIGTERM); this test runs it as a
user would, from the command line, and checks its report's structure and invariants, not its speed.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import REPO, Layout, free_port

pytestmark = [pytest.mark.engine, pytest.mark.kafka]

DOCS = 8
PARTITIONS = 4
BENCH_TIMEOUT_S = 540  # under pytest's 600 s; about 3.5 minutes on a 2-core machine at load 19


def _short_docs(corpus: Path, tmp_path: Path) -> Path:
    """The corpus's ``DOCS`` shortest documents (one engine request each) in a folder of their own."""
    folder = tmp_path / "docs"
    folder.mkdir()
    for path in sorted((corpus / "docs").glob("*.txt"), key=lambda p: (p.stat().st_size, p.name))[:DOCS]:
        shutil.copy(path, folder / path.name)
    return folder


def _run_bench(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``python -m bench.scale``; on a timeout, SIGTERM it first, so that it stops the daemons it
    started."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    command = [sys.executable, "-m", "bench.scale", *args]
    with subprocess.Popen(
        command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=BENCH_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGTERM)
            stdout, stderr = proc.communicate(timeout=120)
            pytest.fail(f"bench/scale.py took over {BENCH_TIMEOUT_S} s:\n{stderr[-4000:]}")
    return subprocess.CompletedProcess(command, proc.returncode, stdout, stderr)


def test_two_daemons_scale_bench_report(tmp_path: Path, tiny_model: Path, corpus: Path) -> None:
    layout = Layout(root=tmp_path, model=tiny_model, metrics_port=free_port())
    layout.write_config()  # the tiny model, 32-token summaries; the bench swaps the sources for Kafka
    docs = _short_docs(corpus, tmp_path)
    out = tmp_path / "scale.json"
    done = _run_bench(
        [
            "--workload=corpus",
            f"--docs={docs}",
            f"--config={layout.config}",
            "--pin=none",
            f"--run=ci:daemons=2,keying=round-robin,partitions={PARTITIONS}",
            f"--json={out}",
        ],
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(out.read_text(encoding="utf-8"))
    print(done.stderr.splitlines()[-1])
    (run,) = report["passes"]
    _check_counts(run)
    _check_daemons(run)
    _check_duplicates(run)
    assert all(run["invariants"].values()), run["invariants"]
    assert report["speedup"] == {"ci": 1.0}


def _check_counts(run: dict[str, Any]) -> None:
    """Every document produced has a result; round robin put two on each partition."""
    assert run["docs"] == DOCS
    assert run["missing"] == []
    assert run["dead_letters"] == 0
    assert run["results"] >= DOCS
    assert run["committed_to_end"]
    assert run["docs_per_s"] > 0
    assert run["seconds"] > 0
    assert run["p95_latency_s"] <= run["seconds"] + 0.01
    assert sorted(run["per_partition"]) == [str(p) for p in range(PARTITIONS)]
    assert all(load["docs"] == DOCS // PARTITIONS for load in run["per_partition"].values())


def _check_daemons(run: dict[str, Any]) -> None:
    """Both daemons own partitions (disjoint, together all) and wrote results; shares sum to 1."""
    daemons = run["per_daemon"]
    assert len(daemons) == 2
    assert len({d["name"] for d in daemons}) == 2
    owned = [set(d["partitions"]) for d in daemons]
    assert all(owned), owned
    assert not owned[0] & owned[1], owned
    assert len(owned[0] | owned[1]) == PARTITIONS, owned
    assert all(d["docs"] > 0 for d in daemons), daemons
    assert all(d["cpu_s"] > 0 for d in daemons), daemons
    assert run["cpu_bound_docs_per_s"] > 0
    assert sum(d["docs"] for d in daemons) == run["results"]
    for share in ("doc_share", "token_share", "document_token_share"):
        assert sum(d[share] for d in daemons) == pytest.approx(1.0, abs=0.001), (share, daemons)
    assert run["imbalance"]["max_token_share"] == max(d["token_share"] for d in daemons)


def _check_duplicates(run: dict[str, Any]) -> None:
    """Duplicates only where a rebalance moved the partition (none expected: the group settled first)."""
    duplicates = run["duplicates"]
    assert duplicates["unexplained"] == 0, duplicates
    assert duplicates["extra_results"] == duplicates["rebalance_republications"], duplicates
    assert run["results"] == DOCS + duplicates["extra_results"]
    if duplicates["extra_results"]:
        assert run["rebalances"]["revocations"] > 0, run["rebalances"]
