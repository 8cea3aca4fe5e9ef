"""``docsumd_prompt_tokens_pending``: the prompt tokens of the work a daemon holds and has not yet
put through the engine, the figure an autoscaler should scale on (work, not messages).

It adds up, at each scrape:

* every document taken in and not finished, by what is left of it:
  its bytes / :data:`BYTES_PER_TOKEN` until it is tokenized; then its tokens until its first engine
  request is made; from then on the prompt tokens of its requests made and not yet finished
  (waiting for admission or for their turn in the document's fan-out, or in the engine). A document
  summarized in stages adds its combine requests' prompts as it makes them. So a part drops out of
  the figure when its request finishes, and a document when it is done (or failed, or aborted).
* every message a source has fetched and not yet handed out, by its bytes / :data:`BYTES_PER_TOKEN`
  (the Kafka source's local buffer).

What it does not count: messages still in Kafka, which the daemon has not fetched (their count is
the lag metric, not their size), and files still waiting in the inbox. So one daemon's figure stops
growing when its buffer and its documents in flight are full, however deep the backlog behind them:
an autoscaler's per-daemon target must stay below that ceiling (docs: get-started/kubernetes.md).

The engine code does not know about this: the pipeline opens a document's account
(:meth:`PendingTokens.document`), and the summarizer reports to the account of the document it is
working on (:func:`tokenized`, :func:`requested`, :func:`finished`), found through a context
variable, as log lines find their ``doc_id``. Outside a document these calls do nothing.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Final

from daemon.ops.metrics import PROMPT_TOKENS_PENDING

BYTES_PER_TOKEN: Final = 4
"""Bytes of input per token, for work not yet tokenized: 4.1 over the shared corpus's 39 English
documents with SmolLM2's tokenizer (3.4-5.1 per document); PDFs and office files hold fewer tokens
per byte, so they count high until extracted."""


class _Account:
    """What is left of one document's prompt tokens."""

    __slots__ = ("requested", "unrequested")

    def __init__(self, unrequested: int) -> None:
        self.unrequested = unrequested
        """Tokens of the document not yet in any request (an estimate until it is tokenized)."""
        self.requested = 0
        """Prompt tokens of its requests made and not finished."""

    @property
    def tokens(self) -> int:
        return self.unrequested + self.requested


_CURRENT: contextvars.ContextVar[_Account | None] = contextvars.ContextVar("docsumd_pending", default=None)


class PendingTokens:
    """The daemon's pending prompt tokens (one per process: :data:`PENDING`)."""

    def __init__(self) -> None:
        self._accounts: set[_Account] = set()
        self._fetched: dict[str, int] = {}

    def total(self) -> float:
        """The metric's value now."""
        documents = sum(account.tokens for account in self._accounts)
        return float(documents + sum(self._fetched.values()) // BYTES_PER_TOKEN)

    def fetched(self, source: str, size: int) -> None:
        """``source`` holds ``size`` bytes of messages fetched and not yet handed out."""
        self._fetched[source] = size

    @contextlib.contextmanager
    def document(self, size: int) -> Iterator[None]:
        """Count a document of ``size`` bytes from now until the block ends, and make it the one
        :func:`tokenized`, :func:`requested` and :func:`finished` report to inside the block (and in
        the tasks started from it)."""
        account = _Account(size // BYTES_PER_TOKEN)
        self._accounts.add(account)
        token = _CURRENT.set(account)
        try:
            yield
        finally:
            _CURRENT.reset(token)
            self._accounts.discard(account)


PENDING: Final = PendingTokens()
PROMPT_TOKENS_PENDING.set_function(PENDING.total)


def resized(size: int) -> None:
    """The current document turned out to be ``size`` bytes (read, or extracted to text)."""
    account = _CURRENT.get()
    if account is not None and account.requested == 0:
        account.unrequested = size // BYTES_PER_TOKEN


def tokenized(tokens: int) -> None:
    """The current document is ``tokens`` tokens long."""
    account = _CURRENT.get()
    if account is not None and account.requested == 0:
        account.unrequested = tokens


def requested(prompt_tokens: int) -> None:
    """The current document made a request of ``prompt_tokens``: its text is now counted through its
    requests."""
    account = _CURRENT.get()
    if account is not None:
        account.unrequested = 0
        account.requested += prompt_tokens


@contextlib.contextmanager
def counted(prompt_tokens: int) -> Iterator[None]:
    """A request of the current document of ``prompt_tokens``, counted from :func:`requested` to
    :func:`finished` (however the block ends)."""
    requested(prompt_tokens)
    try:
        yield
    finally:
        finished(prompt_tokens)


def finished(prompt_tokens: int) -> None:
    """A request of the current document of ``prompt_tokens`` ended (done, failed or cancelled)."""
    account = _CURRENT.get()
    if account is not None:
        account.requested = max(0, account.requested - prompt_tokens)
