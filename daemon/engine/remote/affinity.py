"""Document affinity: every request of one document goes to the same endpoint.

A document's parts, combine steps and retries share their prompt prefixes (the profile's instruction;
a retried final step the whole prompt), and only the server that computed a prefix has it in its
prefix cache. So a document is *pinned* to one endpoint when its first request is placed, and all its
requests go there while it is up.

Where a new document goes: consistent hashing with bounded loads (Mirrokni, Thorup and Zadimoghaddam,
2018). Each endpoint has :data:`POINTS_PER_ENDPOINT` points on a hash ring; a document starts at its
own hash and takes the first endpoint clockwise that is usable, not busy, and whose load (tokens of
docsumd's requests in flight there) stays within ``load_factor`` times the fleet's mean, counting the
new request. So the same document id lands on the same endpoint across restarts and retries while
the fleet is even, an endpoint that joins or leaves moves only its own share of documents, and no
endpoint takes much more than its share when a few large documents hash alike. When every endpoint is
busy or over the bound, the least loaded usable one takes it.

A pin lasts while the document is used (it is refreshed by each request) and is forgotten after
``pin_seconds`` without one, or when its endpoint goes down: the document then moves as a whole to
the next endpoint on its ring.
"""

from __future__ import annotations

import bisect
import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Final, Generic, Protocol, TypeVar

POINTS_PER_ENDPOINT: Final = 64
"""Points per endpoint on the ring: with 64, each of a few endpoints gets its share of ids within
about 20%, and the load bound evens out the rest."""
MAX_PINS: Final = 1 << 16
"""Pins kept at most (the oldest go first beyond it): far more than the documents in flight."""


class Placeable(Protocol):
    """What the ring needs to know of an endpoint."""

    @property
    def key(self) -> str:
        """A stable name (its URL): where its points lie on the ring."""
        ...

    @property
    def usable(self) -> bool:
        """It can take requests now (up and checked)."""
        ...

    @property
    def busy(self) -> bool:
        """It can, but should not take new documents while another can (its queue, KV cache, a recent
        refusal, or a stale load reading)."""
        ...

    @property
    def cooling(self) -> bool:
        """It refused a request lately: its own documents too go elsewhere if another can take them."""
        ...

    @property
    def load(self) -> int:
        """Tokens of docsumd's requests in flight there."""
        ...


E = TypeVar("E", bound=Placeable)


def ring_hash(text: str) -> int:
    """A well-spread 64-bit hash of ``text`` (the same in every process, unlike ``hash()``)."""
    return int.from_bytes(
        hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "big"
    )


class Affinity(Generic[E]):
    """Places documents on endpoints (see the module's doc). One per fleet; not thread-safe."""

    def __init__(
        self,
        endpoints: Sequence[E],
        *,
        load_factor: float = 1.25,
        pin_seconds: float = 600.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if load_factor < 1.0:
            raise ValueError("load_factor must be at least 1")
        self.endpoints = list(endpoints)
        self.load_factor = load_factor
        self.pin_seconds = pin_seconds
        self._clock = clock
        points = sorted(
            (ring_hash(f"{endpoint.key}#{i}"), index)
            for index, endpoint in enumerate(self.endpoints)
            for i in range(POINTS_PER_ENDPOINT)
        )
        self._points = [point for point, _ in points]
        self._owners = [index for _, index in points]
        self._pins: OrderedDict[str, tuple[int, float]] = OrderedDict()

    def place(self, document: str, cost: int, *, avoid: frozenset[str] = frozenset()) -> E | None:
        """The endpoint for a request of ``cost`` tokens of ``document``, or None while none is usable.

        ``avoid`` (endpoint keys): endpoints this request just failed on; the request goes elsewhere
        if another is usable, without moving the document's pin (a refusal says the endpoint is full
        for now, not that the document belongs elsewhere). So does a request of a document pinned to
        an endpoint that is cooling down after a refusal, while another endpoint is free."""
        now = self._clock()
        pinned = self._pinned(document, now)
        if pinned is not None and pinned.usable and pinned.key not in avoid:
            others = [e for e in self.endpoints if e is not pinned and e.usable and not e.busy]
            if not pinned.cooling or not others:
                self._pin(document, pinned, now)
                return pinned
            avoid = avoid | {pinned.key}
        chosen = self._walk(document, cost, avoid)
        if chosen is None:
            return None
        if pinned is None or not pinned.usable:
            self._pin(document, chosen, now)
        return chosen

    def order(self, document: str) -> list[E]:
        """Every endpoint in ``document``'s ring order (its first choice first)."""
        start = bisect.bisect_left(self._points, ring_hash(document))
        seen: list[int] = []
        for offset in range(len(self._points)):
            owner = self._owners[(start + offset) % len(self._points)]
            if owner not in seen:
                seen.append(owner)
                if len(seen) == len(self.endpoints):
                    break
        return [self.endpoints[index] for index in seen]

    def pinned_to(self, document: str) -> E | None:
        """Where ``document`` is pinned now, if anywhere."""
        return self._pinned(document, self._clock())

    def unpin_endpoint(self, endpoint: E) -> int:
        """Forget every pin to ``endpoint`` (it went down); how many documents were pinned there."""
        index = self.endpoints.index(endpoint)
        gone = [document for document, (owner, _) in self._pins.items() if owner == index]
        for document in gone:
            del self._pins[document]
        return len(gone)

    def _walk(self, document: str, cost: int, avoid: frozenset[str]) -> E | None:
        usable = [endpoint for endpoint in self.order(document) if endpoint.usable]
        if not usable:
            return None
        preferred = [endpoint for endpoint in usable if endpoint.key not in avoid] or usable
        total = sum(endpoint.load for endpoint in preferred) + cost
        # An idle endpoint always fits: with token weights, a first request is larger than its share.
        bound = max(self.load_factor * total / len(preferred), cost)
        for endpoint in preferred:
            if not endpoint.busy and endpoint.load + cost <= bound:
                return endpoint
        idle = [endpoint for endpoint in preferred if not endpoint.busy] or preferred
        return min(idle, key=lambda endpoint: endpoint.load)  # stable: ring order breaks ties

    def _pinned(self, document: str, now: float) -> E | None:
        entry = self._pins.get(document)
        if entry is None:
            return None
        index, used = entry
        if now - used > self.pin_seconds:
            del self._pins[document]
            return None
        return self.endpoints[index]

    def _pin(self, document: str, endpoint: E, now: float) -> None:
        self._pins[document] = (self.endpoints.index(endpoint), now)
        self._pins.move_to_end(document)
        while len(self._pins) > MAX_PINS:
            self._pins.popitem(last=False)
