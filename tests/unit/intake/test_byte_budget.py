"""Unit tests of daemon.intake.byte_budget: bytes of documents in progress, first come first served."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from daemon.config import Config, EngineConfig, LimitsConfig, MetricsConfig, ServiceConfig, SummaryConfig
from daemon.folder.files import FilesSource
from daemon.folder.sink import FolderSink
from daemon.intake.byte_budget import ByteBudget
from daemon.service import Service
from tests.doubles.engine import FakeEngine


async def _hold_until(
    budget: ByteBudget, size: int | None, release: asyncio.Event, log: list[str], name: str
) -> None:
    async with budget.hold(size):
        log.append(name)
        await release.wait()


async def test_documents_wait_for_room_and_go_in_arrival_order() -> None:
    budget = ByteBudget(10)
    log: list[str] = []
    gates = {name: asyncio.Event() for name in "abcd"}
    tasks = [
        asyncio.create_task(_hold_until(budget, size, gates[name], log, name))
        for name, size in (("a", 6), ("b", 6), ("c", 1), ("d", 3))
    ]
    await asyncio.sleep(0.01)
    # b does not fit beside a; c would, but waits behind b (no overtaking: b is never starved).
    assert (log, budget.used, budget.waiting) == (["a"], 6, 3)
    gates["a"].set()
    await asyncio.sleep(0.01)
    assert (log, budget.used) == (["a", "b", "c", "d"], 10)
    for gate in gates.values():
        gate.set()
    await asyncio.gather(*tasks)
    assert (budget.used, budget.waiting) == (0, 0)


async def test_a_document_larger_than_the_budget_runs_alone() -> None:
    budget = ByteBudget(10)
    log: list[str] = []
    small, large = asyncio.Event(), asyncio.Event()
    first = asyncio.create_task(_hold_until(budget, 4, small, log, "small"))
    second = asyncio.create_task(_hold_until(budget, 50, large, log, "large"))
    await asyncio.sleep(0.01)
    assert log == ["small"]
    small.set()
    await asyncio.sleep(0.01)
    assert (log, budget.used) == (["small", "large"], 50)
    large.set()
    await asyncio.gather(first, second)
    assert budget.used == 0


async def test_an_unknown_size_is_held_once_read() -> None:
    budget = ByteBudget(10)
    async with budget.hold(8):
        async with budget.hold(None) as held:
            load = held.reading(_returns(b"x" * 5))
            reading = asyncio.ensure_future(load())
            await asyncio.sleep(0.01)
            assert not reading.done()  # read, then waiting for its 5 bytes beside the other 8
            assert budget.waiting == 1
        # Leaving the body releases what it holds, and cancels nothing: the read is still waiting.
        reading.cancel()
        with pytest.raises(asyncio.CancelledError):
            await reading
    assert (budget.used, budget.waiting) == (0, 0)


async def test_a_holding_grows_without_waiting_once_it_holds_bytes() -> None:
    budget = ByteBudget(10)
    async with budget.hold(9) as held:
        await held.grow(12)  # the file grew since its size was seen: never wait while holding
        assert budget.used == 12
    assert budget.used == 0


async def test_a_cancelled_waiter_leaves_the_queue_and_lets_the_next_one_in() -> None:
    budget = ByteBudget(10)
    log: list[str] = []
    gates = {name: asyncio.Event() for name in "abc"}
    a = asyncio.create_task(_hold_until(budget, 8, gates["a"], log, "a"))
    b = asyncio.create_task(_hold_until(budget, 8, gates["b"], log, "b"))
    c = asyncio.create_task(_hold_until(budget, 2, gates["c"], log, "c"))
    await asyncio.sleep(0.01)
    assert log == ["a"]
    b.cancel()  # c was waiting behind b; with b gone it fits beside a
    await asyncio.sleep(0.01)
    assert log == ["a", "c"]
    for gate in gates.values():
        gate.set()
    await asyncio.gather(a, c)
    with pytest.raises(asyncio.CancelledError):
        await b
    assert (budget.used, budget.waiting) == (0, 0)


def _returns(data: bytes) -> Any:
    async def load() -> bytes:
        return data

    return load


async def test_the_service_keeps_the_bytes_in_progress_within_the_budget(
    tmp_path: Path, tokenizer: Any
) -> None:
    # Four documents of 1,000 bytes, room for four by count but for two by bytes: the engine never sees
    # more than two at once (their size is not known before reading: each waits right after its read).
    folder = tmp_path / "in"
    folder.mkdir()
    paths = []
    for index in range(4):
        path = folder / f"doc-{index}.txt"
        path.write_bytes((b"Words of a document. " * 50)[:1000])
        paths.append(path)
    config = Config(
        engine=EngineConfig(model=str(tmp_path / "model"), max_model_len=1024),
        summary=SummaryConfig(max_summary_tokens=16),
        limits=LimitsConfig(max_inflight_bytes=2500),
        metrics=MetricsConfig(enabled=False),
        service=ServiceConfig(max_inflight_documents=4, status_interval_seconds=60),
    )
    engine = FakeEngine(delay=0.2)
    source = FilesSource(paths, FolderSink(tmp_path / "out", tmp_path / "out"), max_input_bytes=1 << 20)
    service = Service(config, engine=engine, tokenizer=tokenizer, sources=[source])
    await asyncio.wait_for(service.run(), 30)
    assert service.stats.succeeded == 4
    assert engine.max_active == 2
