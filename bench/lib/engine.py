"""The real vLLM engine, remembering every request it ran: the one engine wrapper of the benchmarks.

A benchmark summarizes through docsumd's own path (the service, or the summarizer alone) and then
reads what each request was and what it cost: the raw-vLLM pass replays the prompts, the structured
and cache benchmarks read the sampling and the cached tokens. It imports vLLM (through
:mod:`daemon.engine.vllm_engine`), so import it where the engine is needed, not at a script's top.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from daemon.config import EngineConfig
from daemon.contracts import Generation, Sampling
from daemon.engine.vllm_engine import Engine
from daemon.records import parse_request_id


@dataclass(slots=True)
class Request:
    """One finished engine request: what was asked, what came back, and when (monotonic seconds).

    ``stage`` is filled in by :func:`bench.lib.raw_vllm.assign_stages` for the raw replay."""

    request_id: str
    doc: str
    kind: str
    prompt_ids: list[int]
    sampling: Sampling
    generation: Generation
    submitted: float
    finished: float
    stage: int = 1

    @property
    def output_tokens(self) -> int:
        """Tokens the request generated."""
        return self.generation.output_tokens


class RecordingEngine:
    """The real engine; each finished request is appended to :attr:`requests`, in finishing order.

    ``engine``: an :class:`~daemon.engine.vllm_engine.Engine`, or its config (then one is built here).
    ``shared``: the engine outlives the service that uses this wrapper (several passes on one engine),
    so :meth:`stop` leaves it running for its owner to stop, and :attr:`start_seconds` is reported only
    by the wrapper that started it. ``requests``: the list to append to (default: a new one).
    """

    def __init__(
        self,
        engine: Engine | EngineConfig,
        *,
        shared: bool = False,
        requests: list[Request] | None = None,
    ) -> None:
        self.engine = engine if isinstance(engine, Engine) else Engine(engine)
        self.shared = shared
        self.requests: list[Request] = [] if requests is None else requests
        self._started_here = False

    @property
    def is_running(self) -> bool:
        """Whether the engine runs."""
        return self.engine.is_running

    @property
    def kv_cache_tokens(self) -> int | None:
        """The engine's KV cache, in tokens."""
        return self.engine.kv_cache_tokens

    @property
    def cache_block_tokens(self) -> int | None:
        """The engine's KV cache block in tokens (the service pads shared prefixes to it, as with the
        engine itself: :class:`daemon.contracts.CachingEngine`)."""
        return self.engine.cache_block_tokens

    @property
    def start_seconds(self) -> float | None:
        """How long the engine took to start, if this wrapper started it."""
        return self.engine.start_seconds if self._started_here else None

    async def start(self) -> None:
        """Start the engine unless it runs."""
        self._started_here = self._started_here or not self.engine.is_running
        await self.engine.start()

    async def stop(self) -> None:
        """Stop the engine, unless it is shared."""
        if not self.shared:
            await self.engine.stop()

    async def reset_prefix_cache(self) -> None:
        """Empty vLLM's prefix cache (so that a pass does not reuse another's prompts)."""
        await self.engine.reset_prefix_cache()

    async def check_health(self) -> None:
        """The engine's own health check."""
        await self.engine.check_health()

    async def generate(
        self,
        prompt_token_ids: list[int],
        sampling: Sampling,
        request_id: str,
        *,
        on_prefilled: Callable[[], None] | None = None,
        priority: int = 0,
    ) -> Generation:
        """Run the request on the real engine, then remember it."""
        submitted = time.monotonic()
        generation = await self.engine.generate(
            prompt_token_ids, sampling, request_id, on_prefilled=on_prefilled, priority=priority
        )
        parsed = parse_request_id(request_id)
        self.requests.append(
            Request(
                request_id=request_id,
                doc=parsed.doc_id,
                kind=parsed.kind,
                prompt_ids=list(prompt_token_ids),
                sampling=sampling,
                generation=generation,
                submitted=submitted,
                finished=time.monotonic(),
            )
        )
        return generation
