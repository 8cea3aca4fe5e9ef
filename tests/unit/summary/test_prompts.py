"""Unit tests for daemon.summary.prompts with the tiny model's real tokenizer (no engine)."""

from __future__ import annotations

from typing import Any

import pytest

from daemon.summary.prompts import (
    SYSTEM_INSTRUCTION,
    Instructions,
    PromptBuilder,
    PromptKind,
    PromptTemplate,
    build_template,
    length_hint,
    prefix_padding,
)
from tests.doubles.tokenizers import PlainTokenizer, SystemOnlyTokenizer


@pytest.fixture(scope="module")
def template(tokenizer: Any) -> PromptTemplate:
    return build_template(tokenizer)


@pytest.fixture(scope="module")
def builder(tokenizer: Any) -> PromptBuilder:
    return PromptBuilder(tokenizer)


def test_template_starts_with_the_system_instruction(template: PromptTemplate) -> None:
    assert template.prefix.startswith(f"<|im_start|>system\n{SYSTEM_INSTRUCTION}<|im_end|>\n")


def test_template_puts_the_document_in_the_user_message(template: PromptTemplate) -> None:
    assert template.prefix.endswith("<|im_start|>user\nSummarize the following document.\n\n<document>\n")
    assert template.suffix.startswith("\n</document>\n\nWrite plain sentences, without headings or lists.")
    assert template.suffix.endswith("<|im_end|>\n<|im_start|>assistant\n")


def test_render_places_the_document_between_prefix_and_suffix(template: PromptTemplate) -> None:
    rendered = template.render("THE DOCUMENT")
    assert rendered == template.prefix + "THE DOCUMENT" + template.suffix
    assert rendered.index(SYSTEM_INSTRUCTION) < rendered.index("THE DOCUMENT")
    assert "\ue000" not in rendered  # the split marker never leaks into prompts


def test_style_and_length_go_after_the_document(tokenizer: Any) -> None:
    prose = build_template(tokenizer, style="prose", max_tokens=100)
    bullets = build_template(tokenizer, style="bullets", max_tokens=400)
    assert prose.prefix == bullets.prefix  # options never change the cached prefix
    assert "bullet points" in bullets.suffix
    assert "bullet" not in prose.suffix
    assert length_hint(400) in bullets.suffix
    assert length_hint(100) in prose.suffix


@pytest.mark.parametrize("kind", list(PromptKind))
def test_every_kind_shares_the_system_prefix(tokenizer: Any, kind: PromptKind) -> None:
    rendered = build_template(tokenizer, kind)
    assert rendered.prefix.startswith(f"<|im_start|>system\n{SYSTEM_INSTRUCTION}<|im_end|>\n")


def test_part_and_combine_instructions_differ_from_the_document_one(tokenizer: Any) -> None:
    prefixes = {kind: build_template(tokenizer, kind).prefix for kind in PromptKind}
    assert len(set(prefixes.values())) == 3
    assert "one part of a longer document" in prefixes[PromptKind.PART]
    assert "notes on consecutive parts" in prefixes[PromptKind.COMBINE]


def test_length_hint_grows_with_the_budget() -> None:
    assert length_hint(100) == "Use at most about 50 words. Write only the summary."
    assert (
        length_hint(10) == "Use at most about 20 words. Write only the summary."
    )  # a floor for tiny budgets


def test_template_without_chat_template_uses_plain_layout() -> None:
    template = build_template(PlainTokenizer())  # type: ignore[arg-type]
    assert template.prefix.startswith(SYSTEM_INSTRUCTION + "\n\n")
    assert template.prefix.endswith("<document>\n")
    assert template.suffix.endswith("\n\nSummary:\n")


def test_chat_template_that_drops_the_document_is_refused() -> None:
    with pytest.raises(ValueError, match="dropped the user message"):
        build_template(SystemOnlyTokenizer())  # type: ignore[arg-type]


def test_builder_wraps_the_body_in_the_kind_template(builder: PromptBuilder, tokenizer: Any) -> None:
    template = build_template(tokenizer, PromptKind.PART, style="prose", max_tokens=64)
    prompt = builder.build(PromptKind.PART, [7, 8, 9], style="prose", max_tokens=64)
    prefix = tokenizer.encode(template.prefix, add_special_tokens=False)
    suffix = tokenizer.encode(template.suffix, add_special_tokens=False)
    assert prompt == [*prefix, 7, 8, 9, *suffix]
    assert builder.overhead(PromptKind.PART, style="prose", max_tokens=64) == len(prefix) + len(suffix)


