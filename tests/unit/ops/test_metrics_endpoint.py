"""Unit tests for the HTTP endpoint under abuse (daemon.ops.metrics.MetricsServer, daemon.ops.http_limits).

Real sockets on loopback, no fakes of the server: slow and idle clients are closed at their deadline,
connections past the cap are closed at once, normal and kept-alive requests keep working, and running
out of file descriptors while accepting (a child process with a low open-file limit) is logged at
most once in a while and recovers by itself. Deadlines are a fraction of a second here; every wait
is bounded, and the assertions allow for a slow machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from structlog.typing import EventDict

from daemon.ops import http_limits
from daemon.ops.http_limits import ConnectionLimits
from daemon.ops.metrics import MetricsServer

REPO = Path(__file__).resolve().parents[3]
LIMITS = ConnectionLimits(max_connections=4, request_seconds=0.5, response_seconds=2.0, idle_seconds=1.0)
WAIT = 10.0


@contextlib.asynccontextmanager
async def serving(limits: ConnectionLimits = LIMITS) -> AsyncIterator[MetricsServer]:
    """The endpoint on a free loopback port, in the test's own event loop (not a fixture's)."""
    async with MetricsServer(
        "127.0.0.1", 0, healthy=lambda: True, ready=lambda: True, limits=limits
    ) as server:
        yield server


def warnings(logs: list[EventDict]) -> list[EventDict]:
    """The endpoint's warnings (daemon.ops.http_limits logs them)."""
    return [
        entry for entry in logs if entry["logger"] == http_limits.__name__ and entry["log_level"] == "warning"
    ]


