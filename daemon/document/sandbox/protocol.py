"""The frame protocol between the extraction pool and its workers, both directions, and the check of
every reply: the one place that says what crosses the sandbox's boundary.

Both directions are length-prefixed, big-endian:

* pool -> worker: :data:`REQUEST_HEADER` (magic, length of the metadata, length of the data), the
  metadata as JSON (``{"format": "pdf", "limits": {ExtractLimits fields}}``), the document's bytes
  (:func:`encode_request`, read by :func:`read_request`);
* worker -> pool: :data:`REPLY_HEADER` (length), then one JSON object, never pickle (a worker taken
  over by a hostile file must not be able to run code in the daemon by what it sends back):
  ``{"ready": {...}}`` or ``{"fatal": message}`` once at start, then for each document
  ``{"ok": {"text", "format", "layout": {"page_starts", "headings": [[level, title, start]]},
  "details"}}`` or ``{"error": {"reason", "message"}}`` (:func:`encode_reply`).

The pool trusts no reply: :func:`parse_reply` checks each (types, lengths, offsets in order and
inside the text, known formats and reasons) and raises :class:`InvalidReply` for anything else, which
the pool treats as the worker misbehaving.

This module imports only the standard library and the document types: both the worker (before it
imports any parser) and the daemon import it.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import re
import struct
from typing import Any, BinaryIO, Final

from daemon.document.types import (
    EXPANSION_REASON,
    MAX_HEADINGS,
    MAX_TITLE_CHARS,
    Extracted,
    ExtractLimits,
    Format,
    Heading,
    Layout,
)
from daemon.errors import DocumentError, Reason

MIB: Final = 1024 * 1024

PROTOCOL_VERSION: Final = 1
"""Said in the ready message: a pool refuses a worker of another version (the installed code was
replaced under a running daemon)."""

REQUEST_MAGIC: Final = b"DSX1"
REQUEST_HEADER: Final = struct.Struct(">4sIQ")
"""Magic, metadata length, data length."""
MAX_META_BYTES: Final = 64 * 1024
REPLY_HEADER: Final = struct.Struct(">I")
"""Reply length (the JSON that follows)."""
MAX_MESSAGE_CHARS: Final = 2000
"""An error reply's message is cut to this (a repr can be as long as the data it holds)."""

WORKER_REASONS: Final[frozenset[Reason]] = frozenset(
    {"encrypted", "malformed", "too_large", EXPANSION_REASON, "no_text", "binary", "internal_error"}
)
"""The reasons an ``error`` reply may carry: those the extractors raise
(:mod:`daemon.document.extract`) and ``internal_error``. Another is the worker misbehaving."""
MAX_HEADING_LEVEL: Final = 1000
"""A sanity bound on a heading's level (a PDF outline may nest deeper than the six levels written)."""
MAX_DETAILS_ITEMS: Final = 1000
MAX_DETAILS_DEPTH: Final = 8

_SURROGATES: Final = re.compile("[\ud800-\udfff]")


# -- pool -> worker --------------------------------------------------------------------------------


def encode_request(data: bytes, fmt: Format, limits_json: bytes) -> bytes:
    """The header and metadata of a request (the data follows them on the pipe, unchanged);
    ``limits_json`` is :func:`limits_json` of the extraction's limits."""
    meta = b'{"format":' + json.dumps(fmt.value).encode("ascii") + b',"limits":' + limits_json + b"}"
    return REQUEST_HEADER.pack(REQUEST_MAGIC, len(meta), len(data)) + meta


def limits_json(limits: ExtractLimits) -> bytes:
    """``limits`` as the JSON a request carries."""
    return json.dumps(dataclasses.asdict(limits), separators=(",", ":")).encode("ascii")


@dataclasses.dataclass(frozen=True, slots=True)
class Request:
    """One document to extract."""

    data: bytes
    format: Format
    limits: ExtractLimits


class ProtocolError(Exception):
    """What came on the request pipe is not a request."""


def _read_exactly(stream: BinaryIO, size: int) -> bytes:
    data = stream.read(size)
    if len(data) != size:
        raise ProtocolError(f"the input ended {size - len(data)} bytes short of a request")
    return data


