"""The real vLLM engine, remembering every request it ran: for benchmarks that summarize through
docsumd's own path and then read what each request was and what it cost.

Shared by ``bench/structured.py`` and ``bench/profiles_cache.py``; it imports vLLM (through
:mod:`daemon.engine.vllm_engine`), so import it where the engine is needed, not at a script's top.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from daemon.config import EngineConfig
from daemon.contracts import Generation, Sampling
from daemon.engine.vllm_engine import Engine


@dataclass(frozen=True, slots=True)
class Request:
    """One finished request: what was asked and what came back."""

    request_id: str
    sampling: Sampling
    generation: Generation


class RecordingEngine(Engine):
    """The real engine; each finished request is appended to :attr:`requests`, in finishing order."""

    requests: list[Request]

    def __init__(self, config: EngineConfig) -> None:
        super().__init__(config)
        self.requests = []

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
        generation = await super().generate(
            prompt_token_ids, sampling, request_id, on_prefilled=on_prefilled, priority=priority
        )
        self.requests.append(Request(request_id, sampling, generation))
        return generation
