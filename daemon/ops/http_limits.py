"""Limits for the HTTP endpoint: a cap on open connections and deadlines for slow clients.

aiohttp's server has neither. A client that connects and sends nothing, sends its headers a byte at
a time, or never reads the response holds its connection, and a file descriptor, for as long as
aiohttp's keep-alive timeout (an hour in aiohttp 3.14); enough of them exhaust the process's
descriptors, and then the inbox rescan, result writes and everything else that opens a file fail.

:class:`LimitedListener` serves an aiohttp runner on ``host:port`` with :class:`ConnectionLimits`:

* at most ``max_connections`` connections at once. At the cap, a new connection takes the place of
  the connection that has waited longest without a request in progress (one still sending its
  headers, or kept alive idle): that one is aborted. Only when every connection has a request in
  progress (bounded by ``response_seconds``) is the new one closed as soon as it is accepted. So a
  client holding every slot with half-sent requests cannot starve a health probe: the probe, which
  sends its request at once, evicts the stalest of them. The descriptor bound holds either way;
* a request's headers must arrive within ``request_seconds`` of the connection opening, or of the
  first byte of the next request on a kept-alive connection;
* a handler and the writing of its response get ``response_seconds``;
* a kept-alive connection may idle ``idle_seconds`` between requests.

A connection past its deadline is aborted. Running out of descriptors while accepting (EMFILE) is
logged at most once in a while (:mod:`daemon.ops.fd_exhaustion`) and accepting resumes a second later.

Malformed requests and failing handlers are logged by :class:`ServerErrorLog` (aiohttp's own server
logger would write an error line with a traceback for each): one warning per interval, without a
traceback, with the count of those held back.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import errno
import logging
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web

from daemon.lifecycle import Lifecycle
from daemon.ops.fd_exhaustion import is_fd_exhaustion, note_fd_exhaustion
from daemon.ops.logging import get_logger
from daemon.ops.throttle import LogThrottle

log = get_logger(__name__)

ACCEPT_RETRY_SECONDS = 1.0
"""After a failed accept (out of descriptors or buffers), the next try comes this much later."""
_LOG_INTERVAL_SECONDS = 60.0
_BACKLOG = 128
_ACCEPT_TRANSIENT = frozenset({errno.ECONNABORTED, errno.EPROTO, errno.EAGAIN, errno.EINTR})


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """How many connections the endpoint keeps, and how long a slow client may take (seconds)."""

    max_connections: int = 64
    request_seconds: float = 10.0
    response_seconds: float = 30.0
    idle_seconds: float = 30.0


class _State(enum.Enum):
    READING = "reading"  # waiting for a request's headers
    BUSY = "busy"  # a handler runs or its response is written
    IDLE = "idle"  # kept alive between requests


class _Counters:
    """What the listener did to connections, shared by its connections."""

    def __init__(self) -> None:
        self.open = 0
        self.refused = 0
        self.timed_out = 0
        self.evicted = 0
        self.live: dict[_LimitedConnection, None] = {}  # counted connections
        self.evictions = LogThrottle(_LOG_INTERVAL_SECONDS)
        self.refusals = LogThrottle(_LOG_INTERVAL_SECONDS)
        self.timeouts = LogThrottle(_LOG_INTERVAL_SECONDS)
        self.accept_errors = LogThrottle(_LOG_INTERVAL_SECONDS)


class _LimitedConnection(asyncio.Protocol):
    """Wraps aiohttp's protocol for one connection: enforces the cap and the deadlines."""

    def __init__(
        self, inner_factory: Callable[[], asyncio.Protocol], limits: ConnectionLimits, counters: _Counters
    ) -> None:
        self._inner_factory = inner_factory
        self._limits = limits
        self._counters = counters
        self._inner: asyncio.Protocol | None = None
        self._transport: asyncio.Transport | None = None
        self._deadline: asyncio.TimerHandle | None = None
        self._state = _State.READING
        self.since = time.monotonic()  # when the current state began
        self._counted = False

    @property
    def evictable(self) -> bool:
        """No request in progress: still reading headers, or idle between requests."""
        return self._state is not _State.BUSY and self._counted

    def _uncount(self) -> None:
        if self._counted:
            self._counted = False
            self._counters.open -= 1
            self._counters.live.pop(self, None)

    def evict(self) -> None:
        """Make room for a new connection: stop counting this one and abort it."""
        self._disarm()
        self._uncount()
        if self._transport is not None:
            self._transport.abort()

    # -- asyncio.Protocol ------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._counters.open += 1
        self._counters.live[self] = None
        self._counted = True
        self._transport = transport
        self._inner = self._inner_factory()
        self._inner.connection_made(transport)
        self._arm(self._limits.request_seconds)

    def data_received(self, data: bytes) -> None:
        if self._inner is None:
            return
        if self._state is _State.IDLE:
            # The next request begins: its headers get request_seconds from their first byte, once.
            self._state = _State.READING
            self.since = time.monotonic()
            self._arm(self._limits.request_seconds)
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return None if self._inner is None else self._inner.eof_received()

    def pause_writing(self) -> None:
        if self._inner is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._inner is not None:
            self._inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._inner is None:
            return
        inner, self._inner = self._inner, None
        self._uncount()
        inner.connection_lost(exc)

    # -- called by the middleware ----------------------------------------------------------------

    def handler_started(self) -> None:
        """A request's headers are in and its handler runs: it and its response get response_seconds."""
        self._state = _State.BUSY
        self.since = time.monotonic()
        self._arm(self._limits.response_seconds)

    def handler_finished(self) -> None:
        """The handler returned: writing its response and then idling until the next request get
        the longer of idle_seconds and response_seconds together."""
        self._state = _State.IDLE
        self.since = time.monotonic()
        self._arm(max(self._limits.idle_seconds, self._limits.response_seconds))

    # -- deadlines -------------------------------------------------------------------------------

    def _arm(self, seconds: float) -> None:
        self._disarm()
        self._deadline = asyncio.get_running_loop().call_later(seconds, self._expire)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expire(self) -> None:
        self._deadline = None
        counters = self._counters
        counters.timed_out += 1
        if (held := counters.timeouts.pass_through()) is not None:
            log.warning(
                "metrics endpoint: closing a connection past its deadline",
                state=self._state.value,
                suppressed=held,
                timed_out=counters.timed_out,
            )
        if self._transport is not None:
            self._transport.abort()