def read_request(stream: BinaryIO) -> Request | None:
    """The next request, or None at the end of input (the pool is done with this worker)."""
    header = stream.read(REQUEST_HEADER.size)
    if not header:
        return None
    if len(header) != REQUEST_HEADER.size:
        raise ProtocolError("the input ended inside a request header")
    magic, meta_size, data_size = REQUEST_HEADER.unpack(header)
    if magic != REQUEST_MAGIC or meta_size > MAX_META_BYTES:
        raise ProtocolError("not a request header")
    try:
        meta = json.loads(_read_exactly(stream, meta_size))
        fmt = Format(meta["format"])
        limits = ExtractLimits(**meta["limits"])
    except (ValueError, KeyError, TypeError) as exc:
        raise ProtocolError(f"a request's metadata cannot be read: {exc!r}") from exc
    return Request(_read_exactly(stream, data_size), fmt, limits)


# -- worker -> pool --------------------------------------------------------------------------------


def encode_reply(message: dict[str, Any]) -> bytes:
    """One reply frame. Lone surrogates (a broken PDF's text) travel as such (``surrogatepass``):
    the daemon replaces them, keeping every offset."""
    payload = json.dumps(message, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    body = payload.encode("utf-8", "surrogatepass")
    return REPLY_HEADER.pack(len(body)) + body


def extracted_message(extracted: Extracted) -> dict[str, Any]:
    """An ``ok`` reply's content."""
    if not isinstance(extracted, Extracted):
        raise TypeError(f"the extractor returned {type(extracted).__name__}, not Extracted")
    layout = extracted.layout
    return {
        "ok": {
            "text": extracted.text,
            "format": Format(extracted.format).value,
            "layout": {
                "page_starts": list(layout.page_starts),
                "headings": [[h.level, h.title, h.start] for h in layout.headings],
            },
            "details": extracted.details,
        }
    }


def error_message(reason: str, message: str) -> dict[str, Any]:
    """An ``error`` reply's content."""
    if len(message) > MAX_MESSAGE_CHARS:
        message = message[: MAX_MESSAGE_CHARS - 1] + "…"
    return {"error": {"reason": reason, "message": message}}


class InvalidReply(Exception):
    """What a worker sent is not a valid reply (it is misbehaving)."""


def _no_constant(name: str) -> Any:
    raise InvalidReply(f"{name} is not JSON")


def loads_reply(payload: bytes) -> dict[str, Any]:
    """A reply frame's JSON object (raw lone surrogates allowed, as the worker sends them)."""
    try:
        message = json.loads(payload.decode("utf-8", "surrogatepass"), parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise InvalidReply(f"not JSON ({type(exc).__name__})") from None
    if not isinstance(message, dict) or len(message) != 1:
        raise InvalidReply("not a JSON object of one member")
    return message


def _int(value: Any, what: str, low: int, high: int) -> int:
    # bool is an int to Python, not to the protocol
    if type(value) is not int or not low <= value <= high:
        raise InvalidReply(f"{what} is not an integer from {low} to {high}")
    return value


def _members(value: Any, what: str, keys: frozenset[str]) -> dict[str, Any]:
    if not isinstance(value, dict) or set(value) != keys:
        raise InvalidReply(f"{what} is not an object of {', '.join(sorted(keys))}")
    return value


def _page_starts(value: Any, length: int, max_pages: int) -> tuple[int, ...]:
    if not isinstance(value, list) or len(value) > max_pages:
        raise InvalidReply(f"page_starts is not a list of at most {max_pages} offsets")
    starts = tuple(_int(start, "a page start", 0, length) for start in value)
    if starts and starts[0] != 0:
        raise InvalidReply("the first page does not start at 0")
    if any(later < earlier for earlier, later in itertools.pairwise(starts)):
        raise InvalidReply("page starts are not in ascending order")
    return starts


def _headings(value: Any, length: int) -> tuple[Heading, ...]:
    if not isinstance(value, list) or len(value) > MAX_HEADINGS:
        raise InvalidReply(f"headings is not a list of at most {MAX_HEADINGS}")
    headings: list[Heading] = []
    for entry in value:
        if not isinstance(entry, list) or len(entry) != 3:
            raise InvalidReply("a heading is not [level, title, start]")
        level = _int(entry[0], "a heading's level", 1, MAX_HEADING_LEVEL)
        title = entry[1]
        if not isinstance(title, str) or len(title) > MAX_TITLE_CHARS:
            raise InvalidReply(f"a heading's title is not a string of at most {MAX_TITLE_CHARS} characters")
        start = _int(entry[2], "a heading's start", 0, length)
        if headings and start < headings[-1].start:
            raise InvalidReply("headings are not in ascending order of their starts")
        headings.append(Heading(level, _SURROGATES.sub("\ufffd", title), start))
    return tuple(headings)


def _details(value: Any, depth: int = 0, budget: list[int] | None = None) -> Any:
    """``details`` checked (bounded, finite numbers) and cleaned (lone surrogates replaced: results
    are written as UTF-8)."""
    budget = [MAX_DETAILS_ITEMS] if budget is None else budget
    budget[0] -= 1
    if budget[0] < 0 or depth > MAX_DETAILS_DEPTH:
        raise InvalidReply(
            f"details hold over {MAX_DETAILS_ITEMS} values or nest over {MAX_DETAILS_DEPTH} deep"
        )
    if isinstance(value, str):
        return _SURROGATES.sub("\ufffd", value)
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidReply("details hold a number that is not finite")
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, list):
        return [_details(item, depth + 1, budget) for item in value]
    assert isinstance(value, dict)  # JSON has nothing else
    return {_SURROGATES.sub("\ufffd", key): _details(item, depth + 1, budget) for key, item in value.items()}


_OK_KEYS: Final = frozenset({"text", "format", "layout", "details"})
_LAYOUT_KEYS: Final = frozenset({"page_starts", "headings"})
_ERROR_KEYS: Final = frozenset({"reason", "message"})


def _extracted(value: Any, limits: ExtractLimits) -> Extracted:
    ok = _members(value, "ok", _OK_KEYS)
    text = ok["text"]
    if not isinstance(text, str) or len(text) > limits.max_output_chars:
        raise InvalidReply(f"the text is not a string of at most {limits.max_output_chars} characters")
    try:
        fmt = Format(ok["format"])
    except (ValueError, TypeError):
        raise InvalidReply("the format is not one docsumd knows") from None
    layout = _members(ok["layout"], "layout", _LAYOUT_KEYS)
    details = ok["details"]
    if not isinstance(details, dict):
        raise InvalidReply("details is not an object")
    return Extracted(
        text=text,
        format=fmt,
        layout=Layout(
            page_starts=_page_starts(layout["page_starts"], len(text), limits.max_pages),
            headings=_headings(layout["headings"], len(text)),
        ),
        details=_details(details),
    )


def _refusal(value: Any) -> DocumentError:
    error = _members(value, "error", _ERROR_KEYS)
    reason, message = error["reason"], error["message"]
    if not isinstance(reason, str) or reason not in WORKER_REASONS:
        raise InvalidReply("an error's reason is not one an extractor gives")
    if not isinstance(message, str) or len(message) > MAX_MESSAGE_CHARS:
        raise InvalidReply(f"an error's message is not a string of at most {MAX_MESSAGE_CHARS} characters")
    return DocumentError(reason, _SURROGATES.sub("\ufffd", message))


def parse_reply(payload: bytes, limits: ExtractLimits) -> Extracted | DocumentError:
    """A worker's answer to one document: the text and layout, or the extractor's refusal (to be
    raised). :class:`InvalidReply` for anything else: wrong JSON, types, lengths (text over
    ``max_output_chars``), offsets out of order or outside the text, an unknown format or reason."""
    message = loads_reply(payload)
    if "ok" in message:
        return _extracted(message["ok"], limits)
    if "error" in message:
        return _refusal(message["error"])
    raise InvalidReply("neither ok nor error")


def reply_cap(limits: ExtractLimits) -> int:
    """The most bytes a valid reply can take: the text at 6 bytes a character (a control character
    is written ``\\u0001``), headings and details besides; within the 4-byte length prefix."""
    return min(8 * limits.max_output_chars + 4 * MIB, 2**32 - 1)
