"""The engine wrapper and the fatal path, with the real vLLM engine.

* a cancelled document aborts its vLLM request (nothing keeps running in the engine);
* requests vLLM's own admission refuses (``max_num_queued_reqs``: a real ``QueueOverflowError``, a
  503-type error raised in-process) are sent again until they run, never failed (same engine start);
* an engine that dies makes the daemon exit non-zero, leaving unfinished inputs unacknowledged.
"""

from __future__ import annotations

import asyncio
import os
import signal
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from daemon.config import EngineConfig, SummaryConfig
from daemon.engine.vllm_engine import Engine
from daemon.errors import EngineDeadError
from daemon.ops.metrics import ENGINE_REJECTIONS
from daemon.summary.profiles import summary_sampling
from tests.e2e.harness import DaemonProcess, Layout, drop_file, wait_for

pytestmark = pytest.mark.engine


def test_cancel_aborts_the_vllm_request(tiny_model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # vLLM's IPC sockets go to TMPDIR; a short one, as a socket path must fit 107 bytes.
    monkeypatch.setenv("TMPDIR", tempfile.mkdtemp(prefix="docsumd-e2e-"))
    monkeypatch.setenv("VLLM_HOST_IP", "127.0.0.1")
    config = EngineConfig(
        model=str(tiny_model),
        max_model_len=2048,
        kv_cache_memory_bytes=256 << 20,
        enforce_eager=True,
        # vLLM's own admission (0.29 on): more unfinished requests than this are refused with a 503.
        extra={"max_num_queued_reqs": 2},
    )

    async def refused_requests_are_retried(engine: Engine) -> None:
        rejections = ENGINE_REJECTIONS._value.get()
        sampling = summary_sampling(SummaryConfig(max_summary_tokens=24))
        outputs = await asyncio.gather(
            *(engine.generate(list(range(100, 400)), sampling, f"crowd-{i}") for i in range(8))
        )
        assert all(output.finish_reason in {"length", "stop"} for output in outputs)
        assert ENGINE_REJECTIONS._value.get() > rejections  # vLLM did refuse some: they ran later

    async def scenario() -> tuple[int, int, str]:
        async with Engine(config) as engine:
            llm = engine._llm
            long = summary_sampling(SummaryConfig(max_summary_tokens=1500))
            task = asyncio.create_task(engine.generate(list(range(100, 600)), long, "doc-to-cancel"))
            await asyncio.sleep(1.0)
            running = llm.get_num_unfinished_requests()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await asyncio.sleep(0.5)
            left = llm.get_num_unfinished_requests()
            # The engine still serves requests after the abort.
            short = await engine.generate(
                list(range(100, 200)), summary_sampling(SummaryConfig(max_summary_tokens=16)), "after"
            )
            await refused_requests_are_retried(engine)
            return running, left, short.finish_reason or ""

    running, left, finish_reason = asyncio.run(scenario())
    assert running == 1
    assert left == 0
    assert finish_reason in {"length", "stop"}


def test_generate_after_stop_is_engine_dead(tiny_model: Path) -> None:
    engine = Engine(EngineConfig(model=str(tiny_model)))
    with pytest.raises(EngineDeadError):
        asyncio.run(engine.generate([1, 2, 3], summary_sampling(SummaryConfig()), "never-started"))


def test_dead_engine_exits_nonzero_and_acknowledges_nothing(
    layout: Layout, start_daemon: Callable[..., DaemonProcess], corpus: Path
) -> None:
    text = (corpus / "docs" / "legal-common-gpl-3.txt").read_bytes()
    names = [f"doc-{i}.txt" for i in range(6)]
    for name in names:
        drop_file(layout.inbox, name, text[: 3000 + 500 * names.index(name)])
    layout.write_config(**{"summary.max_summary_tokens": "1024"})
    daemon = start_daemon()
    daemon.wait_ready()
    engine_core = [p for p in daemon.group_processes() if "EngineCor" in p]
    assert engine_core, daemon.group_processes()
    os.kill(int(engine_core[0].split(":")[0]), signal.SIGKILL)

    code = daemon.wait_exit(timeout=120)
    assert code == 1, daemon.log_tail()
    wait_for(lambda: daemon.group_processes() == [], 30, "the engine's other processes to exit")
    # The documents in flight were not acknowledged: still claimed in the inbox's work folder (where
    # the next start finds them first, counting this unclean exit), no records written.
    assert layout.pending() == set(names)
    assert not layout.names(layout.outbox, ".json")
    assert not layout.inputs_in(layout.failed)
    assert any(e.get("event", "").startswith("fatal error") for e in daemon.log_events())
