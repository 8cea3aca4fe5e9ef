"""The summarizer with a summary cache (daemon.summary.summarizer over daemon.cache): what is reused,
what is stored, what a result says, and a store that fails.

The tokenizer is the tiny model's real one; the engine is the recording fake of tests/doubles (the
real engine with a cache: bench/cache_edits.py); the store is a real SQLite file.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from daemon.cache import KeyMaker, KeyScope, ModelRevision, SummaryCache
from daemon.cache.sqlite import SqliteStore
from daemon.config import EngineConfig
from daemon.engine.vllm_args import engine_kwargs
from daemon.summary.summarizer import Summarizer
from tests.doubles.engine import FakeEngine
from tests.unit.summary.test_summarize import long_text, make_document, make_summarizer, replying_engine

SCOPE = KeyScope.create(
    engine_kwargs(EngineConfig(model="/m", dtype="bfloat16")), model=ModelRevision("1" * 16, "folder", 1)
)


@pytest.fixture
async def cache(tmp_path: Path) -> AsyncIterator[SummaryCache]:
    cache = SummaryCache(
        SqliteStore(tmp_path / "c.sqlite3", max_bytes=1 << 26, timeout=5),
        KeyMaker(SCOPE),
        max_value_bytes=1 << 20,
        retry_seconds=30,
    )
    await cache.start()
    yield cache
    await cache.stop()


def cached(tokenizer: Any, engine: FakeEngine, cache: SummaryCache, **config: Any) -> Summarizer:
    summarizer = make_summarizer(tokenizer, engine, **config)
    summarizer.cache = cache
    return summarizer


def edited(text: str, clause: int) -> str:
    return text.replace(f"Clause {clause}. The supplier", f"Clause {clause}. The new supplier", 1)


async def test_the_same_document_again_costs_no_engine_request(tokenizer: Any, cache: SummaryCache) -> None:
    engine = replying_engine()
    summarizer = cached(tokenizer, engine, cache)
    text = long_text(120)
    first = await summarizer.summarize(make_document(text, "a.txt"))
    assert first.strategy == "map_reduce"
    assert first.parts > 3
    assert (first.reused_document, first.reused_requests) == (False, 0)
    made = len(engine.calls)
    assert first.requests == made
    assert first.prompt_tokens > first.document_tokens

    again = await summarizer.summarize(make_document(text, "copy-of-a.txt"))  # same bytes, new name
    assert len(engine.calls) == made  # no request at all
    assert again.text == first.text
    assert (again.requests, again.prompt_tokens, again.generated_tokens) == (0, 0, 0)
    assert again.reused_document
    assert again.reused_parts == first.parts
    assert again.reused_requests == first.requests
    assert again.reused_prompt_tokens == first.prompt_tokens
    assert again.reused_generated_tokens == first.generated_tokens
    assert (again.parts, again.depth, again.sources) == (first.parts, first.depth, first.sources)


async def test_an_edited_document_costs_only_its_edited_part_and_the_steps_above(
    tokenizer: Any, cache: SummaryCache
) -> None:
    engine = replying_engine()
    summarizer = cached(tokenizer, engine, cache)
    text = long_text(200)
    first = await summarizer.summarize(make_document(text))
    before = len(engine.calls)
    second = await summarizer.summarize(make_document(edited(text, 150)))
    made = engine.calls[before:]
    assert second.parts == first.parts
    parts_made = [call for call in made if call.kind == "part"]
    assert len(parts_made) == 1  # the edited part only
    assert second.reused_parts == first.parts - 1
    assert not second.reused_document
    # Each level above makes one request again (the edited part's ancestors), then the final step.
    assert len(made) == second.depth
    assert second.requests == len(made)
    assert second.prompt_tokens == sum(len(call.prompt) for call in made)
    assert second.prompt_tokens + second.reused_prompt_tokens >= first.prompt_tokens * 0.95
    assert second.prompt_tokens < first.prompt_tokens * 0.5


async def test_a_profile_that_does_not_reuse_makes_everything(tokenizer: Any, cache: SummaryCache) -> None:
    engine = replying_engine()
    summarizer = cached(tokenizer, engine, cache)
    summarizer.profiles = _not_reusing(summarizer)
    text = long_text(60)
    first = await summarizer.summarize(make_document(text))
    second = await summarizer.summarize(make_document(text))
    assert len(engine.calls) == 2 * first.requests
    assert (second.reused_document, second.reused_requests) == (False, 0)


def _not_reusing(summarizer: Summarizer) -> Any:
    from daemon.summary.profiles import Profiles

    profile = dataclasses.replace(summarizer.profiles.default, reuse_cached=False)
    return Profiles([profile], profile.name)


def cut_off(tokenizer: Any, cache: SummaryCache, temperature: float) -> tuple[FakeEngine, Summarizer]:
    """A summarizer at ``temperature`` whose engine cuts every output off at its length limit."""
    engine = replying_engine()
    engine.replies = [("cut off", "length")] * 1000
    return engine, cached(tokenizer, engine, cache, temperature=temperature)


async def test_an_output_cut_off_at_the_length_limit_is_not_stored_under_sampling(
    tokenizer: Any, cache: SummaryCache
) -> None:
    engine, summarizer = cut_off(tokenizer, cache, 0.3)
    text = long_text(60)
    first = await summarizer.summarize(make_document(text))
    assert first.finish_reason == "length"
    await summarizer.summarize(make_document(text))
    assert len(engine.calls) == 2 * first.requests  # nothing was stored, so nothing reused


async def test_an_output_cut_off_at_the_length_limit_is_stored_when_greedy(
    tokenizer: Any, cache: SummaryCache
) -> None:
    engine, summarizer = cut_off(tokenizer, cache, 0.0)
    text = long_text(60)
    first = await summarizer.summarize(make_document(text))
    assert first.finish_reason == "length"
    made = len(engine.calls)
    again = await summarizer.summarize(make_document(text))
    assert len(engine.calls) == made  # the same draw would come again: the whole document reused
    assert again.reused_document
    assert again.text == first.text
    edited_text = await summarizer.summarize(make_document(edited(text, 40)))
    assert len(engine.calls) - made == edited_text.depth  # the edited part and the steps above it


async def test_a_single_request_document_is_reused_by_its_part_key_under_a_new_options_set(
    tokenizer: Any, cache: SummaryCache
) -> None:
    from daemon.summary.options import SummaryOptions

    engine = replying_engine()
    summarizer = cached(tokenizer, engine, cache)
    document = make_document("A short agreement between two parties about deliveries.")
    first = await summarizer.summarize(document)
    assert (first.strategy, first.requests) == ("single", 1)
    # Another strategy option changes the document's key, not the request's: the request is reused.
    second = await summarizer.summarize(document, summarizer.plan(SummaryOptions(strategy="head")))
    assert len(engine.calls) == 1
    assert not second.reused_document
    assert second.reused_requests == second.reused_parts == 1
    assert second.requests == 0
    assert second.text == first.text


def _damage(folder: Path, path: Path, damage: str) -> None:
    if damage == "deleted":
        for file in folder.iterdir():
            file.unlink()
    elif damage == "corrupt":
        with path.open("r+b") as stream:
            stream.write(os.urandom(4096))
    else:
        path.chmod(0o444)
        folder.chmod(0o555)


class _BrokenStore:
    backend = "broken"

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    async def get_many(self, keys: Any) -> Any:
        from daemon.cache import CacheStoreError

        raise CacheStoreError("unreachable")

    put_many = get_many

    async def maintain(self) -> int | None:
        return None


async def test_a_failing_store_costs_misses_never_a_document(tokenizer: Any) -> None:
    cache = SummaryCache(_BrokenStore(), KeyMaker(SCOPE), max_value_bytes=1 << 20, retry_seconds=30)
    engine = replying_engine()
    summarizer = cached(tokenizer, engine, cache)
    text = long_text(60)
    first = await summarizer.summarize(make_document(text))
    second = await summarizer.summarize(make_document(text))
    assert second.text == first.text
    assert len(engine.calls) == 2 * first.requests


@pytest.mark.parametrize("damage", ["deleted", "corrupt", "read-only"])
async def test_a_store_damaged_while_running_degrades_to_misses(
    tokenizer: Any, tmp_path: Path, damage: str
) -> None:
    path = tmp_path / "c.sqlite3"
    cache = SummaryCache(
        SqliteStore(path, max_bytes=1 << 26, timeout=5),
        KeyMaker(SCOPE),
        max_value_bytes=1 << 20,
        retry_seconds=0,
    )
    await cache.start()
    try:
        engine = replying_engine()
        summarizer = cached(tokenizer, engine, cache)
        text = long_text(60)
        first = await summarizer.summarize(make_document(text))
        if damage == "read-only":
            await cache.store.stop()  # reopened read-only (as root a mode alone would not stop writes)
        _damage(tmp_path, path, damage)
        second = await summarizer.summarize(make_document(edited(text, 30)))
        third = await summarizer.summarize(make_document(edited(text, 40)))
        assert second.text == first.text == third.text  # the fake's text: every document summarized
    finally:
        os.chmod(tmp_path, 0o755)
        await cache.stop()


@pytest.mark.parametrize("name", ["default", "record"])
async def test_the_final_requests_key_holds_the_profiles_sampling_at_the_plans_length(
    tmp_path: Path, tokenizer: Any, cache: SummaryCache, name: str
) -> None:
    """The key of a one-request summary, made the way it was before the plan held its sampling: the
    profile's sampling at the summary's length, as the output format asks for its first draw (a
    schema's included). Keys made otherwise would miss every summary stored before."""
    import json

    from daemon.cache import Step
    from daemon.summary.chunking import tokenize_text
    from daemon.summary.options import SummaryOptions
    from daemon.summary.prompts import PROMPT_VERSION, PromptKind
    from tests.unit.summary.test_structured import VALID
    from tests.unit.summary.test_structured import _summarizer as structured_summarizer

    summarizer = structured_summarizer(tmp_path, tokenizer, FakeEngine(text=json.dumps(VALID)))
    summarizer.cache = cache
    profile = summarizer.profiles.get(name)
    text = "A short licence between two parties."
    plan = summarizer.plan(SummaryOptions(max_summary_tokens=150), profile)
    await summarizer.summarize(make_document(text), plan)
    step = Step(
        template=profile.prompts.template_ids(PromptKind.DOCUMENT, style=plan.style, max_tokens=150),
        sampling=profile.output.sampling(profile.sampling(150), 0),
        prompt_version=PROMPT_VERSION,
        profile_version=profile.version,
    )
    stored = await cache.get(cache.keys.part(tokenize_text(tokenizer, text).ids, step))
    assert stored is not None
    assert stored.text == json.dumps(VALID)


async def test_a_structured_retry_is_not_stored_and_a_valid_first_output_is(
    tmp_path: Path, tokenizer: Any, cache: SummaryCache
) -> None:
    import json

    from tests.unit.summary.test_structured import VALID
    from tests.unit.summary.test_structured import _summarizer as structured_summarizer

    engine = FakeEngine(text=json.dumps(VALID))
    engine.replies = [("not json", "stop")]  # the first try is refused, the retry is valid
    summarizer = structured_summarizer(tmp_path, tokenizer, engine)
    summarizer.cache = cache
    record = summarizer.profiles.get("record")
    document = make_document("A short licence.")
    first = await summarizer.summarize(document, summarizer.plan(profile=record))
    assert first.structured == VALID
    assert len(engine.calls) == 2
    again = await summarizer.summarize(document, summarizer.plan(profile=record))  # nothing stored: made anew
    assert len(engine.calls) == 3
    assert again.reused_requests == 0
    third = await summarizer.summarize(
        document, summarizer.plan(profile=record)
    )  # the valid first try was stored
    assert len(engine.calls) == 3
    assert third.reused_document
    assert third.structured == VALID


async def test_a_model_whose_revision_cannot_be_read_leaves_the_cache_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from daemon import factory
    from daemon.config import CacheConfig, Config

    async def unreadable(*args: Any, **kwargs: Any) -> None:
        raise ValueError("more than 10000 files: not a model folder")

    monkeypatch.setattr(factory, "create_cache", unreadable)
    config = Config(engine=EngineConfig(model=str(tmp_path)), cache=CacheConfig(path=tmp_path / "c.sqlite3"))
    assert await factory.build_cache(config) is None


async def test_smaller_parts_make_an_edit_cheaper(tokenizer: Any, cache: SummaryCache) -> None:
    """``summary.max_part_tokens`` caps what a part carries: more parts on a first run, and an edit
    redoes less of the document."""
    text = long_text(200)
    shares = {}
    for cap in (None, 300):
        engine = replying_engine()
        summarizer = cached(tokenizer, engine, cache, max_part_tokens=cap)
        first = await summarizer.summarize(make_document(text, f"a-{cap}.txt"))
        second = await summarizer.summarize(make_document(edited(text, 150), f"b-{cap}.txt"))
        parts = [call for call in engine.calls if call.kind == "part"]
        if cap is not None:
            assert all(len(call.prompt) <= cap + 200 for call in parts)  # the text plus its template
        shares[cap] = (first.parts, second.prompt_tokens / first.prompt_tokens)
    assert shares[300][0] > shares[None][0]
    assert shares[300][1] < shares[None][1]
