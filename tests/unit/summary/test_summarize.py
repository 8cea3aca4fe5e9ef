"""daemon.summary.summarizer: request planning, map-reduce staging, truncation, options, fan-out.

The tokenizer is the tiny model's real one (session fixture), so every budget is checked on real token
counts. The engine is a fake that records each request (prompt ids, max_tokens, request id) and answers
with a fixed text: this is only for the narrow planning logic here; the real engine is exercised in
tests/e2e. Admission is the real :class:`~daemon.engine.admission.Admission` (with room for everything unless
a test says otherwise).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import re
from typing import Any

import pytest

from daemon.config import Config, EngineConfig, ProfileConfig, SummaryConfig
from daemon.document.decode import sha256_hex
from daemon.document.types import Document, Format, Heading, Layout
from daemon.engine.admission import Admission, AdmissionLimits
from daemon.errors import DocumentError, RequestError
from daemon.summary.chunking import split_into_chunks, tokenize_text
from daemon.summary.options import SummaryOptions
from daemon.summary.profiles import build_profiles, default_profiles
from daemon.summary.prompts import SYSTEM_INSTRUCTION, PromptKind
from daemon.summary.summarizer import Summarizer, _gather, _group
from daemon.typing import Style
from tests.doubles.admission import RecordingAdmission
from tests.doubles.engine import Call, FakeEngine

REPLY = "part summary words "  # 3 tokens per repetition with the tiny tokenizer


def replying_engine(
    *, repeats: int = 20, output_tokens: int = 60, steps: int = 3, behaviour: Any = None
) -> FakeEngine:
    """The shared fake engine answering ``REPLY`` repeated ``repeats`` times, with 7 cached tokens and
    ``steps`` event-loop turns per request so that concurrent requests overlap."""
    return FakeEngine(
        text=REPLY * repeats,
        output_tokens=output_tokens,
        cached_prompt_tokens=7,
        steps=steps,
        behaviour=behaviour,
    )


def make_admission() -> RecordingAdmission:
    return RecordingAdmission(AdmissionLimits(max_requests=1000, max_tokens=10**9))


def make_summarizer(
    tokenizer: Any,
    engine: FakeEngine,
    *,
    max_model_len: int = 1024,
    admission: Admission | None = None,
    **config: Any,
) -> Summarizer:
    # No opening in the final combine unless a test asks (its own test): the rest count notes exactly.
    settings: dict[str, Any] = {"max_summary_tokens": 64, "chunk_overlap_tokens": 32, "opening_tokens": 0}
    settings |= config
    summary_config = SummaryConfig(**settings)
    return Summarizer(
        engine,
        tokenizer,
        summary_config,
        profiles=default_profiles(summary_config, max_model_len, tokenizer),
        admission=admission or make_admission(),
    )


def make_document(text: str, doc_id: str = "doc.txt") -> Document:
    data = text.encode()
    return Document(
        id=doc_id,
        text=text,
        source="test",
        sha256=sha256_hex(data),
        size_bytes=len(data),
        encoding="utf-8",
    )


def long_text(paragraphs: int) -> str:
    """Numbered paragraphs, each different, so every stretch of tokens occurs once in the document."""
    return "".join(
        f"Clause {number}. The supplier number {number} shall deliver {number * 7} units within "
        f"{number % 29 + 1} days, and the buyer pays {number * 13} euros on receipt.\n\n"
        for number in range(1, paragraphs + 1)
    )


def body_of(
    summarizer: Summarizer, call: Call, kind: PromptKind, *, style: Any, max_tokens: int
) -> list[int]:
    """The text ids of a recorded prompt, with the template's prefix and suffix checked and removed."""
    prefix, suffix = summarizer.profiles.default.prompts.template_ids(
        kind, style=style, max_tokens=max_tokens
    )
    assert call.prompt[: len(prefix)] == prefix
    assert call.prompt[len(call.prompt) - len(suffix) :] == suffix
    return call.prompt[len(prefix) : len(call.prompt) - len(suffix)]


def find(haystack: list[int], needle: list[int], start: int) -> int:
    """The first index >= start where ``needle`` occurs in ``haystack``, or -1."""
    for index in range(start, len(haystack) - len(needle) + 1):
        if haystack[index : index + len(needle)] == needle:
            return index
    return -1


def assert_every_request_fits(engine: FakeEngine, max_model_len: int) -> None:
    assert engine.calls
    for call in engine.calls:
        assert len(call.prompt) + call.max_tokens <= max_model_len, call.request_id


# -- one request -----------------------------------------------------------------------------------


async def test_each_request_reaches_the_engine_with_the_priority_admission_gave_it(tokenizer: Any) -> None:
    engine = replying_engine()
    limits = AdmissionLimits(max_requests=1000, max_tokens=10**9, light_prompt_tokens=200)
    summarizer = make_summarizer(tokenizer, engine, admission=RecordingAdmission(limits))
    await summarizer.summarize(make_document("A short lease.", "short.txt"))
    await summarizer.summarize(make_document("A longer lease, clause after clause. " * 60, "long.txt"))
    assert {call.doc_id: call.priority for call in engine.calls} == {"short.txt": 0, "long.txt": 1}


