"""One document's path: work item -> options -> plan -> bytes -> document -> summary -> record ->
acknowledgement.

:class:`DocumentPipeline` takes one :class:`~daemon.work.WorkItem` to exactly one settled outcome.
Its plan (:mod:`daemon.summary.plan`: profile, length, style, strategy, sampling) is made from its
own options and its source's profile before its bytes are read, so a document whose options are
bad fails unread, and it is made once. The pipeline applies the error policy of
:mod:`daemon.errors` in one place:

* a :class:`~daemon.errors.DocumentError` at any step (options, reading, decoding, summarizing)
  becomes the document's failure record; the input is acknowledged and the outcome is its reason;
* any other exception on one document is a bug met on that document: logged with its traceback and
  recorded as ``internal_error``, so it can neither stop the stream nor crash-loop a restart;
* a result record the sink cannot write for this document alone (it cannot be encoded, its name is
  refused, it is too large for Kafka: the sink raises :class:`~daemon.errors.DocumentError`) becomes
  a failure record instead; a failure record that cannot be written either is replaced by a minimal
  one (:func:`~daemon.records.fallback_failure_record`);
* :class:`~daemon.errors.EngineDeadError`, :class:`~daemon.errors.SinkError` and cancellation
  propagate: they are the service's to handle (fatal, or a drain cut short), and the input stays
  unacknowledged.

It knows nothing of the service's lifecycle, so it is tested on its own with a fake engine.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, Final

import structlog

from daemon.document.decode import sha256_hex
from daemon.document.reader import DocumentReader, Room
from daemon.errors import DocumentError, EngineDeadError, SinkError
from daemon.ops import pending, tracing
from daemon.ops.logging import get_logger
from daemon.ops.metrics import (
    observe_failed,
    observe_profiles,
    observe_request_kinds,
    observe_summarized,
)
from daemon.ops.pending import PENDING
from daemon.records import Summary, failure_record, fallback_failure_record, result_record
from daemon.summary.options import parse_options
from daemon.summary.profiles import Profile
from daemon.summary.prompts import PromptKind
from daemon.summary.summarizer import Summarizer
from daemon.work import WorkItem

log = get_logger(__name__)

OK: Final = "ok"
"""The outcome of a summarized document; any other outcome is a failure reason."""

OnFinished = Callable[[WorkItem, str], None]
"""Told of each finished document and its outcome (``ok`` or a failure reason)."""


class DocumentPipeline:
    """Processes work items with one summarizer; safe to run for many items at once."""

    def __init__(
        self,
        summarizer: Summarizer,
        *,
        model_name: str,
        reader: DocumentReader,
        on_finished: OnFinished | None = None,
    ) -> None:
        """``model_name`` goes into every result; ``reader`` turns each item's bytes into a checked
        document (started and stopped by its owner); ``on_finished`` is told of each settled item."""
        self.summarizer = summarizer
        self.model_name = model_name
        self.reader = reader
        self._on_finished = on_finished
        observe_profiles(summarizer.profiles.names)
        observe_request_kinds(kind.value for kind in PromptKind)

    async def process(self, item: WorkItem, *, room: Room | None = None) -> str:
        """Take ``item`` to an acknowledged result or failure record; return the outcome.

        ``room`` is told what the document holds as it is read (:meth:`DocumentReader.read`): the
        service's byte budget, which the document may wait for."""
        with (
            structlog.contextvars.bound_contextvars(doc_id=item.id, source=item.source),
            tracing.document_span(
                item.id,
                item.source,
                parent=item.trace_context,
                received_at=item.received_at,
                metadata=item.metadata,
            ),
            PENDING.document(item.size or 0),
        ):
            data: bytes | None = None
            profile: Profile | None = None
            try:
                with tracing.receive_span(item.received_at):
                    with tracing.span("plan"):
                        raw_options = None if item.load_options is None else await item.load_options()
                        options = parse_options(raw_options)
                        # Chosen apart from the plan: a failure under a known profile counts under it.
                        profile = self.summarizer.profiles.choose(options.profile, item.profile)
                        plan = self.summarizer.plan(options, profile)
                    data = await item.load()
                pending.resized(len(data))
                with tracing.span("extract"):
                    document = await self.reader.read(
                        data,
                        doc_id=item.id,
                        source=item.source,
                        metadata=item.metadata,
                        hint=item.format_hint,
                        room=room,
                    )
                queued_s = time.monotonic() - item.received_at
                summary = await self.summarizer.summarize(document, plan, arrived_at=item.received_at)
            except DocumentError as error:
                return await self._record_failure(item, error, data, profile)
            except (EngineDeadError, SinkError, asyncio.CancelledError):
                raise
            except Exception as exc:
                # A bug met on one document must not stop the stream (nor crash-loop on restart).
                log.exception("unexpected error on a document")
                return await self._record_failure(
                    item, DocumentError("internal_error", repr(exc)), data, profile
                )
            total_s = time.monotonic() - item.received_at
            record = result_record(
                document, summary, model=self.model_name, queued_s=queued_s, total_s=total_s
            )
            tracing.annotate(_summary_attributes(summary))
            try:
                with tracing.span("publish"):
                    await item.complete(record)
            except DocumentError as error:  # this result cannot be written; its failure record can
                log.error("the result cannot be written", reason=error.reason, message=error.message)
                return await self._record_failure(item, error, data, profile)
            self._summarized(item, summary, total_s)
            return OK

    async def _record_failure(
        self, item: WorkItem, error: DocumentError, data: bytes | None, profile: Profile | None
    ) -> str:
        record = failure_record(
            doc_id=item.id,
            source=item.source,
            error=error,
            metadata=item.metadata,
            sha256=None if data is None else sha256_hex(data),
            input_bytes=None if data is None else len(data),
        )
        tracing.failed(error.reason, error.message)
        with tracing.span("publish"):
            try:
                await item.fail(record)
            except DocumentError as problem:
                log.error("the failure record cannot be written; writing a minimal one", error=str(problem))
                await item.fail(fallback_failure_record(record, problem.message))
        # Before its profile was chosen (or when it asked for an unknown one) a document counts
        # under its source's: metric labels stay within the config's profile names.
        label = profile.name if profile is not None else self.summarizer.profiles.label(item.profile)
        observe_failed(item.source, error.reason, label)
        if self._on_finished is not None:
            self._on_finished(item, error.reason)
        log.warning("document failed", reason=error.reason, message=error.message)
        return error.reason

    def _summarized(self, item: WorkItem, summary: Summary, total_s: float) -> None:
        observe_summarized(item.source, summary, total_s)
        if self._on_finished is not None:
            self._on_finished(item, OK)
        log.info(
            "document summarized",
            profile=summary.profile,
            strategy=summary.strategy,
            parts=summary.parts,
            document_tokens=summary.document_tokens,
            prompt_tokens=summary.prompt_tokens,
            summary_tokens=summary.summary_tokens,
            truncated=summary.truncated,
            total_s=round(total_s, 3),
        )


def _summary_attributes(summary: Summary) -> dict[str, Any]:
    """What the document span records of its summary."""
    return {
        "docsumd.outcome": OK,
        "docsumd.profile": summary.profile,
        "docsumd.strategy": summary.strategy,
        "docsumd.parts": summary.parts,
        "docsumd.depth": summary.depth,
        "docsumd.requests": summary.requests,
        "docsumd.document_tokens": summary.document_tokens,
        "docsumd.truncated": summary.truncated,
        "gen_ai.usage.input_tokens": summary.prompt_tokens,
        "gen_ai.usage.output_tokens": summary.generated_tokens,
        "docsumd.cached_prompt_tokens": summary.cached_prompt_tokens,
    }
