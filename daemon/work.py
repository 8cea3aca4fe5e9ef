"""Work items: the one seam between sources and the service.

A source yields :class:`WorkItem` objects that carry their own acknowledgement. The service never
knows where a document came from: it loads the bytes, summarizes, and then calls exactly one of

* :meth:`WorkItem.complete` with the result record: the source's sink writes it durably, and only
  then is the input acknowledged (file moved to ``done/``, Kafka offset marked finished);
* :meth:`WorkItem.fail` with the failure record: written durably (failed folder, dead-letter
  topic), then the input is acknowledged.

If neither is called (crash, drain deadline, dead engine) the input stays unacknowledged and is
processed again on the next start.

If ``complete`` or ``fail`` raises :class:`~daemon.errors.DocumentError`, the sink could not write
*this* record (it cannot be encoded, the file system refuses its name) and nothing was acknowledged:
the item is not settled, and may still be failed (the pipeline does so).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from daemon.errors import DocumentError
from daemon.records import Record


@dataclass(slots=True)
class WorkItem:
    """One input document on its way through the service."""

    id: str
    source: str
    load: Callable[[], Awaitable[bytes]]
    """Read the raw bytes. May raise DocumentError (e.g. too_large, checked before reading)."""
    on_complete: Callable[[Record], Awaitable[None]]
    on_fail: Callable[[Record], Awaitable[None]]
    metadata: dict[str, Any] = field(default_factory=dict)
    load_options: Callable[[], Awaitable[Any]] | None = None
    """Read the document's own summary options (a JSON object, as dict, bytes or text), or None."""
    profile: str | None = None
    """The profile its source chose (a name from the config); None: ``summary.profile``. The
    document's own options may still choose another (:meth:`daemon.summary.profiles.Profiles.choose`)."""
    format_hint: str | None = None
    """What its source says the format is (a file name's suffix, a Kafka ``content-type``): a hint to
    :func:`~daemon.document.formats.detect_format`, which reads the bytes first."""
    trace_context: dict[str, str] | None = None
    """The W3C trace context its source received with it (a Kafka message's ``traceparent`` and
    ``tracestate`` headers): its trace continues there (:mod:`daemon.ops.tracing`). None: a new trace."""
    received_at: float = field(default_factory=time.monotonic)
    settled: bool = False
    size: int | None = None
    """The document's bytes when known before reading (a message's text): the service's byte budget
    admits it before it is read; None: right after it is read, by what was read."""

    async def complete(self, result: Record) -> None:
        """Write ``result`` durably, then acknowledge the input."""
        self._settle()
        try:
            await self.on_complete(result)
        except DocumentError:
            self.settled = False  # this record could not be written; nothing was acknowledged
            raise

    async def fail(self, failure: Record) -> None:
        """Write ``failure`` durably, then acknowledge the input."""
        self._settle()
        try:
            await self.on_fail(failure)
        except DocumentError:
            self.settled = False
            raise

    def _settle(self) -> None:
        if self.settled:
            raise RuntimeError(f"work item {self.id!r} was already completed or failed")
        self.settled = True