async def test_short_document_is_one_request(tokenizer: Any) -> None:
    engine = replying_engine(output_tokens=42)
    admission = make_admission()
    summarizer = make_summarizer(tokenizer, engine, admission=admission)
    text = "The lessee pays the rent on the first day of each month."
    summary = await summarizer.summarize(make_document(text))
    assert [call.kind for call in engine.calls] == ["document"]
    (call,) = engine.calls
    assert call.request_id.startswith("doc.txt:document1:")
    assert call.max_tokens == 64
    document_ids = tokenize_text(tokenizer, text).ids
    assert body_of(summarizer, call, PromptKind.DOCUMENT, style="prose", max_tokens=64) == document_ids
    assert admission.asked == [(len(call.prompt) + 64, False)]
    assert (summary.strategy, summary.parts, summary.depth, summary.requests) == ("single", 1, 1, 1)
    assert (summary.dropped_tokens, summary.truncated) == (0, False)
    assert summary.document_tokens == len(document_ids)
    assert summary.text == engine.text.strip()
    assert (summary.summary_tokens, summary.generated_tokens) == (42, 42)
    assert (summary.prompt_tokens, summary.cached_prompt_tokens) == (len(call.prompt), 7)
    assert (summary.style, summary.max_summary_tokens, summary.finish_reason) == ("prose", 64, "stop")
    assert (admission.inflight_requests, admission.inflight_tokens, admission.waiting) == (0, 0, 0)


async def test_document_that_just_fits_is_one_request_and_one_more_token_is_not(tokenizer: Any) -> None:
    engine = replying_engine()
    summarizer = make_summarizer(tokenizer, engine, max_model_len=512)
    room = summarizer.profiles.default.budget.room(PromptKind.DOCUMENT, "prose", 64)
    text = long_text(40)
    ids = tokenize_text(tokenizer, text).ids
    assert len(ids) > room + 1
    fitting = tokenizer.decode(ids[:room])
    assert len(tokenize_text(tokenizer, fitting)) == room  # the cut round-trips exactly here
    summary = await summarizer.summarize(make_document(fitting))
    assert (summary.strategy, summary.requests) == ("single", 1)
    assert len(engine.calls[0].prompt) + 64 == 512  # the whole context, not a token more

    too_long = tokenizer.decode(ids[: room + 1])
    assert len(tokenize_text(tokenizer, too_long)) == room + 1
    summary = await summarizer.summarize(make_document(too_long))
    assert (summary.strategy, summary.parts) == ("map_reduce", 2)


# -- map-reduce ------------------------------------------------------------------------------------


async def test_long_document_is_split_into_parts_that_cover_it_then_combined(tokenizer: Any) -> None:
    max_model_len = 1024
    engine = replying_engine()
    admission = make_admission()
    summarizer = make_summarizer(tokenizer, engine, max_model_len=max_model_len, admission=admission)
    text = long_text(150)
    document_ids = tokenize_text(tokenizer, text).ids
    assert len(document_ids) > 4 * max_model_len

    summary = await summarizer.summarize(make_document(text))

    assert_every_request_fits(engine, max_model_len)
    parts = engine.of_kind("part")
    assert summary.parts == len(parts) > 4
    assert [call.kind for call in engine.calls] == ["part"] * len(parts) + ["combine"]
    assert (summary.strategy, summary.depth, summary.requests) == ("map_reduce", 2, len(parts) + 1)
    assert (summary.dropped_tokens, summary.truncated, summary.document_tokens) == (
        0,
        False,
        len(document_ids),
    )
    # The parts are consecutive stretches of the document that overlap or touch, from its first token to
    # its last: nothing is left out.
    covered = 0
    previous_start = -1
    for call in parts:
        assert call.max_tokens == summarizer.profiles.default.budget.part_summary_tokens == 64
        body = body_of(summarizer, call, PromptKind.PART, style="prose", max_tokens=call.max_tokens)
        assert 0 < len(body) <= summarizer.profiles.default.budget.part_input_tokens
        start = find(document_ids, body, previous_start + 1)
        assert 0 <= start <= covered, f"{call.request_id} leaves a gap before token {start}"
        previous_start, covered = start, start + len(body)
    assert covered == len(document_ids)
    # The final request combines the labelled part summaries, in order, at the summary's length.
    final = engine.calls[-1]
    assert final.max_tokens == 64
    combined = tokenizer.decode(body_of(summarizer, final, PromptKind.COMBINE, style="prose", max_tokens=64))
    labels = [int(label) for label in re.findall(r"\[Part (\d+)\]", combined)]
    assert labels == list(range(1, len(parts) + 1))
    assert combined.count(REPLY.strip()) == len(parts) * 20
    # Combine steps are urgent in admission; parts are not, but the document follows each with the
    # combine step, which admission's stage lead needs to know. Every slot is the request's prompt + budget.
    assert admission.asked[-1] == (len(final.prompt) + 64, True)
    assert all(not urgent for _, urgent in admission.asked[:-1])
    assert admission.follow_ups == [True] * len(parts) + [False]
    assert sorted(cost for cost, _ in admission.asked) == sorted(
        len(call.prompt) + call.max_tokens for call in engine.calls
    )
    assert summary.prompt_tokens == sum(len(call.prompt) for call in engine.calls)
    assert summary.generated_tokens == 60 * len(engine.calls)
    assert summary.cached_prompt_tokens == 7 * len(engine.calls)
    assert (admission.inflight_requests, admission.inflight_tokens, admission.waiting) == (0, 0, 0)


