"""Unit tests for daemon.records: request ids, encodings, dead letters and output headers."""

from __future__ import annotations

import json
import re

import pytest

from daemon.records import (
    REDUCED_TEXT_BYTES,
    carried_bytes,
    clip_text,
    dead_letter,
    dead_letter_headers,
    encode_record,
    parse_request_id,
    reduced_dead_letter,
    request_id,
    result_headers,
)

REQUEST_ID = re.compile(r"^(?P<doc>.+):(?P<kind>document|part|combine)(?P<number>\d+):[0-9a-f]{8}$")


@pytest.mark.parametrize("doc_id", ["a.txt", "with:colons:inside", "topic-0-12", "ünïcode name"])
@pytest.mark.parametrize(("kind", "number"), [("document", 1), ("part", 12), ("combine", 3)])
def test_request_ids_have_their_format_and_parse_back(doc_id: str, kind: str, number: int) -> None:
    value = request_id(doc_id, kind, number)
    match = REQUEST_ID.match(value)
    assert match is not None, value
    assert (match["doc"], match["kind"], int(match["number"])) == (doc_id, kind, number)
    parsed = parse_request_id(value)
    assert (parsed.doc_id, parsed.kind, parsed.number) == (doc_id, kind, number)


def test_request_ids_of_one_request_number_differ() -> None:
    assert request_id("a", "part", 1) != request_id("a", "part", 1)


def test_encode_record_pretty_for_files_and_compact_for_messages() -> None:
    record = {"summary": "Übersicht — 要約", "n": 1}
    pretty = encode_record(record, pretty=True)
    assert pretty.endswith(b"\n")
    assert b"\n  " in pretty
    compact = encode_record(record)
    assert compact == '{"summary":"Übersicht — 要約","n":1}'.encode()
    assert json.loads(pretty) == json.loads(compact) == record


def test_dead_letter_keeps_text_payload_and_its_size() -> None:
    letter = dead_letter(
        {"id": "x", "reason": "empty"}, topic="t", partition=2, offset=9, value=b"abcdef", payload_bytes=4
    )
    assert letter["id"] == "x"
    assert (letter["topic"], letter["partition"], letter["offset"]) == ("t", 2, 9)
    assert (letter["payload"], letter["payload_encoding"]) == ("abcd", "utf-8")
    assert (letter["payload_bytes"], letter["payload_truncated"]) == (6, True)


def test_dead_letter_of_binary_payload_is_base64_and_of_no_value_is_null() -> None:
    binary = dead_letter({}, topic="t", partition=0, offset=0, value=b"\xff\xfe", payload_bytes=10)
    assert (binary["payload"], binary["payload_encoding"]) == ("//4=", "base64")
    tombstone = dead_letter({}, topic="t", partition=0, offset=0, value=None, payload_bytes=10)
    assert tombstone["payload"] is None
    assert (tombstone["payload_bytes"], tombstone["payload_truncated"]) == (0, False)


def test_result_headers_replace_ours_and_keep_the_rest_in_order() -> None:
    result = {"model": "tiny", "prompt_version": "v2", "profile": "brief", "profile_version": "0123abcd4567"}
    headers = result_headers([("trace", b"1"), ("model", b"spoofed"), ("profile", b"x"), ("x", b"2")], result)
    assert headers == [
        ("trace", b"1"),
        ("x", b"2"),
        ("model", b"tiny"),
        ("prompt_version", b"v2"),
        ("profile", b"brief"),
        ("profile_version", b"0123abcd4567"),
    ]


def test_dead_letter_headers_add_the_reason() -> None:
    assert dead_letter_headers([("a", b"1")], {"reason": "too_large"}) == [
        ("a", b"1"),
        ("reason", b"too_large"),
    ]


@pytest.mark.parametrize(
    ("text", "limit", "expected"),
    [
        ("short", 10, "short"),
        ("abcdefghij", 10, "abcdefghij"),
        ("abcdefghijk", 10, "abcdefg…"),
        ("ééééé", 6, "é…"),  # never half a character
        ("a\udc80b", 10, "a?b"),  # a lone surrogate cannot be written as UTF-8
    ],
)
def test_clip_text_cuts_to_bytes_on_a_character(text: str, limit: int, expected: str) -> None:
    clipped = clip_text(text, limit)
    assert clipped == expected
    assert len(clipped.encode("utf-8")) <= limit


def test_carried_bytes_keeps_a_bounded_copy_with_size_and_hash_when_cut() -> None:
    assert carried_bytes("key", None, 4) == {"key": None}
    assert carried_bytes("key", b"abc", 4) == {"key": "abc"}
    cut = carried_bytes("key", b"abcdef\xff", 4)
    assert cut["key"] == "abcd"
    assert cut["key_bytes"] == 7
    assert len(cut["key_sha256"]) == 64


def test_dead_letter_has_the_payload_hash_and_is_not_reduced() -> None:
    letter = dead_letter({"id": "x"}, topic="t", partition=0, offset=1, value=b"abc", payload_bytes=2)
    assert letter["payload_sha256"] == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    assert letter["reduced"] is False


def test_a_reduced_dead_letter_is_small_whatever_the_letter_holds() -> None:
    huge = "\u0001" * 100_000  # escaped six times over in JSON
    letter = dead_letter(
        {
            "id": huge,
            "source": "kafka",
            "reason": "too_large",
            "message": huge,
            "sha256": None,
            "input_bytes": None,
            "metadata": {"key": huge, "headers": {huge: huge}, "key_bytes": 5, "offset": 1},
            "failed_at": "now",
            "docsumd_version": "0",
        },
        topic="t" * 249,
        partition=0,
        offset=1,
        value=b"v" * 1_000_000,
        payload_bytes=64 * 1024,
    )
    reduced = reduced_dead_letter(letter)
    assert reduced["reduced"] is True
    assert reduced["payload"] is None
    assert (reduced["payload_bytes"], reduced["payload_sha256"]) == (1_000_000, letter["payload_sha256"])
    assert reduced["metadata"] == {"key_bytes": 5, "offset": 1}
    assert len(reduced["id"].encode()) <= REDUCED_TEXT_BYTES
    assert len(encode_record(reduced)) < 4096
