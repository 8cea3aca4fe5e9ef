"""The byte budget: how many bytes of documents may be in progress at once, counted as what each
holds in the main process.

A document's memory in the main process grows with the size of its text (the text, its token ids,
their offsets and the parts cut from them: ``bench/memory.py`` measures it, docs/guides/sizing.md
gives the rule), so the count of documents in flight (``service.max_inflight_documents``) alone bounds
nothing: 128 documents of 16 MiB are 2 GiB of input, and a 2 KB DOCX can hold 12 MB of text.
:class:`ByteBudget` bounds their sum (``limits.max_inflight_bytes``), in two parts that a
document's :class:`Holding` moves through:

* **input** bytes, from when it is taken in until its text is counted: a document whose size is
  known when it is taken in (:attr:`~daemon.work.WorkItem.size`: a Kafka message's text) waits for
  them before it is read, and the service pulls nothing more from its source meanwhile; one whose
  size is not known is read in its turn (one at a time, :meth:`Holding.reading`) and waits for them
  right after. Admission waits until input and text bytes together fit;
* **text** bytes, before its text is built: the most that text can take as UTF-8, told by the reader
  (:meth:`daemon.document.reader.DocumentReader.read`; for PDF, DOCX, ODT and HTML the expansion cap
  of ``extract.max_expansion_ratio``, taken once an extraction worker is free for it), then, once
  built, the larger of its input's bytes and its text's. From then on its input's bytes count as
  part of its text. Text waits until the text bytes fit: input bytes of documents still waiting to
  be read (for a worker, say) never hold a text back.

So every text in the main process is counted before it is built, and the README's sizing rule
(``K`` bytes of main-process memory per byte of text, plus the input bytes themselves) bounds the
memory of every document in progress, however much its input expands.

Waiting, and why it cannot deadlock:

* each part is first come, first served: a document that does not fit waits, and those after it wait
  behind it, so a large document is never starved by a stream of small ones;
* a document waits for text only while it holds no text (it gives back what it held first), and
  text waits only for text, which documents in progress give back without waiting on the budget
  again: no two documents can wait for each other;
* a document larger than its whole part is admitted when nothing else holds bytes of that part: it
  runs alone, and never waits forever.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable

from daemon.ops.metrics import INFLIGHT_BYTES, WAITING_FOR_BYTES

_Waiter = tuple[int, "Holding", asyncio.Future[None]]


class Holding:
    """The bytes one document holds in a :class:`ByteBudget` while it is read and processed: its
    input's (until its text is counted), or its text's."""

    def __init__(self, budget: ByteBudget) -> None:
        self._budget = budget
        self.input = 0
        self.text = 0

    @property
    def held(self) -> int:
        """All the bytes it holds."""
        return self.input + self.text

    async def admit(self, size: int) -> None:
        """Hold ``size`` bytes of input, waiting in turn with the documents not yet admitted (it
        holds nothing yet)."""
        if self.held:
            raise RuntimeError("a document is admitted once")
        await self._budget._wait(self._budget._admissions, size, self)

    async def hold_text(self, size: int) -> None:
        """Hold ``size`` bytes of text from now on; its input's bytes are part of them. Fewer than
        held: the rest is given back at once. More: give the text held back and wait for ``size``,
        in turn with the other documents waiting for room for text (input bytes never hold a text
        back; see the module's doc)."""
        budget = self._budget
        if self.text and size <= self.text:
            budget._give_back(self, text=self.text - size, input_=self.input)
            return
        if self.text:
            budget._give_back(self, text=self.text, input_=0, regrant=False)
        await budget._wait(budget._texts, size, self)

    def reading(self, load: Callable[[], Awaitable[bytes]]) -> Callable[[], Awaitable[bytes]]:
        """``load`` for a document whose size was not known when it was taken in: read in its turn,
        then admitted by what was read (:meth:`admit`); the next such document is read once this one
        is admitted, so one at most waits with its bytes read and not counted."""

        async def load_in_turn() -> bytes:
            async with self._budget._reading:
                data = await load()
                await self.admit(len(data))
            return data

        return load_in_turn

    def release(self) -> None:
        """Give every byte held back (the document is finished, or was never started)."""
        self._budget._give_back(self, text=self.text, input_=self.input)


class ByteBudget:
    """A first-come, first-served budget of ``limit`` bytes (see the module's doc)."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"a byte budget needs at least one byte, got {limit}")
        self.limit = limit
        self.input_used = 0
        """Input bytes of documents whose text is not counted yet."""
        self.text_used = 0
        """Text bytes counted (with the input bytes of their documents)."""
        self._texts: deque[_Waiter] = deque()
        """Documents in progress waiting for room for their text: served first, in turn."""
        self._admissions: deque[_Waiter] = deque()
        """Documents waiting to be admitted, in turn."""
        self._reading = asyncio.Lock()
        """The turn of documents of unknown size to be read (:meth:`Holding.reading`)."""

    @property
    def used(self) -> int:
        """All bytes held."""
        return self.input_used + self.text_used

    @property
    def waiting(self) -> int:
        """Documents waiting for bytes."""
        return len(self._texts) + len(self._admissions)

    async def reserve(self, size: int | None) -> Holding:
        """A holding of ``size`` bytes of input, waiting for them first; ``None`` or 0: nothing yet
        (it is admitted once read: :meth:`Holding.reading`). The holder releases it
        (:meth:`Holding.release`)."""
        holding = Holding(self)
        if size:
            await holding.admit(size)
        return holding

    @contextlib.asynccontextmanager
    async def hold(self, size: int | None) -> AsyncIterator[Holding]:
        """:meth:`reserve` for the body, released on exit however it ends."""
        holding = await self.reserve(size)
        try:
            yield holding
        finally:
            holding.release()

    # -- the queues ---------------------------------------------------------------------------------

    def _fits(self, queue: deque[_Waiter], size: int) -> bool:
        if queue is self._texts:
            return self.text_used == 0 or self.text_used + size <= self.limit
        return self.used == 0 or self.used + size <= self.limit

    async def _wait(self, queue: deque[_Waiter], size: int, holding: Holding) -> None:
        if not queue and self._fits(queue, size):
            self._take(queue, size, holding)
            self._grant()  # what it gave back for this may let others in too
            return
        granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (size, holding, granted)
        queue.append(entry)
        self._grant()  # text a document just gave back goes to those ahead of it, or to it
        try:
            await granted
        except BaseException:
            if granted.done() and not granted.cancelled():
                pass  # granted as it was cancelled: the holding holds it, its owner releases it
            else:
                with contextlib.suppress(ValueError):  # already taken off the queue by _grant
                    queue.remove(entry)
                self._grant()  # the head may have been what blocked the rest
            raise
        finally:
            WAITING_FOR_BYTES.set(self.waiting)

    def _take(self, queue: deque[_Waiter], size: int, holding: Holding) -> None:
        if queue is self._texts:
            # Its input is part of its text from now on.
            self.input_used -= holding.input
            holding.input = 0
            self.text_used += size
            holding.text = size
        else:
            self.input_used += size
            holding.input = size
        INFLIGHT_BYTES.set(self.used)

    def _give_back(self, holding: Holding, *, text: int, input_: int, regrant: bool = True) -> None:
        """``text`` and ``input_`` bytes of ``holding`` back; ``regrant`` False: the holder queues for
        more at once, and grants then (what it gave back must not go to a later document first)."""
        holding.text -= text
        holding.input -= input_
        self.text_used -= text
        self.input_used -= input_
        INFLIGHT_BYTES.set(self.used)
        if regrant and (text or input_):
            self._grant()

    def _grant(self) -> None:
        # Text first: a text granted counts its document's input in it, which may change what fits.
        # In each queue the head that does not fit holds up everything behind it.
        for queue in (self._texts, self._admissions):
            while queue and self._fits(queue, queue[0][0]):
                size, holding, granted = queue.popleft()
                if not granted.done():
                    self._take(queue, size, holding)
                    granted.set_result(None)
        WAITING_FOR_BYTES.set(self.waiting)
