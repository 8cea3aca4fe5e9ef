"""Admission control: which engine request goes to vLLM next, and when.

vLLM serves the requests it holds first come, first served. Handing it every request at once makes a
500-token document wait behind a backlog of 20,000-token ones, and makes memory grow with the
backlog. :class:`Admission` sits in front of the engine and keeps what vLLM holds bounded to what
it can work on (``max_requests`` requests and ``max_tokens`` tokens, prompt plus output budget),
and picks the next request from those waiting:

1. combine (reduce) steps of documents already in progress first, so documents finish instead of
   all advancing slowly;
2. then by *virtual arrival time*: the document's arrival time plus a delay that grows with the
   request's length, up to ``window_seconds`` for a full-context request. Within that window short
   requests overtake long ones; a long request that has waited ``window_seconds`` is ahead of
   anything arriving later, so it never starves.

The request at the head of the order is never overtaken by a smaller one just because that one fits
in the remaining budget: it waits for room, which is what bounds the wait of long requests.

With ``enabled=False`` requests go straight to the engine in arrival order (plain FIFO), which is
the baseline the benchmark compares against; the counters still work.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from daemon.config import AdmissionConfig, EngineConfig
from daemon.logging import get_logger
from daemon.metrics import ADMISSION_WAIT, ADMISSION_WAITING, ENGINE_INFLIGHT_REQUESTS, ENGINE_INFLIGHT_TOKENS

log = get_logger(__name__)

MAX_DEFAULT_REQUESTS = 128
"""The default request bound's cap: keeps a 7B model on an H200 saturated on long documents (measured)
while leaving vLLM's own queue empty."""


@dataclass(order=True, slots=True)
class _Waiter:
    key: tuple[int, float, int]
    cost: int = field(compare=False)
    granted: asyncio.Future[None] = field(compare=False)
    gone: bool = field(default=False, compare=False)


