"""Unit tests for daemon.admission.Admission: bounds, ordering, head-of-line waiting, cancellation.

No engine and no fakes: requests are plain tasks holding ``Admission.slot`` until the test releases them.
Everything is driven by events and ``asyncio.sleep(0)`` steps, never by wall-clock timing; arrival times
are passed explicitly, so the order does not depend on how fast the machine is.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from daemon.admission import Admission

WINDOW = 10.0
FULL = 1000
WAIT = 5.0  # bound on anything that should happen at once: a broken admission fails instead of hanging


def make_admission(
    *, max_requests: int = 100, max_tokens: int = 1_000_000, enabled: bool = True
) -> Admission:
    return Admission(
        max_requests=max_requests,
        max_tokens=max_tokens,
        window_seconds=WINDOW,
        full_length=FULL,
        enabled=enabled,
    )


async def settle(steps: int = 20) -> None:
    """Let every runnable task run until it blocks (a few event-loop turns)."""
    for _ in range(steps):
        await asyncio.sleep(0)


class Request:
    """A task that waits for a slot, records its admission, and holds the slot until released."""

    def __init__(
        self,
        admission: Admission,
        name: str,
        cost: int,
        log: list[str],
        *,
        hold: bool = True,
        **slot_kwargs: Any,
    ) -> None:
        self.name = name
        self.admitted = asyncio.Event()
        self._release = asyncio.Event()
        if not hold:
            self._release.set()
        self._log = log
        self.task = asyncio.create_task(self._run(admission, cost, slot_kwargs), name=name)

    async def _run(self, admission: Admission, cost: int, slot_kwargs: dict[str, Any]) -> None:
        async with admission.slot(cost, **slot_kwargs):
            self._log.append(self.name)
            self.admitted.set()
            await self._release.wait()

    async def release(self) -> None:
        """Let the request finish and wait until it has given its slot back."""
        self._release.set()
        await asyncio.wait_for(self.task, WAIT)


async def run_in_order(admission: Admission, requests: list[tuple[str, int, dict[str, Any]]]) -> list[str]:
    """Queue ``requests`` behind a blocker (one request at a time), then free the engine; admission order."""
    assert admission.max_requests == 1
    log: list[str] = []
    blocker = Request(admission, "blocker", 1, log)
    await settle()
    waiting = [Request(admission, name, cost, log, hold=False, **kwargs) for name, cost, kwargs in requests]
    await settle()
    assert admission.waiting == len(requests)
    assert log == ["blocker"]
    await blocker.release()
    await asyncio.wait_for(asyncio.gather(*(request.task for request in waiting)), WAIT)
    assert (admission.waiting, admission.inflight_requests, admission.inflight_tokens) == (0, 0, 0)
    return log[1:]


# -- bounds ----------------------------------------------------------------------------------------


async def test_request_count_is_bounded() -> None:
    admission = make_admission(max_requests=2)
    log: list[str] = []
    first, second, third = (Request(admission, name, 10, log) for name in ("a", "b", "c"))
    await settle()
    assert log == ["a", "b"]
    assert (admission.inflight_requests, admission.inflight_tokens, admission.waiting) == (2, 20, 1)
    await first.release()
    await asyncio.wait_for(third.admitted.wait(), WAIT)
    assert log == ["a", "b", "c"]
    assert (admission.inflight_requests, admission.waiting) == (2, 0)
    await second.release()
    await third.release()
    assert (admission.inflight_requests, admission.inflight_tokens) == (0, 0)


async def test_tokens_are_bounded_and_the_budget_can_be_filled_exactly() -> None:
    admission = make_admission(max_tokens=1000)
    log: list[str] = []
    first = Request(admission, "a", 600, log)
    second = Request(admission, "b", 400, log)  # 600 + 400 == 1000: fits exactly
    third = Request(admission, "c", 1, log)
    await settle()
    assert log == ["a", "b"]
    assert (admission.inflight_requests, admission.inflight_tokens, admission.waiting) == (2, 1000, 1)
    await second.release()
    await asyncio.wait_for(third.admitted.wait(), WAIT)
    assert admission.inflight_tokens == 601
    await first.release()
    await third.release()
    assert (admission.inflight_requests, admission.inflight_tokens, admission.waiting) == (0, 0, 0)


async def test_request_larger_than_the_token_budget_runs_alone() -> None:
    admission = make_admission(max_tokens=1000)
    log: list[str] = []
    huge = Request(admission, "huge", 5000, log)
    await settle()
    assert log == ["huge"]  # nothing else in flight: admitted although over max_tokens
    assert admission.inflight_tokens == 5000
    small = Request(admission, "small", 1, log)
    await settle()
    assert log == ["huge"]  # but nothing joins it while it runs
    assert admission.waiting == 1
    await huge.release()
    await asyncio.wait_for(small.admitted.wait(), WAIT)
    await small.release()
    assert (admission.inflight_requests, admission.inflight_tokens) == (0, 0)


def test_limits_must_be_positive() -> None:
    for kwargs in ({"max_requests": 0}, {"max_tokens": 0}, {"full_length": 0}):
        settings: dict[str, Any] = {
            "max_requests": 1,
            "max_tokens": 1,
            "window_seconds": 1.0,
            "full_length": 1,
        } | kwargs
        with pytest.raises(ValueError, match="positive"):
            Admission(**settings)


# -- ordering --------------------------------------------------------------------------------------


async def test_short_request_overtakes_long_one_that_arrived_at_the_same_time() -> None:
    order = await run_in_order(
        make_admission(max_requests=1),
        [
            ("long", FULL, {"arrived_at": 100.0}),
            ("medium", FULL // 2, {"arrived_at": 100.0}),
            ("short", FULL // 10, {"arrived_at": 100.0}),
        ],
    )
    assert order == ["short", "medium", "long"]


async def test_short_request_arriving_within_the_window_still_overtakes() -> None:
    # long: virtual arrival 100 + 10 = 110; short: 108 + 1 = 109.
    order = await run_in_order(
        make_admission(max_requests=1),
        [("long", FULL, {"arrived_at": 100.0}), ("short", FULL // 10, {"arrived_at": 108.0})],
    )
    assert order == ["short", "long"]


async def test_long_request_older_than_the_window_goes_before_later_short_ones() -> None:
    # long: 100 + 10 = 110; the short ones arrived after 110: 110.5 + 0 and 111 + 0.01.
    order = await run_in_order(
        make_admission(max_requests=1),
        [
            ("long", 3 * FULL, {"arrived_at": 100.0}),  # longer than full_length: the delay is capped
            ("tiny", 0, {"arrived_at": 110.5}),
            ("short", 1, {"arrived_at": 111.0}),
        ],
    )
    assert order == ["long", "tiny", "short"]


async def test_urgent_requests_go_first_whatever_their_size_and_arrival() -> None:
    order = await run_in_order(
        make_admission(max_requests=1),
        [
            ("early-short", 1, {"arrived_at": 0.0}),
            ("late-long-urgent", FULL, {"arrived_at": 500.0, "urgent": True}),
            ("early-urgent", FULL, {"arrived_at": 400.0, "urgent": True}),
        ],
    )
    assert order == ["early-urgent", "late-long-urgent", "early-short"]


async def test_equal_keys_are_served_in_submission_order() -> None:
    names = [f"r{number}" for number in range(6)]
    order = await run_in_order(
        make_admission(max_requests=1), [(name, 200, {"arrived_at": 50.0}) for name in names]
    )
    assert order == names


def test_priority_key_is_arrival_plus_a_delay_proportional_to_length() -> None:
    admission = make_admission()
    assert admission.priority_key(0, urgent=False, arrived_at=5.0)[:2] == (1, 5.0)
    assert admission.priority_key(FULL // 4, urgent=False, arrived_at=5.0)[:2] == (1, 5.0 + WINDOW / 4)
    assert admission.priority_key(FULL, urgent=True, arrived_at=5.0)[:2] == (0, 5.0 + WINDOW)
    assert admission.priority_key(10 * FULL, urgent=False, arrived_at=5.0)[:2] == (1, 5.0 + WINDOW)


async def test_head_of_line_waits_for_room_and_is_not_overtaken_by_a_smaller_request() -> None:
    admission = make_admission(max_tokens=1000)
    log: list[str] = []
    running = Request(admission, "running", 600, log)
    await settle()
    big = Request(admission, "big", 600, log, arrived_at=0.0)  # head of the queue; 600 + 600 > 1000
    await settle()
    small = Request(admission, "small", 100, log, arrived_at=50.0)  # would fit (700), but is behind big
    await settle()
    assert log == ["running"]
    assert (admission.waiting, admission.inflight_requests, admission.inflight_tokens) == (2, 1, 600)
    await running.release()
    await asyncio.wait_for(small.admitted.wait(), WAIT)
    assert log == ["running", "big", "small"]
    assert admission.inflight_tokens == 700
    await big.release()
    await small.release()
    assert (admission.waiting, admission.inflight_requests, admission.inflight_tokens) == (0, 0, 0)


# -- cancellation ----------------------------------------------------------------------------------


async def test_cancelled_waiter_leaves_the_queue_clean() -> None:
    admission = make_admission(max_requests=1)
    log: list[str] = []
    blocker = Request(admission, "blocker", 10, log)
    await settle()
    doomed = Request(admission, "doomed", 10, log, arrived_at=0.0)  # would be next
    other = Request(admission, "other", 10, log, arrived_at=1.0)
    await settle()
    assert admission.waiting == 2
    doomed.task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(doomed.task, WAIT)
    assert (admission.waiting, admission.inflight_requests, admission.inflight_tokens) == (1, 1, 10)
    await blocker.release()
    await asyncio.wait_for(other.admitted.wait(), WAIT)
    await other.release()
    assert log == ["blocker", "other"]
    assert (admission.waiting, admission.inflight_requests, admission.inflight_tokens) == (0, 0, 0)
    # The queue still works afterwards.
    last = Request(admission, "last", 10, log, hold=False)
    await asyncio.wait_for(last.task, WAIT)
    assert (admission.waiting, admission.inflight_requests, admission.inflight_tokens) == (0, 0, 0)


async def test_cancelling_the_blocked_head_lets_the_next_waiter_in() -> None:
    admission = make_admission(max_tokens=1000)
    log: list[str] = []
    running = Request(admission, "running", 600, log)
    await settle()
    head = Request(admission, "head", 600, log, arrived_at=0.0)  # does not fit beside running
    small = Request(admission, "small", 100, log, arrived_at=50.0)  # fits, but is behind the head
    await settle()
    assert log == ["running"]
    head.task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(head.task, WAIT)
    await asyncio.wait_for(small.admitted.wait(), WAIT)  # admitted without waiting for running
    assert (admission.waiting, admission.inflight_requests, admission.inflight_tokens) == (0, 2, 700)
    await running.release()
    await small.release()
    assert log == ["running", "small"]
    assert (admission.waiting, admission.inflight_requests, admission.inflight_tokens) == (0, 0, 0)


async def test_cancellation_right_after_the_grant_gives_the_slot_back() -> None:
    admission = make_admission(max_requests=1)
    log: list[str] = []
    blocker = admission.slot(10)
    await blocker.__aenter__()
    granted_then_cancelled = Request(admission, "cancelled", 20, log, arrived_at=0.0)
    next_in_line = Request(admission, "next", 30, log, arrived_at=1.0)
    await settle()
    assert admission.waiting == 2
    # Releasing the blocker grants the head at once (no await in between), before its task resumes;
    # the task is cancelled while the grant is on its way.
    await blocker.__aexit__(None, None, None)
    assert (admission.inflight_requests, admission.inflight_tokens, admission.waiting) == (1, 20, 1)
    granted_then_cancelled.task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(granted_then_cancelled.task, WAIT)
    # Its 20 tokens are back, and the next waiter already holds the slot instead.
    assert (admission.inflight_requests, admission.inflight_tokens, admission.waiting) == (1, 30, 0)
    await asyncio.wait_for(next_in_line.admitted.wait(), WAIT)
    assert log == ["next"]
    assert (admission.inflight_requests, admission.inflight_tokens, admission.waiting) == (1, 30, 0)
    await next_in_line.release()
    assert (admission.inflight_requests, admission.inflight_tokens, admission.waiting) == (0, 0, 0)


async def test_release_while_the_head_is_being_cancelled_skips_it() -> None:
    """A drain cancels many documents at once: a cancelled waiter's future is cancelled at once, but
    its task cleans up only when it next runs. A slot released in between must skip that waiter and
    grant the next one, not fail with InvalidStateError in the releasing task (seen as internal_error
    records during a shutdown)."""
    admission = make_admission(max_requests=1)
    log: list[str] = []
    blocker = admission.slot(10)
    await blocker.__aenter__()
    doomed = Request(admission, "doomed", 20, log, arrived_at=0.0)  # the head
    next_in_line = Request(admission, "next", 30, log, arrived_at=1.0)
    await settle()
    assert admission.waiting == 2
    doomed.task.cancel()  # its future is cancelled now; the task has not run its except block yet
    await blocker.__aexit__(None, None, None)  # raised InvalidStateError before the fix
    assert (admission.inflight_requests, admission.inflight_tokens, admission.waiting) == (1, 30, 0)
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(doomed.task, WAIT)
    await asyncio.wait_for(next_in_line.admitted.wait(), WAIT)
    assert (admission.inflight_requests, admission.inflight_tokens, admission.waiting) == (1, 30, 0)
    await next_in_line.release()
    assert log == ["next"]
    assert (admission.inflight_requests, admission.inflight_tokens, admission.waiting) == (0, 0, 0)


async def test_many_cancelled_at_once_while_slots_are_released() -> None:
    """The drain's pattern at scale: every waiter and holder cancelled in one go; the books balance."""
    admission = make_admission(max_requests=3)
    log: list[str] = []
    holders = [Request(admission, f"h{i}", 10, log) for i in range(3)]
    await settle()
    waiters = [Request(admission, f"w{i}", 10, log, arrived_at=float(i)) for i in range(20)]
    await settle()
    assert admission.waiting == 20
    for request in waiters[::2]:
        request.task.cancel()
    for holder in holders:  # each release dispatches past the cancelled heads
        await holder.release()
    for request in waiters:
        request.task.cancel()
    results = await asyncio.wait_for(
        asyncio.gather(*(request.task for request in waiters), return_exceptions=True), WAIT
    )
    assert all(isinstance(result, asyncio.CancelledError) for result in results)
    assert (admission.inflight_requests, admission.inflight_tokens, admission.waiting) == (0, 0, 0)
    assert not any(name.startswith("w") and int(name[1:]) % 2 == 0 for name in log)


async def test_exception_in_the_body_releases_the_slot() -> None:
    admission = make_admission(max_requests=1)
    seen: list[tuple[int, int]] = []

    async def failing_request() -> None:
        async with admission.slot(50):
            seen.append((admission.inflight_requests, admission.inflight_tokens))
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        await failing_request()
    assert seen == [(1, 50)]
    assert (admission.inflight_requests, admission.inflight_tokens) == (0, 0)


# -- disabled --------------------------------------------------------------------------------------


async def test_disabled_admits_everything_at_once_and_still_counts() -> None:
    admission = make_admission(max_requests=1, max_tokens=10, enabled=False)
    log: list[str] = []
    requests = [Request(admission, f"r{number}", 100, log, arrived_at=float(-number)) for number in range(5)]
    await settle()
    assert log == [f"r{number}" for number in range(5)]  # no bound, no reordering
    assert (admission.inflight_requests, admission.inflight_tokens, admission.waiting) == (5, 500, 0)
    for request in requests:
        await request.release()
    assert (admission.inflight_requests, admission.inflight_tokens, admission.waiting) == (0, 0, 0)
