"""Unit tests for daemon.work.WorkItem: exactly one acknowledgement per item."""

from __future__ import annotations

import pytest

from tests.doubles.work import Acks


async def test_complete_calls_the_sink_once() -> None:
    acks = Acks()
    item = acks.item()
    await item.complete({"summary": "s"})
    assert acks.calls == [("complete", "doc-1", {"summary": "s"})]
    assert item.settled is True


async def test_complete_twice_raises() -> None:
    acks = Acks()
    item = acks.item()
    await item.complete({"n": 1})
    with pytest.raises(RuntimeError, match="'doc-1' was already completed or failed"):
        await item.complete({"n": 2})
    assert acks.calls == [("complete", "doc-1", {"n": 1})]


async def test_fail_twice_raises() -> None:
    acks = Acks()
    item = acks.item()
    await item.fail({"reason": "empty"})
    with pytest.raises(RuntimeError, match="already completed or failed"):
        await item.fail({"reason": "empty"})
    assert acks.calls == [("fail", "doc-1", {"reason": "empty"})]


async def test_fail_after_complete_raises() -> None:
    acks = Acks()
    item = acks.item()
    await item.complete({"n": 1})
    with pytest.raises(RuntimeError):
        await item.fail({"reason": "x"})
    assert acks.calls == [("complete", "doc-1", {"n": 1})]


async def test_complete_after_fail_raises() -> None:
    acks = Acks()
    item = acks.item()
    await item.fail({"reason": "x"})
    with pytest.raises(RuntimeError):
        await item.complete({"n": 1})
    assert acks.calls == [("fail", "doc-1", {"reason": "x"})]


def test_new_item_is_unsettled_with_empty_metadata() -> None:
    item = Acks().item()
    assert item.settled is False
    assert item.metadata == {}
