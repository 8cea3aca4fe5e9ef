"""bench/compare.py's speculative-decoding figures (issue 24 item 4): the acceptance counters' arithmetic,
the summaries two passes wrote alike, and the pair of GPU configs measured against each other."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.lib.counters import spec_decoding_stats
from bench.lib.daemon_pass import DaemonRun, same_summaries
from daemon.config import EngineConfig, load_config

CONFIGS = Path(__file__).resolve().parents[2] / "bench" / "configs"


def test_a_pass_gets_the_counters_difference_and_its_rates() -> None:
    before = {"drafts": 10.0, "draft_tokens": 40.0, "accepted_tokens": 12.0, "accepted_pos_0": 8.0}
    before |= {"accepted_pos_1": 4.0}
    after = {"drafts": 110.0, "draft_tokens": 440.0, "accepted_tokens": 162.0, "accepted_pos_0": 88.0}
    after |= {"accepted_pos_1": 74.0}
    stats = spec_decoding_stats(before, after)
    assert stats == {
        "drafts": 100,
        "draft_tokens": 400,
        "accepted_tokens": 150,
        "acceptance_rate": 0.375,
        "mean_accepted_length": 2.5,  # the target model's own token, plus 1.5 accepted per draft
        "accepted_per_position": [0.8, 0.7],
    }


def test_no_counters_means_no_speculation_and_no_drafts_means_no_rates() -> None:
    assert spec_decoding_stats({}, {}) is None
    idle = spec_decoding_stats({"drafts": 5.0}, {"drafts": 5.0, "draft_tokens": 0.0, "accepted_tokens": 0.0})
    assert idle is not None
    assert (idle["drafts"], idle["acceptance_rate"], idle["mean_accepted_length"]) == (0, None, None)
    assert idle["accepted_per_position"] == []


def test_counters_that_restarted_count_from_zero() -> None:
    """A new engine registers vLLM's counters anew: a reading below the one before is all this pass's."""
    stats = spec_decoding_stats(
        {"drafts": 500.0, "draft_tokens": 2000.0, "accepted_tokens": 900.0},
        {"drafts": 20.0, "draft_tokens": 80.0, "accepted_tokens": 40.0},
    )
    assert stats is not None
    assert (stats["drafts"], stats["acceptance_rate"]) == (20, 0.5)


def test_same_summaries_counts_the_documents_both_passes_wrote_alike() -> None:
    first, second = DaemonRun(label="baseline"), DaemonRun(label="admission")
    first.results = {"a": {"summary": "x"}, "b": {"summary": "y"}, "c": {"summary": "z"}}
    second.results = {"a": {"summary": "x"}, "b": {"summary": "y!"}, "d": {"summary": "w"}}
    assert same_summaries(first, second) == {"compared": 2, "identical": 1}


@pytest.mark.parametrize("name", ["h200-smollm2.toml", "h200-smollm2-ngram.toml"])
def test_the_speculation_pair_is_greedy(name: str) -> None:
    """Greedy decoding: a pass with speculation writes what the pass without it writes, so both do
    the same work and their throughputs compare."""
    assert load_config(CONFIGS / name).summary.temperature == 0.0


def test_the_speculation_pair_differs_only_in_speculation() -> None:
    off, on = (load_config(CONFIGS / name) for name in ("h200-smollm2.toml", "h200-smollm2-ngram.toml"))
    fields = EngineConfig.model_fields
    differing = {name for name in fields if getattr(off.engine, name) != getattr(on.engine, name)}
    assert differing == {"speculative"}
    assert off.summary == on.summary
    assert on.engine.speculative is not None
    assert on.engine.speculative.method == "ngram"
