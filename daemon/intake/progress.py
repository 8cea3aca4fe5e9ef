"""Health means progress: a daemon that has work and finishes nothing is wedged, whatever else it says.

The process can be alive, its event loop turning and its engine running, while no document moves: a
read that never returns, a lock never released, an engine that accepts requests and never answers.
:class:`ProgressWatch` notices: it is told of every document that finishes and of every engine request
that completes (:meth:`ProgressWatch.watching` wraps the engine), and with work present (documents in
flight or waiting at a source) and none of that for ``service.stall_seconds``, it says *stalled*. The
service then reports unhealthy: ``/healthz`` answers 503 and the systemd watchdog is no longer fed, so
systemd restarts the daemon (the inputs in flight were not acknowledged: they are read again).

Idle with no work is never a stall; neither is a long document whose engine requests keep completing.
The clock starts when work is first seen (after idle) or at the last progress, whichever is later.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from daemon.contracts import EngineClient, Generation, Sampling
from daemon.errors import RequestError
from daemon.ops.logging import get_logger

log = get_logger(__name__)


class ProgressWatch:
    """Whether work is moving (see the module's doc). ``stall_seconds`` 0 turns the check off."""

    def __init__(self, stall_seconds: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.stall_seconds = stall_seconds
        self._clock = clock
        self._last_progress = clock()
        self._work_since: float | None = None
        self._reported = False

    def progressed(self) -> None:
        """Something finished: a document (result or failure record written) or an engine request."""
        self._last_progress = self._clock()
        if self._reported:
            log.info("progress again after a stall")
            self._reported = False

    def stalled(self, *, has_work: bool) -> bool:
        """Whether, with ``has_work``, nothing finished for longer than ``stall_seconds``. Called often
        (health checks, watchdog pings): seeing no work restarts the clock for the next work."""
        if self.stall_seconds <= 0 or not has_work:
            self._work_since = None
            return False
        now = self._clock()
        if self._work_since is None:
            self._work_since = now
        quiet = now - max(self._last_progress, self._work_since)
        if quiet <= self.stall_seconds:
            return False
        if not self._reported:
            self._reported = True
            log.error(
                "no progress: work is waiting and nothing finished; reporting unhealthy (the systemd "
                "watchdog is no longer fed)",
                quiet_s=round(quiet, 1),
                stall_seconds=self.stall_seconds,
            )
        return True

    def watching(self, engine: EngineClient) -> EngineClient:
        """``engine``, telling this watch of every request that completes (or fails: it answered)."""
        return _WatchedEngine(engine, self)


class _WatchedEngine:
    """An :class:`~daemon.contracts.EngineClient` that reports completed requests as progress."""

    def __init__(self, engine: EngineClient, watch: ProgressWatch) -> None:
        self._engine = engine
        self._watch = watch

    @property
    def is_running(self) -> bool:
        """The wrapped engine's."""
        return self._engine.is_running

    @property
    def kv_cache_tokens(self) -> int | None:
        """The wrapped engine's."""
        return self._engine.kv_cache_tokens

    @property
    def start_seconds(self) -> float | None:
        """The wrapped engine's."""
        return self._engine.start_seconds

    async def start(self) -> None:
        """Start the wrapped engine."""
        await self._engine.start()

    async def stop(self) -> None:
        """Stop the wrapped engine."""
        await self._engine.stop()

    async def generate(
        self,
        prompt_token_ids: list[int],
        sampling: Sampling,
        request_id: str,
        *,
        on_prefilled: Callable[[], None] | None = None,
        priority: int = 0,
    ) -> Generation:
        """The wrapped engine's answer; a completed or refused request is progress."""
        try:
            generation = await self._engine.generate(
                prompt_token_ids, sampling, request_id, on_prefilled=on_prefilled, priority=priority
            )
        except RequestError:
            self._watch.progressed()
            raise
        self._watch.progressed()
        return generation
