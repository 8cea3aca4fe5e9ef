"""Unit tests for daemon.summary.budget: the lengths of valid configurations, and what refuses the others.

The tokenizer is the tiny model's real one (session fixture), so the template overheads are real.
The expected numbers of valid configurations were computed by the code before the budget had its own
module (``Summarizer.part_tokens``, ``part_budget``, ``overlap`` and ``_step_tokens`` at commit
e9d7357) with this tokenizer: the budget must not change any of them.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import pytest

from daemon.config import Config, EngineConfig, SummaryConfig
from daemon.errors import ConfigError, DocumentError
from daemon.summary.budget import ContextBudget, check_lengths, check_summary_lengths, part_summary_tokens
from daemon.summary.profiles import build_profiles
from daemon.summary.prompts import PromptBuilder, PromptKind
from daemon.typing import Style


def make_budget(tokenizer: Any, context_tokens: int, **summary: Any) -> ContextBudget:
    return ContextBudget.create(SummaryConfig(**summary), context_tokens, tokenizer)


# -- valid configurations: pinned numbers (they move only with the prompts: summary-v5 here) --------


@pytest.mark.parametrize(
    ("context_tokens", "summary", "expected"),
    [
        # (part_summary_tokens, part_input_tokens, overlap_tokens, step_tokens of the configured summary)
        (4096, {}, (256, 3652, 64, 256)),  # the defaults
        (16384, {}, (256, 15940, 64, 256)),  # the GPU benchmark's context
        (1024, {"max_summary_tokens": 64, "chunk_overlap_tokens": 32}, (64, 773, 32, 64)),
        (512, {"max_summary_tokens": 64, "chunk_overlap_tokens": 32}, (64, 261, 32, 64)),
        (512, {"max_summary_tokens": 256}, (85, 240, 60, 16)),  # part summary: a sixth of the context
        (512, {"max_summary_tokens": 240, "style": "bullets"}, (85, 240, 60, 21)),
        (
            8192,
            {"max_summary_tokens": 512, "part_summary_tokens": 300, "style": "bullets"},
            (300, 7704, 64, 300),
        ),
    ],
)
def test_valid_budgets_keep_the_lengths_of_before(
    tokenizer: Any, context_tokens: int, summary: dict[str, Any], expected: tuple[int, int, int, int]
) -> None:
    config = SummaryConfig(**summary)
    budget = make_budget(tokenizer, context_tokens, **summary)
    step_tokens = budget.step_tokens(config.style, config.max_summary_tokens)
    assert (
        budget.part_summary_tokens,
        budget.part_input_tokens,
        budget.overlap_tokens,
        step_tokens,
    ) == expected
    assert budget.context_tokens == context_tokens
    assert budget.summary_tokens == config.max_summary_tokens


def test_rooms_and_steps_of_before(tokenizer: Any) -> None:
    budget = make_budget(tokenizer, 512, max_summary_tokens=64, chunk_overlap_tokens=32)
    assert budget.room(PromptKind.DOCUMENT, "prose", 64) == 284
    assert budget.room(PromptKind.PART, "prose", 64) == 261 == budget.part_input_tokens
    assert budget.room(PromptKind.COMBINE, "prose", 64) == 258
    # A longer summary leaves less room for the final combine, so intermediate summaries get shorter.
    assert budget.step_tokens("prose", 16) == 64
    assert budget.step_tokens("prose", 256) == 16
    assert budget.step_tokens("bullets", 256) == 13


def test_room_is_the_context_less_output_and_template(tokenizer: Any) -> None:
    budget = make_budget(tokenizer, 4096)
    overhead = PromptBuilder(tokenizer).overhead(PromptKind.DOCUMENT, style="bullets", max_tokens=300)
    assert budget.room(PromptKind.DOCUMENT, "bullets", 300) == 4096 - 300 - overhead


@pytest.mark.parametrize(("style", "max_tokens"), [("prose", 64), ("prose", 256), ("bullets", 256)])
def test_combining_follows_room_and_step(tokenizer: Any, style: Style, max_tokens: int) -> None:
    budget = make_budget(tokenizer, 512, max_summary_tokens=64)
    combining = budget.combining(style, max_tokens)
    assert combining.final_room == budget.room(PromptKind.COMBINE, style, max_tokens)
    assert combining.step_tokens == budget.step_tokens(style, max_tokens)
    assert combining.step_room == budget.room(PromptKind.COMBINE, "prose", combining.step_tokens)
    # Two intermediate summaries with their labels fit in the final request, so staging converges.
    assert 2 * (combining.step_tokens + 16) <= combining.final_room


def test_build_profiles_takes_the_whole_config(tokenizer: Any) -> None:
    summary = SummaryConfig(max_summary_tokens=128)
    config = Config(engine=EngineConfig(model="unused", max_model_len=2048), summary=summary)
    budget = build_profiles(config, tokenizer).default.budget
    assert budget == ContextBudget.create(summary, 2048, tokenizer)
    assert budget.as_dict() == {
        "context_tokens": 2048,
        "summary_tokens": 128,
        "part_summary_tokens": 128,
        "part_input_tokens": 1733,
        "overlap_tokens": 64,
    }


def test_budget_is_immutable(tokenizer: Any) -> None:
    budget = make_budget(tokenizer, 1024)
    with pytest.raises(dataclasses.FrozenInstanceError):
        budget.part_input_tokens = 10  # type: ignore[misc]


def test_fits_counts_prompt_and_output(tokenizer: Any) -> None:
    budget = make_budget(tokenizer, 1024)
    assert budget.fits(1000, 24)
    assert not budget.fits(1000, 25)


# -- overlap ---------------------------------------------------------------------------------------


def test_overlap_is_capped_at_a_quarter_of_a_part(tokenizer: Any) -> None:
    budget = make_budget(tokenizer, 512, max_summary_tokens=64, chunk_overlap_tokens=1000)
    assert budget.part_input_tokens == 261
    assert budget.overlap_tokens == 65 == budget.part_input_tokens // 4
    # The default overlap (64) is capped too when parts are small.
    assert make_budget(tokenizer, 512, max_summary_tokens=256).overlap_tokens == 240 // 4
    assert make_budget(tokenizer, 512, max_summary_tokens=64, chunk_overlap_tokens=0).overlap_tokens == 0


def test_max_part_tokens_caps_what_a_part_carries(tokenizer: Any) -> None:
    budget = make_budget(tokenizer, 16384, max_part_tokens=4000)
    assert budget.part_input_tokens == 4000
    assert budget.as_dict()["part_input_tokens"] == 4000
    # A cap above the room changes nothing.
    assert make_budget(tokenizer, 4096, max_part_tokens=100_000).part_input_tokens == 3652
    with pytest.raises(ValueError, match="max_part_tokens"):
        SummaryConfig(max_part_tokens=100)


# -- configurations that cannot work ---------------------------------------------------------------


def test_the_issue_example_loads_but_has_no_budget(tokenizer: Any) -> None:
    # max_summary_tokens is exactly half and part_summary_tokens under a sixth: the config loads (and
    # so passed check-config before), but a combine request cannot hold two part summaries.
    config = Config(
        engine=EngineConfig(model="unused", max_model_len=256),
        summary=SummaryConfig(max_summary_tokens=128, part_summary_tokens=32),
    )
    with pytest.raises(ConfigError) as caught:
        build_profiles(config, tokenizer)
    message = str(caught.value)
    assert message.startswith("profiles.default: ")  # the profile whose budget fails
    assert "engine.max_model_len (256) is too small for staged summaries" in message
    assert "lower summary.part_summary_tokens or raise engine.max_model_len" in message


def test_too_small_for_staged_summaries_says_how_much_is_needed(tokenizer: Any) -> None:
    with pytest.raises(ConfigError, match="too small") as caught:
        make_budget(tokenizer, 300, max_summary_tokens=64, part_summary_tokens=50)
    needed = int(str(caught.value).split("a context of at least ")[1].split(" ")[0])
    # What the message asks for is enough (and one token less is not).
    make_budget(tokenizer, needed, max_summary_tokens=64, part_summary_tokens=50)
    with pytest.raises(ConfigError, match="too small"):
        make_budget(tokenizer, needed - 1, max_summary_tokens=64, part_summary_tokens=50)


def test_too_little_room_to_combine_into_the_summary_names_max_summary_tokens(tokenizer: Any) -> None:
    # Valid on load (256 is half of 512), but the final bullet-list combine leaves intermediate
    # summaries of 12 tokens, under the 16 that staging needs.
    with pytest.raises(ConfigError) as caught:
        make_budget(tokenizer, 512, max_summary_tokens=256, style="bullets")
    message = str(caught.value)
    assert "leaves too little room for combining part summaries into a summary of 256 tokens" in message
    assert "lower summary.max_summary_tokens or raise engine.max_model_len" in message


@pytest.mark.parametrize(
    ("context_tokens", "summary", "key"),
    [
        (1024, {"max_summary_tokens": 513}, "summary.max_summary_tokens (513)"),
        (400, {"max_summary_tokens": 64, "part_summary_tokens": 100}, "summary.part_summary_tokens (100)"),
    ],
)
def test_rules_checked_on_load_are_checked_by_the_budget_too(
    tokenizer: Any, context_tokens: int, summary: dict[str, Any], key: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        make_budget(tokenizer, context_tokens, **summary)
    assert str(caught.value).startswith(key)
    config = SummaryConfig(**summary)
    with pytest.raises(ConfigError, match=re.escape(key)):
        check_lengths(context_tokens, config.max_summary_tokens, part_summary_tokens(config, context_tokens))
    with pytest.raises(ConfigError, match=re.escape(key)):
        check_summary_lengths(config, context_tokens)


def test_part_summaries_default_to_the_summary_length_at_most_a_sixth_of_the_context() -> None:
    assert part_summary_tokens(SummaryConfig(max_summary_tokens=64), 4096) == 64
    assert part_summary_tokens(SummaryConfig(max_summary_tokens=512), 1024) == 170
    assert part_summary_tokens(SummaryConfig(max_summary_tokens=512, part_summary_tokens=40), 1024) == 40


def test_check_lengths_accepts_the_limits(tokenizer: Any) -> None:
    check_lengths(1024, 512, 170)
    check_summary_lengths(SummaryConfig(max_summary_tokens=512), 1024)
    with pytest.raises(ConfigError, match=r"summary\.part_summary_tokens"):
        check_lengths(1024, 512, 171)


# -- a document's own summary length ---------------------------------------------------------------


def test_check_summary_refuses_over_half_the_context(tokenizer: Any) -> None:
    budget = make_budget(tokenizer, 512, max_summary_tokens=64)
    budget.check_summary(256, "prose")
    with pytest.raises(DocumentError) as caught:
        budget.check_summary(257, "prose")
    assert caught.value.reason == "invalid_options"
    assert caught.value.message == "max_summary_tokens 257 is over half the context (512 tokens)"


def test_check_summary_refuses_too_little_room_for_combining(tokenizer: Any) -> None:
    budget = make_budget(tokenizer, 512, max_summary_tokens=64)
    with pytest.raises(DocumentError) as caught:
        budget.check_summary(256, "bullets")  # intermediate summaries of 12 tokens: too short
    assert caught.value.reason == "invalid_options"
    assert caught.value.message == (
        "max_summary_tokens 256 leaves too little of the context (512 tokens) for combining part summaries"
    )
    budget.check_summary(240, "bullets")  # 20 tokens: enough
