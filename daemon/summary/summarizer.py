"""One document in, one summary out, as engine requests; and the records that results carry.

A document that fits in one request (template, text and summary budget within ``max_model_len``)
is summarized in one request. A longer one is, by ``summary.strategy``:

* ``map_reduce`` (default): cut into parts on the strongest breaks available
  (:mod:`daemon.summary.chunking`); each part is summarized (the map step); the part summaries are
  combined, in order, into the final summary (the reduce step). When the part summaries do not fit
  in one request together, consecutive groups of them are combined first, level by level, until
  they do. Nothing is left out: ``dropped_tokens`` is 0.
* ``head`` / ``head_tail``: the start (and end) of the document in one request; the result says how
  many tokens were dropped.

A document is summarized under one profile (:mod:`daemon.summary.profiles`), chosen before it comes
here: the profile gives the wording of its prompts, its lengths, style and sampling, and its context
budget. How long parts, part summaries and combine steps are is the budget's business
(:mod:`daemon.summary.budget`), decided before the engine starts; this module only follows it.

Every request goes through admission (:class:`~daemon.engine.admission.AdmissionControl`); combine
steps are marked urgent so documents already in progress finish first. One document has at most
``summary.max_parallel_requests_per_document`` requests waiting or running at once.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Iterable
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from daemon.config import SummaryConfig
from daemon.contracts import EngineClient, Generation
from daemon.document.decode import Document
from daemon.engine.admission import AdmissionControl
from daemon.errors import DocumentError, RequestError
from daemon.ops.metrics import ENGINE_REQUESTS
from daemon.records import Summary, request_id
from daemon.summary.chunking import (
    TokenizedText,
    head_ids,
    head_tail_ids,
    head_tail_spans,
    split_into_chunks,
    tokenize_text,
)
from daemon.summary.options import NO_OPTIONS, SummaryOptions
from daemon.summary.profiles import Profile, Profiles
from daemon.summary.prompts import PROMPT_VERSION, ChatTokenizer, PromptKind
from daemon.summary.tidy import tidy

T = TypeVar("T")

_MAX_DEPTH: Final = 12  # a guard: combining at least halves the count per level, so 2**11 parts at most
_GAP_TEXT: Final = "\n\n[...]\n\n"
_OPENING_LABEL: Final = "[The opening of the document, verbatim]\n"
_OPENING_END: Final = "\n[...]\n\n"
_MIN_OPENING_TOKENS: Final = 32


@dataclass(frozen=True, slots=True)
class _Plan:
    """What one document asks for, after options and its profile's defaults."""

    profile: Profile
    max_tokens: int
    style: Any
    strategy: str


