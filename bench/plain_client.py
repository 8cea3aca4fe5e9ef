"""The baseline of the remote benchmark: a plain client of a fleet, as teams write one in an afternoon.

Every request goes at once, first come first served, to the next server in turn (round robin), as one
non-streamed ``POST /v1/completions``: no admission, no ordering of short before long, no affinity, no
load reading, no retry of a refusal (the servers of the benchmark have no queue limit, so nothing is
refused). Like any client over pooled connections, it sends a request again when its connection drops
before the answer (a server closes an idle keep-alive connection while a request is being written on
it), and it sets no overall timeout (aiohttp's default of 5 minutes would cut long FIFO passes).
It is an :class:`~daemon.contracts.EngineClient`, so the benchmark runs docsumd's own pipeline over it
(the same documents, prompts and summaries) with ``admission.enabled = false``: only the way requests
reach the servers differs.

A module of ``bench/remote.py --measure fleet``, not a benchmark of its own:

    PYTHONPATH=. .venv/bin/python -m bench.remote --measure fleet
"""

from __future__ import annotations

import argparse
import itertools
import time
from collections.abc import Callable
from typing import Any

import aiohttp

from daemon.contracts import Generation, Sampling
from daemon.errors import RequestError

CONNECTION_TRIES = 3
"""Sends of one request when its connection drops before the answer."""


class RoundRobinClient:
    """A plain FIFO round-robin client over ``urls`` (see the module's doc)."""

    def __init__(self, urls: list[str], model: str) -> None:
        self.urls = [url.rstrip("/") for url in urls]
        self.model = model
        self._next = itertools.cycle(self.urls)
        self._session: aiohttp.ClientSession | None = None
        self.start_seconds: float | None = None

    @property
    def is_running(self) -> bool:
        return self._session is not None

    @property
    def kv_cache_tokens(self) -> int | None:
        return None

    async def start(self) -> None:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0),
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
            )
            self.start_seconds = 0.0

    async def stop(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def generate(
        self,
        prompt_token_ids: list[int],
        sampling: Sampling,
        request_id: str,
        *,
        on_prefilled: Callable[[], None] | None = None,
        priority: int = 0,
    ) -> Generation:
        assert self._session is not None
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": prompt_token_ids,
            "max_tokens": sampling.max_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "repetition_penalty": sampling.repetition_penalty,
        }
        started = time.monotonic()
        for attempt in range(CONNECTION_TRIES):
            try:
                async with self._session.post(f"{next(self._next)}/v1/completions", json=body) as response:
                    answer = await response.json()
                break
            except aiohttp.ClientConnectionError:
                if attempt == CONNECTION_TRIES - 1:
                    raise
        if response.status != 200:
            raise RequestError(f"HTTP {response.status}: {answer}")
        choice, usage = answer["choices"][0], answer.get("usage") or {}
        return Generation(
            text=choice["text"],
            prompt_tokens=int(usage.get("prompt_tokens", len(prompt_token_ids))),
            output_tokens=int(usage.get("completion_tokens", 0)),
            cached_prompt_tokens=0,
            finish_reason=choice.get("finish_reason"),
            first_token_s=None,
            total_s=time.monotonic() - started,
        )


def main() -> int:
    """Answer ``--help``: this module is run through ``bench/remote.py``."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.parse_args()
    parser.print_help()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
