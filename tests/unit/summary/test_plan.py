"""daemon.summary.plan: a document's plan from its profile and options, made before its text is seen.

The profiles are real (the tiny model's tokenizer, a structured profile of tests/unit/summary's schema);
the pipeline's use of the plan (options first, bytes unread when they fail) is in tests/unit/test_pipeline.py,
the cache keys made of it in tests/unit/cache/test_reuse.py.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from daemon.errors import DocumentError
from daemon.summary.options import NO_OPTIONS, SummaryOptions
from daemon.summary.plan import plan_summary
from daemon.summary.summarizer import Summarizer
from tests.doubles.engine import FakeEngine
from tests.unit.summary.test_structured import _summarizer as structured_summarizer


@pytest.fixture
def summarizer(tmp_path: Path, tokenizer: Any) -> Summarizer:
    """Profiles ``default`` (64-token prose summaries, a 2048-token context) and ``record`` (one JSON
    object of a schema, 128 tokens, greedy)."""
    made: Summarizer = structured_summarizer(tmp_path, tokenizer, FakeEngine())
    return made


def test_without_options_a_plan_is_its_profiles_defaults(summarizer: Summarizer) -> None:
    profile = summarizer.profiles.default
    plan = summarizer.plan()
    assert plan.profile is profile
    assert plan.options is NO_OPTIONS
    assert (plan.max_tokens, plan.style, plan.strategy) == (64, "prose", "map_reduce")
    assert plan.sampling == profile.sampling(64)
    assert plan.final_sampling == plan.sampling  # prose asks for nothing more
    assert plan_summary(profile) == plan


def test_options_override_the_length_style_and_strategy(summarizer: Summarizer) -> None:
    options = SummaryOptions(max_summary_tokens=100, style="bullets", strategy="head_tail")
    plan = summarizer.plan(options)
    assert plan.options is options
    assert (plan.max_tokens, plan.style, plan.strategy) == (100, "bullets", "head_tail")
    assert plan.sampling == summarizer.profiles.default.sampling(100)
    assert plan.sampling.max_tokens == 100


def test_a_structured_plan_asks_for_its_schema_in_the_final_requests_first_draw(
    summarizer: Summarizer,
) -> None:
    record = summarizer.profiles.get("record")
    plan = summarizer.plan(SummaryOptions(style="bullets"), record)
    assert (plan.max_tokens, plan.style) == (128, "json")  # a style option cannot change a schema's
    assert plan.sampling == record.sampling(128)
    assert plan.sampling.json_schema is None
    assert plan.final_sampling == record.output.sampling(record.sampling(128), 0)
    schema = plan.final_sampling.json_schema
    assert schema is not None
    assert json.loads(schema) == record.output.schema
    assert plan.final_sampling == dataclasses.replace(plan.sampling, json_schema=schema)


@pytest.mark.parametrize(
    ("profile", "length", "message"),
    [
        ("default", 1025, "over half the context (2048 tokens)"),
        ("record", 16, "cannot hold this profile's structured summary"),
    ],
)
def test_a_length_the_profile_cannot_give_is_invalid_options(
    summarizer: Summarizer, profile: str, length: int, message: str
) -> None:
    with pytest.raises(DocumentError) as caught:
        summarizer.plan(SummaryOptions(max_summary_tokens=length), summarizer.profiles.get(profile))
    assert caught.value.reason == "invalid_options"
    assert message in caught.value.message


def test_a_plan_cannot_change(summarizer: Summarizer) -> None:
    plan = summarizer.plan()
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.max_tokens = 1  # type: ignore[misc]
