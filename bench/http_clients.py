"""Which HTTP client the remote engine uses: aiohttp against httpx, on the remote engine's own traffic.

A local server (a separate process, so that it does not share the client's CPU time) answers
``POST /v1/completions`` the way vLLM's server does for docsumd's requests: a streamed completion of
three events (the first output, the rest of the text with its finish, the usage) and ``[DONE]``, each
after a short pause, and the prompt (token ids, as docsumd sends them) in the request body. The client
sends ``--requests`` such requests with ``--concurrency`` in flight, reads every stream to its end
with docsumd's own event parser, and reports the client process's CPU seconds per request (what the
daemon's event loop pays) and the wall time, for each library, alternating, ``--rounds`` times.

    PYTHONPATH=. .venv/bin/python -m bench.http_clients [--requests 400] [--concurrency 64] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bench.lib.results import result_path, write_result
from daemon.engine.remote.completions import CompletionReader
from daemon.engine.remote.sse import EventParser

PROMPT_TOKENS = 3000
EVENT_PAUSE_S = 0.005


def serve(port: int) -> None:
    """The fake vLLM server (run in its own process)."""
    from aiohttp import web

    first = json.dumps({"choices": [{"index": 0, "text": "Summary", "finish_reason": None}]})
    last = json.dumps(
        {"choices": [{"index": 0, "text": " of the document. " * 20, "finish_reason": "length"}]}
    )
    usage = json.dumps({"choices": [], "usage": {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": 256}})

    async def complete(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8"})
        await response.prepare(request)
        for payload in (first, last, usage, "[DONE]"):
            await asyncio.sleep(EVENT_PAUSE_S)
            await response.write(f"data: {payload}\n\n".encode())
        return response

    app = web.Application(client_max_size=64 << 20)
    app.router.add_post("/v1/completions", complete)
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None)


def _read(chunks: list[bytes]) -> None:
    parser, reader = EventParser(), CompletionReader()
    for chunk in chunks:
        for payload in parser.feed(chunk):
            reader.add(payload)
    assert reader.complete


async def with_aiohttp(url: str, body: dict[str, Any], requests: int, concurrency: int) -> None:
    import aiohttp

    gate = asyncio.Semaphore(concurrency)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

        async def one() -> None:
            async with gate, session.post(url, json=body) as response:
                chunks = [chunk async for chunk in response.content.iter_any()]
            _read(chunks)

        await asyncio.gather(*(one() for _ in range(requests)))


async def with_httpx(url: str, body: dict[str, Any], requests: int, concurrency: int) -> None:
    import httpx

    gate = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(limits=limits, timeout=None) as client:

        async def one() -> None:
            async with gate, client.stream("POST", url, json=body) as response:
                chunks = [chunk async for chunk in response.aiter_raw()]
            _read(chunks)

        await asyncio.gather(*(one() for _ in range(requests)))


Client = Callable[[str, dict[str, Any], int, int], Awaitable[None]]


def measure(
    client: Client, url: str, body: dict[str, Any], requests: int, concurrency: int
) -> dict[str, float]:
    cpu, wall = time.process_time(), time.perf_counter()
    asyncio.run(client(url, body, requests, concurrency))  # type: ignore[arg-type]
    return {"cpu_s": time.process_time() - cpu, "wall_s": time.perf_counter() - wall}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--serve", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, default=result_path("http-clients"))
    args = parser.parse_args()
    if args.serve is not None:
        serve(args.serve)
        return 0
    from tests.e2e.harness import free_port

    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "bench.http_clients", "--serve", str(port)])
    url = f"http://127.0.0.1:{port}/v1/completions"
    body = {"model": "m", "prompt": list(range(PROMPT_TOKENS)), "max_tokens": 256, "stream": True}
    try:
        time.sleep(2.0)
        clients: dict[str, Client] = {"aiohttp": with_aiohttp, "httpx": with_httpx}
        for client in clients.values():  # warm both (imports, first connections)
            measure(client, url, body, 16, 16)
        rounds: dict[str, list[dict[str, float]]] = {name: [] for name in clients}
        for _ in range(args.rounds):
            for name, client in clients.items():
                figures = measure(client, url, body, args.requests, args.concurrency)
                rounds[name].append(figures)
                print(name, figures, flush=True)
    finally:
        server.terminate()
        server.wait(10)
    import aiohttp
    import httpx

    summary = {
        name: {
            "cpu_ms_per_request": [round(1000 * r["cpu_s"] / args.requests, 3) for r in runs],
            "wall_s": [round(r["wall_s"], 3) for r in runs],
            "cpu_ms_per_request_median": round(
                1000 * statistics.median(r["cpu_s"] for r in runs) / args.requests, 3
            ),
        }
        for name, runs in rounds.items()
    }
    result = {
        "what": "client CPU per streamed completion (docsumd's request shape), aiohttp against httpx",
        "machine": platform.platform(),
        "versions": {
            "aiohttp": aiohttp.__version__,
            "httpx": httpx.__version__,
            "python": platform.python_version(),
        },
        "requests": args.requests,
        "concurrency": args.concurrency,
        "prompt_tokens": PROMPT_TOKENS,
        "rounds": args.rounds,
        "clients": summary,
        "httpx_over_aiohttp_cpu": round(
            summary["httpx"]["cpu_ms_per_request_median"] / summary["aiohttp"]["cpu_ms_per_request_median"], 3
        ),
    }
    write_result(args.json, result, indent=1)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
