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

A document is summarized as its plan says (:mod:`daemon.summary.plan`), made before its bytes were
read: its profile (:mod:`daemon.summary.profiles`) gives the wording of its prompts, its lengths,
style and sampling, and its context budget; its options may change the length, style and strategy.
How long parts, part summaries and combine steps are is the budget's business
(:mod:`daemon.summary.budget`), decided before the engine starts; this module only follows it.

Every request goes through admission (:class:`~daemon.engine.admission.AdmissionControl`); combine
steps are marked urgent so documents already in progress finish first. One document has at most
``summary.max_parallel_requests_per_document`` requests waiting or running at once.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import hashlib
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, Final, TypeVar

from daemon.cache import CachedSummary, CacheKey, SummaryCache
from daemon.cache import Step as CacheStep
from daemon.config import SummaryConfig
from daemon.contracts import EngineClient, Generation, Sampling
from daemon.document.types import Document, Layout
from daemon.engine.admission import AdmissionControl
from daemon.errors import DocumentError, RequestError
from daemon.ops import pending, tracing
from daemon.ops.metrics import ENGINE_REQUESTS, observe_grounding, observe_structured
from daemon.records import OUTPUT_BYTES, Summary, clip_text, request_id
from daemon.summary.checking import CheckResult, check_result, chunk_parts, passages, read_text
from daemon.summary.chunking import (
    TokenizedText,
    head_ids,
    head_tail_ids,
    head_tail_spans,
    split_into_chunks,
    tokenize_text,
)
from daemon.summary.evidence import Part, Step
from daemon.summary.grounding import SourceIndex
from daemon.summary.options import NO_OPTIONS, SummaryOptions
from daemon.summary.plan import DocumentPlan, plan_summary
from daemon.summary.profiles import Profile, Profiles
from daemon.summary.prompts import PROMPT_VERSION, ChatTokenizer, PromptKind
from daemon.summary.structured import RETRY_MIN_TEMPERATURE, Accepted, InvalidOutput
from daemon.summary.tidy import tidy
from daemon.typing import Strategy

T = TypeVar("T")

_MAX_DEPTH: Final = 12  # a guard: combining at least halves the count per level, so 2**11 parts at most
_GAP_TEXT: Final = "\n\n[...]\n\n"
_OPENING_LABEL: Final = "[The opening of the document, verbatim]\n"
_OPENING_END: Final = "\n[...]\n\n"
_MIN_OPENING_TOKENS: Final = 32


_Kept = tuple[list[int], list[tuple[int, int]], int]
Cut = Callable[[TokenizedText, int, list[int]], _Kept]
"""How a strategy that sends one request keeps part of a long document: from the document's tokens,
the room of one request and the gap marker's ids, the ids sent, the character spans of the text
they cover, and how many of the document's own tokens they hold."""


def _cut_head(
    tokens: TokenizedText, room: int, gap_ids: list[int]
) -> tuple[list[int], list[tuple[int, int]], int]:
    kept = head_ids(tokens, room)
    return kept, [(0, tokens.char_at(room))], len(kept)


def _cut_head_tail(tokens: TokenizedText, room: int, gap_ids: list[int]) -> _Kept:
    kept = head_tail_ids(tokens, room, gap_ids)
    return kept, head_tail_spans(tokens, room - len(gap_ids)), len(kept) - len(gap_ids)


