"""Unit tests for daemon.work.WorkItem: exactly one acknowledgement per item."""

from __future__ import annotations

import pytest

from daemon.records import Record
from daemon.work import WorkItem


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Record]] = []

    async def load(self) -> bytes:
        return b"data"

    async def complete(self, record: Record) -> None:
        self.calls.append(("complete", record))

    async def fail(self, record: Record) -> None:
        self.calls.append(("fail", record))

    def item(self) -> WorkItem:
        return WorkItem(
            id="doc-1", source="test", load=self.load, on_complete=self.complete, on_fail=self.fail
        )


async def test_complete_calls_the_sink_once() -> None:
    recorder = Recorder()
    item = recorder.item()
    await item.complete({"summary": "s"})
    assert recorder.calls == [("complete", {"summary": "s"})]
    assert item.settled is True


async def test_complete_twice_raises() -> None:
    recorder = Recorder()
    item = recorder.item()
    await item.complete({"n": 1})
    with pytest.raises(RuntimeError, match="'doc-1' was already completed or failed"):
        await item.complete({"n": 2})
    assert recorder.calls == [("complete", {"n": 1})]


async def test_fail_twice_raises() -> None:
    recorder = Recorder()
    item = recorder.item()
    await item.fail({"reason": "empty"})
    with pytest.raises(RuntimeError, match="already completed or failed"):
        await item.fail({"reason": "empty"})
    assert recorder.calls == [("fail", {"reason": "empty"})]


async def test_fail_after_complete_raises() -> None:
    recorder = Recorder()
    item = recorder.item()
    await item.complete({"n": 1})
    with pytest.raises(RuntimeError):
        await item.fail({"reason": "x"})
    assert recorder.calls == [("complete", {"n": 1})]


async def test_complete_after_fail_raises() -> None:
    recorder = Recorder()
    item = recorder.item()
    await item.fail({"reason": "x"})
    with pytest.raises(RuntimeError):
        await item.complete({"n": 1})
    assert recorder.calls == [("fail", {"reason": "x"})]


def test_new_item_is_unsettled_with_empty_metadata() -> None:
    item = Recorder().item()
    assert item.settled is False
    assert item.metadata == {}