async def test_part_summaries_too_long_for_one_combine_are_combined_in_stages(tokenizer: Any) -> None:
    max_model_len = 512
    engine = replying_engine(
        repeats=30
    )  # about 90 tokens, cut to part_summary_tokens (64) in the combine input
    admission = make_admission()
    summarizer = make_summarizer(tokenizer, engine, max_model_len=max_model_len, admission=admission)
    text = long_text(80)

    summary = await summarizer.summarize(make_document(text))

    assert_every_request_fits(engine, max_model_len)
    parts, combines = engine.of_kind("part"), engine.of_kind("combine")
    assert summary.parts == len(parts) >= 8
    assert summary.depth >= 3
    assert len(combines) >= 3  # at least one intermediate level of two or more groups, then the final
    assert summary.requests == len(parts) + len(combines) == len(engine.calls)
    assert engine.calls[-1].kind == "combine"
    assert engine.calls[-1] is combines[-1]
    assert summary.dropped_tokens == 0
    # Every request but the final one is followed by another of the same document.
    assert admission.follow_ups == [True] * (len(engine.calls) - 1) + [False]
    # Levels are strictly sequential: every part comes before every combine.
    kinds = [call.kind for call in engine.calls]
    assert kinds == ["part"] * len(parts) + ["combine"] * len(combines)
    # Each level combines the previous level's entries in consecutive groups (labels 1..n, in order),
    # every group but a level's last holding two or more; each level at least halves the count.
    room = summarizer.profiles.default.budget.room(PromptKind.COMBINE, "prose", 64)
    levels: list[list[list[int]]] = []
    for call in combines[:-1]:
        body = body_of(summarizer, call, PromptKind.COMBINE, style="prose", max_tokens=64)
        assert len(body) <= room
        labels = [int(label) for label in re.findall(r"\[Part (\d+)\]", tokenizer.decode(body))]
        if labels[0] == 1:
            levels.append([])
        levels[-1].append(labels)
    assert len(levels) == summary.depth - 2
    entries = len(parts)
    for level in levels:
        assert [label for group in level for label in group] == list(range(1, entries + 1))
        assert all(len(group) >= 2 for group in level[:-1])
        assert len(level) <= (entries + 1) // 2
        entries = len(level)
    final = body_of(summarizer, combines[-1], PromptKind.COMBINE, style="prose", max_tokens=64)
    assert re.findall(r"\[Part (\d+)\]", tokenizer.decode(final)) == [str(n) for n in range(1, entries + 1)]


async def test_too_many_parts_is_too_long_and_sends_nothing(tokenizer: Any) -> None:
    engine = replying_engine()
    summarizer = make_summarizer(tokenizer, engine, max_model_len=512, max_parts=3)
    with pytest.raises(DocumentError) as caught:
        await summarizer.summarize(make_document(long_text(60)))
    assert caught.value.reason == "too_long"
    assert "max_parts is 3" in caught.value.message
    assert engine.calls == []


# -- head / head_tail ------------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", ["head", "head_tail"])
async def test_truncating_strategies_send_one_request_and_report_what_was_dropped(
    tokenizer: Any, strategy: str
) -> None:
    max_model_len = 512
    engine = replying_engine()
    summarizer = make_summarizer(tokenizer, engine, max_model_len=max_model_len, strategy=strategy)
    text = long_text(60)
    document_ids = tokenize_text(tokenizer, text).ids
    summary = await summarizer.summarize(make_document(text))

    assert [call.kind for call in engine.calls] == ["document"]
    (call,) = engine.calls
    assert len(call.prompt) + call.max_tokens == max_model_len  # the context is used to the last token
    body = body_of(summarizer, call, PromptKind.DOCUMENT, style="prose", max_tokens=64)
    room = summarizer.profiles.default.budget.room(PromptKind.DOCUMENT, "prose", 64)
    assert len(body) == room
    gap = summarizer.encode("\n\n[...]\n\n")
    if strategy == "head":
        kept = len(body)
        assert body == document_ids[:kept]
    else:
        head = find(body, gap, 0)
        assert head > 0
        tail = body[head + len(gap) :]
        assert body[:head] == document_ids[:head]
        assert tail == document_ids[len(document_ids) - len(tail) :]
        kept = head + len(tail)
        assert kept == room - len(gap)
    assert (summary.strategy, summary.parts, summary.depth, summary.requests) == (strategy, 1, 1, 1)
    assert summary.document_tokens == len(document_ids)
    assert summary.dropped_tokens == len(document_ids) - kept > 0
    assert summary.truncated is True


async def test_truncating_strategy_does_not_truncate_a_document_that_fits(tokenizer: Any) -> None:
    engine = replying_engine()
    summarizer = make_summarizer(tokenizer, engine, strategy="head_tail")
    summary = await summarizer.summarize(make_document("A short notice."))
    assert (summary.strategy, summary.dropped_tokens, summary.truncated) == ("single", 0, False)


async def test_options_strategy_overrides_the_configured_one(tokenizer: Any) -> None:
    engine = replying_engine()
    summarizer = make_summarizer(tokenizer, engine, max_model_len=512)
    summary = await summarizer.summarize(
        make_document(long_text(60)), summarizer.plan(SummaryOptions(strategy="head"))
    )
    assert (summary.strategy, summary.requests, summary.truncated) == ("head", 1, True)


# -- options ---------------------------------------------------------------------------------------


async def test_options_set_the_final_length_and_style(tokenizer: Any) -> None:
    engine = replying_engine()
    summarizer = make_summarizer(tokenizer, engine, max_model_len=1024)
    options = SummaryOptions(max_summary_tokens=100, style="bullets")
    summary = await summarizer.summarize(make_document(long_text(60)), summarizer.plan(options))

    assert_every_request_fits(engine, 1024)
    final = engine.calls[-1]
    assert final.kind == "combine"
    assert final.max_tokens == 100
    final_text = tokenizer.decode(final.prompt)
    assert "bullet" in final_text
    assert "at most about 50 words" in final_text
    # The parts keep the configured part length and plain prose (their prompt prefix stays shared).
    for call in engine.of_kind("part"):
        assert call.max_tokens == 64
        assert "bullet" not in tokenizer.decode(call.prompt)
    assert (summary.style, summary.max_summary_tokens) == ("bullets", 100)


