"""The benchmarks' daemon passes: what they change in the config they are given."""

from __future__ import annotations

from bench.lib.daemon_pass import without_summary_cache
from daemon.config import Config, EngineConfig


def test_without_summary_cache_turns_off_the_cache_alone() -> None:
    config = Config(engine=EngineConfig(model="some-model"))
    assert config.cache.enabled  # on by default: a benchmark's repeated texts would hit it

    off = without_summary_cache(config)

    assert not off.cache.enabled
    assert off.cache.model_copy(update={"enabled": True}) == config.cache
    assert off.model_copy(update={"cache": config.cache}) == config
