"""Test doubles of our own contracts, in one place (see daemon/contracts.py).

They stand in for the real thing only in narrow unit tests of our own logic; end-to-end tests use the
real vLLM engine and the real broker.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from daemon.contracts import Generation, Sampling
from daemon.records import parse_request_id


class FakeEngine:
    """An :class:`~daemon.contracts.EngineClient` whose timing and failures per document the test sets."""

    def __init__(self) -> None:
        self.running = False
        self.concurrent = 0
        self.max_concurrent = 0
        self.cancelled: list[str] = []
        self.delay = 0.05
        self.behaviour: dict[str, BaseException] = {}  # doc id -> exception to raise
        self.delays: dict[str, float] = {}  # doc id -> its own delay
        self.stopped = False
        self.kv_cache_tokens: int | None = None
        self.start_seconds: float | None = None

    @property
    def is_running(self) -> bool:
        return self.running

    async def start(self) -> None:
        self.running = True

    async def stop(self) -> None:
        self.running = False
        self.stopped = True

    async def generate(
        self,
        prompt_token_ids: list[int],
        sampling: Sampling,
        request_id: str,
        *,
        on_prefilled: Callable[[], None] | None = None,
    ) -> Generation:
        doc_id = parse_request_id(request_id).doc_id
        if on_prefilled is not None:
            on_prefilled()  # no prefill to speak of: the engine's queue never holds it back
        self.concurrent += 1
        self.max_concurrent = max(self.max_concurrent, self.concurrent)
        try:
            await asyncio.sleep(self.delays.get(doc_id, self.delay))
            if doc_id in self.behaviour:
                raise self.behaviour[doc_id]
        except asyncio.CancelledError:
            self.cancelled.append(doc_id)
            raise
        finally:
            self.concurrent -= 1
        return Generation(
            text="a summary",
            prompt_tokens=len(prompt_token_ids),
            output_tokens=2,
            cached_prompt_tokens=0,
            finish_reason="stop",
            first_token_s=0.01,
            total_s=self.delay,
        )