class _DocumentRun:
    """The engine requests of one document under its profile: fan-out bound, admission, counters."""

    def __init__(
        self, summarizer: Summarizer, document: Document, profile: Profile, arrived_at: float
    ) -> None:
        self._summarizer = summarizer
        self._document = document
        self._profile = profile
        self._arrived_at = arrived_at
        self._fan_out = asyncio.Semaphore(summarizer.config.max_parallel_requests_per_document)
        self.requests = 0
        self.prompt_tokens = 0
        self.generated_tokens = 0
        self.cached_prompt_tokens = 0
        self.first_token_s: float | None = None
        self.started = time.monotonic()

    async def generate(
        self, kind: PromptKind, body_ids: list[int], *, style: Any, max_tokens: int, urgent: bool = False
    ) -> Generation:
        """One request: ``body_ids`` in the ``kind`` template, at most ``max_tokens`` out."""
        summarizer, profile = self._summarizer, self._profile
        prompt_ids = profile.prompts.build(kind, body_ids, style=style, max_tokens=max_tokens)
        if not profile.budget.fits(len(prompt_ids), max_tokens):  # a bug, never the document's fault
            raise AssertionError(f"{kind} prompt of {len(prompt_ids)} tokens does not fit the context")
        self.requests += 1
        engine_request_id = request_id(self._document.id, kind.value, self.requests)
        async with (
            self._fan_out,
            summarizer.admission.slot(
                len(prompt_ids) + max_tokens,
                urgent=urgent,
                arrived_at=self._arrived_at,
                prompt_tokens=len(prompt_ids),
            ) as slot,
        ):
            ENGINE_REQUESTS.labels(kind=kind.value).inc()
            try:
                generation = await summarizer.engine.generate(
                    prompt_ids,
                    profile.sampling(max_tokens),
                    engine_request_id,
                    on_prefilled=slot.prefill_done,
                )
            except RequestError as exc:
                raise DocumentError("engine_error", f"the engine failed on this document: {exc}") from exc
        self.prompt_tokens += generation.prompt_tokens
        self.generated_tokens += generation.output_tokens
        self.cached_prompt_tokens += generation.cached_prompt_tokens
        if self.first_token_s is None and generation.first_token_s is not None:
            self.first_token_s = (
                time.monotonic() - self.started - generation.total_s + generation.first_token_s
            )
        return generation

    def summary(
        self,
        final: Generation,
        *,
        plan: _Plan,
        strategy: str,
        parts: int,
        depth: int,
        tokens: int,
        dropped: int,
        spans: Iterable[tuple[int, int]],
    ) -> Summary:
        """The document's summary from its final request and the counters; ``spans`` are the character
        ranges of the document that its requests read (the result's ``sources``)."""
        return Summary(
            text=tidy(final.text),
            strategy=strategy,
            style=plan.style,
            max_summary_tokens=plan.max_tokens,
            prompt_version=PROMPT_VERSION,
            profile=plan.profile.name,
            profile_version=plan.profile.version,
            parts=parts,
            depth=depth,
            requests=self.requests,
            prompt_tokens=self.prompt_tokens,
            generated_tokens=self.generated_tokens,
            summary_tokens=final.output_tokens,
            document_tokens=tokens,
            dropped_tokens=dropped,
            cached_prompt_tokens=self.cached_prompt_tokens,
            finish_reason=final.finish_reason,
            first_token_s=self.first_token_s,
            engine_s=time.monotonic() - self.started,
            sources=tuple(self.source(index, span) for index, span in enumerate(spans, 1)),
        )

    def source(self, part: int, span: tuple[int, int]) -> dict[str, Any]:
        """Where part ``part`` (the characters ``span``) of the document came from."""
        start, end = span
        return {"part": part, "chars": [start, end], **self._document.layout.source_of(start, end)}


