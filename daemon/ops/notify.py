"""The systemd notify protocol (``sd_notify(3)``): READY, STOPPING, STATUS and watchdog pings.

Under a ``Type=notify`` unit, systemd passes a datagram socket in ``NOTIFY_SOCKET`` and, with
``WatchdogSec=``, the ping period in ``WATCHDOG_USEC``. The entry point reads both and builds a
:class:`SystemdNotifier`; without a socket every call is a no-op, so the same code runs anywhere.

The watchdog pings come from a task on the event loop, so a loop that hangs (a blocking call, a
deadlock) stops the pings and systemd restarts the daemon; a slow engine start does not, because the
engine is built in a thread and the loop stays live. With a health check (:meth:`SystemdNotifier.
watch_health`: the service's, which fails when work stopped moving) a ping is sent only while it
passes, so a daemon whose loop turns but whose work is wedged is restarted too.

Written out rather than taken from a library: the protocol is one datagram per message, and the
packages that wrap it are either unmaintained (``sdnotify``) or need systemd's C headers to build
(``systemd-python``).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable

from daemon.lifecycle import Lifecycle
from daemon.ops.logging import get_logger

log = get_logger(__name__)


class SystemdNotifier(Lifecycle):
    """Sends notify messages to systemd; owns the watchdog task. ``start()``/``stop()`` are idempotent."""

    def __init__(self, socket_path: str | None, *, watchdog_usec: int | None = None) -> None:
        """``socket_path``: ``$NOTIFY_SOCKET`` (``@name`` is an abstract socket); ``watchdog_usec``:
        ``$WATCHDOG_USEC``. Both None outside systemd."""
        self._address = _socket_address(socket_path) if socket_path else None
        self.watchdog_seconds = watchdog_usec / 1e6 if watchdog_usec else None
        self._socket: socket.socket | None = None
        self._watchdog: asyncio.Task[None] | None = None
        self._healthy: Callable[[], bool] | None = None

    @property
    def enabled(self) -> bool:
        """Whether a notify socket was given."""
        return self._address is not None

    def send(self, *fields: str) -> None:
        """Send ``KEY=VALUE`` fields as one message; failures are logged, never raised."""
        if self._address is None:
            return
        try:
            if self._socket is None:
                # Non-blocking: sent from the event loop, a send to a receiver that stopped reading
                # (its queue full) must fail at once, not freeze the daemon until it reads again.
                self._socket = socket.socket(
                    socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC | socket.SOCK_NONBLOCK
                )
            self._socket.sendto("\n".join(fields).encode(), self._address)
        except OSError as exc:
            log.warning("systemd notify failed", error=str(exc), fields=fields)

    def ready(self, status: str = "ready") -> None:
        """The service is up: the engine is warm and the sources run."""
        self.send("READY=1", f"STATUS={status}")

    def stopping(self, status: str = "draining") -> None:
        """The service began its drain."""
        self.send("STOPPING=1", f"STATUS={status}")

    def status(self, text: str) -> None:
        """A one-line status for ``systemctl status``."""
        self.send(f"STATUS={text}")

    def watch_health(self, healthy: Callable[[], bool]) -> None:
        """Send watchdog pings only while ``healthy()``: once it fails, systemd restarts the daemon
        after ``WatchdogSec`` unless it passes again before."""
        self._healthy = healthy

    async def start(self) -> None:
        """Start the watchdog pings (at half the period systemd asked for)."""
        if self._watchdog is None and self.enabled and self.watchdog_seconds:
            self._watchdog = asyncio.create_task(self._ping(self.watchdog_seconds / 2), name="watchdog")

    async def stop(self) -> None:
        """Stop the pings and close the socket."""
        task, self._watchdog = self._watchdog, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._socket is not None:
            self._socket.close()
            self._socket = None

    async def _ping(self, period: float) -> None:
        withheld = False
        while True:
            if self._healthy is None or self._healthy():
                self.send("WATCHDOG=1")
                withheld = False
            elif not withheld:
                withheld = True
                log.error("not healthy: watchdog pings withheld, systemd will restart the daemon")
            await asyncio.sleep(period)


def _socket_address(path: str) -> str:
    # An abstract socket is written "@name" and addressed with a leading NUL byte.
    return "\0" + path[1:] if path.startswith("@") else path
