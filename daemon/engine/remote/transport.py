"""HTTP to the servers: one aiohttp session, TLS and the API key, and the outcome of one completion.

Why aiohttp: it is already docsumd's dependency (the metrics endpoint), and over the same 400 streamed
completions against a local server it used less CPU per request than httpx (``bench/http_clients.py``,
README "Remote engines"); httpx would be a new dependency of the default install besides.

Every answer is hostile until checked: bodies are read with a bound, JSON is type-checked where it is
used, redirects are not followed (a server that redirects is misconfigured, and following one would
send the API key elsewhere), and proxies from the environment are not used unless the operator
says so (``trust_env``: off).

:func:`stream_completion` turns every way a completion can end into one of four outcomes:

* a :class:`~daemon.contracts.Generation`: done;
* :class:`Refused` (429, 503, 502, or the in-band 503 of a ``200`` stream): the server did not take the
  request; send it again after a wait, elsewhere if possible, as often as it takes;
* :class:`Lost` (a connection refused or cut, a timeout, 500, 504, an in-band 500, a stream that ends
  without a finish): the answer is gone; ``started`` says whether the server had taken the request,
  which counts towards ``max_lost_tries`` (the request may be what kills the server);
* :class:`Failed` (another 4xx): the server refused this request for good; with ``too_long`` set,
  because the prompt does not fit its context.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import aiohttp

from daemon.config import RemoteEngineConfig
from daemon.contracts import Generation
from daemon.engine.backoff import retry_after_seconds
from daemon.engine.remote.completions import (
    CompletionReader,
    InBandError,
    MalformedStreamError,
    ServerError,
    server_error,
)
from daemon.engine.remote.sse import EventParser, StreamTooLargeError

MAX_JSON_BYTES: Final = 4 << 20
"""The largest JSON answer read (``/v1/models``, ``/tokenize``, an error body): 4 MiB."""
MAX_METRICS_BYTES: Final = 16 << 20
"""The largest ``/metrics`` answer read: 16 MiB (vLLM's is about 50 KB)."""
KEEPALIVE_SECONDS: Final = 4.0
"""How long an idle connection to a server is kept for reuse."""
REFUSED_STATUSES: Final = frozenset({429, 502, 503})
"""Statuses that mean the request was not taken: full (429, 503) or a gateway without a server (502)."""
LOST_STATUSES: Final = frozenset({500, 504})
"""Statuses that mean the answer is lost after the request may have been taken."""


class Refused(Exception):
    """The server did not take the request (see the module's doc)."""

    def __init__(self, status: int, message: str, retry_after: float | None = None) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.retry_after = retry_after


class Lost(Exception):
    """The answer is lost; ``started``: the server had taken the request."""

    def __init__(self, message: str, *, started: bool, connect: bool = False) -> None:
        super().__init__(message)
        self.started = started
        self.connect = connect
        """It never connected (refused, unreachable): the server is down."""


class Failed(Exception):
    """The server refused this request for good (a 4xx other than 429)."""

    def __init__(self, error: ServerError) -> None:
        super().__init__(f"{error.status}: {error.message}")
        self.error = error

    @property
    def too_long(self) -> bool:
        """The prompt does not fit the server's context."""
        return self.error.prompt_too_long


@dataclass(frozen=True, slots=True)
class Deadlines:
    """How long one completion may take: its first output, and all of it (seconds from sending)."""

    first_output: float
    total: float


def deadlines(config: RemoteEngineConfig, prompt_tokens: int, max_tokens: int) -> Deadlines:
    """The deadlines of a request of this size (``timeout_*`` keys): the base, plus the prompt at the
    slowest prefill rate worth waiting for, plus the output budget at the slowest decode rate."""
    first = config.timeout_base_seconds + prompt_tokens / config.timeout_prefill_tokens_per_second
    return Deadlines(first, first + max_tokens / config.timeout_decode_tokens_per_second)


def ssl_context(config: RemoteEngineConfig) -> ssl.SSLContext:
    """TLS for https endpoints: verified against ``ca_file`` (else the system's CAs), with the client
    certificate for mutual TLS when given; nothing verified with ``verify_tls = false``."""
    context = ssl.create_default_context(cafile=str(config.ca_file) if config.ca_file else None)
    if not config.verify_tls:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if config.client_cert_file is not None and config.client_key_file is not None:
        context.load_cert_chain(str(config.client_cert_file), str(config.client_key_file))
    return context


def new_session(config: RemoteEngineConfig, *, user_agent: str) -> aiohttp.ClientSession:
    """The one session of the remote engine (connections are kept alive and reused).

    No connection limit: admission bounds the requests in flight, and a limit here would queue them
    in aiohttp's order instead of admission's."""
    # Idle connections are dropped before uvicorn's (vLLM's server's) 5-s keep-alive closes them:
    # a request sent on a connection the server is closing fails before it starts.
    connector = aiohttp.TCPConnector(
        limit=0, ssl=ssl_context(config), keepalive_timeout=KEEPALIVE_SECONDS, enable_cleanup_closed=True
    )
    return aiohttp.ClientSession(
        connector=connector,
        timeout=aiohttp.ClientTimeout(
            total=None, connect=config.connect_timeout_seconds, sock_connect=config.connect_timeout_seconds
        ),
        headers={"User-Agent": user_agent},
        trust_env=False,
        auto_decompress=True,
    )


async def read_bounded(response: aiohttp.ClientResponse, limit: int) -> bytes:
    """The body of ``response``, at most ``limit`` bytes (ValueError beyond)."""
    body = bytearray()
    async for chunk in response.content.iter_any():
        body += chunk
        if len(body) > limit:
            raise ValueError(f"the answer is larger than {limit} bytes")
    return bytes(body)


async def get_json(
    session: aiohttp.ClientSession,
    url: str,
    *,
    headers: dict[str, str],
    seconds: float,
    body: dict[str, Any] | None = None,
) -> tuple[int, Any]:
    """GET ``url`` (POST ``body`` when given): the status and the parsed JSON (None when the body is
    not JSON). aiohttp's and the OS's connection errors, TimeoutError and ValueError (too large)
    propagate."""
    async with asyncio.timeout(seconds):
        request = (
            session.post(url, json=body, headers=headers, allow_redirects=False)
            if body is not None
            else session.get(url, headers=headers, allow_redirects=False)
        )
        async with request as response:
            raw = await read_bounded(response, MAX_JSON_BYTES)
            status = response.status
    try:
        return status, json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        return status, None


async def get_text(
    session: aiohttp.ClientSession, url: str, *, headers: dict[str, str], seconds: float
) -> tuple[int, str]:
    """GET ``url``: the status and the body as text (``/metrics``), bounded."""
    async with asyncio.timeout(seconds), session.get(url, headers=headers, allow_redirects=False) as response:
        raw = await read_bounded(response, MAX_METRICS_BYTES)
        return response.status, raw.decode("utf-8", errors="replace")


async def stream_completion(
    session: aiohttp.ClientSession,
    url: str,
    body: dict[str, Any],
    *,
    headers: dict[str, str],
    limits: Deadlines,
    on_first_output: Callable[[], None] | None = None,
) -> Generation:
    """Send one streamed completion and read it to its end (see the module's doc for what it raises).
    Cancellation closes the connection, which makes vLLM abort the request."""
    started = time.monotonic()
    reader = CompletionReader()
    first_output_s: float | None = None
    response: aiohttp.ClientResponse | None = None
    try:
        async with asyncio.timeout(limits.first_output):
            response = await session.post(url, json=body, headers=headers, allow_redirects=False)
            if response.status != 200:
                raise await _error_status(response)
            parser = EventParser()
            chunks = response.content.iter_any()
            while not reader.first_seen:
                chunk = await anext(chunks)
                for payload in parser.feed(chunk):
                    if reader.add(payload):
                        first_output_s = time.monotonic() - started
                        if on_first_output is not None:
                            on_first_output()
        async with asyncio.timeout(max(0.0, limits.total - (time.monotonic() - started))):
            async for chunk in chunks:
                for payload in parser.feed(chunk):
                    reader.add(payload)
                if reader.done:
                    break
    except (Refused, Lost, Failed):
        _close(response)
        raise
    except InBandError as exc:
        _close(response)
        raise _in_band(exc.error) from None
    except StopAsyncIteration:
        _close(response)
        raise Lost("the stream ended before any output", started=True) from None
    except TimeoutError:
        _close(response)
        where = "its first output" if not reader.first_seen else "its end"
        raise Lost(f"no {where} within the request's deadline", started=response is not None) from None
    except (MalformedStreamError, StreamTooLargeError) as exc:
        _close(response)
        raise Lost(f"a stream that does not follow the protocol: {exc}", started=True) from None
    except (aiohttp.ClientConnectorError, ConnectionRefusedError) as exc:
        _close(response)
        raise Lost(f"cannot connect: {exc}", started=False, connect=True) from None
    except (aiohttp.ClientError, OSError) as exc:
        _close(response)
        raise Lost(
            f"the connection broke: {type(exc).__name__}: {exc}", started=response is not None
        ) from None
    except BaseException:  # cancelled: close the connection so the server aborts the request
        _close(response)
        raise
    if response is not None:
        response.release()
    if not reader.complete:
        raise Lost("the stream ended without a finish", started=True)
    prompt_tokens = reader.prompt_tokens if reader.prompt_tokens is not None else len(body["prompt"])
    return Generation(
        text=reader.text,
        prompt_tokens=prompt_tokens,
        # A server that sends no usage (not asked for by name everywhere): its events are a floor.
        output_tokens=reader.output_tokens if reader.output_tokens is not None else reader.events,
        cached_prompt_tokens=min(reader.cached_prompt_tokens, prompt_tokens),
        finish_reason=reader.finish_reason,
        first_token_s=first_output_s,
        total_s=time.monotonic() - started,
    )


async def _error_status(response: aiohttp.ClientResponse) -> Exception:
    """The outcome of a completion answered with a status other than 200."""
    try:
        raw = await read_bounded(response, MAX_JSON_BYTES)
        payload: Any = json.loads(raw)
    except (ValueError, aiohttp.ClientError, OSError, RecursionError):
        payload = f"HTTP {response.status}"
    error = server_error(payload, response.status)
    error = ServerError(response.status, error.message, error.param)  # the HTTP status wins here
    if response.status in REFUSED_STATUSES:
        retry_after = retry_after_seconds(response.headers.get("Retry-After"), now=time.time())
        return Refused(response.status, error.message, retry_after)
    if response.status in LOST_STATUSES or response.status >= 500:
        return Lost(f"{response.status}: {error.message}", started=True)
    return Failed(error)


def _in_band(error: ServerError) -> Exception:
    """The outcome of an error event inside a ``200`` stream."""
    if error.status in REFUSED_STATUSES:
        return Refused(error.status, error.message)
    if 400 <= error.status < 500:
        return Failed(error)
    return Lost(f"{error.status} in the stream: {error.message}", started=True)


def _close(response: aiohttp.ClientResponse | None) -> None:
    if response is not None:
        with contextlib.suppress(Exception):
            response.close()
