"""Server-sent events, as OpenAI-compatible servers stream a completion: bytes in, ``data`` payloads out.

The format (the WHATWG HTML standard's ``text/event-stream``): lines ending in LF, CRLF or CR; an
event is the ``data:`` lines before an empty line, joined by LF; lines starting with ``:`` are
comments; other fields (``event``, ``id``, ``retry``) are ignored here. A completion stream ends with
the payload ``[DONE]``.

The server is not trusted: one event, and the whole stream, are bounded (:class:`StreamTooLargeError`),
so a server that never sends a line end cannot make the daemon hold an unbounded buffer.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

MAX_EVENT_BYTES: Final = 8 << 20
"""The largest event taken (8 MiB): a completion's last event holds its text, bounded by max_tokens."""
MAX_STREAM_BYTES: Final = 64 << 20
"""The most bytes one stream may send (64 MiB)."""
DONE: Final = "[DONE]"
"""The payload that ends an OpenAI completion stream."""


class StreamTooLargeError(Exception):
    """An event or the stream went past its bound."""


class EventParser:
    """Turns the chunks of an event stream, cut anywhere, into the ``data`` of each event."""

    __slots__ = ("_buffer", "_data", "_pending_cr", "_total", "max_event_bytes", "max_stream_bytes")

    def __init__(
        self, *, max_event_bytes: int = MAX_EVENT_BYTES, max_stream_bytes: int = MAX_STREAM_BYTES
    ) -> None:
        self.max_event_bytes = max_event_bytes
        self.max_stream_bytes = max_stream_bytes
        self._buffer = bytearray()
        self._data: list[bytes] = []
        self._pending_cr = False
        self._total = 0

    def feed(self, chunk: bytes) -> Iterator[str]:
        """The payloads of the events that ``chunk`` completes, in order (decoded as UTF-8, invalid
        bytes replaced)."""
        self._total += len(chunk)
        if self._total > self.max_stream_bytes:
            raise StreamTooLargeError(f"the stream sent more than {self.max_stream_bytes} bytes")
        if self._pending_cr and chunk.startswith(b"\n"):
            chunk = chunk[1:]  # the LF of a CRLF cut between two chunks
        self._pending_cr = chunk.endswith(b"\r")
        self._buffer += chunk
        start = 0
        buffer = self._buffer
        while True:
            end = _line_end(buffer, start)
            if end < 0:
                break
            line = bytes(buffer[start:end])
            start = end + (2 if buffer[end : end + 2] == b"\r\n" else 1)
            payload = self._line(line)
            if payload is not None:
                yield payload
        del buffer[:start]
        pending = len(buffer) + sum(len(part) for part in self._data)
        if pending > self.max_event_bytes:
            raise StreamTooLargeError(f"an event longer than {self.max_event_bytes} bytes")

    def _line(self, line: bytes) -> str | None:
        if not line:  # the end of an event
            if not self._data:
                return None
            data, self._data = b"\n".join(self._data), []
            return data.decode("utf-8", errors="replace")
        if line.startswith(b":"):
            return None  # a comment (servers send them to keep a connection alive)
        name, _, value = line.partition(b":")
        if name == b"data":
            self._data.append(value[1:] if value.startswith(b" ") else value)
        return None


def _line_end(buffer: bytearray, start: int) -> int:
    """The index of the first CR or LF at or after ``start``, or -1. A CR at the very end may be the
    first half of a CRLF: it is taken as a line end (the LF, if it follows, is skipped by ``feed``)."""
    lf = buffer.find(b"\n", start)
    cr = buffer.find(b"\r", start, lf if lf >= 0 else len(buffer))
    return cr if cr >= 0 else lf
