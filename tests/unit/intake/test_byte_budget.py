"""Unit tests of daemon.intake.byte_budget: bytes of documents in progress, first come first served,
then what their text holds."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from daemon.config import (
    Config,
    EngineConfig,
    ExtractConfig,
    LimitsConfig,
    MetricsConfig,
    ServiceConfig,
    SummaryConfig,
)
from daemon.folder.files import FilesSource
from daemon.folder.sink import FolderSink
from daemon.intake.byte_budget import ByteBudget
from daemon.service import Service
from daemon.work import WorkItem
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


async def test_a_text_smaller_than_counted_gives_bytes_back_at_once() -> None:
    budget = ByteBudget(10)
    log: list[str] = []
    gate = asyncio.Event()
    async with budget.hold(2) as held:
        await held.hold_text(9)  # the most its text may take: its input counts in it from now
        assert (held.input, held.text, budget.used) == (0, 9, 9)
        waiter = asyncio.create_task(_hold_until(budget, 4, gate, log, "next"))
        await asyncio.sleep(0.01)
        assert log == []
        await held.hold_text(3)  # its text turned out smaller
        await asyncio.sleep(0.01)
        assert (log, budget.used) == (["next"], 7)
    gate.set()
    await waiter
    assert budget.used == 0


async def test_room_for_text_waits_for_text_only() -> None:
    # Input bytes of documents not yet read into text (waiting for an extraction worker, say) do not
    # hold a text back: text waits for text. The input and the text are each within the limit.
    budget = ByteBudget(10)
    queued = [await budget.reserve(3) for _ in range(3)]  # 9 bytes of input, waiting for workers
    async with budget.hold(1) as held:
        await asyncio.wait_for(held.hold_text(8), 1)
        assert (budget.input_used, budget.text_used) == (9, 8)
        # A new document is admitted only when input and text together fit.
        admitting = asyncio.create_task(budget.reserve(1))
        await asyncio.sleep(0.01)
        assert not admitting.done()
    (await asyncio.wait_for(admitting, 1)).release()  # 9 of input, no text: 1 more fits
    for holding in queued:
        holding.release()
    assert budget.used == 0


async def test_text_is_served_in_turn_and_a_text_larger_than_the_budget_runs_alone() -> None:
    budget = ByteBudget(10)
    order: list[str] = []
    gates = {name: asyncio.Event() for name in "abc"}

    async def document(name: str, text: int) -> None:
        async with budget.hold(1) as held:
            await held.hold_text(text)
            order.append(name)
            await gates[name].wait()

    a = asyncio.create_task(document("a", 6))
    await asyncio.sleep(0.01)
    b = asyncio.create_task(document("b", 50))  # larger than the budget: waits until no text is held
    await asyncio.sleep(0.01)
    c = asyncio.create_task(document("c", 2))  # would fit beside a, but waits behind b
    await asyncio.sleep(0.01)
    assert order == ["a"]
    gates["a"].set()
    await asyncio.sleep(0.01)
    assert (order, budget.text_used) == (["a", "b"], 50)
    gates["b"].set()
    await asyncio.sleep(0.01)
    assert order == ["a", "b", "c"]
    gates["c"].set()
    await asyncio.gather(a, b, c)
    assert (budget.used, budget.waiting) == (0, 0)


async def test_two_documents_whose_text_grows_never_wait_for_each_other() -> None:
    # Each holds half of the budget as text and needs 8: holding on while waiting for more would
    # deadlock, taking it at once would go over the limit. Each gives its text back and they take turns.
    budget = ByteBudget(10)
    peak = 0
    finished: list[str] = []

    async def document(name: str) -> None:
        nonlocal peak
        async with budget.hold(1) as held:
            await held.hold_text(5)
            await asyncio.sleep(0.01)  # both hold their 5 now
            await held.hold_text(8)
            peak = max(peak, budget.text_used)
            await asyncio.sleep(0.02)
            finished.append(name)

    await asyncio.wait_for(asyncio.gather(document("a"), document("b")), 5)
    assert sorted(finished) == ["a", "b"]
    assert peak <= 10
    assert (budget.used, budget.waiting) == (0, 0)


async def test_a_document_cancelled_while_it_waits_for_text_keeps_only_its_input() -> None:
    budget = ByteBudget(10)
    async with budget.hold(8) as big:
        await big.hold_text(8)
        async with budget.hold(1) as held:
            waiting = asyncio.create_task(held.hold_text(9))
            await asyncio.sleep(0.01)
            assert budget.waiting == 1
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            assert (held.input, held.text, budget.waiting) == (1, 0, 0)
    assert budget.used == 0


async def test_documents_of_unknown_size_are_read_one_at_a_time() -> None:
    # The second may start reading only once the first is admitted: at most one document waits for
    # room with its bytes read and not counted.
    budget = ByteBudget(10)
    order: list[str] = []
    blocker = await budget.reserve(8)

    async def document(name: str, data: bytes) -> None:
        async def load() -> bytes:
            order.append(f"{name} reads")
            return data

        held = await budget.reserve(None)
        try:
            await held.reading(load)()
            order.append(f"{name} admitted")
        finally:
            held.release()

    first = asyncio.create_task(document("first", b"x" * 5))
    second = asyncio.create_task(document("second", b"y"))
    await asyncio.sleep(0.01)
    assert order == ["first reads"]
    blocker.release()
    await asyncio.gather(first, second)
    assert order == ["first reads", "first admitted", "second reads", "second admitted"]
    assert budget.used == 0


async def test_a_turn_to_read_ends_when_the_read_fails() -> None:
    budget = ByteBudget(10)

    async def unreadable() -> bytes:
        raise OSError("gone")

    held = await budget.reserve(None)
    with pytest.raises(OSError, match="gone"):
        await held.reading(unreadable)()
    other = await budget.reserve(None)
    assert await asyncio.wait_for(other.reading(_returns(b"abc"))(), 1) == b"abc"
    assert budget.used == 3
    other.release()
    held.release()
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


def _returns(data: bytes) -> Any:
    async def load() -> bytes:
        return data

    return load


def _expanding_html(letters: int) -> bytes:
    """About 80 bytes of HTML whose text is a list label of ``letters`` letters."""
    return f'<html><body><ol type="A"><li value="{26 * (letters - 1) + 1}">x</li></ol></body></html>'.encode()


class _SizedFiles:
    """A files source whose items say their size before they are read, as a Kafka message's do."""

    def __init__(self, inner: FilesSource, sizes: dict[str, int]) -> None:
        self.inner = inner
        self.sizes = sizes
        self.backlog = 0

    async def start(self) -> None:
        await self.inner.start()

    async def stop(self) -> None:
        await self.inner.stop()

    async def items(self) -> AsyncIterator[WorkItem]:
        async for item in self.inner.items():
            yield dataclasses.replace(item, size=self.sizes[item.id])


