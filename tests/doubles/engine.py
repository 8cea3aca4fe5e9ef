"""The engine's doubles: :class:`FakeEngine` (an :class:`~daemon.contracts.EngineClient`) and what it
records (:class:`Call`); :class:`FakeAsyncLLM`, vLLM's ``AsyncLLM`` as :meth:`Engine.stop` touches it.

They stand in for the real engine only in narrow unit tests of our own logic; end-to-end tests use the
real vLLM engine.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from daemon.contracts import Generation, Sampling
from daemon.records import RequestId, parse_request_id


@dataclass(frozen=True)
class Call:
    """One request the fake engine received."""

    request_id: str
    prompt: list[int]
    max_tokens: int
    sampling: Sampling | None = field(default=None, compare=False, repr=False)
    priority: int = field(default=0, compare=False)
    parsed: RequestId = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "parsed", parse_request_id(self.request_id))

    @property
    def doc_id(self) -> str:
        """The document the request belongs to."""
        return self.parsed.doc_id

    @property
    def kind(self) -> str:
        """``document``, ``part`` or ``combine``."""
        return self.parsed.kind

    @property
    def number(self) -> int:
        """The request's number within its document (1, 2, ...)."""
        return self.parsed.number


class FakeEngine:
    """An :class:`~daemon.contracts.EngineClient` that records every request and answers ``text``.

    Each request takes ``delay`` seconds (``delays`` per document id) and then ``steps`` turns of the
    event loop, so concurrent requests overlap; ``behaviour(request_id)``, when set, is awaited in
    between and may block or raise; ``failures`` maps a document id to the exception its requests
    raise. What the test reads back: ``calls``, ``cancelled`` (calls cancelled while running),
    ``active`` and ``max_active`` (requests running at once), ``stopped``.
    """

    def __init__(
        self,
        *,
        text: str = "a summary",
        output_tokens: int = 2,
        cached_prompt_tokens: int = 0,
        delay: float = 0.0,
        steps: int = 0,
        behaviour: Callable[[str], Awaitable[None]] | None = None,
    ) -> None:
        self.text = text
        self.output_tokens = output_tokens
        self.cached_prompt_tokens = cached_prompt_tokens
        self.delay = delay
        self.delays: dict[str, float] = {}
        self.steps = steps
        self.behaviour = behaviour
        self.failures: dict[str, BaseException] = {}
        self.calls: list[Call] = []
        self.cancelled: list[Call] = []
        self.active = 0
        self.max_active = 0
        self.running = False
        self.stopped = False
        self.kv_cache_tokens: int | None = None
        self.start_seconds: float | None = None
        self.replies: list[tuple[str, str]] = []
        """(text, finish_reason) answers, used up one per request in order before ``text`` is."""

    @property
    def is_running(self) -> bool:
        """True between start() and stop()."""
        return self.running

    @property
    def cancelled_docs(self) -> list[str]:
        """The document ids of the cancelled calls, in order."""
        return [call.doc_id for call in self.cancelled]

    async def start(self) -> None:
        """Mark running."""
        self.running = True

    async def stop(self) -> None:
        """Mark stopped."""
        self.running = False
        self.stopped = True

    @property
    def samplings(self) -> list[Sampling]:
        """The sampling of every call, in order."""
        return [call.sampling for call in self.calls if call.sampling is not None]

    def of_kind(self, kind: str) -> list[Call]:
        """The calls of one kind, in request-number order."""
        return sorted((call for call in self.calls if call.kind == kind), key=lambda call: call.number)

    async def generate(
        self,
        prompt_token_ids: list[int],
        sampling: Sampling,
        request_id: str,
        *,
        on_prefilled: Callable[[], None] | None = None,
        priority: int = 0,
    ) -> Generation:
        """Record the call, take its time, then answer (or raise what the test set up)."""
        if on_prefilled is not None:
            on_prefilled()  # no prefill to speak of: the engine's queue never holds it back
        call = Call(request_id, list(prompt_token_ids), sampling.max_tokens, sampling, priority)
        self.calls.append(call)
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        delay = self.delays.get(call.doc_id, self.delay)
        try:
            if delay:
                await asyncio.sleep(delay)
            for _ in range(self.steps):
                await asyncio.sleep(0)
            if self.behaviour is not None:
                await self.behaviour(request_id)
            if call.doc_id in self.failures:
                raise self.failures[call.doc_id]
        except asyncio.CancelledError:
            self.cancelled.append(call)
            raise
        finally:
            self.active -= 1
        text, finish_reason = self.replies.pop(0) if self.replies else (self.text, "stop")
        return Generation(
            text=text,
            prompt_tokens=len(prompt_token_ids),
            output_tokens=self.output_tokens,
            cached_prompt_tokens=self.cached_prompt_tokens,
            finish_reason=finish_reason,
            first_token_s=0.01,
            total_s=delay,
        )


class FakeAsyncLLM:
    """vLLM's ``AsyncLLM`` as :meth:`~daemon.engine.vllm_engine.Engine.stop` touches it: records, in
    ``events``, the order in which its output handler is cancelled and the engine shut down.

    Made inside a running event loop: like vLLM's, its output handler is a task started at once.
    """

    def __init__(self) -> None:
        self.events: list[str] = []
        self.output_handler = asyncio.create_task(self._handle_outputs())
        self.errored = False

    async def _handle_outputs(self) -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.events.append("output handler cancelled")
            raise

    def shutdown(self) -> None:
        """Record the shutdown."""
        self.events.append("shutdown")
