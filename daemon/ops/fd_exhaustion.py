"""Running out of file descriptors: a condition to wait out, not a crash and not a log flood.

``EMFILE`` (this process's open-file limit, ``LimitNOFILE`` under systemd) or ``ENFILE`` (the whole
system's) can hit anything that opens something: the inbox rescan, reading an input, writing a
result, syncing a folder, accepting a connection. Descriptors come back as connections close and
work finishes, so docsumd waits and retries instead of failing the document (it is not the
document's fault) or exiting (a restart would not fix a limit). Each place logs the condition at
most once per :data:`LOG_INTERVAL_SECONDS`, with how often it recurred meanwhile.
"""

from __future__ import annotations

import asyncio
import errno
import resource
from collections.abc import Awaitable, Callable
from typing import Final, TypeVar

from daemon.ops.logging import get_logger
from daemon.ops.throttle import LogThrottle

log = get_logger(__name__)

T = TypeVar("T")

ERRNOS: Final = frozenset({errno.EMFILE, errno.ENFILE})
LOG_INTERVAL_SECONDS: Final = 30.0
RETRY_FIRST_SECONDS: Final = 0.1
RETRY_MAX_SECONDS: Final = 2.0

_throttles: dict[str, LogThrottle] = {}


def is_fd_exhaustion(exc: BaseException) -> bool:
    """Whether ``exc`` says the process or the system is out of file descriptors."""
    return isinstance(exc, OSError) and exc.errno in ERRNOS


def note_fd_exhaustion(where: str, exc: OSError) -> None:
    """Record that ``where`` (a fixed phrase, e.g. "inbox rescan") ran out of descriptors; logged as a
    warning at most once per :data:`LOG_INTERVAL_SECONDS` for each ``where``."""
    throttle = _throttles.setdefault(where, LogThrottle(LOG_INTERVAL_SECONDS))
    held = throttle.pass_through()
    if held is None:
        return
    soft_limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    log.warning(
        "out of file descriptors; retrying",
        where=where,
        error=exc.strerror or str(exc),
        open_files_limit=soft_limit,
        suppressed=held,
        occurrences=throttle.total,
    )


async def retry_on_fd_exhaustion(
    operation: Callable[[], T],
    *,
    where: str,
    run: Callable[[Callable[[], T]], Awaitable[T]] | None = None,
) -> T:
    """Run the blocking ``operation`` in a thread; while it fails for want of file descriptors, note
    it and try again after a growing pause (up to :data:`RETRY_MAX_SECONDS`). Any other error is
    raised. Cancellable between tries (a drain deadline ends the wait), so ``operation`` must be safe
    to repeat. ``run`` runs it off the event loop (default :func:`asyncio.to_thread`; the folder path
    passes its own bounded-thread pool, :mod:`daemon.fs.blocking_io`)."""
    pause = RETRY_FIRST_SECONDS
    while True:
        try:
            return await (asyncio.to_thread(operation) if run is None else run(operation))
        except OSError as exc:
            if not is_fd_exhaustion(exc):
                raise
            note_fd_exhaustion(where, exc)
        await asyncio.sleep(pause)
        pause = min(pause * 2, RETRY_MAX_SECONDS)