@web.middleware
async def deadline_middleware(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Tells the request's connection when its handler runs (for apps a :class:`LimitedListener` serves)."""
    transport = request.transport
    connection = transport.get_protocol() if transport is not None else None
    if not isinstance(connection, _LimitedConnection):
        return await handler(request)
    connection.handler_started()
    try:
        return await handler(request)
    finally:
        connection.handler_finished()


class LimitedListener(Lifecycle):
    """Accepts connections on ``host:port`` for an aiohttp runner, within :class:`ConnectionLimits`.

    Its own accept loop, not ``loop.create_server``: asyncio's accept handler (CPython 3.11) keeps
    calling ``accept()`` after EMFILE, up to the backlog (128) times per wake-up, reporting each
    failure through the loop's exception handler as an error with a traceback (a log flood), and
    leaves a retry callback per failure that fails again once the socket is closed. Here a failed
    accept is noted (at most once in a while) and retried after :data:`ACCEPT_RETRY_SECONDS`, and a
    connection over the cap is closed before any transport is built for it.
    """

    def __init__(self, runner: web.BaseRunner, host: str, port: int, limits: ConnectionLimits) -> None:
        self._runner = runner
        self.host = host
        self.port = port
        self.limits = limits
        self._counters = _Counters()
        self._socket: socket.socket | None = None
        self._accepting: asyncio.Task[None] | None = None

    @property
    def open_connections(self) -> int:
        """Connections open now."""
        return self._counters.open

    @property
    def refused_connections(self) -> int:
        """Connections closed at once because the cap was reached."""
        return self._counters.refused

    @property
    def timed_out_connections(self) -> int:
        """Connections aborted past a deadline."""
        return self._counters.timed_out

    @property
    def evicted_connections(self) -> int:
        """Connections without a request in progress aborted to make room for a new one at the cap."""
        return self._counters.evicted

    async def start(self) -> None:
        """Bind (port 0: a free port, then in :attr:`port`) and accept connections."""
        if self._socket is not None:
            return
        family = socket.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[
            0
        ][0]
        sock = socket.create_server((self.host, self.port), family=family, backlog=_BACKLOG)
        sock.setblocking(False)
        self._socket = sock
        self.port = int(sock.getsockname()[1])
        self._accepting = asyncio.create_task(self._accept_loop(sock), name="metrics-accept")

    async def stop(self) -> None:
        """Stop accepting (open connections are closed by the runner's cleanup)."""
        if self._socket is None:
            return
        sock, self._socket = self._socket, None
        if self._accepting is not None:
            self._accepting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._accepting
            self._accepting = None
        sock.close()

    async def _accept_loop(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, _ = await loop.sock_accept(sock)
            except OSError as exc:
                if exc.errno in _ACCEPT_TRANSIENT:
                    continue  # the client gave up before we accepted it
                if is_fd_exhaustion(exc):
                    note_fd_exhaustion("accepting a metrics connection", exc)
                else:  # ENOBUFS, ENOMEM and the like: also a shortage to wait out
                    self._note_accept_error(exc)
                await asyncio.sleep(ACCEPT_RETRY_SECONDS)
                continue
            if self._counters.open >= self.limits.max_connections and not self._evict_one():
                self._refuse(conn)
                continue
            await self._serve(loop, conn)

    async def _serve(self, loop: asyncio.AbstractEventLoop, conn: socket.socket) -> None:
        server = self._runner.server
        if server is None:  # the runner is being cleaned up
            conn.close()
            return
        try:
            await loop.connect_accepted_socket(
                lambda: _LimitedConnection(server, self.limits, self._counters), conn
            )
        except OSError as exc:
            conn.close()
            log.debug("metrics endpoint: could not set up a connection", error=str(exc))

    def _evict_one(self) -> bool:
        """At the cap: abort the connection that has waited longest without a request in progress.
        False if every connection has one."""
        counters = self._counters
        victim = min((c for c in counters.live if c.evictable), key=lambda c: c.since, default=None)
        if victim is None:
            return False
        victim.evict()
        counters.evicted += 1
        if (held := counters.evictions.pass_through()) is not None:
            log.warning(
                "metrics endpoint: connection limit reached; closing the stalest connection without a "
                "request in progress",
                max_connections=self.limits.max_connections,
                suppressed=held,
                evicted=counters.evicted,
            )
        return True

    def _refuse(self, conn: socket.socket) -> None:
        counters = self._counters
        counters.refused += 1
        conn.close()
        if (held := counters.refusals.pass_through()) is not None:
            log.warning(
                "metrics endpoint: connection limit reached; closing new connections",
                max_connections=self.limits.max_connections,
                suppressed=held,
                refused=counters.refused,
            )

    def _note_accept_error(self, exc: OSError) -> None:
        if (held := self._counters.accept_errors.pass_through()) is not None:
            log.warning("metrics endpoint: accept failed; retrying", error=str(exc), suppressed=held)


class ServerErrorLog(logging.Logger):
    """The logger aiohttp's request handler is given (``AppRunner(..., logger=...)``).

    aiohttp logs each malformed request (and each exception a handler raises) with
    ``logger.exception``: an error line with a traceback, for every bad request a client cares to
    send. Here they become one warning per :data:`_LOG_INTERVAL_SECONDS`, with the error's text and
    the number held back since the last one, never a traceback. Debug lines go to debug without
    their traceback.
    """

    def __init__(self, interval: float = _LOG_INTERVAL_SECONDS) -> None:
        super().__init__("docsumd.http", logging.DEBUG)
        self.throttle = LogThrottle(interval)

    def _note(self, msg: object, args: tuple[object, ...], exc_info: object) -> None:
        if (held := self.throttle.pass_through()) is None:
            return
        error = exc_info if isinstance(exc_info, BaseException) else None
        text = str(msg)
        with contextlib.suppress(TypeError, ValueError):
            text = text % args if args else text
        log.warning(
            "metrics endpoint: bad request or failed handler",
            detail=text,
            error=(f"{type(error).__name__}: {error}" if error is not None else None),
            suppressed=held,
            total=self.throttle.total,
        )

    def exception(self, msg: object, *args: object, exc_info: object = True, **kwargs: object) -> None:
        self._note(msg, args, exc_info)

    def error(self, msg: object, *args: object, **kwargs: object) -> None:
        self._note(msg, args, kwargs.get("exc_info"))

    def warning(self, msg: object, *args: object, **kwargs: object) -> None:
        self._note(msg, args, kwargs.get("exc_info"))

    def debug(self, msg: object, *args: object, **kwargs: object) -> None:
        exc_info = kwargs.get("exc_info")
        text = str(msg)
        with contextlib.suppress(TypeError, ValueError):
            text = text % args if args else text
        log.debug(
            "metrics endpoint: " + text,
            error=(str(exc_info) if isinstance(exc_info, BaseException) else None),
        )
