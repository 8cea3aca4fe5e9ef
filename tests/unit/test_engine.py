"""The engine wrapper's checks that need no engine: a missing model is a configuration error."""

from __future__ import annotations

from pathlib import Path

import pytest

from daemon.config import EngineConfig
from daemon.engine import Engine, engine_args
from daemon.errors import ConfigError, EngineDeadError


async def test_missing_model_folder_is_a_config_error(tmp_path: Path) -> None:
    engine = Engine(EngineConfig(model=str(tmp_path / "no-such-model")))
    with pytest.raises(ConfigError, match="does not exist"):
        await engine.start()
    assert not engine.is_running


async def test_stopped_engine_cannot_start_again(tmp_path: Path) -> None:
    engine = Engine(EngineConfig(model=str(tmp_path)))
    engine._stopped = True
    with pytest.raises(EngineDeadError, match="stopped"):
        await engine.start()


def test_engine_args_carry_the_config() -> None:
    config = EngineConfig(
        model="/m",
        max_model_len=8192,
        max_num_seqs=7,
        max_num_batched_tokens=2048,
        kv_cache_memory_bytes=1 << 30,
    )
    args = engine_args(config)
    assert (args.max_model_len, args.max_num_seqs, args.max_num_batched_tokens) == (8192, 7, 2048)
    assert args.enable_prefix_caching is True
    assert args.enable_chunked_prefill is True
    assert args.kv_cache_memory_bytes == 1 << 30
    assert args.served_model_name == "m"
