"""The two contracts the service is built on: a source and the engine.

The service and the summarizer depend on these protocols, never on a concrete class, so a new source
is a new module plus one line in :mod:`daemon.factory`, and tests or the benchmark pass their own
engine in instead of patching.

**Source** (:class:`Source`): yields :class:`~daemon.work.WorkItem` objects, each carrying its own
acknowledgement. It must acknowledge an input (move the file, mark the offset finished) only after
the item's result or failure record is durable in its sink, and never hand out the same input twice
while it is in flight. Whatever was not acknowledged is handed out again after a restart. It pulls
only when asked for the next item, so a backlog waits at the source (on disk, in the broker), not in
memory.

**Sinks** have no protocol here: nothing but their own source calls one (the pipeline settles work
items, :meth:`~daemon.work.WorkItem.complete` / :meth:`~daemon.work.WorkItem.fail`), and the two
write differently: the folder sink (:mod:`daemon.folder.sink`) a record under a file name, the
Kafka sink (:mod:`daemon.kafka.sink`) encoded messages, one by one or in a transaction as the
source's committer decides. What every sink owes its source, and so the item: a write returns only
once the record is durable (file synced and renamed into place; broker acknowledged with
``acks=all``); otherwise it raises :class:`~daemon.errors.SinkError`, which is fatal, or
:class:`~daemon.errors.DocumentError` when only this record cannot be written (the item is then not
settled, and the pipeline fails it instead).

**Engine** (:class:`EngineClient`): runs one request to completion; a cancelled call aborts its
request and re-raises. It raises :class:`~daemon.errors.RequestError` when one request failed (the
document fails, the daemon goes on) and :class:`~daemon.errors.EngineDeadError` when the engine is
gone (fatal). :class:`daemon.engine.vllm_engine.Engine` is the vLLM implementation.

Every implementation has idempotent ``start()``/``stop()``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, fields
from typing import Any, Protocol, runtime_checkable

from daemon.work import WorkItem


class Source(Protocol):
    """Where work items come from (see the module's doc for what it must guarantee)."""

    @property
    def backlog(self) -> int:
        """Inputs waiting at the source, not yet handed out."""
        ...

    async def start(self) -> None:
        """Connect or create what it reads from; idempotent."""
        ...

    async def stop(self) -> None:
        """Stop handing out items (those handed out can still be settled); idempotent."""
        ...

    def items(self) -> AsyncIterator[WorkItem]:
        """Work items, one per input, pulled one at a time; ends only for finite sources."""
        ...


@runtime_checkable
class ReleasingSource(Protocol):
    """A source that can tell a clean stop from a crash (the folder source's crash-loop guard counts
    the unclean exits an input was in flight at). The service calls :meth:`release_unsettled` after a
    drain that was not cut short by a fatal error, before ``stop()``."""

    async def release_unsettled(self) -> None:
        """Give inputs handed out and not settled back to where they wait (not counted as a crash)."""
        ...

    async def uncount_unsettled(self) -> None:
        """Keep inputs handed out and not settled where they are, without counting this exit against
        them: the service calls it instead when a fatal error came from a sink or the file system,
        which no input caused."""
        ...


@runtime_checkable
class TroubledSource(Protocol):
    """A source that can be unable to take work for a while (a folder gone or replaced) without
    failing: while :attr:`problem` is set the service reports itself unhealthy."""

    @property
    def problem(self) -> str | None:
        """Why no work is taken now, or None."""
        ...


@runtime_checkable
class PausableSource(Protocol):
    """A source that can stop taking inputs in without stopping (the Kafka source pauses its
    partitions and stays in its group; the folder source claims no file): the service pauses intake
    while no engine server takes work."""

    def pause_intake(self) -> None:
        """Take no new input in until :meth:`resume_intake` (what is already taken in stays)."""
        ...

    def resume_intake(self) -> None:
        """Take inputs in again."""
        ...


@runtime_checkable
class FleetEngine(Protocol):
    """An engine made of servers that come and go (:class:`daemon.engine.remote.engine.RemoteEngine`).

    While none takes work (:attr:`problem` set) requests wait instead of failing; the service then
    reports itself unhealthy and pulls no input (:meth:`wait_available`). Admission scales its
    per-engine bounds with :attr:`engines` and is told of changes (:meth:`on_change`)."""

    @property
    def problem(self) -> str | None:
        """Why no request can be served now, or None."""
        ...

    @property
    def engines(self) -> int:
        """How many servers take work now (at least 1)."""
        ...

    def on_change(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` whenever a server comes up or goes down."""
        ...

    async def wait_available(self) -> None:
        """Return once a server takes work."""
        ...


@runtime_checkable
class CachingEngine(Protocol):
    """An engine that knows its prefix cache's granularity: prompts then pad their shared prefix to
    whole blocks (:class:`daemon.summary.prompts.PromptBuilder`)."""

    @property
    def cache_block_tokens(self) -> int | None:
        """The KV cache block size in tokens (only whole blocks are reused), once known."""
        ...


@dataclass(frozen=True, slots=True)
class Sampling:
    """How one request samples its output: the engine turns it into its own settings.

    Hashable (``stop`` is a tuple), so an engine can keep one settings object per distinct sampling.
    """

    max_tokens: int
    temperature: float
    top_p: float
    repetition_penalty: float
    seed: int | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    stop: tuple[str, ...] = ()
    json_schema: str | None = None
    """A JSON Schema (as JSON text) the output is constrained to, or None for free text."""

    def settings(self) -> dict[str, Any]:
        """Every field but ``json_schema`` by name, ``stop`` as a list: vLLM's ``SamplingParams``
        and the OpenAI completions API take them under these names (each engine asks for a schema
        its own way). The fields besides ``max_tokens`` and ``json_schema`` are the config's
        sampling keys (:data:`daemon.config.SAMPLING_KEYS`)."""
        values = {item.name: getattr(self, item.name) for item in fields(self) if item.name != "json_schema"}
        values["stop"] = list(self.stop)
        return values


@dataclass(frozen=True, slots=True)
class Generation:
    """The finished output of one request."""

    text: str
    prompt_tokens: int
    output_tokens: int
    cached_prompt_tokens: int
    finish_reason: str | None
    first_token_s: float | None
    total_s: float


class EngineClient(Protocol):
    """What the service and the summarizer need of an engine."""

    @property
    def is_running(self) -> bool:
        """True once started and until stopped or dead."""
        ...

    @property
    def kv_cache_tokens(self) -> int | None:
        """Tokens the engine's KV cache holds, once known (admission sizes itself from it)."""
        ...

    @property
    def start_seconds(self) -> float | None:
        """How long the last start took, once started."""
        ...

    async def start(self) -> None:
        """Build and warm up the engine; idempotent. :class:`~daemon.errors.EngineDeadError` on failure."""
        ...

    async def stop(self) -> None:
        """Shut the engine down; idempotent."""
        ...

    async def generate(
        self,
        prompt_token_ids: list[int],
        sampling: Sampling,
        request_id: str,
        *,
        on_prefilled: Callable[[], None] | None = None,
        priority: int = 0,
    ) -> Generation:
        """Run one request to completion (see the module's doc for its errors and cancellation).

        ``on_prefilled`` is called once when the engine has prefilled the prompt, if it can tell
        (admission keeps the engine's prefill queue short with it); an engine that cannot may leave
        it uncalled. ``priority``: among the requests waiting inside the engine, lower goes first,
        where the engine schedules by priority (vLLM's ``scheduling_policy = "priority"``); an engine
        that does not ignores it.
        """
        ...
