"""The engine wrapper's checks that need no engine: a missing model is a configuration error; the
engine's processes leave SIGINT to the main process; a deliberate stop logs no error; vLLM's sampling
settings carry every field of a request's sampling."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from daemon.config import EngineConfig
from daemon.contracts import Sampling
from daemon.engine.vllm_engine import (
    Engine,
    _deliberate_shutdown_logged_as_info,
    engine_args,
    sampling_params,
)
from daemon.errors import ConfigError, EngineDeadError
from tests.doubles.engine import FakeAsyncLLM


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


def test_engine_args_carry_the_config(tmp_path: Path) -> None:
    # An existing folder: with huggingface_hub in offline mode (which the CLI turns on, and which
    # sticks once another test in this process imported it so), vLLM resolves a model path that does
    # not exist as a hub id and refuses "/m".
    model = tmp_path / "m"
    model.mkdir()
    config = EngineConfig(
        model=str(model),
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


# -- signals and a deliberate stop -----------------------------------------------------------------


# A fresh interpreter, as the daemon is: multiprocessing's resource tracker is not running yet, and
# vLLM starts its engine with multiprocessing's spawn (which starts the tracker on first use).
_SPAWN_CHILD = """
import json, multiprocessing, signal, threading
from daemon.engine.vllm_engine import _sigint_blocked_in_new_processes

def blocked(status):
    mask = int(next(l for l in status.splitlines() if l.startswith("SigBlk:")).split()[1], 16)
    return [n for n in range(1, 65) if mask & (1 << (n - 1))]

def child(queue):
    queue.put(blocked(open("/proc/self/status").read()))

seen = {}
def build():
    context = multiprocessing.get_context("spawn")
    with _sigint_blocked_in_new_processes():
        queue = context.Queue()  # its lock is the first thing that needs the resource tracker
        process = context.Process(target=child, args=(queue,))
        process.start()
        seen["child"] = queue.get(timeout=60)
        process.join()
    seen["after"] = sorted(signal.pthread_sigmask(signal.SIG_BLOCK, set()))

if __name__ == "__main__":
    thread = threading.Thread(target=build)
    thread.start()
    thread.join()
    print(json.dumps(seen))
"""


def test_processes_started_while_building_the_engine_leave_sigint_to_the_main_process(tmp_path: Path) -> None:
    script = tmp_path / "spawn_child.py"
    script.write_text(_SPAWN_CHILD, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    out = subprocess.run(
        [sys.executable, str(script)], check=False, capture_output=True, text=True, env=env, timeout=120
    )
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert signal.SIGINT in seen["child"]
    assert signal.SIGTERM not in seen["child"]  # vLLM's own shutdown is SIGTERM: it must get through
    assert signal.SIGINT not in seen["after"]  # the building thread's mask is restored


def _log_output_handler_failure() -> None:
    vllm_logger = logging.getLogger("vllm.v1.engine.async_llm")
    try:
        raise RuntimeError("EngineCore exited")  # what vLLM's EngineDeadError says, in short
    except RuntimeError:
        vllm_logger.exception("AsyncLLM output_handler failed.")


def test_output_handler_failure_is_info_only_during_a_deliberate_stop(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # vLLM's own logging setup, once it has run in this process, stops its records at the "vllm"
    # logger; the daemon's configure_logging lets them through to the root (where caplog listens).
    monkeypatch.setattr(logging.getLogger("vllm"), "propagate", True)
    vllm_logger = logging.getLogger("vllm.v1.engine.async_llm")
    caplog.set_level(logging.DEBUG, logger=vllm_logger.name)
    with _deliberate_shutdown_logged_as_info():
        _log_output_handler_failure()
        vllm_logger.error("some other vLLM error")  # only that one record is downgraded
    _log_output_handler_failure()  # a real death, outside a stop
    during, other, real = [record for record in caplog.records if record.name == vllm_logger.name]
    assert (during.levelno, during.exc_info) == (logging.INFO, None)
    assert "deliberate stop" in during.getMessage()
    assert "EngineCore exited" in during.getMessage()
    assert other.levelno == logging.ERROR
    assert real.levelno == logging.ERROR
    assert real.exc_info is not None


async def test_stop_cancels_the_output_handler_before_shutting_the_engine_down(tmp_path: Path) -> None:
    engine = Engine(EngineConfig(model=str(tmp_path)))
    llm = FakeAsyncLLM()
    await asyncio.sleep(0)
    engine._llm = llm
    await engine.stop()
    await engine.stop()  # idempotent
    assert llm.events == ["output handler cancelled", "shutdown"]
    assert not engine.is_running


def test_request_priorities_reach_vllm_only_where_it_schedules_by_priority(tmp_path: Path) -> None:
    # Some vLLM versions refuse a request's priority under first-come-first-served scheduling.
    assert Engine(EngineConfig(model=str(tmp_path)))._by_priority is False
    by_priority = EngineConfig(model=str(tmp_path), extra={"scheduling_policy": "priority"})
    assert Engine(by_priority)._by_priority is True


def test_vllms_sampling_settings_carry_every_sampling_field() -> None:
    from vllm.sampling_params import RequestOutputKind

    sampling = Sampling(
        max_tokens=32,
        temperature=0.7,
        top_p=0.8,
        repetition_penalty=1.2,
        seed=5,
        presence_penalty=0.1,
        frequency_penalty=0.2,
        stop=("END",),
    )
    params = sampling_params(sampling)
    assert (params.max_tokens, params.temperature, params.top_p, params.seed) == (32, 0.7, 0.8, 5)
    assert (params.repetition_penalty, params.presence_penalty, params.frequency_penalty) == (1.2, 0.1, 0.2)
    assert params.stop == ["END"]
    assert params.output_kind == RequestOutputKind.DELTA
    assert params.structured_outputs is None
    schema = sampling_params(
        Sampling(max_tokens=8, temperature=0.0, top_p=1.0, repetition_penalty=1.0, json_schema="{}")
    )
    assert schema.structured_outputs is not None
    assert (schema.structured_outputs.json, schema.stop, schema.seed) == ("{}", [], None)
