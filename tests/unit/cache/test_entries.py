"""Stored entries (daemon.cache.store): what is written reads back the same, and nothing else is read."""

from __future__ import annotations

import json
import zlib

import pytest

from daemon.cache.keys import CacheKey
from daemon.cache.store import (
    COMPRESS_FROM_BYTES,
    CachedSummary,
    InvalidEntry,
    decode_entry,
    encode_entry,
)

KEY = CacheKey("part", "a" * 64, {"model_revision": "0123456789abcdef"})
OTHER = CacheKey("part", "b" * 64)


def entry(text: str = "The licensee must give 30 days' notice.") -> CachedSummary:
    return CachedSummary(
        text=text,
        prompt_tokens=4000,
        generated_tokens=120,
        finish_reason="stop",
        created=1_700_000_000.5,
        key_parts=KEY.parts,
        fields={"structured": None, "sources": [{"part": 1, "chars": [0, 10]}]},
    )


@pytest.mark.parametrize("text", ["short", "A longer part summary. " * 80, "ünïcödé \ud800 surrogate", ""])
def test_an_entry_reads_back_as_written(text: str) -> None:
    written = entry(text)
    value = encode_entry(KEY, written)
    assert decode_entry(KEY, value, max_bytes=1 << 20) == written


def test_long_entries_are_compressed_short_ones_not() -> None:
    long_value = encode_entry(KEY, entry("Clause 4 requires notice within thirty days. " * 40))
    assert long_value[:1] == b"z"
    assert len(long_value) < len("Clause 4 requires notice within thirty days. " * 40) / 2
    short_value = encode_entry(KEY, CachedSummary("ok", 1, 1, None, 0.0))
    assert len(short_value) < COMPRESS_FROM_BYTES
    assert short_value[:1] == b"{"


def test_an_entry_of_another_key_is_refused() -> None:
    value = encode_entry(OTHER, entry())
    with pytest.raises(InvalidEntry, match="another key"):
        decode_entry(KEY, value, max_bytes=1 << 20)


@pytest.mark.parametrize(
    "value",
    [
        b"",
        b"garbage",
        b"{not json",
        b"z" + b"not zlib",
        b"\xff\xfe",
        json.dumps({"format": 2, "key": KEY.id}).encode(),
        json.dumps([1, 2]).encode(),
        b"[" * 100_000,
    ],
)
def test_damaged_values_are_refused(value: bytes) -> None:
    with pytest.raises(InvalidEntry):
        decode_entry(KEY, value, max_bytes=1 << 20)


@pytest.mark.parametrize(
    ("field", "bad"),
    [
        ("text", 5),
        ("prompt_tokens", -1),
        ("prompt_tokens", "12"),
        ("generated_tokens", True),
        ("finish_reason", 3),
        ("created", "yesterday"),
        ("key_parts", []),
        ("fields", None),
        ("kind", "other"),
    ],
)
def test_fields_of_the_wrong_type_are_refused(field: str, bad: object) -> None:
    document = json.loads(encode_entry(KEY, CachedSummary("ok", 1, 1, None, 0.0)))
    document[field] = bad
    with pytest.raises(InvalidEntry):
        decode_entry(KEY, json.dumps(document).encode(), max_bytes=1 << 20)


def test_a_value_that_inflates_past_the_limit_is_refused() -> None:
    bomb = b"z" + zlib.compress(b"{" + b" " * (8 << 20), 9)
    assert len(bomb) < 20_000
    with pytest.raises(InvalidEntry, match="inflates"):
        decode_entry(KEY, bomb, max_bytes=1 << 20)