CUTS: Final[dict[Strategy, Cut]] = {"head": _cut_head, "head_tail": _cut_head_tail}
"""The strategies that send one request with part of a long document; every other strategy
(``map_reduce``) summarizes it in stages."""


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
        self.final_tokens = 0
        """Tokens generated by the final step's tries."""
        self.started = time.monotonic()
        cache = summarizer.cache
        self.cache: SummaryCache | None = cache if cache is not None and profile.reuse_cached else None
        """The summary cache, unless the daemon has none or the profile does not reuse summaries."""
        self.reused_parts = 0
        self.reused_requests = 0
        self.reused_prompt_tokens = 0
        self.reused_generated_tokens = 0
        self.final_attempt = 0
        """The final step's try whose output was accepted (0: the first; a retry's is not stored)."""
        self.keeps_cut_outputs = profile.sampling().temperature == 0
        """Whether an output cut off at its length limit is stored: greedy decoding would make the same
        output again, while under sampling it is one poor draw that a later request may improve on."""

        self.engine_s = 0.0
        """Seconds from the start to the final summary (its check excluded)."""
        self.check_s = 0.0
        self._index: asyncio.Future[SourceIndex] | None = None

    # -- the summary cache -------------------------------------------------------------------------

    def step(self, kind: PromptKind, *, style: Any, max_tokens: int, sampling: Sampling) -> CacheStep:
        """What a request of ``kind`` adds around its text, as cache keys hold it."""
        return CacheStep(
            template=self._profile.prompts.template_ids(kind, style=style, max_tokens=max_tokens),
            sampling=sampling,
            prompt_version=PROMPT_VERSION,
            profile_version=self._profile.version,
        )

    def reuse(self, entry: CachedSummary, *, part: bool = False) -> Generation:
        """A request's output taken from the cache: counted as reused, not as the engine's work."""
        self.reused_requests += 1
        self.reused_parts += part
        self.reused_prompt_tokens += entry.prompt_tokens
        self.reused_generated_tokens += entry.generated_tokens
        return _cached_generation(entry)

    async def outputs(
        self,
        kind: PromptKind,
        requests: Sequence[tuple[CacheKey | None, list[int]]],
        *,
        max_tokens: int,
        sampling: Sampling,
        urgent: bool = False,
    ) -> list[Generation]:
        """The outputs of one level's requests (``(key, body_ids)`` each, in the ``prose`` style, sampled
        as ``sampling``): taken from the cache where it has them, else made by the engine concurrently
        and stored (unless cut off at the length limit under sampling)."""
        keys = [key for key, _ in requests]
        found: list[CachedSummary | None] = [None] * len(requests)
        if self.cache is not None:
            found = await self.cache.get_many([key for key in keys if key is not None])
            found_iter = iter(found)
            found = [None if key is None else next(found_iter) for key in keys]
        missing = [i for i, entry in enumerate(found) if entry is None]
        made = await _gather(
            self.generate(
                kind,
                requests[i][1],
                style="prose",
                max_tokens=max_tokens,
                sampling=sampling,
                urgent=urgent,
                follow_up=True,
            )
            for i in missing
        )
        generations: list[Generation | None] = [
            None if entry is None else self.reuse(entry, part=kind is PromptKind.PART) for entry in found
        ]
        for i, generation in zip(missing, made, strict=True):
            generations[i] = generation
        await self.store([(keys[i], generation) for i, generation in zip(missing, made, strict=True)])
        return [generation for generation in generations if generation is not None]

    async def store(self, made: Sequence[tuple[CacheKey | None, Generation]]) -> None:
        """Store what the engine made under its key; an output cut off at the length limit only where
        the profile decodes greedily (:attr:`keeps_cut_outputs`)."""
        if self.cache is None:
            return
        now = time.time()
        entries = [
            (
                key,
                CachedSummary(
                    text=generation.text,
                    prompt_tokens=generation.prompt_tokens,
                    generated_tokens=generation.output_tokens,
                    finish_reason=generation.finish_reason,
                    created=now,
                    key_parts=key.parts,
                ),
            )
            for key, generation in made
            if key is not None and (generation.finish_reason != "length" or self.keeps_cut_outputs)
        ]
        if entries:
            await self.cache.put_many(entries)

    def index_source(self, spans: list[tuple[int, int]]) -> None:
        """Start building the grounding index of the text that ``spans`` of the document hold (what the
        requests read), in a worker thread, while the engine works."""
        text = read_text(self._document.text, spans)
        self._index = asyncio.ensure_future(asyncio.to_thread(SourceIndex.of, text))

    def close(self) -> None:
        """Stop waiting for the index (a document that failed); its thread finishes on its own."""
        if self._index is not None and not self._index.done():
            self._index.cancel()

    async def finish_checked(
        self,
        kind: PromptKind,
        body_ids: list[int],
        *,
        plan: DocumentPlan,
        parts: list[Part],
        tree: Step | None = None,
        urgent: bool = False,
        key: CacheKey | None = None,
    ) -> tuple[Generation, Accepted, CheckResult]:
        """:meth:`finish`, then the grounding check and the evidence of its summary, and the profile's
        ``on_unsupported``: ``retry`` draws the final step once more and keeps the summary with fewer
        unsupported items; ``fail`` raises DocumentError ``unsupported_claims`` with the summary, its
        checks and evidence."""
        profile = plan.profile
        generation, accepted = await self.finish(kind, body_ids, plan=plan, urgent=urgent, key=key)
        self.engine_s = time.monotonic() - self.started
        checked = await self._check(accepted, parts, tree)
        retried = False
        retry_error: str | None = None
        if checked.unsupported and profile.on_unsupported == "retry":
            retried = True
            try:
                again = await self.finish(kind, body_ids, plan=plan, urgent=urgent, redraw=True)
            except DocumentError as exc:
                # The first summary was valid and checked: a second draw that gives none (an invalid
                # output, a request the engine failed) leaves it standing instead of failing the document.
                again, retry_error = None, exc.reason
            self.engine_s = time.monotonic() - self.started
            if again is not None:
                second = await self._check(again[1], parts, tree)
                if second.unsupported < checked.unsupported:
                    (generation, accepted), checked = again, second
                    self.final_attempt = max(self.final_attempt, 1)  # another draw: never stored
        checked.checks_record["on_unsupported"] = profile.on_unsupported
        if profile.on_unsupported == "retry":
            checked.checks_record["retried"] = retried
        if retry_error is not None:
            checked.checks_record["retry_error"] = retry_error
        observe_grounding(profile.name, checked.checks, seconds=self.check_s, retried=retried)
        if checked.unsupported and profile.on_unsupported == "fail":
            raise DocumentError(
                "unsupported_claims",
                f"the summary states {checked.unsupported} item(s) its source does not hold: "
                + "; ".join(
                    f"{item.kind.value} {item.text!r}" for item in checked.checks.unsupported[:_NAMED_ITEMS]
                ),
                fields={
                    "summary": accepted.text,
                    "checks": checked.checks_record,
                    "evidence": list(checked.evidence),
                },
            )
        return generation, accepted, checked

    async def _check(self, accepted: Accepted, parts: list[Part], tree: Step | None) -> CheckResult:
        """The check and evidence of ``accepted`` against the index, in a worker thread."""
        started = time.monotonic()
        if self._index is None:  # pragma: no cover - every path starts it before its final step
            raise AssertionError("the grounding index was not started")
        index = await self._index
        result = await asyncio.to_thread(check_result, accepted.text, accepted.structured, index, parts, tree)
        self.check_s += time.monotonic() - started
        return result

    async def finish(
        self,
        kind: PromptKind,
        body_ids: list[int],
        *,
        plan: DocumentPlan,
        urgent: bool = False,
        key: CacheKey | None = None,
        redraw: bool = False,
    ) -> tuple[Generation, Accepted]:
        """The document's final request, in its profile's output format: accepted as it is (prose),
        or parsed and validated against the profile's schema, with one retry (a new draw) when the
        output is cut off or invalid; then DocumentError ``invalid_output`` carrying the last output.

        With ``key``, a cached output is used when there is one that the format accepts; the first
        try's output is stored unless it was refused, or cut off under sampling (a retry's never: it is
        another draw)."""
        output = plan.profile.output
        base = plan.sampling
        if redraw:  # another draw (on_unsupported = "retry"): another seed where one is set, never greedy
            base = dataclasses.replace(
                base,
                seed=None if base.seed is None else base.seed + 1,
                temperature=max(base.temperature, RETRY_MIN_TEMPERATURE),
            )
        elif key is not None and self.cache is not None and (entry := await self.cache.get(key)) is not None:
            reused = await self._accept_cached(output, entry, whole=kind is PromptKind.DOCUMENT)
            if reused is not None:
                return reused
        problems: list[str] = []
        started = time.monotonic()
        for attempt in range(output.attempts):
            generation = await self.generate(
                kind,
                body_ids,
                style=plan.style,
                max_tokens=plan.max_tokens,
                urgent=urgent,
                sampling=output.sampling(base, attempt),
            )
            self.final_tokens += generation.output_tokens
            try:
                with tracing.span("validate"):
                    tracing.annotate({"docsumd.attempt": attempt})
                    if output.schema is None:
                        accepted = output.accept(generation, tidy)
                    else:  # validation is bounded (MAX_SCHEMA_CHECKS), not cheap: off the event loop
                        accepted = await asyncio.to_thread(output.accept, generation, tidy)
            except InvalidOutput as exc:
                problems.append(str(exc))
                continue
            self._observe(output, attempt, started)
            self.final_attempt = attempt
            if attempt == 0:
                await self.store([(key, generation)])
            return generation, accepted
        self._observe(output, None, started)
        tries = "; ".join(f"try {i}: {problem}" for i, problem in enumerate(problems, 1))
        raise DocumentError(
            "invalid_output",
            f"the model's output did not follow profile {plan.profile.name!r}'s schema ({tries})",
            output=clip_text(generation.text, OUTPUT_BYTES),
        )

    async def _accept_cached(
        self, output: Any, entry: CachedSummary, *, whole: bool
    ) -> tuple[Generation, Accepted] | None:
        """A cached final output as the profile's format accepts it, or None (then it is made anew);
        ``whole``: the request read the document itself (its one part), not part summaries."""
        generation = _cached_generation(entry)
        try:
            if output.schema is None:
                accepted = output.accept(generation, tidy)
            else:
                accepted = await asyncio.to_thread(output.accept, generation, tidy)
        except InvalidOutput:
            return None
        self.reuse(entry, part=whole)
        return generation, accepted

    def _observe(self, output: Any, attempt: int | None, started: float) -> None:
        """Count a structured final step: valid at ``attempt`` (0 first, 1 the retry) or invalid (None)."""
        if output.schema is None:
            return
        outcome = "invalid" if attempt is None else ("valid" if attempt == 0 else "retried")
        observe_structured(
            self._profile.name, outcome, seconds=time.monotonic() - started, tokens=self.final_tokens
        )

    async def generate(
        self,
        kind: PromptKind,
        body_ids: list[int],
        *,
        style: Any,
        max_tokens: int,
        sampling: Sampling,
        urgent: bool = False,
        follow_up: bool = False,
    ) -> Generation:
        """One request: ``body_ids`` in the ``kind`` template, at most ``max_tokens`` out, sampled as
        ``sampling``; ``urgent`` and ``follow_up`` are admission's
        (:meth:`~daemon.engine.admission.AdmissionControl.slot`)."""
        profile = self._profile
        prompt_ids = profile.prompts.build(kind, body_ids, style=style, max_tokens=max_tokens)
        if not profile.budget.fits(len(prompt_ids), max_tokens):  # a bug, never the document's fault
            raise AssertionError(f"{kind} prompt of {len(prompt_ids)} tokens does not fit the context")
        self.requests += 1
        engine_request_id = request_id(self._document.id, kind.value, self.requests)
        with tracing.span(f"request {kind.value}"), pending.counted(len(prompt_ids)):
            if tracing.enabled():
                tracing.annotate(
                    _request_attributes(
                        engine_request_id, kind, len(prompt_ids), max_tokens=max_tokens, urgent=urgent
                    )
                )
            generation = await self._run(
                engine_request_id,
                kind,
                prompt_ids,
                max_tokens=max_tokens,
                urgent=urgent,
                follow_up=follow_up,
                sampling=sampling,
            )
            if tracing.enabled():
                tracing.annotate(_generation_attributes(generation))
        self.prompt_tokens += generation.prompt_tokens
        self.generated_tokens += generation.output_tokens
        self.cached_prompt_tokens += generation.cached_prompt_tokens
        if self.first_token_s is None and generation.first_token_s is not None:
            self.first_token_s = (
                time.monotonic() - self.started - generation.total_s + generation.first_token_s
            )
        return generation

    async def _run(
        self,
        engine_request_id: str,
        kind: PromptKind,
        prompt_ids: list[int],
        *,
        max_tokens: int,
        urgent: bool,
        follow_up: bool,
        sampling: Sampling,
    ) -> Generation:
        """One request through the document's fan-out and admission, then the engine."""
        summarizer = self._summarizer
        waited_from = time.monotonic()
        async with (
            self._fan_out,
            summarizer.admission.slot(
                len(prompt_ids) + max_tokens,
                urgent=urgent,
                arrived_at=self._arrived_at,
                prompt_tokens=len(prompt_ids),
                follow_up=follow_up,
            ) as slot,
        ):
            if tracing.enabled():
                light = summarizer.admission.is_light(len(prompt_ids))
                tracing.annotate(
                    {
                        "docsumd.admission.class": "light" if light else "heavy",
                        "docsumd.admission.wait_s": time.monotonic() - waited_from,
                        "docsumd.priority": slot.priority,
                    }
                )
                tracing.event("admitted")
            ENGINE_REQUESTS.labels(kind=kind.value).inc()
            try:
                return await summarizer.engine.generate(
                    prompt_ids,
                    sampling,
                    engine_request_id,
                    on_prefilled=tracing.on_this_span(slot.prefill_done, "prefilled"),
                    priority=slot.priority,
                )
            except RequestError as exc:
                raise DocumentError(exc.reason, f"the engine failed on this document: {exc}") from exc

    def summary(
        self,
        finished: tuple[Generation, Accepted, CheckResult],
        *,
        plan: DocumentPlan,
        strategy: str,
        parts: int,
        depth: int,
        tokens: int,
        dropped: int,
        spans: Iterable[tuple[int, int]],
    ) -> Summary:
        """The document's summary from its final request and the counters; ``spans`` are the character
        ranges of the document that its requests read (the result's ``sources``)."""
        final, accepted, checked = finished
        return Summary(
            text=accepted.text,
            structured=accepted.structured,
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
            engine_s=self.engine_s,
            sources=tuple(self.source(index, span) for index, span in enumerate(spans, 1)),
            reused_parts=self.reused_parts,
            reused_requests=self.reused_requests,
            reused_prompt_tokens=self.reused_prompt_tokens,
            reused_generated_tokens=self.reused_generated_tokens,
            checks=checked.checks_record,
            evidence=checked.evidence,
            check_s=self.check_s,
        )

    @property
    def document_text(self) -> str:
        """The document's extracted text."""
        return self._document.text

    @property
    def document_layout(self) -> Layout:
        """The document's layout (pages, headings)."""
        return self._document.layout

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
        cache: SummaryCache | None = None,
    ) -> None:
        """``profiles`` are :func:`daemon.summary.profiles.build_profiles`'s, for this ``tokenizer``;
        ``config`` bounds every document's fan-out and parts; ``cache`` (started by its owner) holds
        summaries made before, reused for profiles that allow it (``reuse_cached``)."""
        self.engine = engine
        self.cache = cache
        self.tokenizer = tokenizer
        self.config = config
        self.profiles = profiles
        self.admission = admission
        self._gap_ids = self.encode(_GAP_TEXT)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` as content (special-token strings are plain text)."""
        return list(self.tokenizer.encode(text, add_special_tokens=False, split_special_tokens=True))  # type: ignore[call-arg]

    def plan(self, options: SummaryOptions = NO_OPTIONS, profile: Profile | None = None) -> DocumentPlan:
        """The plan of a document with ``options`` under ``profile`` (default: the default profile;
        the service chooses it with :meth:`~daemon.summary.profiles.Profiles.choose`);
        DocumentError ``invalid_options`` if impossible (:func:`~daemon.summary.plan.plan_summary`)."""
        return plan_summary(profile or self.profiles.default, options)

    async def summarize(
        self, document: Document, plan: DocumentPlan | None = None, *, arrived_at: float | None = None
    ) -> Summary:
        """Summarize ``document`` as ``plan`` says (default: the default profile's, without options;
        see :meth:`plan`). Raises DocumentError for a document that cannot be summarized.

        ``arrived_at`` (``time.monotonic()``) orders its requests in admission; defaults to now.
        """
        plan = plan if plan is not None else self.plan()
        run = _DocumentRun(
            self, document, plan.profile, time.monotonic() if arrived_at is None else arrived_at
        )
        document_key = await self._document_key(run, document, plan)
        if document_key is not None and run.cache is not None:
            entry = await run.cache.get(document_key)
            if entry is not None and (summary := _reused_summary(entry.fields)) is not None:
                return summary
        summary = await self._summarize(run, document, plan)
        if (
            document_key is not None
            and run.cache is not None
            and (summary.finish_reason != "length" or run.keeps_cut_outputs)
            and run.final_attempt == 0
        ):
            await run.cache.put(document_key, _document_entry(document_key, summary))
        return summary

    async def _document_key(
        self, run: _DocumentRun, document: Document, plan: DocumentPlan
    ) -> CacheKey | None:
        """The whole-document key: the input's bytes, its extracted text, and every setting its summary
        depends on (None without a cache)."""
        if run.cache is None:
            return None
        profile = plan.profile
        text_sha256 = await asyncio.to_thread(
            lambda: hashlib.sha256(document.text.encode("utf-8", "surrogatepass")).hexdigest()
        )
        settings = {
            "profile": profile.name,
            "profile_version": profile.version,
            "prompt_version": PROMPT_VERSION,
            "summary": _summary_settings(profile.summary),
            "budget": profile.budget.as_dict(),
            "max_tokens": plan.max_tokens,
            "style": plan.style,
            "strategy": plan.strategy,
            "max_parts": self.config.max_parts,
            "format": document.format.value,
            "text_sha256": text_sha256,
        }
        return run.cache.keys.document(
            bytes.fromhex(document.sha256), settings=settings, options=plan.options.model_dump(mode="json")
        )

    async def _summarize(self, run: _DocumentRun, document: Document, plan: DocumentPlan) -> Summary:
        room = plan.profile.budget.room(PromptKind.DOCUMENT, plan.style, plan.max_tokens)
        # Tokenizing a long document takes a while (about 0.6 s per MB): keep it off the event loop.
        # Only a document that does not fit one request is cut, so only its offsets are read.
        with tracing.span("tokenize"):
            tokens = await asyncio.to_thread(
                tokenize_text, self.tokenizer, document.text, offsets_beyond=room
            )
        pending.tokenized(len(tokens))
        if len(tokens) <= room:
            whole = [(0, len(tokens.text))]
            run.index_source(whole)
            final = await run.finish_checked(
                PromptKind.DOCUMENT,
                tokens.ids,
                plan=plan,
                parts=passages(document.text, document.layout, whole),
                key=self._part_key(run, tokens.ids, plan),
            )
            return run.summary(
                final,
                plan=plan,
                strategy="single",
                parts=1,
                depth=1,
                tokens=len(tokens),
                dropped=0,
                spans=whole,
            )
        cut = CUTS.get(plan.strategy)
        if cut is None:
            run.index_source([(0, len(tokens.text))])
            return await self._map_reduce(run, tokens, plan)
        kept, spans, kept_tokens = cut(tokens, room, self._gap_ids)
        run.index_source(list(spans))
        final = await run.finish_checked(
            PromptKind.DOCUMENT,
            kept,
            plan=plan,
            parts=passages(document.text, document.layout, spans),
            key=self._part_key(run, kept, plan),
        )
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

    @staticmethod
    def _part_key(run: _DocumentRun, body_ids: list[int], plan: DocumentPlan) -> CacheKey | None:
        """The key of the one request that reads ``body_ids`` of the document (None without a cache)."""
        if run.cache is None:
            return None
        step = run.step(
            PromptKind.DOCUMENT,
            style=plan.style,
            max_tokens=plan.max_tokens,
            sampling=plan.final_sampling,
        )
        return run.cache.keys.part(body_ids, step)

    async def _map_reduce(self, run: _DocumentRun, tokens: TokenizedText, plan: DocumentPlan) -> Summary:
        budget = plan.profile.budget
        part_tokens = budget.part_summary_tokens
        # max_chunks: a document whose token count alone needs too many parts is refused before
        # its cut points are computed (a long run of one character made that costly).
        with tracing.span("split"):
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
        # Part and intermediate combine summaries have lengths of their own (the budget's), so each
        # level samples as the profile does at its length; the plan holds only the final step's.
        part_step = run.step(
            PromptKind.PART,
            style="prose",
            max_tokens=part_tokens,
            sampling=plan.profile.sampling(part_tokens),
        )
        keys: list[CacheKey | None] = [None] * len(chunks)
        if run.cache is not None:  # hashing every part's ids takes a while: off the event loop
            key_maker = run.cache.keys
            keys = list(
                await asyncio.to_thread(
                    lambda: [key_maker.part(chunk.token_ids, part_step) for chunk in chunks]
                )
            )
        generations = await run.outputs(
            PromptKind.PART,
            [(key, chunk.token_ids) for key, chunk in zip(keys, chunks, strict=True)],
            max_tokens=part_tokens,
            sampling=part_step.sampling,
        )
        spans = [(chunk.char_start, chunk.char_end) for chunk in chunks]
        labels = [_label(i, _where(run.source(i, span))) for i, span in enumerate(spans, 1)]
        steps = [Step(tidy(generation.text), (i,)) for i, generation in enumerate(generations, 1)]
        entries = [
            self._entry(label, generation.text, part_tokens)
            for label, generation in zip(labels, generations, strict=True)
        ]
        combining = budget.combining(plan.style, plan.max_tokens)
        step_tokens = combining.step_tokens
        combine_step = run.step(
            PromptKind.COMBINE,
            style="prose",
            max_tokens=step_tokens,
            sampling=plan.profile.sampling(step_tokens),
        )
        depth = 2
        wanted_opening = plan.profile.summary.opening_tokens
        # The opening's room is kept free of notes (at most half the final request's, which still holds
        # any one note: budget rule 3), so the notes are combined once more rather than crowd it out.
        opening_room = min(self._opening_cost(wanted_opening), combining.final_room // 2)
        while sum(map(len, entries)) > combining.final_room - opening_room:
            if depth >= _MAX_DEPTH:  # pragma: no cover - cannot happen with the room checked at start
                raise DocumentError("internal_error", "staged summary did not converge")
            sizes = [len(entry) for entry in entries]
            groups = _group(range(len(entries)), combining.step_room, sizes.__getitem__)
            requests = [
                (
                    _combine_key(run, [keys[i] for i in group], [labels[i] for i in group], combine_step),
                    [token for i in group for token in entries[i]],
                )
                for group in groups
            ]
            generations = await run.outputs(
                PromptKind.COMBINE,
                requests,
                max_tokens=step_tokens,
                sampling=combine_step.sampling,
                urgent=True,
            )
            keys = [key for key, _ in requests]
            labels = [_label(i) for i in range(1, len(generations) + 1)]
            entries = [
                self._entry(label, generation.text, step_tokens)
                for label, generation in zip(labels, generations, strict=True)
            ]
            steps = _combined(steps, [len(group) for group in groups], generations)
            depth += 1
        notes = [i for entry in entries for i in entry]
        opening = self._opening(tokens, wanted_opening, combining.final_room - len(notes))
        final_key = None
        if run.cache is not None:
            final_step = run.step(
                PromptKind.COMBINE,
                style=plan.style,
                max_tokens=plan.max_tokens,
                sampling=plan.final_sampling,
            )
            final_key = _combine_key(run, keys, labels, final_step, verbatim=opening)
        # The opening is the start of part 1: evidence reaches part 1 through it.
        read: tuple[int | Step, ...] = (1, *steps) if opening else tuple(steps)
        final = await run.finish_checked(
            PromptKind.COMBINE,
            [*opening, *notes],
            plan=plan,
            urgent=True,
            parts=chunk_parts(run.document_text, run.document_layout, spans),
            tree=Step("", read),
            key=final_key,
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

    def _entry(self, label: str, text: str, limit: int) -> list[int]:
        """One summary as combine input: its ``label`` (:func:`_label`), then the text without its chat
        frame (:func:`tidy`), cut to ``limit``, what was asked of it: decoding and encoding again can
        come out a few tokens longer."""
        body = self.encode(tidy(text))[:limit]
        return [*self.encode(label), *body, *self.encode("\n\n")]


_NAMED_ITEMS: Final = 5
"""An ``unsupported_claims`` failure's message names this many items (the record lists them all)."""


def _cached_generation(entry: CachedSummary) -> Generation:
    """A cached output as the engine's answer: no engine time, nothing from vLLM's prefix cache."""
    return Generation(
        text=entry.text,
        prompt_tokens=entry.prompt_tokens,
        output_tokens=entry.generated_tokens,
        cached_prompt_tokens=0,
        finish_reason=entry.finish_reason,
        first_token_s=None,
        total_s=0.0,
    )


_HELD_WHEN_SET: Final = ("max_part_tokens",)
"""[summary] keys added after whole-document keys were: a key holds them only when they are set, so
that adding a key keeps every entry stored before."""


def _summary_settings(summary: SummaryConfig) -> dict[str, Any]:
    """The ``[summary]`` settings a whole-document key holds."""
    settings = summary.model_dump(mode="json")
    for key in _HELD_WHEN_SET:
        if settings.get(key) is None:
            settings.pop(key, None)
    return settings


def _combined(steps: list[Step], sizes: list[int], generations: list[Generation]) -> list[Step]:
    """The combine steps of one level: each reads the next ``sizes[i]`` of ``steps`` and wrote
    ``generations[i]``."""
    combined, at = [], 0
    for size, generation in zip(sizes, generations, strict=True):
        combined.append(Step(tidy(generation.text), tuple(steps[at : at + size])))
        at += size
    return combined


def _request_attributes(
    engine_request_id: str, kind: PromptKind, prompt_tokens: int, *, max_tokens: int, urgent: bool
) -> dict[str, Any]:
    """What a request's span records before it runs: its id, kind and size."""
    return {
        "docsumd.request.id": engine_request_id,
        "docsumd.request.kind": kind.value,
        "docsumd.request.prompt_tokens": prompt_tokens,
        "gen_ai.request.max_tokens": max_tokens,
        "docsumd.admission.urgent": urgent,
    }


def _generation_attributes(generation: Generation) -> dict[str, Any]:
    """What a request's span records of its outcome."""
    attributes: dict[str, Any] = {
        "gen_ai.usage.input_tokens": generation.prompt_tokens,
        "gen_ai.usage.output_tokens": generation.output_tokens,
        "docsumd.cached_prompt_tokens": generation.cached_prompt_tokens,
        "docsumd.engine_s": generation.total_s,
    }
    if generation.finish_reason is not None:
        attributes["gen_ai.response.finish_reasons"] = (generation.finish_reason,)
    if generation.first_token_s is not None:
        attributes["docsumd.first_token_s"] = generation.first_token_s
    return attributes


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


def _label(index: int, where: str = "") -> str:
    """A summary's label in a combine request: its number, and its part's pages or section (``where``,
    when the document has a layout)."""
    return f"[Part {index}{': ' + where if where else ''}]\n"


def _combine_key(
    run: _DocumentRun,
    children: Sequence[CacheKey | None],
    labels: Sequence[str],
    step: CacheStep,
    *,
    verbatim: Sequence[int] = (),
) -> CacheKey | None:
    """The key of a combine request over ``children``'s outputs (None without a cache)."""
    if run.cache is None or any(child is None for child in children):
        return None
    known = [child for child in children if child is not None]
    return run.cache.keys.combine(known, step, labels=labels, verbatim=list(verbatim))


def _group(entries: Sequence[T], room: int, size: Callable[[T], int] = len) -> list[list[T]]:  # type: ignore[assignment]
    """Consecutive entries in groups of at most ``room`` tokens each (``size``: an entry's tokens).

    ``room`` holds at least two entries (checked at start), so every group but the last has two or
    more and each level at least halves the count.
    """
    groups: list[list[T]] = []
    current: list[T] = []
    used = 0
    for entry in entries:
        tokens = size(entry)
        if current and used + tokens > room:
            groups.append(current)
            current, used = [], 0
        current.append(entry)
        used += tokens
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


_NOT_REUSED: Final = frozenset({"first_token_s", "engine_s"})


def _document_entry(key: CacheKey, summary: Summary) -> CachedSummary:
    """A document's summary as its whole-document cache entry."""
    fields = {name: value for name, value in dataclasses.asdict(summary).items() if name not in _NOT_REUSED}
    return CachedSummary(
        text=summary.text,
        prompt_tokens=summary.prompt_tokens + summary.reused_prompt_tokens,
        generated_tokens=summary.generated_tokens + summary.reused_generated_tokens,
        finish_reason=summary.finish_reason,
        created=time.time(),
        key_parts=key.parts,
        fields=fields,
    )


def _reused_summary(fields: Any) -> Summary | None:
    """The summary of a whole-document cache entry, as this document's: no engine work, everything
    reused; None for an entry this code cannot read (then the document is summarized anew)."""
    try:
        stored = dict(fields)
        summary = Summary(**{**stored, "first_token_s": None, "engine_s": 0.0})
        return dataclasses.replace(
            summary,
            sources=tuple(dict(source) for source in stored.get("sources", ())),
            requests=0,
            prompt_tokens=0,
            generated_tokens=0,
            cached_prompt_tokens=0,
            reused_document=True,
            reused_parts=summary.parts,
            reused_requests=summary.requests + summary.reused_requests,
            reused_prompt_tokens=summary.prompt_tokens + summary.reused_prompt_tokens,
            reused_generated_tokens=summary.generated_tokens + summary.reused_generated_tokens,
        )
    except (TypeError, ValueError):
        return None
