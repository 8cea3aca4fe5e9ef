"""Unit tests for daemon.records: request ids, encodings, dead letters and output headers."""

from __future__ import annotations

import json
import re

import pytest

from daemon.records import (
    dead_letter,
    dead_letter_headers,
    encode_record,
    parse_request_id,
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
