"""Unit and property tests for daemon.fs.names: file-system names, and names as text and JSON fields.

Names are generated as what Linux allows: any bytes but NUL and ``/``, 1 to 255 of them, handed to the
functions the way Python hands them over (``os.fsdecode``: undecodable bytes as lone surrogates).
"""

from __future__ import annotations

import base64
import json
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from daemon.fs.names import (
    MAX_NAME_BYTES,
    MAX_STEM_BYTES,
    byte_length,
    display_name,
    first_free,
    is_utf8,
    name_fields,
    numbered,
    record_stem,
    shortened,
    temp_name,
)
from daemon.records import encode_record, fallback_failure_record

NAME_BYTES = st.binary(min_size=1, max_size=MAX_NAME_BYTES).map(
    lambda raw: raw.replace(b"\x00", b"_").replace(b"/", b"_")
)
OS_NAMES = NAME_BYTES.map(os.fsdecode)

BAD_UTF8 = os.fsdecode(b"bad-\xff\xfe-caf\xe9.txt")


# -- record stems ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["report.txt", "Übersicht — 要約.md", "x" * MAX_STEM_BYTES, "a b\nc", "y" * 240]
)
def test_a_utf8_name_that_fits_is_its_own_stem(name: str) -> None:
    assert record_stem(name) == name


def test_a_long_name_gets_a_readable_hashed_stem() -> None:
    name = "quarterly-report-" + "x" * 229 + ".txt"  # 250 bytes: NAME.summary.json would not fit
    stem = record_stem(name)
    assert stem.startswith("quarterly-report-xxx")
    assert byte_length(stem) < 120
    assert stem != record_stem(name[:-5] + "y.txt")  # same prefix, another name: another stem


def test_a_non_utf8_name_gets_a_utf8_stem() -> None:
    stem = record_stem(BAD_UTF8)
    assert stem.startswith("bad-__-caf_.txt~")
    assert is_utf8(stem)


@given(OS_NAMES)
def test_every_stem_is_utf8_and_leaves_room_for_every_record_suffix(name: str) -> None:
    stem = record_stem(name)
    assert is_utf8(stem)
    assert byte_length(stem) <= MAX_STEM_BYTES
    assert byte_length(stem + ".summary.json") <= MAX_NAME_BYTES
    assert "/" not in stem
    assert "\x00" not in stem


@given(OS_NAMES, OS_NAMES)
def test_distinct_names_get_distinct_stems(first: str, second: str) -> None:
    if first != second:
        assert record_stem(first) != record_stem(second)


# -- numbered candidates and temporary names -------------------------------------------------------


def test_numbered_candidates() -> None:
    assert [numbered("p", n) for n in (1, 2, 10)] == ["p", "p~2", "p~10"]
    with pytest.raises(ValueError, match="start at 1"):
        numbered("p", 0)


@given(OS_NAMES, st.integers(min_value=1, max_value=10**9))
def test_numbered_candidates_always_fit_and_differ(name: str, number: int) -> None:
    candidate = numbered(name, number)
    assert byte_length(candidate) <= MAX_NAME_BYTES
    if number > 1:
        assert candidate != name
        assert candidate.endswith(f"~{number}")


def test_a_full_length_name_is_shortened_to_take_a_number() -> None:
    name = "é" * 127 + "x"  # 255 bytes
    assert numbered(name, 1) == name
    second = numbered(name, 2)
    assert second == shortened(name) + "~2"
    assert byte_length(second) <= MAX_NAME_BYTES


@given(OS_NAMES)
def test_temporary_names_fit_whatever_the_target(name: str) -> None:
    temp = temp_name(name, "0123456789ab")
    assert byte_length(temp) <= MAX_NAME_BYTES
    assert temp.startswith(".")
    assert temp.endswith(".0123456789ab.tmp")


@given(st.sets(st.integers(min_value=1, max_value=3000)))
def test_first_free_finds_a_free_number(taken: set[int]) -> None:
    calls: list[int] = []

    def is_taken(number: int) -> bool:
        calls.append(number)
        return number in taken

    free = first_free(is_taken)
    assert free >= 1
    assert free not in taken
    if taken == set(range(1, len(taken) + 1)):  # no gaps: exactly the first free one, in few checks
        assert free == len(taken) + 1
        assert len(calls) <= 2 * 12 + 2


# -- names in records ------------------------------------------------------------------------------


def test_utf8_name_is_one_field() -> None:
    assert name_fields("Übersicht.txt") == {"file_name": "Übersicht.txt"}


def test_undecodable_name_is_escaped_for_display_with_its_exact_bytes_in_base64() -> None:
    fields = name_fields(BAD_UTF8)
    assert fields == {
        "file_name": "bad-\\xff\\xfe-caf\\xe9.txt",
        "file_name_b64": base64.b64encode(b"bad-\xff\xfe-caf\xe9.txt").decode(),
    }
    assert display_name(BAD_UTF8) == fields["file_name"]


def _name_from_fields(fields: dict[str, str]) -> bytes:
    """The documented way back from a record's name fields to the exact bytes."""
    if "file_name_b64" in fields:
        return base64.b64decode(fields["file_name_b64"])
    return fields["file_name"].encode("utf-8")


@given(NAME_BYTES)
def test_name_fields_are_reversible_and_always_encode(raw: bytes) -> None:
    fields = name_fields(os.fsdecode(raw))
    assert _name_from_fields(fields) == raw
    encoded = encode_record({"id": display_name(os.fsdecode(raw)), "metadata": fields})
    assert _name_from_fields(json.loads(encoded.decode("utf-8"))["metadata"]) == raw


def test_encode_record_never_fails_on_a_lone_surrogate() -> None:
    data = encode_record({"id": BAD_UTF8}, pretty=True)
    data.decode("utf-8")  # valid UTF-8
    assert json.loads(data) == {"id": BAD_UTF8}  # escaped, and Python reads it back as it was


def test_fallback_failure_record_encodes_what_the_full_one_could_not() -> None:
    failure = {
        "id": BAD_UTF8,
        "source": "folder",
        "reason": "empty",
        "message": "input is empty",
        "sha256": None,
        "input_bytes": 0,
        "metadata": {"unencodable": object()},
    }
    with pytest.raises(TypeError):
        encode_record(failure)
    record = fallback_failure_record(failure, "Object of type object is not JSON serializable")
    assert json.loads(encode_record(record))["reason"] == "empty"
    assert record["metadata"] == {}
    assert "could not be written" in record["message"]