class Admission:
    """Bounds and orders the requests in the engine. Safe to use from many tasks of one event loop."""

    def __init__(
        self,
        *,
        max_requests: int,
        max_tokens: int,
        window_seconds: float,
        full_length: int,
        enabled: bool = True,
    ) -> None:
        """``full_length`` is the request size (tokens) that gets the whole ``window_seconds`` delay."""
        if max_requests < 1 or max_tokens < 1 or full_length < 1:
            raise ValueError("admission limits must be positive")
        self.max_requests = max_requests
        self.max_tokens = max_tokens
        self.window_seconds = window_seconds
        self.full_length = full_length
        self.enabled = enabled
        self.inflight_requests = 0
        self.inflight_tokens = 0
        self._waiting: list[_Waiter] = []
        self._waiting_count = 0
        self._sequence = itertools.count()

    @property
    def waiting(self) -> int:
        """Requests waiting for admission."""
        return self._waiting_count

    def priority_key(self, cost: int, *, urgent: bool, arrived_at: float) -> tuple[int, float, int]:
        """The order key of a request: urgent first, then by virtual arrival time, then by submission."""
        delay = self.window_seconds * min(1.0, cost / self.full_length)
        return (0 if urgent else 1, arrived_at + delay, next(self._sequence))

    @contextlib.asynccontextmanager
    async def slot(
        self, cost: int, *, urgent: bool = False, arrived_at: float | None = None
    ) -> AsyncIterator[None]:
        """Wait for admission of a request of ``cost`` tokens; hold it for the ``async with`` body.

        ``arrived_at`` (``time.monotonic()`` seconds) is when the request's document arrived;
        ``urgent`` marks a combine step of a document in progress. Cancellation while waiting
        leaves the queue clean.
        """
        waited_from = time.monotonic()
        if self.enabled:
            await self._wait_turn(
                cost, urgent=urgent, arrived_at=waited_from if arrived_at is None else arrived_at
            )
        else:
            self._take(cost)
        ADMISSION_WAIT.observe(time.monotonic() - waited_from)
        try:
            yield
        finally:
            self._release(cost)

    async def _wait_turn(self, cost: int, *, urgent: bool, arrived_at: float) -> None:
        waiter = _Waiter(
            key=self.priority_key(cost, urgent=urgent, arrived_at=arrived_at),
            cost=cost,
            granted=asyncio.get_running_loop().create_future(),
        )
        heapq.heappush(self._waiting, waiter)
        self._waiting_count += 1
        ADMISSION_WAITING.set(self._waiting_count)
        self._dispatch()
        try:
            await waiter.granted
        except asyncio.CancelledError:
            if waiter.granted.done() and not waiter.granted.cancelled():
                self._release(cost)  # granted just as we were cancelled: give the room back
            else:
                self._forget(waiter)
                self._dispatch()  # the head may have changed
            raise

    def _fits(self, cost: int) -> bool:
        if self.inflight_requests == 0:
            return True  # a request larger than the token budget still runs, alone
        return self.inflight_requests < self.max_requests and self.inflight_tokens + cost <= self.max_tokens

    def _forget(self, waiter: _Waiter) -> None:
        """Stop counting ``waiter`` as waiting (it stays in the heap, marked gone, until it surfaces)."""
        if not waiter.gone:
            waiter.gone = True
            self._waiting_count -= 1
            ADMISSION_WAITING.set(self._waiting_count)

    def _dispatch(self) -> None:
        while self._waiting:
            head = self._waiting[0]
            # A waiter whose task was cancelled has a cancelled future at once, but runs its own
            # clean-up only when its task next gets the loop. A release in between (another task's
            # slot ending, e.g. while a drain cancels documents) must skip it, not grant it: setting
            # a result on a cancelled future raises InvalidStateError in the releasing task.
            if head.gone or head.granted.done():
                heapq.heappop(self._waiting)
                self._forget(head)
                continue
            if not self._fits(head.cost):
                return
            heapq.heappop(self._waiting)
            self._forget(head)
            self._take(head.cost)
            head.granted.set_result(None)

    def _take(self, cost: int) -> None:
        self.inflight_requests += 1
        self.inflight_tokens += cost
        ENGINE_INFLIGHT_REQUESTS.set(self.inflight_requests)
        ENGINE_INFLIGHT_TOKENS.set(self.inflight_tokens)

    def _release(self, cost: int) -> None:
        self.inflight_requests -= 1
        self.inflight_tokens -= cost
        ENGINE_INFLIGHT_REQUESTS.set(self.inflight_requests)
        ENGINE_INFLIGHT_TOKENS.set(self.inflight_tokens)
        if self.enabled:
            self._dispatch()


def admission_for_engine(
    settings: AdmissionConfig, engine: EngineConfig, *, kv_cache_tokens: int | None
) -> Admission:
    """Admission with the configured bounds, or bounds derived from the running engine.

    Tokens default to what the KV cache holds (``kv_cache_tokens``, known once the engine runs):
    beyond that requests would only queue inside vLLM, in its order instead of ours. Requests default
    to vLLM's batch size, at most :data:`MAX_DEFAULT_REQUESTS`.
    """
    max_tokens = settings.max_inflight_tokens or max(
        kv_cache_tokens or 32 * engine.max_num_batched_tokens, engine.max_model_len
    )
    max_requests = settings.max_inflight_requests or min(engine.max_num_seqs, MAX_DEFAULT_REQUESTS)
    admission = Admission(
        max_requests=max_requests,
        max_tokens=max_tokens,
        window_seconds=settings.window_seconds,
        full_length=engine.max_model_len,
        enabled=settings.enabled,
    )
    log.info(
        "admission",
        enabled=admission.enabled,
        max_inflight_requests=admission.max_requests,
        max_inflight_tokens=admission.max_tokens,
        kv_cache_tokens=kv_cache_tokens,
        window_s=admission.window_seconds,
    )
    return admission
