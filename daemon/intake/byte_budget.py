"""The byte budget: how many input bytes of documents may be read and in progress at once.

A document's memory in the main process grows with its size (its bytes, its text, its token ids and
the parts cut from them: ``bench/memory.py`` measures it, docs/guides/sizing.md gives the rule), so the
count of documents in flight (``service.max_inflight_documents``) alone bounds nothing: 128 documents
of 16 MiB are 2 GiB of input. :class:`ByteBudget` bounds their sum (``limits.max_inflight_bytes``):

* a document whose size is known when it is taken in (:attr:`~daemon.work.WorkItem.size`: a Kafka
  message's text) waits for its bytes before it is read, and the service pulls nothing more from its
  source meanwhile (the source's own buffer bounds what waits there); one whose size is not known is
  admitted by what was read, right after reading and before anything larger is built from it;
* admission is first come, first served: a document that does not fit waits, and those after it wait
  behind it, so a large document is never starved by a stream of small ones;
* a document larger than the whole budget is admitted when nothing else holds bytes: it runs alone,
  and never waits forever.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable

from daemon.ops.metrics import INFLIGHT_BYTES


class Holding:
    """The bytes one document holds in a :class:`ByteBudget` while it is read and processed."""

    def __init__(self, budget: ByteBudget) -> None:
        self._budget = budget
        self.bytes = 0

    async def grow(self, size: int) -> None:
        """Hold ``size`` bytes. Holding none yet: wait for them in turn. Holding some already (the size
        known before reading, the file grew since): take the difference at once, never waiting while
        holding bytes (two documents waiting to grow could otherwise wait for each other)."""
        if self.bytes == 0:
            await self._budget.acquire(size)
            self.bytes = size
        elif size > self.bytes:
            self._budget.take(size - self.bytes)
            self.bytes = size

    def release(self) -> None:
        """Give every byte held back (the document is finished, or was never started)."""
        self._budget._release(self.bytes)
        self.bytes = 0

    def reading(self, load: Callable[[], Awaitable[bytes]]) -> Callable[[], Awaitable[bytes]]:
        """``load``, then wait until what it read is held (a document whose size was not known)."""

        async def load_then_hold() -> bytes:
            data = await load()
            await self.grow(len(data))
            return data

        return load_then_hold


class ByteBudget:
    """A first-come, first-served budget of ``limit`` bytes (see the module's doc)."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"a byte budget needs at least one byte, got {limit}")
        self.limit = limit
        self.used = 0
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()

    @property
    def waiting(self) -> int:
        """Documents waiting for their bytes."""
        return len(self._waiters)

    async def reserve(self, size: int | None) -> Holding:
        """Hold ``size`` bytes, waiting for them first; ``None``: nothing yet, the holder grows the
        holding once it knows (:meth:`Holding.reading`). The holder releases it (:meth:`Holding.release`)."""
        holding = Holding(self)
        if size:
            await holding.grow(size)
        return holding

    @contextlib.asynccontextmanager
    async def hold(self, size: int | None) -> AsyncIterator[Holding]:
        """:meth:`reserve` for the body, released on exit however it ends."""
        holding = await self.reserve(size)
        try:
            yield holding
        finally:
            holding.release()

    async def acquire(self, size: int) -> None:
        """Wait for ``size`` bytes, in turn; release them with :meth:`_release` (via :meth:`hold`)."""
        if not self._waiters and self._fits(size):
            self.take(size)
            return
        granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (size, granted)
        self._waiters.append(entry)
        try:
            await granted
        except BaseException:
            if granted.done() and not granted.cancelled():
                self._release(size)  # granted as it was cancelled: give the bytes back
            else:
                with contextlib.suppress(ValueError):  # already taken off the queue by _grant
                    self._waiters.remove(entry)
                self._grant()  # the head may have been what blocked the rest
            raise

    def take(self, size: int) -> None:
        """Hold ``size`` more bytes now, without waiting (may go over the limit: see :meth:`Holding.grow`)."""
        self.used += size
        INFLIGHT_BYTES.set(self.used)

    def _fits(self, size: int) -> bool:
        return self.used == 0 or self.used + size <= self.limit

    def _release(self, size: int) -> None:
        if size:
            self.used -= size
            INFLIGHT_BYTES.set(self.used)
            self._grant()

    def _grant(self) -> None:
        while self._waiters and self._fits(self._waiters[0][0]):
            size, granted = self._waiters.popleft()
            if not granted.done():
                self.take(size)
                granted.set_result(None)
