"""How long to wait before trying a refused or failed engine request again: exponential backoff with
full jitter, and the ``Retry-After`` a server may send.

Full jitter (a uniform draw between 0 and the exponential bound) keeps the clients that a full engine
turned away at the same moment from coming back at the same moment: retries that arrive together are
what turns a busy server into an overloaded one.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Final

MAX_RETRY_AFTER_SECONDS: Final = 300.0
"""A ``Retry-After`` longer than this is read as this (a server cannot park a document for hours)."""


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential backoff with full jitter: the n-th retry (0-based) waits a uniform draw in
    ``[0, min(cap, first * factor**n)]``, at least ``floor``."""

    first_seconds: float = 0.2
    cap_seconds: float = 10.0
    factor: float = 2.0
    floor_seconds: float = 0.02

    def bound(self, attempt: int) -> float:
        """The longest wait before retry ``attempt`` (0-based)."""
        return min(self.cap_seconds, self.first_seconds * self.factor ** min(attempt, 64))

    def delay(
        self, attempt: int, *, retry_after: float | None = None, rng: random.Random | None = None
    ) -> float:
        """Seconds to wait before retry ``attempt``; at least ``retry_after`` when the server sent one."""
        draw = (rng or random).uniform(0.0, self.bound(attempt))
        wait = max(self.floor_seconds, draw)
        if retry_after is not None:
            wait = max(wait, min(retry_after, MAX_RETRY_AFTER_SECONDS))
        return wait


def retry_after_seconds(value: str | None, *, now: float) -> float | None:
    """A ``Retry-After`` header's seconds from ``now`` (Unix time): delay-seconds or an HTTP date;
    None when absent or unreadable (it is only a hint)."""
    if not value:
        return None
    text = value.strip()
    if text.isdigit():
        return min(float(text), MAX_RETRY_AFTER_SECONDS)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        return None
    return min(max(0.0, when.timestamp() - now), MAX_RETRY_AFTER_SECONDS)