def test_builder_prefix_ids_are_identical_across_requests(builder: PromptBuilder) -> None:
    first = builder.build(PromptKind.DOCUMENT, [5] * 10, style="prose", max_tokens=64)
    second = builder.build(PromptKind.DOCUMENT, [6] * 500, style="bullets", max_tokens=300)
    prefix, _ = builder.template_ids(PromptKind.DOCUMENT, style="prose", max_tokens=64)
    assert first[: len(prefix)] == second[: len(prefix)] == prefix


def test_special_tokens_appear_only_in_the_template(builder: PromptBuilder, tokenizer: Any) -> None:
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    prompt = builder.build(PromptKind.DOCUMENT, [], style="prose", max_tokens=64)
    assert prompt.count(im_end) == 2  # system and user turns


def test_a_profiles_instructions_word_the_system_and_each_kind(tokenizer: Any) -> None:
    legal = Instructions(system="Write a legal brief.", part="Extract this part.", combine="Merge these.")
    for kind, wording in (
        (PromptKind.DOCUMENT, "Summarize the following document."),  # docsumd's own where not set
        (PromptKind.PART, "Extract this part."),
        (PromptKind.COMBINE, "Merge these."),
    ):
        template = build_template(tokenizer, kind, instructions=legal)
        assert template.prefix == (
            f"<|im_start|>system\nWrite a legal brief.<|im_end|>\n<|im_start|>user\n{wording}\n\n<document>\n"
        )
    builder = PromptBuilder(tokenizer, legal)
    prefix, _ = builder.template_ids(PromptKind.PART, style="prose", max_tokens=64)
    assert prefix == tokenizer.encode(build_template(tokenizer, PromptKind.PART, instructions=legal).prefix)
    # The suffix (length and style) is the same whatever the wording: it is the layout's.
    assert build_template(tokenizer, instructions=legal).suffix == build_template(tokenizer).suffix


# -- the shared prefix aligned to the engine's KV blocks ------------------------------------------


@pytest.mark.parametrize(
    ("prefix", "block", "padding"),
    [
        (97, 128, 31),  # 97 tokens reused instead of none, for 31 tokens of room
        (129, 128, 0),  # 127 tokens of room to save 1: not worth it
        (119, 64, 9),
        (97, 64, 31),
        (96, 16, 0),  # already whole blocks
        (97, 16, 0),  # 15 tokens to save 1
        (100, None, 0),  # block size unknown: nothing
        (100, 1, 0),
    ],
)
def test_a_prefix_is_padded_to_its_next_block_only_where_that_pays(
    prefix: int, block: int | None, padding: int
) -> None:
    assert prefix_padding(prefix, block) == padding


@pytest.mark.parametrize("block", [16, 32, 64, 128])
def test_padded_prefixes_end_on_a_block_or_are_left_alone(tokenizer: Any, block: int) -> None:
    plain, aligned = PromptBuilder(tokenizer), PromptBuilder(tokenizer, cache_block_tokens=block)
    newline = tokenizer.encode("\n", add_special_tokens=False)
    for kind in PromptKind:
        before, suffix = plain.template_ids(kind, style="prose", max_tokens=256)
        after, aligned_suffix = aligned.template_ids(kind, style="prose", max_tokens=256)
        assert aligned_suffix == suffix
        assert after[: len(before)] == before  # the same prefix, padding after it
        padding = after[len(before) :]
        assert padding == newline * prefix_padding(len(before), block)
        assert not padding or len(after) % block == 0
        # The budget sees the padding: overhead is exactly what the prompt takes.
        body = [5, 6, 7]
        built = aligned.build(kind, body, style="prose", max_tokens=256)
        assert len(built) == aligned.overhead(kind, style="prose", max_tokens=256) + len(body)
        # The padding decodes as blank lines before the document's text.
        assert tokenizer.decode(built[len(before) : len(after)]) == "\n" * len(padding)