async def test_options_on_a_single_request_document(tokenizer: Any) -> None:
    engine = replying_engine()
    summarizer = make_summarizer(tokenizer, engine)
    summary = await summarizer.summarize(
        make_document("A short notice."),
        summarizer.plan(SummaryOptions(max_summary_tokens=200, style="bullets")),
    )
    (call,) = engine.calls
    assert call.max_tokens == 200
    assert "bullet" in tokenizer.decode(call.prompt)
    assert (summary.strategy, summary.style, summary.max_summary_tokens) == ("single", "bullets", 200)

    engine_plain = replying_engine()
    await make_summarizer(tokenizer, engine_plain).summarize(make_document("A short notice."))
    assert "bullet" not in tokenizer.decode(engine_plain.calls[0].prompt)
    assert engine_plain.calls[0].max_tokens == 64


async def test_options_asking_for_over_half_the_context_are_invalid(tokenizer: Any) -> None:
    engine = replying_engine()
    summarizer = make_summarizer(tokenizer, engine, max_model_len=1024)
    with pytest.raises(DocumentError) as caught:
        await summarizer.summarize(
            make_document("A short notice."), summarizer.plan(SummaryOptions(max_summary_tokens=513))
        )
    assert caught.value.reason == "invalid_options"
    assert "513" in caught.value.message
    assert engine.calls == []
    summary = await summarizer.summarize(
        make_document("A short notice."), summarizer.plan(SummaryOptions(max_summary_tokens=512))
    )
    assert summary.max_summary_tokens == 512


@pytest.mark.parametrize(
    ("config", "options"),
    [
        # Accepted by Config (max_summary_tokens <= half, part summaries of 85 <= a sixth of 512) and
        # by the context budget; no per-document options at all.
        ({"max_summary_tokens": 256}, SummaryOptions()),
        # The configured summary is small, but a valid option (not over half the context) asks for more.
        ({"max_summary_tokens": 64, "part_summary_tokens": 85}, SummaryOptions(max_summary_tokens=256)),
    ],
    ids=["config", "options"],
)
async def test_long_summary_in_a_small_context_still_combines(
    tokenizer: Any, config: dict[str, Any], options: SummaryOptions
) -> None:
    # The final combine of max_summary_tokens 256 in a 520-token context (512 before the longer
    # prompts of summary-v3) has room for about 70 tokens of text, less than one combined entry (label
    # plus up to 85 tokens): combining one entry again gives one entry again, until the depth guard
    # fails the document with internal_error.
    engine = replying_engine(repeats=40)  # the model uses its whole part budget (120 tokens, cut to 85)
    summarizer = make_summarizer(tokenizer, engine, max_model_len=520, **config)
    summary = await summarizer.summarize(make_document(long_text(40)), summarizer.plan(options))
    assert summary.dropped_tokens == 0
    assert_every_request_fits(engine, 520)


# -- failures and fan-out --------------------------------------------------------------------------


async def test_engine_error_fails_the_document_and_cancels_its_other_requests(tokenizer: Any) -> None:
    engine = replying_engine()
    admission = make_admission()
    summarizer = make_summarizer(tokenizer, engine, max_model_len=512, admission=admission)
    text = long_text(20)
    parts = len(
        split_into_chunks(
            tokenize_text(tokenizer, text),
            summarizer.profiles.default.budget.part_input_tokens,
            summarizer.profiles.default.budget.overlap_tokens,
        )
    )
    assert 3 <= parts <= summarizer.config.max_parallel_requests_per_document  # all reach the engine
    all_started = asyncio.Event()
    never = asyncio.Event()

    async def behaviour(request_id: str) -> None:
        if len(engine.calls) == parts:
            all_started.set()
        if ":part2:" in request_id:
            await all_started.wait()  # fail only once the other parts are running
            raise RequestError("the engine refused this prompt")
        await never.wait()  # the other parts would run forever

    engine.behaviour = behaviour
    with pytest.raises(DocumentError) as caught:
        await asyncio.wait_for(summarizer.summarize(make_document(text)), 10)
    assert caught.value.reason == "engine_error"
    assert "the engine refused this prompt" in caught.value.message
    assert [call.kind for call in engine.calls] == ["part"] * parts
    assert sorted(call.request_id for call in engine.cancelled) == sorted(
        call.request_id for call in engine.calls if ":part2:" not in call.request_id
    )
    assert len(engine.cancelled) == parts - 1
    assert engine.active == 0
    assert (admission.inflight_requests, admission.inflight_tokens, admission.waiting) == (0, 0, 0)


async def test_engine_error_in_a_single_request_is_a_document_error(tokenizer: Any) -> None:
    async def refuse(request_id: str) -> None:
        raise RequestError("prompt rejected")

    engine = replying_engine(behaviour=refuse)
    with pytest.raises(DocumentError) as caught:
        await make_summarizer(tokenizer, engine).summarize(make_document("A short notice."))
    assert caught.value.reason == "engine_error"
    assert isinstance(caught.value.__cause__, RequestError)