async def get(port: int, path: str = "/healthz") -> tuple[int, bytes]:
    """One HTTP/1.1 request on a fresh connection (closed after the response)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        await writer.drain()
        response = await asyncio.wait_for(reader.read(), WAIT)
    finally:
        writer.close()
    status = int(response.split(b" ", 2)[1]) if response else 0
    return status, response


async def closed_within(reader: asyncio.StreamReader, seconds: float) -> float | None:
    """Seconds until the server closes the connection (EOF or reset), or None if it did not in time."""
    started = time.monotonic()
    try:
        while await asyncio.wait_for(reader.read(65536), seconds):
            pass
    except TimeoutError:
        return None
    except ConnectionError:
        pass
    return time.monotonic() - started


async def test_normal_and_kept_alive_requests_work() -> None:
    async with serving() as server:
        assert (await get(server.port, "/metrics"))[0] == 200
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        for _ in range(3):  # one connection, three requests, as a Prometheus server scrapes
            writer.write(b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n")
            await writer.drain()
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), WAIT)
            assert head.startswith(b"HTTP/1.1 200")
            length = int(
                next(h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")).split(b":")[1]
            )
            await reader.readexactly(length)
        writer.close()
        assert server.listener is not None
        assert server.listener.timed_out_connections == 0


async def test_silent_client_is_closed_after_the_request_deadline() -> None:
    async with serving() as server:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        took = await closed_within(reader, WAIT)
        writer.close()
        assert took is not None
        assert LIMITS.request_seconds * 0.8 <= took < LIMITS.request_seconds + 3


async def test_trickling_headers_do_not_extend_the_deadline() -> None:
    """Slowloris: a byte every 0.1 s keeps the connection busy but never completes the headers."""
    async with serving() as server:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        started = time.monotonic()
        request = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 1000
        closed = False
        for byte in request:
            try:
                writer.write(bytes([byte]))
                await writer.drain()
            except ConnectionError:
                closed = True
                break
            if reader.at_eof():
                closed = True
                break
            await asyncio.sleep(0.1)
            if time.monotonic() - started > WAIT:
                break
        if not closed:
            closed = await closed_within(reader, 1.0) is not None
        took = time.monotonic() - started
        writer.close()
        assert closed, "a client trickling its headers was never closed"
        assert took < LIMITS.request_seconds + 3


async def test_idle_kept_alive_connection_is_closed() -> None:
    async with serving() as server:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        await writer.drain()
        await asyncio.wait_for(reader.readuntil(b"}"), WAIT)
        took = await closed_within(reader, WAIT)
        writer.close()
        assert took is not None
        assert took < max(LIMITS.idle_seconds, LIMITS.response_seconds) + 3


async def test_connections_over_the_cap_evict_the_stalest_and_are_logged_rarely(
    logs: list[EventDict],
) -> None:
    async with serving() as server:
        listener = server.listener
        assert listener is not None
        held = [
            await asyncio.open_connection("127.0.0.1", server.port) for _ in range(LIMITS.max_connections)
        ]
        await asyncio.sleep(0.1)
        assert listener.open_connections == LIMITS.max_connections
        extra = []
        for _ in range(20):
            extra.append(await asyncio.open_connection("127.0.0.1", server.port))
            await asyncio.sleep(0.01)  # accepted in this order
        clients = [*held, *extra]
        # The oldest 20 silent connections made room for the newer ones, at once; the newest stay.
        for reader, _ in clients[:20]:
            took = await closed_within(reader, 2.0)
            assert took is not None
            assert took < 0.3 + 0.02 * 20
        assert listener.open_connections == LIMITS.max_connections
        assert listener.evicted_connections == 20
        assert listener.refused_connections == 0
        evictions = [
            e for e in warnings(logs) if e["event"].startswith("metrics endpoint: connection limit reached")
        ]
        assert len(evictions) == 1
        for _, writer in clients:
            writer.close()
        assert (await get(server.port))[0] == 200


async def test_connections_with_requests_in_progress_are_not_evicted() -> None:
    """At the cap with every connection's handler running, a new connection is closed at once."""
    release = asyncio.Event()

    async def slow(request: web.Request) -> web.Response:
        await release.wait()
        return web.Response(text="done")

    app = web.Application(middlewares=[http_limits.deadline_middleware])
    app.router.add_get("/slow", slow)
    runner = web.AppRunner(app, access_log=None, logger=http_limits.ServerErrorLog())
    await runner.setup()
    listener = http_limits.LimitedListener(runner, "127.0.0.1", 0, LIMITS)
    await listener.start()
    try:
        busy = [
            await asyncio.open_connection("127.0.0.1", listener.port) for _ in range(LIMITS.max_connections)
        ]
        for _, writer in busy:
            writer.write(b"GET /slow HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            await writer.drain()
        await asyncio.sleep(0.2)
        reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
        took = await closed_within(reader, 2.0)
        writer.close()
        assert took is not None
        assert listener.refused_connections == 1
        assert listener.evicted_connections == 0
        release.set()
        for reader, writer in busy:
            assert b"done" in await asyncio.wait_for(reader.read(), WAIT)
            writer.close()
    finally:
        await listener.stop()
        await runner.cleanup()


async def test_probes_get_through_while_slow_clients_hold_every_slot() -> None:
    """80 local clients with half-sent requests (the default cap is 64): every /healthz still answers."""
    limits = ConnectionLimits(request_seconds=60, response_seconds=60, idle_seconds=60)
    async with serving(limits) as server:
        slow = []
        for _ in range(80):
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            slow.append((reader, writer))
        await asyncio.sleep(0.2)
        statuses = []
        for i in range(54):
            statuses.append((await get(server.port, "/healthz" if i % 2 else "/readyz"))[0])
            # the slow clients come back, as an attacker's would
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            slow.append((reader, writer))
        assert statuses == [200] * 54
        assert server.listener is not None
        assert server.listener.open_connections <= limits.max_connections
        for _, writer in slow:
            writer.close()


async def test_malformed_requests_are_logged_rarely_without_a_traceback(
    logs: list[EventDict], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with serving() as server:
        for _ in range(100):
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nNo colon here\r\n\r\n")
            response = await asyncio.wait_for(reader.read(), WAIT)
            writer.close()
            assert b" 400 " in response.split(b"\r\n", 1)[0]
        assert (await get(server.port))[0] == 200
    stdlib = [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]
    assert stdlib == []
    (warning,) = warnings(logs)
    assert warning["event"] == "metrics endpoint: bad request or failed handler"
    assert warning["suppressed"] == 0
    assert "BadHttpMessage" in warning["error"] or "400" in warning["error"]


@pytest.mark.usefixtures("logs")
async def test_stop_does_not_wait_for_slow_clients() -> None:
    endpoint = MetricsServer(
        "127.0.0.1",
        0,
        healthy=lambda: True,
        ready=lambda: True,
        limits=ConnectionLimits(max_connections=8, request_seconds=60, response_seconds=60, idle_seconds=60),
    )
    await endpoint.start()
    clients = [await asyncio.open_connection("127.0.0.1", endpoint.port) for _ in range(5)]
    await asyncio.sleep(0.1)
    started = time.monotonic()
    await endpoint.stop()
    await endpoint.stop()  # idempotent
    assert time.monotonic() - started < 5
    for _, writer in clients:
        writer.close()


# A child process: serves the endpoint, then uses up its own descriptors (a low RLIMIT_NOFILE, filled
# with /dev/null), so that accepting connections fails with EMFILE until the test tells it to free them.
_EMFILE_CHILD = textwrap.dedent(
    """
    import asyncio, json, logging, os, resource, sys
    from daemon.ops import fd_exhaustion
    from daemon.ops.metrics import MetricsServer
    from tests.doubles.logs import captured_logs

    errors = []
    class Count(logging.Handler):
        def emit(self, record):
            if record.levelno >= logging.ERROR:
                errors.append(record.getMessage())
    logging.getLogger().addHandler(Count())

    async def main():
        server = MetricsServer("127.0.0.1", 0, healthy=lambda: True, ready=lambda: True)
        await server.start()
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, int)  # start the executor now: importing later needs a descriptor
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
        fillers = []
        while True:
            try:
                fillers.append(os.open("/dev/null", os.O_RDONLY))
            except OSError:
                break
        print(json.dumps({"port": server.port}), flush=True)
        await loop.run_in_executor(None, sys.stdin.readline)  # the test says when to free them
        for fd in fillers:
            os.close(fd)
        await loop.run_in_executor(None, sys.stdin.readline)  # and when to stop
        await server.stop()
        warnings = [
            [entry["event"], entry.get("where")]
            for entry in logs
            if entry["logger"] == fd_exhaustion.__name__ and entry["log_level"] == "warning"
        ]
        print(json.dumps({"warnings": warnings, "errors": errors}), flush=True)

    with captured_logs() as logs:
        asyncio.run(main())
    """
)


async def json_line(stream: asyncio.StreamReader) -> dict[str, Any]:
    """The child's next JSON line (its log lines, on the same stream, are skipped)."""
    while True:
        line = await asyncio.wait_for(stream.readline(), 60)
        assert line, "the child exited early"
        if line.startswith(b"{"):
            data: dict[str, Any] = json.loads(line)
            return data


async def test_accept_out_of_descriptors_is_logged_once_and_recovers(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _EMFILE_CHILD,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        cwd=tmp_path,
        limit=1 << 24,
    )
    assert child.stdin is not None
    assert child.stdout is not None
    try:
        port = (await json_line(child.stdout))["port"]
        # These sit in the listen backlog: each accept fails with EMFILE; asyncio retries every second.
        waiting = [await asyncio.open_connection("127.0.0.1", port) for _ in range(3)]
        await asyncio.sleep(3.5)
        child.stdin.write(b"free\n")
        await child.stdin.drain()
        # Accepted and served once descriptors are back, without anything restarting.
        status, _ = await asyncio.wait_for(get(port), WAIT)
        assert status == 200
        for _, writer in waiting:
            writer.close()
        child.stdin.write(b"stop\n")
        await child.stdin.drain()
        report = await json_line(child.stdout)
    finally:
        if child.returncode is None:
            child.kill()
        await child.wait()
    # At least three failed accept rounds, one warning, and no error (no traceback per retry).
    assert report["warnings"] == [["out of file descriptors; retrying", "accepting a metrics connection"]]
    assert report["errors"] == []