class Summarizer:
    """Turns documents into summaries with the engine. Safe to call concurrently."""

    def __init__(
        self,
        engine: EngineClient,
        tokenizer: ChatTokenizer,
        config: SummaryConfig,
        *,
        profiles: Profiles,
        admission: AdmissionControl,
    ) -> None:
        """``profiles`` are :func:`daemon.summary.profiles.build_profiles`'s, for this ``tokenizer``;
        ``config`` bounds every document's fan-out and parts."""
        self.engine = engine
        self.tokenizer = tokenizer
        self.config = config
        self.profiles = profiles
        self.admission = admission
        self._gap_ids = self.encode(_GAP_TEXT)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` as content (special-token strings are plain text)."""
        return list(self.tokenizer.encode(text, add_special_tokens=False, split_special_tokens=True))  # type: ignore[call-arg]

    def plan(self, options: SummaryOptions, profile: Profile | None = None) -> _Plan:
        """The length, style and strategy for a document under ``profile`` (default: the default
        profile); DocumentError ``invalid_options`` if impossible."""
        profile = profile or self.profiles.default
        max_tokens = options.max_summary_tokens or profile.budget.summary_tokens
        style = options.style or profile.summary.style
        profile.budget.check_summary(max_tokens, style)
        return _Plan(
            profile=profile,
            max_tokens=max_tokens,
            style=style,
            strategy=options.strategy or profile.summary.strategy,
        )

    async def summarize(
        self,
        document: Document,
        options: SummaryOptions = NO_OPTIONS,
        *,
        profile: Profile | None = None,
        arrived_at: float | None = None,
    ) -> Summary:
        """Summarize ``document`` under ``profile`` (default: the default profile; see
        :meth:`~daemon.summary.profiles.Profiles.choose`). Raises DocumentError for a document that cannot be
        summarized.

        ``arrived_at`` (``time.monotonic()``) orders its requests in admission; defaults to now.
        """
        plan = self.plan(options, profile)
        # Tokenizing a long document takes a while (about 0.6 s per MB): keep it off the event loop.
        tokens = await asyncio.to_thread(tokenize_text, self.tokenizer, document.text)
        run = _DocumentRun(
            self, document, plan.profile, time.monotonic() if arrived_at is None else arrived_at
        )
        room = plan.profile.budget.room(PromptKind.DOCUMENT, plan.style, plan.max_tokens)
        if len(tokens) <= room:
            final = await run.generate(
                PromptKind.DOCUMENT, tokens.ids, style=plan.style, max_tokens=plan.max_tokens
            )
            return run.summary(
                final,
                plan=plan,
                strategy="single",
                parts=1,
                depth=1,
                tokens=len(tokens),
                dropped=0,
                spans=[(0, len(tokens.text))],
            )
        if plan.strategy == "map_reduce":
            return await self._map_reduce(run, tokens, plan)
        kept = (
            head_ids(tokens, room) if plan.strategy == "head" else head_tail_ids(tokens, room, self._gap_ids)
        )
        spans = (
            [(0, tokens.char_at(room))]
            if plan.strategy == "head"
            else head_tail_spans(tokens, room - len(self._gap_ids))
        )
        final = await run.generate(PromptKind.DOCUMENT, kept, style=plan.style, max_tokens=plan.max_tokens)
        kept_tokens = len(kept) - (len(self._gap_ids) if plan.strategy == "head_tail" else 0)
        return run.summary(
            final,
            plan=plan,
            strategy=plan.strategy,
            parts=1,
            depth=1,
            tokens=len(tokens),
            dropped=len(tokens) - kept_tokens,
            spans=spans,
        )

    async def _map_reduce(self, run: _DocumentRun, tokens: TokenizedText, plan: _Plan) -> Summary:
        budget = plan.profile.budget
        part_tokens = budget.part_summary_tokens
        # max_chunks: a document whose token count alone needs too many parts is refused before
        # its cut points are computed (a long run of one character made that costly).
        chunks = await asyncio.to_thread(
            functools.partial(
                split_into_chunks,
                tokens,
                budget.part_input_tokens,
                budget.overlap_tokens,
                max_chunks=self.config.max_parts,
            )
        )
        if len(chunks) > self.config.max_parts:
            raise DocumentError(
                "too_long",
                f"the document needs {len(chunks)} parts of up to {budget.part_input_tokens} tokens "
                f"({len(tokens)} tokens); summary.max_parts is {self.config.max_parts}",
            )
        generations = await _gather(
            run.generate(PromptKind.PART, chunk.token_ids, style="prose", max_tokens=part_tokens)
            for chunk in chunks
        )
        spans = [(chunk.char_start, chunk.char_end) for chunk in chunks]
        entries = [
            self._entry(i, generation.text, part_tokens, where=_where(run.source(i, span)))
            for i, (generation, span) in enumerate(zip(generations, spans, strict=True), 1)
        ]
        combining = budget.combining(plan.style, plan.max_tokens)
        step_tokens = combining.step_tokens
        depth = 2
        wanted_opening = plan.profile.summary.opening_tokens
        # The opening's room is kept free of notes (at most half the final request's, which still holds
        # any one note: budget rule 3), so the notes are combined once more rather than crowd it out.
        opening_room = min(self._opening_cost(wanted_opening), combining.final_room // 2)
        while sum(map(len, entries)) > combining.final_room - opening_room:
            if depth >= _MAX_DEPTH:  # pragma: no cover - cannot happen with the room checked at start
                raise DocumentError("internal_error", "staged summary did not converge")
            groups = _group(entries, combining.step_room)
            generations = await _gather(
                run.generate(
                    PromptKind.COMBINE,
                    [i for entry in group for i in entry],
                    style="prose",
                    max_tokens=step_tokens,
                    urgent=True,
                )
                for group in groups
            )
            entries = [
                self._entry(i, generation.text, step_tokens) for i, generation in enumerate(generations, 1)
            ]
            depth += 1
        notes = [i for entry in entries for i in entry]
        opening = self._opening(tokens, wanted_opening, combining.final_room - len(notes))
        final = await run.generate(
            PromptKind.COMBINE,
            [*opening, *notes],
            style=plan.style,
            max_tokens=plan.max_tokens,
            urgent=True,
        )
        return run.summary(
            final,
            plan=plan,
            strategy="map_reduce",
            parts=len(chunks),
            depth=depth,
            tokens=len(tokens),
            dropped=0,
            spans=spans,
        )

    def _opening_cost(self, wanted: int) -> int:
        """Tokens an opening of ``wanted`` tokens takes in a request, labels included (0 for none)."""
        if wanted < _MIN_OPENING_TOKENS:
            return 0
        return wanted + len(self.encode(_OPENING_LABEL)) + len(self.encode(_OPENING_END))

    def _opening(self, tokens: TokenizedText, wanted: int, room: int) -> list[int]:
        """The document's first ``wanted`` tokens, labelled, for the final combine request, cut to its
        ``room`` left beside the notes; nothing when fewer than :data:`_MIN_OPENING_TOKENS` fit."""
        label, gap = self.encode(_OPENING_LABEL), self.encode(_OPENING_END)
        take = min(wanted, room - len(label) - len(gap))
        if take < _MIN_OPENING_TOKENS:
            return []
        return [*label, *tokens.ids[:take], *gap]

    def _entry(self, index: int, text: str, limit: int, where: str = "") -> list[int]:
        """One summary as combine input: a label (with the part's pages or section, ``where``, when the
        document has a layout), then the text without its chat frame (:func:`tidy`), cut to ``limit``,
        what was asked of it: decoding and encoding again can come out a few tokens longer."""
        body = self.encode(tidy(text))[:limit]
        label = f"[Part {index}{': ' + where if where else ''}]\n"
        return [*self.encode(label), *body, *self.encode("\n\n")]


_WHERE_CHARS: Final = 120
"""A part label's pages or section is cut to this many characters: headings come from the input."""


def _where(source: dict[str, Any]) -> str:
    """A part's pages or section as its label in a combine request shows it ("" without a layout)."""
    if "pages" in source:
        first, last = source["pages"]
        where = f"page {first}" if first == last else f"pages {first}-{last}"
    elif source.get("section") or source.get("headings"):
        where = " > ".join(source.get("section") or source["headings"][:1])
    else:
        return ""
    return where if len(where) <= _WHERE_CHARS else where[: _WHERE_CHARS - 1] + "…"


def _group(entries: list[list[int]], room: int) -> list[list[list[int]]]:
    """Consecutive entries in groups of at most ``room`` tokens each.

    ``room`` holds at least two entries (checked at start), so every group but the last has two or
    more and each level at least halves the count.
    """
    groups: list[list[list[int]]] = []
    current: list[list[int]] = []
    used = 0
    for entry in entries:
        if current and used + len(entry) > room:
            groups.append(current)
            current, used = [], 0
        current.append(entry)
        used += len(entry)
    groups.append(current)
    return groups


async def _gather(awaitables: Iterable[Awaitable[T]]) -> list[T]:
    """Run concurrently; on the first failure cancel the rest (aborting their requests), then raise."""
    tasks = [asyncio.ensure_future(awaitable) for awaitable in awaitables]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