async def test_fan_out_of_one_document_is_bounded(tokenizer: Any) -> None:
    engine = replying_engine(steps=10)
    summarizer = make_summarizer(tokenizer, engine, max_model_len=512, max_parallel_requests_per_document=2)
    summary = await summarizer.summarize(make_document(long_text(60)))
    assert summary.parts >= 5
    assert engine.max_active == 2


async def test_fan_out_bound_is_per_document(tokenizer: Any) -> None:
    both_documents_running = asyncio.Event()

    async def behaviour(request_id: str) -> None:
        # Hold the first requests until both documents have some in the engine (each tokenizes in a
        # thread, so one could otherwise finish before the other starts). The wait is only a guard: it
        # ends at once in a passing run, and on timeout the assertion below reports the problem.
        if engine.active >= 4:
            both_documents_running.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(both_documents_running.wait(), 5)

    engine = replying_engine(steps=10, behaviour=behaviour)
    summarizer = make_summarizer(tokenizer, engine, max_model_len=512, max_parallel_requests_per_document=2)
    await asyncio.gather(
        summarizer.summarize(make_document(long_text(60), "a.txt")),
        summarizer.summarize(make_document(long_text(60), "b.txt")),
    )
    assert engine.max_active == 4


async def test_every_prompt_starts_with_the_same_system_prefix(tokenizer: Any) -> None:
    engine = replying_engine()
    summarizer = make_summarizer(tokenizer, engine, max_model_len=512)
    await summarizer.summarize(make_document(long_text(80)), summarizer.plan(SummaryOptions(style="bullets")))
    await summarizer.summarize(make_document("A short notice.", "short.txt"))
    assert {call.kind for call in engine.calls} == {"part", "combine", "document"}
    system = tokenizer.encode(
        f"<|im_start|>system\n{SYSTEM_INSTRUCTION}<|im_end|>\n", add_special_tokens=False
    )
    for call in engine.calls:
        assert call.prompt[: len(system)] == system, call.request_id
    # Within a kind the shared prefix runs up to the text: the instruction is before it, not after.
    for kind in (PromptKind.PART, PromptKind.COMBINE):
        prefix, _ = summarizer.profiles.default.prompts.template_ids(kind, style="prose", max_tokens=64)
        assert len(prefix) > len(system)
        for call in engine.of_kind(kind.value):
            assert call.prompt[: len(prefix)] == prefix


# -- helpers ---------------------------------------------------------------------------------------


def test_group_keeps_order_and_room_with_two_or_more_per_group() -> None:
    sizes = [30, 50, 10, 45, 50, 5, 20, 50, 50, 1, 33, 49, 50]
    entries = [[index] * size for index, size in enumerate(sizes)]
    for room in (100, 101, 150, 400):
        groups = _group(entries, room)
        assert [entry for group in groups for entry in group] == entries  # consecutive, all, in order
        assert all(sum(map(len, group)) <= room for group in groups)
        assert all(len(group) >= 2 for group in groups[:-1])
        assert len(groups) <= (len(entries) + 1) // 2 + 1


def test_group_fills_each_group_before_starting_the_next() -> None:
    entries = [[0] * 40, [1] * 40, [2] * 40, [3] * 40, [4] * 40]
    assert [len(group) for group in _group(entries, 100)] == [2, 2, 1]
    assert [len(group) for group in _group(entries, 120)] == [3, 2]
    assert _group(entries, 1000) == [entries]


async def test_gather_returns_results_in_order() -> None:
    async def value(number: int) -> int:
        for _ in range(5 - number):
            await asyncio.sleep(0)
        return number

    assert await _gather(value(number) for number in range(5)) == [0, 1, 2, 3, 4]


async def test_gather_cancels_the_rest_on_the_first_failure() -> None:
    cancelled: list[int] = []
    never = asyncio.Event()

    async def wait_forever(number: int) -> int:
        try:
            await never.wait()
        except asyncio.CancelledError:
            cancelled.append(number)
            raise
        return number

    async def fail() -> int:
        await asyncio.sleep(0)
        raise ValueError("part failed")

    with pytest.raises(ValueError, match="part failed"):
        await asyncio.wait_for(_gather([wait_forever(1), fail(), wait_forever(2)]), 5)
    assert sorted(cancelled) == [1, 2]


# -- profiles --------------------------------------------------------------------------------------


async def test_a_staged_summary_runs_every_request_under_its_profile(tokenizer: Any) -> None:
    engine = replying_engine()
    config = Config(
        engine=EngineConfig(model="unused", max_model_len=512),
        summary=SummaryConfig(max_summary_tokens=64, chunk_overlap_tokens=32),
        profiles={"brief": ProfileConfig(max_summary_tokens=48)},
    )
    profiles = build_profiles(config, tokenizer)
    summarizer = Summarizer(engine, tokenizer, config.summary, profiles=profiles, admission=make_admission())
    brief = profiles.get("brief")

    summary = await summarizer.summarize(make_document(long_text(80)), summarizer.plan(profile=brief))

    assert_every_request_fits(engine, 512)
    assert (summary.profile, summary.profile_version) == ("brief", brief.version)
    assert (summary.style, summary.max_summary_tokens) == ("bullets", 48)  # the profile's defaults
    assert {call.kind for call in engine.calls} == {"part", "combine"}
    for call in engine.calls:
        kind = PromptKind(call.kind)
        style: Style = "bullets" if call is engine.calls[-1] else "prose"
        prefix, suffix = brief.prompts.template_ids(kind, style=style, max_tokens=call.max_tokens)
        assert call.prompt[: len(prefix)] == prefix, call.request_id
        assert call.prompt[len(call.prompt) - len(suffix) :] == suffix, call.request_id
        assert call.sampling is not None
        assert call.sampling == brief.sampling(call.max_tokens)
    # Parts are cut to the brief's room (its longer wording leaves less of the context for text).
    assert brief.budget.part_input_tokens < profiles.default.budget.part_input_tokens
    for call in engine.of_kind("part"):
        assert call.max_tokens == brief.budget.part_summary_tokens == 48


