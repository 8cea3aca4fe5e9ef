"""bench/lib/results.py and bench/results_index.py: a result names its date, machine and experiment,
carries a stamp of commit, machine, date, command and config, and bench/results/INDEX.md is current."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bench import results_index
from bench.lib.results import NAME, RESULTS, machine_tag, result_path, write_result


def test_the_index_is_current_and_every_result_is_named_by_the_scheme() -> None:
    """Run ``python -m bench.results_index`` after adding, renaming or citing a result."""
    assert results_index.main(["--check"]) == 0


def test_a_result_path_names_the_date_machine_experiment_and_label(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BENCH_MACHINE", "h200x2")
    path = result_path("compare", "Mixed FP8 seed_7", when=datetime(2026, 12, 6, tzinfo=UTC))
    assert path == RESULTS / "2026-12-06_h200x2_compare_mixed-fp8-seed-7.json"
    match = NAME.match(path.stem)
    assert match is not None
    assert (match["date"], match["machine"], match["experiment"], match["label"]) == (
        "2026-12-06",
        "h200x2",
        "compare",
        "mixed-fp8-seed-7",
    )
    assert result_path("admission_sim").name.split("_", 2)[2] == "admission-sim.json"


def test_names_off_the_scheme_are_refused() -> None:
    for stem in ("cpu_corpus", "gpu_h200_mixed_seed7", "2026-12-06_compare", "2026-12-06_cpu2_Compare"):
        assert NAME.match(stem) is None


def test_the_machine_tag_counts_cores_without_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BENCH_MACHINE", raising=False)
    monkeypatch.setattr("bench.lib.results._gpu_names", lambda: [])
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    assert machine_tag() == "cpu2"
    monkeypatch.setattr("bench.lib.results._gpu_names", lambda: ["NVIDIA H200", "NVIDIA H200"])
    assert machine_tag() == "h200x2"


def test_a_written_result_is_stamped(tmp_path: Path) -> None:
    config = tmp_path / "run.toml"
    config.write_text('[engine]\nmodel = "tiny"\n', encoding="utf-8")
    target = tmp_path / "out" / "result.json"
    write_result(target, {"docs_per_s": 1.5}, config=config)
    data = json.loads(target.read_text(encoding="utf-8"))
    assert data["docs_per_s"] == 1.5
    stamp = data["stamp"]
    assert len(stamp["commit"]) == 40
    assert isinstance(stamp["dirty"], bool)
    assert datetime.fromisoformat(stamp["date"]).tzinfo is not None
    assert stamp["machine"]["tag"] == machine_tag()
    assert stamp["machine"]["cpus"] >= 1
    assert stamp["config"]["text"] == '[engine]\nmodel = "tiny"\n'
    assert len(stamp["config"]["sha256"]) == 64
    assert stamp["command"].startswith("python -m ")
    assert not list(target.parent.glob("*.tmp"))


def test_the_index_links_a_citing_section_by_its_fixed_anchor() -> None:
    text = (
        '<a id="gpu-fp8"></a>\n\n### GPU: FP8 weights\n\nsee `2026-12-03_h200_compare_corpus-fp8.json`\n'
        "### Without an anchor\n\n`2026-12-03_h200_compare_corpus-fp8.json` again\n"
    )
    assert results_index.citations(text)["2026-12-03_h200_compare_corpus-fp8"] == [
        ("GPU: FP8 weights", "gpu-fp8"),
        ("Without an anchor", "without-an-anchor"),
    ]


def test_the_recording_engine_is_what_the_service_sees_of_the_engine() -> None:
    """The service asks its engine for more than ``EngineClient`` (the KV block size, to pad shared
    prefixes): the wrapper must answer every protocol the real engine does, or a benchmark through
    it measures another path than the daemon's."""
    from bench.lib.engine import RecordingEngine
    from daemon.contracts import CachingEngine, EngineClient

    for protocol in (EngineClient, CachingEngine):
        members = {name for name in vars(protocol) if not name.startswith("_")}
        assert members
        assert members <= set(dir(RecordingEngine)), protocol.__name__
