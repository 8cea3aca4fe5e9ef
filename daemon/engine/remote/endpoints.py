"""One server of the fleet as docsumd sees it: checked or not, up or down, its load, docsumd's own
requests there, and the watch that keeps that knowledge fresh.

Load (what placement and the health of the fleet read):

* **docsumd's own counts**, exact and immediate: requests and tokens it has in flight there, and how
  many of them are not prefilled yet;
* **the server's own word**, from vLLM's ``/metrics`` every ``metrics_interval_seconds``
  (:mod:`.load`): requests waiting (others' too: a fleet is often shared), KV cache in use, and its KV
  capacity. A reading older than three intervals is *stale*, and a stale server counts as busy: no
  news from a server under load is not good news. A server without vLLM's metrics (another
  OpenAI-compatible server) is judged by docsumd's counts alone.

Busy (it takes no new documents while another server can): stale, its KV cache at least
``busy_kv_cache_usage`` full, more requests waiting there than docsumd's own unprefilled ones (someone
else's queue), or it refused a request in the last backoff period.

Down: it refused a connection, or ``down_after_failures`` reads in a row failed. docsumd's requests in
flight there are cancelled at once (they go to other servers, :class:`Moved`), its documents are
unpinned, and it is checked again (:mod:`.checks`) once it answers, before it takes work again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlsplit

from daemon.config import RemoteEngineConfig
from daemon.engine.remote.checks import EndpointInfo
from daemon.engine.remote.load import LoadReading
from daemon.ops.metrics import (
    ENDPOINT_BUSY,
    ENDPOINT_INFLIGHT_REQUESTS,
    ENDPOINT_INFLIGHT_TOKENS,
    ENDPOINT_UP,
)

STALE_INTERVALS: Final = 3
"""A load reading older than this many intervals counts as busy."""


class Moved(Exception):
    """The request's endpoint went down while it ran: it goes elsewhere (not the request's fault)."""


def endpoint_label(url: str) -> str:
    """The endpoint's name in metrics and logs: its URL without a trailing slash (the config refuses
    credentials in it, so nothing secret)."""
    return url.rstrip("/")


@dataclass(slots=True)
class _Attempt:
    """A request running on an endpoint, cancellable when the endpoint goes down."""

    task: asyncio.Task[Any]
    tokens: int
    prefilled: bool = False
    moved: bool = False


class Endpoint:
    """One server (see the module's doc). Owned by the remote engine; used from its event loop only."""

    def __init__(
        self, url: str, config: RemoteEngineConfig, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.url = endpoint_label(url)
        self.config = config
        self._clock = clock
        self.info: EndpointInfo | None = None
        self.up = False
        self.problem: str | None = "not checked yet"
        """Why it takes no work, or None."""
        self.misconfigured = False
        """Its last check found a mismatch (it stays out until a check passes)."""
        self.failures = 0
        self.reading: LoadReading | None = None
        self.cool_until = 0.0
        self.inflight_tokens = 0
        self._attempts: dict[int, _Attempt] = {}
        self._changed: Callable[[], None] = lambda: None
        ENDPOINT_UP.labels(endpoint=self.url).set(0)
        # Read when scraped: busy also ends by itself (a refusal's pause runs out).
        ENDPOINT_BUSY.labels(endpoint=self.url).set_function(
            lambda: 1.0 if self.usable and self.busy else 0.0
        )

    # -- what placement reads ----------------------------------------------------------------------

    @property
    def key(self) -> str:
        """Its place on the affinity ring: the URL."""
        return self.url

    @property
    def host(self) -> str:
        """Host and port, for log lines."""
        return urlsplit(self.url).netloc

    @property
    def usable(self) -> bool:
        """Checked and up."""
        return self.up and self.info is not None

    @property
    def load(self) -> int:
        """Tokens of docsumd's requests in flight here."""
        return self.inflight_tokens

    @property
    def inflight_requests(self) -> int:
        """docsumd's requests in flight here."""
        return len(self._attempts)

    @property
    def unprefilled(self) -> int:
        """docsumd's requests here whose first output has not come yet."""
        return sum(1 for attempt in self._attempts.values() if not attempt.prefilled)

    @property
    def stale(self) -> bool:
        """Whether its vLLM load reading is older than :data:`STALE_INTERVALS` intervals."""
        if self.info is None or not self.info.vllm_metrics:
            return False
        age_limit = STALE_INTERVALS * self.config.metrics_interval_seconds
        return self.reading is None or self._clock() - self.reading.at > age_limit

    @property
    def cooling(self) -> bool:
        """It refused a request lately: even its own documents go elsewhere where another can take them."""
        return self._clock() < self.cool_until

    @property
    def busy(self) -> bool:
        """It should take no new document while another server can (see the module's doc)."""
        if self.cooling or self.stale:
            return True
        reading = self.reading
        if reading is None:
            return False
        return reading.kv_usage >= self.config.busy_kv_cache_usage or reading.waiting > self.unprefilled

    @property
    def kv_capacity_tokens(self) -> int | None:
        """Its KV cache in tokens, as its metrics said (None where unknown)."""
        return self.reading.kv_capacity_tokens if self.reading is not None else None

    @property
    def block_size(self) -> int | None:
        """Its KV cache block size (prefix-cache granularity), where its metrics say."""
        return self.reading.block_size if self.reading is not None else None

    # -- state changes ------------------------------------------------------------------------------

    def on_change(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` whenever it comes up or goes down."""
        self._changed = callback

    def checked(self, info: EndpointInfo) -> None:
        """Its checks passed: it takes work."""
        was_usable = self.usable
        self.info, self.up, self.problem, self.misconfigured, self.failures = info, True, None, False, 0
        if info.reading is not None:
            self.reading = info.reading
        ENDPOINT_UP.labels(endpoint=self.url).set(1)
        self._publish()
        if not was_usable:
            self._changed()

    def read(self, reading: LoadReading | None) -> None:
        """A load read succeeded (``reading`` None where it has no vLLM metrics)."""
        self.failures = 0
        if reading is not None:
            self.reading = reading
        self._publish()

    def read_failed(self, reason: str) -> bool:
        """A load read failed; True when that makes it down."""
        self.failures += 1
        if self.up and self.failures >= self.config.down_after_failures:
            self.down(f"{self.failures} load reads failed: {reason}")
            return True
        return False

    def refused(self, seconds: float) -> None:
        """It refused a request: it takes no new document for ``seconds``."""
        self.cool_until = max(self.cool_until, self._clock() + seconds)
        self._publish()

    def down(self, reason: str, *, misconfigured: bool = False) -> int:
        """It is down: its requests in flight are moved (cancelled here, sent elsewhere by their
        callers). How many were moved."""
        was_usable = self.usable
        self.up, self.problem, self.misconfigured = False, reason, misconfigured
        if misconfigured:
            self.info = None  # checked again before it takes work
        moved = 0
        for attempt in list(self._attempts.values()):
            if not attempt.task.done():
                attempt.moved = True
                attempt.task.cancel()
                moved += 1
        ENDPOINT_UP.labels(endpoint=self.url).set(0)
        self._publish()
        if was_usable:
            self._changed()
        return moved

    def needs_check(self) -> bool:
        """Whether it must pass the checks before it takes work (never checked, down, or misconfigured)."""
        return not self.usable

    # -- docsumd's requests here --------------------------------------------------------------------

    def attach(self, task: asyncio.Task[Any], tokens: int) -> int:
        """Count a request running here (its task, so that :meth:`down` can move it); its handle."""
        handle = id(task)
        self._attempts[handle] = _Attempt(task, tokens)
        self.inflight_tokens += tokens
        self._publish()
        return handle

    def prefilled(self, handle: int) -> None:
        """The request's first output came."""
        attempt = self._attempts.get(handle)
        if attempt is not None:
            attempt.prefilled = True

    def detach(self, handle: int) -> bool:
        """The request ended here; True when it ended because the endpoint went down (moved)."""
        attempt = self._attempts.pop(handle, None)
        if attempt is None:
            return False
        self.inflight_tokens -= attempt.tokens
        self._publish()
        return attempt.moved

    def _publish(self) -> None:
        ENDPOINT_INFLIGHT_REQUESTS.labels(endpoint=self.url).set(len(self._attempts))
        ENDPOINT_INFLIGHT_TOKENS.labels(endpoint=self.url).set(self.inflight_tokens)