async def test_document_options_override_the_profiles_defaults(tokenizer: Any) -> None:
    engine = replying_engine()
    config = Config(
        engine=EngineConfig(model="unused", max_model_len=1024),
        summary=SummaryConfig(max_summary_tokens=64),
        profiles={"brief": ProfileConfig()},
    )
    profiles = build_profiles(config, tokenizer)
    summarizer = Summarizer(engine, tokenizer, config.summary, profiles=profiles, admission=make_admission())
    summary = await summarizer.summarize(
        make_document("A short notice."),
        summarizer.plan(SummaryOptions(style="prose", max_summary_tokens=32), profiles.get("brief")),
    )
    assert (summary.profile, summary.style, summary.max_summary_tokens) == ("brief", "prose", 32)


# -- provenance: where each part came from -------------------------------------------------------


def paged_document(pages: int, paragraphs_per_page: int = 6) -> Document:
    """A document as the PDF extractor writes one: pages separated by form feeds, a Layout that
    records where each starts."""
    texts = [long_text(paragraphs_per_page).replace("Clause", f"Page{page} clause") for page in range(pages)]
    text = "\f".join(texts)
    starts = [0]
    for page_text in texts[:-1]:
        starts.append(starts[-1] + len(page_text) + 1)
    document = make_document(text, "paged.pdf")
    return dataclasses.replace(document, format=Format.PDF, layout=Layout(page_starts=tuple(starts)))


async def test_a_staged_summary_records_each_parts_pages_and_labels_its_notes_with_them(
    tokenizer: Any,
) -> None:
    engine = replying_engine()
    summarizer = make_summarizer(tokenizer, engine, max_model_len=1024)
    document = paged_document(12)

    summary = await summarizer.summarize(document)

    assert summary.parts > 2
    assert [source["part"] for source in summary.sources] == list(range(1, summary.parts + 1))
    previous_end = 0
    for source in summary.sources:
        start, end = source["chars"]
        assert start <= previous_end < end  # consecutive, overlapping or touching
        first, last = source["pages"]
        # The pages are those of the part's first and last characters: count the page breaks before.
        assert first == document.text[:start].count("\f") + 1
        assert last == document.text[: end - 1].count("\f") + 1
        previous_end = end
    assert summary.sources[0]["pages"][0] == 1
    assert summary.sources[-1]["pages"][1] == 12
    assert summary.sources[-1]["chars"][1] == len(document.text)
    combined = tokenizer.decode(
        body_of(summarizer, engine.calls[-1], PromptKind.COMBINE, style="prose", max_tokens=64)
    )
    labels = re.findall(r"\[Part (\d+): pages? (\d+)(?:-(\d+))?\]", combined)
    assert [int(part) for part, _, _ in labels] == list(range(1, summary.parts + 1))


async def test_a_text_document_records_character_spans_only_and_its_labels_are_unchanged(
    tokenizer: Any,
) -> None:
    engine = replying_engine()
    summarizer = make_summarizer(tokenizer, engine, max_model_len=1024)

    summary = await summarizer.summarize(make_document(long_text(150)))

    assert all(set(source) == {"part", "chars"} for source in summary.sources)
    combined = tokenizer.decode(
        body_of(summarizer, engine.calls[-1], PromptKind.COMBINE, style="prose", max_tokens=64)
    )
    assert re.findall(r"\[Part [^\]]*\]", combined) == [f"[Part {n}]" for n in range(1, summary.parts + 1)]


async def test_a_headed_document_records_each_parts_section(tokenizer: Any) -> None:
    sections = [f"# Chapter {n}\n\n" + long_text(12) for n in range(1, 6)]
    text = "".join(sections)
    headings = []
    offset = 0
    for n, section in enumerate(sections, 1):
        headings.append(Heading(level=1, title=f"Chapter {n}", start=offset))
        offset += len(section)
    document = dataclasses.replace(
        make_document(text, "book.md"), format=Format.MARKDOWN, layout=Layout(headings=tuple(headings))
    )
    engine = replying_engine()
    summarizer = make_summarizer(tokenizer, engine, max_model_len=1024)

    summary = await summarizer.summarize(document)

    assert summary.parts > 2
    assert summary.sources[0]["section"] == ["Chapter 1"]
    assert summary.sources[-1]["section"][0].startswith("Chapter")
    # Every heading starts inside some part (one in an overlap, inside two).
    assert {title for source in summary.sources for title in source["headings"]} == {
        f"Chapter {n}" for n in range(1, 6)
    }


async def test_truncating_strategies_record_the_spans_they_read(tokenizer: Any) -> None:
    document = paged_document(12)
    for strategy, spans in (("head", 1), ("head_tail", 2)):
        engine = replying_engine()
        summarizer = make_summarizer(tokenizer, engine, max_model_len=1024, strategy=strategy)
        summary = await summarizer.summarize(document)
        assert len(summary.sources) == spans
        assert summary.sources[0]["chars"][0] == 0
        assert summary.sources[0]["pages"][0] == 1
        if spans == 2:
            assert summary.sources[1]["chars"][1] == len(document.text)
            assert summary.sources[1]["pages"][1] == 12
        else:
            assert summary.sources[0]["pages"][1] < 12


