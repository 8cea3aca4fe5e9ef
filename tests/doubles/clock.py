"""The one fake clock: time that moves only when the test moves it."""

from __future__ import annotations


class FakeClock:
    """A monotonic clock and a wall clock that move together, only by :meth:`advance` or by setting
    :attr:`now`.

    Call it for the monotonic time, where code takes a ``clock=`` callable (admission, the log
    throttle, the progress watch); or put it in place of the ``time`` module where code calls
    ``time.monotonic()`` and ``time.time()`` (the folder source, to test settling).
    """

    def __init__(self, now: float = 0.0, *, wall: float = 1_700_000_000.0) -> None:
        self.now = now
        # Kept as an offset, not a second reading: setting ``now`` moves the wall clock too.
        self._wall_offset = wall - now

    def __call__(self) -> float:
        """The monotonic time, as ``time.monotonic()`` would give it."""
        return self.now

    def monotonic(self) -> float:
        """The monotonic time (standing in for ``time.monotonic``)."""
        return self.now

    def time(self) -> float:
        """The wall-clock time in seconds since the epoch (standing in for ``time.time``)."""
        return self.now + self._wall_offset

    def advance(self, seconds: float) -> None:
        """Let ``seconds`` pass, on both clocks."""
        self.now += seconds
