"""daemon.summary.options: parsing and validating per-document summary options (no fakes needed)."""

from __future__ import annotations

from typing import Any

import pytest

from daemon.errors import DocumentError
from daemon.summary.options import NO_OPTIONS, SummaryOptions, parse_options


def invalid(raw: Any) -> DocumentError:
    with pytest.raises(DocumentError) as caught:
        parse_options(raw)
    assert caught.value.reason == "invalid_options"
    return caught.value


def test_none_means_the_defaults() -> None:
    options = parse_options(None)
    assert options is NO_OPTIONS
    assert (options.max_summary_tokens, options.style, options.strategy) == (None, None, None)


def test_empty_object_means_the_defaults() -> None:
    assert parse_options({}) == NO_OPTIONS
    assert parse_options(b"{}") == NO_OPTIONS
    assert parse_options("  {}\n") == NO_OPTIONS


@pytest.mark.parametrize(
    "raw",
    [
        {"max_summary_tokens": 120, "style": "bullets", "strategy": "head_tail"},
        b'{"max_summary_tokens": 120, "style": "bullets", "strategy": "head_tail"}',
        '{"max_summary_tokens": 120, "style": "bullets", "strategy": "head_tail"}',
        '\ufeff{"max_summary_tokens": 120, "style": "bullets", "strategy": "head_tail"}'.encode(),
    ],
    ids=["dict", "bytes", "str", "bytes-with-utf8-bom"],
)
def test_options_from_dict_bytes_and_text(raw: Any) -> None:
    assert parse_options(raw) == SummaryOptions(max_summary_tokens=120, style="bullets", strategy="head_tail")


def test_fields_are_optional_and_null_means_default() -> None:
    assert parse_options('{"style": "prose"}') == SummaryOptions(style="prose")
    assert parse_options({"max_summary_tokens": None, "style": None}) == NO_OPTIONS


def test_smallest_allowed_length() -> None:
    assert parse_options({"max_summary_tokens": 16}).max_summary_tokens == 16


def test_options_are_immutable() -> None:
    options = parse_options({"style": "bullets"})
    with pytest.raises(ValueError, match="frozen"):
        options.style = "prose"


@pytest.mark.parametrize("raw", ["{", b'{"style": "bullets"', "style=bullets", "", b"\xff\xfe\xfd"])
def test_invalid_json(raw: str | bytes) -> None:
    assert "not valid JSON" in invalid(raw).message


def test_invalid_utf8_in_json_bytes() -> None:
    assert "not valid JSON" in invalid(b'{"style": "\xff"}').message


@pytest.mark.parametrize(
    ("raw", "kind"),
    [("[1, 2]", "list"), ('"bullets"', "str"), ("120", "int"), ("null", "NoneType"), (["style"], "list")],
)
def test_options_must_be_an_object(raw: Any, kind: str) -> None:
    message = invalid(raw).message
    assert "must be a JSON object" in message
    assert kind in message


def test_unknown_key_is_refused_and_named() -> None:
    message = invalid({"max_sumary_tokens": 100}).message
    assert "max_sumary_tokens" in message
    assert "Extra inputs are not permitted" in message


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"max_summary_tokens": "lots"}, "max_summary_tokens"),
        ({"max_summary_tokens": 12.5}, "max_summary_tokens"),
        ({"max_summary_tokens": [100]}, "max_summary_tokens"),
        ({"style": "haiku"}, "style"),
        ({"style": 5}, "style"),
        ({"strategy": "tail"}, "strategy"),
        ('{"strategy": {"name": "head"}}', "strategy"),
    ],
)
def test_wrong_type_or_value_names_the_field(raw: Any, field: str) -> None:
    message = invalid(raw).message
    assert message.startswith("invalid options: ")
    assert f"{field}:" in message


@pytest.mark.parametrize("tokens", [15, 0, -100])
def test_too_small_length_names_the_field(tokens: int) -> None:
    message = invalid({"max_summary_tokens": tokens}).message
    assert "max_summary_tokens:" in message
    assert "16" in message


def test_every_problem_is_reported() -> None:
    message = invalid({"style": "haiku", "max_summary_tokens": 1, "extra": True}).message
    for field in ("style", "max_summary_tokens", "extra"):
        assert f"{field}:" in message


DEEP = 50_000


@pytest.mark.parametrize(
    "raw",
    [
        b'{"style": ' + b"[" * DEEP + b"]" * DEEP + b"}",  # a sidecar's bytes
        '{"style": ' + '{"a": ' * DEEP + "1" + "}" * DEEP + "}",  # text
        "[" * DEEP + "]" * DEEP,
    ],
    ids=["sidecar-bytes", "text", "top-level"],
)
def test_options_nested_fifty_thousand_levels_deep_are_invalid_options(raw: str | bytes) -> None:
    with pytest.raises(DocumentError, match="nested too deeply") as refused:
        parse_options(raw)
    assert refused.value.reason == "invalid_options"


def test_options_as_a_deeply_nested_object_are_invalid_options() -> None:
    nested: dict[str, Any] = {}
    inner = nested
    for _ in range(900):  # what a message's JSON parser still returns
        inner["style"] = {}
        inner = inner["style"]
    with pytest.raises(DocumentError) as refused:
        parse_options(nested)
    assert refused.value.reason == "invalid_options"


def test_a_huge_unknown_field_name_is_quoted_cut_short() -> None:
    with pytest.raises(DocumentError) as refused:
        parse_options({"x" * 1_000_000: 1})
    assert refused.value.reason == "invalid_options"
    assert len(refused.value.message) < 300