async def test_the_final_combine_reads_the_documents_opening_when_asked_and_it_fits(tokenizer: Any) -> None:
    text = long_text(150)
    opening_ids = tokenize_text(tokenizer, text).ids[:100]
    for wanted, expected in ((0, 0), (100, 100), (10, 0)):  # 10: under the 32-token minimum
        engine = replying_engine()
        summarizer = make_summarizer(tokenizer, engine, max_model_len=1024, opening_tokens=wanted)
        await summarizer.summarize(make_document(text))
        final = engine.calls[-1]
        body = body_of(summarizer, final, PromptKind.COMBINE, style="prose", max_tokens=64)
        decoded = tokenizer.decode(body)
        assert ("[The opening of the document, verbatim]" in decoded) is (expected > 0)
        if expected:
            assert find(body, opening_ids, 0) >= 0
            assert decoded.index("verbatim]") < decoded.index("[Part 1]")
        assert len(final.prompt) + final.max_tokens <= 1024


# -- the grounding check and evidence of each summary ----------------------------------------------

NOTICE = "The licensee must give thirty (30) days notice to Acme Holdings before the term ends.\n"


def checking_summarizer(tokenizer: Any, engine: FakeEngine, on_unsupported: str) -> Summarizer:
    config = Config(
        engine=EngineConfig(model="unused", max_model_len=1024),
        summary=SummaryConfig(max_summary_tokens=64, opening_tokens=0),
        profiles={"strict": ProfileConfig(on_unsupported=on_unsupported)},  # type: ignore[arg-type]
    )
    return Summarizer(
        engine,
        tokenizer,
        config.summary,
        profiles=build_profiles(config, tokenizer),
        admission=make_admission(),
    )


async def test_every_summary_carries_its_checks_and_evidence_and_flag_keeps_it(tokenizer: Any) -> None:
    engine = FakeEngine(text="Acme Holdings must give 60 days notice.")
    summarizer = checking_summarizer(tokenizer, engine, "flag")
    summary = await summarizer.summarize(
        make_document(NOTICE), summarizer.plan(profile=summarizer.profiles.get("strict"))
    )

    assert summary.text == "Acme Holdings must give 60 days notice."
    assert summary.checks is not None
    assert summary.checks["counts"] == {"supported": 1, "unsupported": 1, "unchecked": 0}
    assert summary.checks["unsupported"] == [
        {"text": "60 days", "kind": "duration", "sentence": 0, "chars": [24, 31]}
    ]
    assert summary.checks["on_unsupported"] == "flag"
    assert "retried" not in summary.checks
    (entry,) = summary.evidence
    assert entry["sentence"] == 0
    assert entry["chars"] == [0, len(summary.text)]
    assert entry["parts"][0]["part"] == 1  # the one request's part
    assert entry["parts"][0]["chars"] == [0, len(NOTICE)]
    assert len(engine.calls) == 1


async def test_retry_draws_the_final_step_again_and_keeps_the_better_summary(tokenizer: Any) -> None:
    engine = FakeEngine()
    engine.replies = [("Notice is 60 days.", "stop"), ("Notice is 30 days.", "stop")]
    summarizer = checking_summarizer(tokenizer, engine, "retry")
    summary = await summarizer.summarize(
        make_document(NOTICE), summarizer.plan(profile=summarizer.profiles.get("strict"))
    )

    assert summary.text == "Notice is 30 days."
    assert summary.checks is not None
    assert summary.checks["counts"]["unsupported"] == 0
    assert summary.checks["retried"] is True
    assert summary.requests == 2
    first, second = engine.samplings
    assert second.temperature >= 0.5
    assert second.seed == first.seed


async def test_retry_keeps_the_first_summary_when_the_second_is_no_better(tokenizer: Any) -> None:
    engine = FakeEngine()
    engine.replies = [("Notice is 60 days.", "stop"), ("Notice is 61 days, paid by Globex.", "stop")]
    summarizer = checking_summarizer(tokenizer, engine, "retry")
    summary = await summarizer.summarize(
        make_document(NOTICE), summarizer.plan(profile=summarizer.profiles.get("strict"))
    )
    assert summary.text == "Notice is 60 days."
    assert summary.checks is not None
    assert summary.checks["retried"] is True
    assert summary.requests == 2


async def test_retry_keeps_the_first_summary_when_the_second_draw_fails(tokenizer: Any) -> None:
    # A second draw the engine fails (a server's 500, a dropped connection) does not fail a document
    # whose first summary was valid and checked.
    async def fail_the_second_request(request_id: str) -> None:
        if len(engine.calls) == 2:
            raise RequestError("the server answered 500")

    engine = FakeEngine(behaviour=fail_the_second_request)
    engine.replies = [("Notice is 60 days.", "stop")]
    summarizer = checking_summarizer(tokenizer, engine, "retry")
    summary = await summarizer.summarize(
        make_document(NOTICE), summarizer.plan(profile=summarizer.profiles.get("strict"))
    )
    assert summary.text == "Notice is 60 days."
    assert summary.checks is not None
    assert summary.checks["retried"] is True
    assert summary.checks["retry_error"] == "engine_error"
    assert summary.checks["counts"]["unsupported"] == 1
    assert len(engine.calls) == 2


