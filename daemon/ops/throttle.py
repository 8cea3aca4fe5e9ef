"""Log a recurring condition at most once in a while, saying how often it recurred meanwhile.

A condition that recurs on every loop turn (out of file descriptors, a client flood) must not turn
into one log line per occurrence: that floods the journal, costs CPU exactly when the process is
short of resources, and buries everything else.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class LogThrottle:
    """Lets one occurrence through per ``interval`` seconds and counts those it held back.

    Use it as: ``if (held := throttle.pass_through()) is not None: log.warning(..., suppressed=held)``.
    """

    def __init__(self, interval: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self._clock = clock
        self._last: float | None = None
        self._held = 0
        self.total = 0

    def pass_through(self) -> int | None:
        """Record one occurrence. None: do not log it; else log it, with this many held back since the
        last logged one."""
        self.total += 1
        now = self._clock()
        if self._last is not None and now - self._last < self.interval:
            self._held += 1
            return None
        self._last = now
        held, self._held = self._held, 0
        return held
