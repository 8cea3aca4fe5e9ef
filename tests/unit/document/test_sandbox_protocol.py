"""Unit tests for daemon.document.sandbox.protocol: both directions round-trip, and replies are checked."""

from __future__ import annotations

import io

import pytest

from daemon.document.sandbox.protocol import (
    MAX_MESSAGE_CHARS,
    REPLY_HEADER,
    InvalidReply,
    ProtocolError,
    encode_reply,
    encode_request,
    error_message,
    extracted_message,
    limits_json,
    parse_reply,
    read_request,
)
from daemon.document.types import Extracted, ExtractLimits, Format, Heading, Layout
from daemon.errors import DocumentError

LIMITS = ExtractLimits()


def payload(frame: bytes) -> bytes:
    (size,) = REPLY_HEADER.unpack(frame[: REPLY_HEADER.size])
    body = frame[REPLY_HEADER.size :]
    assert len(body) == size
    return body


def test_a_request_round_trips() -> None:
    data = b"%PDF-1.7 not really"
    stream = io.BytesIO(encode_request(data, Format.PDF, limits_json(LIMITS)) + data)
    request = read_request(stream)
    assert request is not None
    assert (request.data, request.format, request.limits) == (data, Format.PDF, LIMITS)
    assert read_request(stream) is None  # end of input


def test_a_request_cut_short_is_a_protocol_error() -> None:
    data = b"<html>text</html>"
    frame = encode_request(data, Format.HTML, limits_json(LIMITS)) + data
    with pytest.raises(ProtocolError):
        read_request(io.BytesIO(frame[:-1]))
    with pytest.raises(ProtocolError):
        read_request(io.BytesIO(b"XXXX" + frame[4:]))


def test_an_ok_reply_round_trips() -> None:
    extracted = Extracted(
        text="Title\n\nBody text.",
        format=Format.DOCX,
        layout=Layout(page_starts=(0,), headings=(Heading(1, "Title", 0),)),
        details={"pages": 1},
    )
    assert parse_reply(payload(encode_reply(extracted_message(extracted))), LIMITS) == extracted


def test_an_error_reply_is_the_extractors_refusal_with_its_message_cut() -> None:
    frame = encode_reply(error_message("encrypted", "x" * (MAX_MESSAGE_CHARS + 10)))
    refusal = parse_reply(payload(frame), LIMITS)
    assert isinstance(refusal, DocumentError)
    assert refusal.reason == "encrypted"
    assert len(refusal.message) == MAX_MESSAGE_CHARS


@pytest.mark.parametrize(
    "message",
    [
        {"error": {"reason": "crash_loop", "message": "not an extractor's reason"}},
        {
            "ok": {
                "text": "abc",
                "format": "pdf",
                "layout": {"page_starts": [1], "headings": []},  # the first page starts at 0
                "details": {},
            }
        },
        {"neither": 1},
    ],
)
def test_a_reply_outside_the_protocol_is_invalid(message: dict[str, object]) -> None:
    with pytest.raises(InvalidReply):
        parse_reply(payload(encode_reply(message)), LIMITS)