async def test_retry_is_not_drawn_for_a_summary_without_unsupported_items(tokenizer: Any) -> None:
    engine = FakeEngine(text="Notice is 30 days.")
    summarizer = checking_summarizer(tokenizer, engine, "retry")
    summary = await summarizer.summarize(
        make_document(NOTICE), summarizer.plan(profile=summarizer.profiles.get("strict"))
    )
    assert summary.checks is not None
    assert summary.checks["retried"] is False
    assert summary.requests == 1


async def test_fail_raises_unsupported_claims_with_the_summary_checks_and_evidence(tokenizer: Any) -> None:
    engine = FakeEngine(text="Notice is 60 days, says Globex.")
    summarizer = checking_summarizer(tokenizer, engine, "fail")
    with pytest.raises(DocumentError) as raised:
        await summarizer.summarize(
            make_document(NOTICE), summarizer.plan(profile=summarizer.profiles.get("strict"))
        )
    error = raised.value
    assert error.reason == "unsupported_claims"
    assert "duration '60 days'" in error.message
    assert "name 'Globex'" in error.message
    assert error.fields["summary"] == "Notice is 60 days, says Globex."
    assert [item["text"] for item in error.fields["checks"]["unsupported"]] == ["60 days", "Globex"]
    assert error.fields["evidence"][0]["text"] == "Notice is 60 days, says Globex."
    # A supported summary passes under the same profile.
    engine.text = "Notice is 30 days."
    summary = await summarizer.summarize(
        make_document(NOTICE), summarizer.plan(profile=summarizer.profiles.get("strict"))
    )
    assert summary.checks is not None
    assert summary.checks["counts"]["unsupported"] == 0


async def test_a_truncated_summary_is_checked_against_what_was_read_only(tokenizer: Any) -> None:
    text = long_text(60) + "The final clause sets a fee of 99999 euros.\n"
    engine = FakeEngine(text="A fee of 99999 euros is due.")
    summarizer = make_summarizer(tokenizer, engine, strategy="head")
    summary = await summarizer.summarize(make_document(text))
    assert summary.truncated
    assert summary.checks is not None
    assert [item["text"] for item in summary.checks["unsupported"]] == ["99999 euros"]
    read_end = summary.sources[0]["chars"][1]
    for entry in summary.evidence:
        assert all(part["chars"][1] <= read_end for part in entry["parts"])


class EchoEngine(FakeEngine):
    """Answers each request with the first ``Page<N> clause <M>`` its prompt holds, as a note: a part
    summary names its part, and a combine step passes its first note on."""

    def __init__(self, tokenizer: Any) -> None:
        super().__init__()
        self.tokenizer = tokenizer

    async def generate(
        self, prompt_token_ids: list[int], sampling: Any, request_id: str, **kwargs: Any
    ) -> Any:
        generation = await super().generate(prompt_token_ids, sampling, request_id, **kwargs)
        found = re.search(r"Page(\d+) clause (\d+)", self.tokenizer.decode(prompt_token_ids))
        note = f"Page{found.group(1)} clause {found.group(2)} binds the supplier." if found else "Nothing."
        return dataclasses.replace(generation, text=note)


async def test_a_staged_summarys_evidence_points_to_the_part_and_pages_its_sentence_came_from(
    tokenizer: Any,
) -> None:
    engine = EchoEngine(tokenizer)
    summarizer = make_summarizer(tokenizer, engine, max_model_len=512)
    document = paged_document(pages=6)
    summary = await summarizer.summarize(document)

    assert summary.strategy == "map_reduce"
    assert summary.parts >= 3
    (entry,) = summary.evidence
    best = entry["parts"][0]
    # The final summary names the first part's first clause: the evidence is part 1, page 1.
    assert entry["text"].startswith("Page0 clause 1 ")
    assert best["part"] == 1
    assert best["pages"][0] == 1
    assert best["chars"] == summary.sources[0]["chars"]
    assert summary.checks is not None
    assert summary.checks["counts"]["unsupported"] == 0


async def test_each_checked_summary_is_counted_by_profile_and_kind(tokenizer: Any) -> None:
    from prometheus_client import REGISTRY

    def value(name: str, **labels: str) -> float:
        return REGISTRY.get_sample_value(name, {"profile": "strict", **labels}) or 0.0

    before = {
        "checked": value("docsumd_grounding_checked_summaries_total"),
        "flagged": value("docsumd_grounding_flagged_summaries_total"),
        "retries": value("docsumd_grounding_retries_total"),
        "durations": value("docsumd_grounding_unsupported_total", kind="duration"),
        "items": value("docsumd_grounding_items_total", kind="duration"),
    }
    engine = FakeEngine()
    engine.replies = [
        ("Notice is 60 days.", "stop"),
        ("Notice is 61 days.", "stop"),
        ("Notice is 30 days.", "stop"),
    ]
    summarizer = checking_summarizer(tokenizer, engine, "retry")
    profile = summarizer.profiles.get("strict")
    await summarizer.summarize(
        make_document(NOTICE), summarizer.plan(profile=profile)
    )  # 60, retried: 61, kept 60
    await summarizer.summarize(make_document(NOTICE), summarizer.plan(profile=profile))  # 30: supported

    assert value("docsumd_grounding_checked_summaries_total") - before["checked"] == 2
    assert value("docsumd_grounding_flagged_summaries_total") - before["flagged"] == 1
    assert value("docsumd_grounding_retries_total") - before["retries"] == 1
    assert value("docsumd_grounding_unsupported_total", kind="duration") - before["durations"] == 1
    assert value("docsumd_grounding_items_total", kind="duration") - before["items"] == 2