@pytest.mark.parametrize("size_known", [False, True], ids=["read-then-sized", "sized-first"])
async def test_the_service_counts_the_text_extracted_not_the_bytes_read(
    tmp_path: Path, tokenizer: Any, size_known: bool
) -> None:
    # Four HTML files of 80 bytes, each 9,000 bytes of text: room for all four by their bytes, for
    # two by their text. Each is counted at its cap (10,000) while it is extracted, then at its text.
    folder = tmp_path / "in"
    folder.mkdir()
    paths = []
    for index in range(4):
        path = folder / f"doc-{index}.html"
        path.write_bytes(_expanding_html(9000))
        paths.append(path)
    config = Config(
        engine=EngineConfig(model=str(tmp_path / "model"), max_model_len=1024),
        summary=SummaryConfig(max_summary_tokens=16, strategy="head"),
        limits=LimitsConfig(max_inflight_bytes=20_000),
        extract=ExtractConfig(workers=2, expansion_floor_bytes=10_000),
        metrics=MetricsConfig(enabled=False),
        service=ServiceConfig(max_inflight_documents=4, status_interval_seconds=60),
    )
    engine = FakeEngine(delay=0.5)
    files = FilesSource(paths, FolderSink(tmp_path / "out", tmp_path / "out"), max_input_bytes=1 << 20)
    source = _SizedFiles(files, {path.name: path.stat().st_size for path in paths}) if size_known else files
    service = Service(config, engine=engine, tokenizer=tokenizer, sources=[source])
    peak_text = peak_input = 0

    async def watch() -> None:
        nonlocal peak_text, peak_input
        while True:
            peak_text = max(peak_text, service._bytes.text_used)
            peak_input = max(peak_input, service._bytes.input_used)
            await asyncio.sleep(0.005)

    watcher = asyncio.create_task(watch())
    try:
        await asyncio.wait_for(service.run(), 60)
    finally:
        watcher.cancel()
    assert service.stats.succeeded == 4
    assert engine.max_active == 2
    assert peak_text <= 20_000  # each part within the budget (inputs waiting for a worker beside texts)
    assert peak_input <= 20_000
