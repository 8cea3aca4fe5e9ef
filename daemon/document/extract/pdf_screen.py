"""Screening a PDF's raw bytes before any PDF library reads them (:func:`screen`).

A small file can hold streams that decode to gigabytes of content (a decompression bomb): PDFium
would parse every operator of it and abort on memory. The screen finds every stream, reads the
filters its dictionary declares, decodes it a chunk at a time through them, and counts what comes
out, stopping as soon as that is over the limits; so it costs a few MiB and a little time past the
limits, whatever the ratio.

It reads a stream as PDFium does, not as a well-behaved writer writes it:

* streams are found by their ``stream`` keyword (a word of its own: not ``endstream``), their data
  starting after the end of that line; the cross-reference table and ``/Length`` are not used (both
  may lie, and PDFium recovers from a wrong length by looking for ``endstream``);
* the dictionary is read with a lexer of PDF's syntax (comments, nested dictionaries and arrays,
  strings with their escapes, names with ``#xx`` escapes, hexadecimal strings), so a ``/Filter``
  inside a nested dictionary or a string, a long dictionary or one holding the word ``obj`` changes
  nothing; a ``/Filter`` (or an entry of its array, or ``/DecodeParms``) given as an indirect
  reference is resolved through the file's ``N G obj`` definitions;
* the decoders that can inflate are applied in order: FlateDecode, LZWDecode, ASCIIHexDecode,
  ASCII85Decode, RunLengthDecode (abbreviations included), a PNG or TIFF predictor between two of
  them; a stream whose filters end in an image codec (DCT, JPX, JBIG2, CCITT fax) is an image,
  which text extraction never decodes;
* where the filters cannot be told (a dictionary this lexer cannot read, a reference to an object
  inside an object stream or defined twice), the layers are found from the data itself: zlib,
  hexadecimal and ASCII85 headers.

What is counted: the final output's text-like chunks (:data:`TEXT_LIKE_SHARE`), as images, fonts
and colour profiles are binary and never parsed as operators; all of it for a stream whose last
filter has a predictor (its output is differences, never text-like) unless its dictionary says it
is an image. Not screened: streams of an encrypted document (their data is ciphertext until
decrypted), and a content stream whose dictionary claims ``/Subtype /Image`` behind a predictor;
the extraction worker's memory limit still stops those.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import itertools
import re
import zlib
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Final

from daemon.document.types import ExtractLimits
from daemon.errors import DocumentError

HEADER_WINDOW: Final = 1024
"""PDF readers look for ``%PDF-`` this far into the file (junk before it is tolerated)."""
EOF_WINDOW: Final = 4096
"""A complete file has ``%%EOF`` this close to its end (writers may append a little junk)."""
RATIO_MIN_BYTES: Final = 8 * 1024 * 1024
"""A stream's compression ratio is judged once it has decoded to this much text: small streams of
repeated operators compress very well and are harmless."""
TEXT_LIKE_SHARE: Final = 0.5
"""A decoded chunk with at least this share of printable ASCII is counted: what a content stream
(operators) holds. Images, fonts and colour profiles are binary, are never parsed as operators when
text is extracted, and would otherwise count a scan's pixels against the limits."""
MAX_LAYERS: Final = 8
"""Filters of one stream decoded at most (more is no real file: it is not measured)."""
MAX_READS: Final = 4
"""The screen reads each byte of the file about once (streams do not overlap in a real file); one
that makes it read them more often than this (a stream whose ``/Length`` covers others, or the
word ``stream`` millions of times before one ``endstream``) is refused (``malformed``)."""
MAX_DICTIONARY_TOKENS: Final = 100_000
"""Tokens of one object read at most; a longer dictionary is screened as if it could not be read."""
_OUT_CHUNK: Final = 1024 * 1024  # the most one decoding step returns: bounds memory per layer
_FEED_CHUNK: Final = 16 * 1024  # raw bytes fed at a time: the ratio is known within this
_PRINTABLE: Final = bytes(range(0x20, 0x7F)) + b"\t\n\r\f"


def screen(data: bytes, limits: ExtractLimits) -> None:
    """Refuses what no PDF library should be handed: no ``%PDF-`` header or no ``%%EOF`` near the end
    (``malformed``: garbage, a truncated file), or streams that decode to more text than ``limits``
    allow (``too_large``: a decompression bomb, in total or by its ratio)."""
    if b"%PDF-" not in data[:HEADER_WINDOW]:
        raise DocumentError("malformed", "this is not a PDF file: no %PDF- header at its start")
    if b"%%EOF" not in data[-EOF_WINDOW:]:
        raise DocumentError(
            "malformed",
            "this PDF file is truncated or damaged: it does not end with %%EOF (an incomplete download?)",
        )
    total = read = 0
    for stream in streams(data):
        decoded, fed = decoded_text_bytes(
            data, stream, limits.max_unpacked_bytes - total, limits.max_compression_ratio
        )
        total += decoded
        read += fed
        if read > MAX_READS * len(data):
            raise DocumentError(
                "malformed",
                f"this PDF's streams overlap: screening them would read its bytes over {MAX_READS} "
                "times (streams inside each other's data)",
            )
        if total > limits.max_unpacked_bytes:
            raise DocumentError(
                "too_large",
                f"this PDF's compressed streams inflate to more than {limits.max_unpacked_bytes} bytes "
                "of text (extract.max_unpacked_bytes): a decompression bomb?",
            )
        if _over_ratio(decoded, fed, limits.max_compression_ratio):
            raise DocumentError(
                "too_large",
                f"a stream of this PDF inflates {decoded // max(fed, 1)} times or more "
                f"(over extract.max_compression_ratio {limits.max_compression_ratio:g}): "
                "a decompression bomb?",
            )


def _over_ratio(decoded: int, fed: int, max_ratio: float) -> bool:
    return decoded >= RATIO_MIN_BYTES and decoded > max_ratio * fed


# -- PDF syntax ------------------------------------------------------------------------------------

_WS: Final = b"\x00\t\n\x0c\r "
_WS_CLASS: Final = rb"[\x00\t\n\x0c\r ]"
_REGULAR: Final = rb"[^\x00\t\n\x0c\r ()<>\[\]{}/%]"  # what a number, keyword or name is made of
# Keywords are words of their own (not "endstream", "endobj"), each found by its literal first: a
# pattern that opens with a character class or an assertion is tried at every byte of the file.
_STREAM_KEYWORD: Final = re.compile(rb"stream(?<!%bstream)(?!%b)" % (_REGULAR, _REGULAR))
_OBJ_KEYWORD: Final = re.compile(rb"obj(?<!%bobj)(?!%b)" % (_REGULAR, _REGULAR))
# The "N G " before an "obj", read backwards (in the file reversed): linear whatever is before it.
_HEADER_REVERSED: Final = re.compile(rb"%b++[0-9]{1,5}+%b++([0-9]{1,10}+)(?![0-9])" % (_WS_CLASS, _WS_CLASS))
_END_OF_LINE: Final = re.compile(rb"\r\n?|\n")
# Whitespace and comments, then one token (none at the end): a dictionary's or an array's bracket,
# a name, a hexadecimal string, the opening of a literal string (read by _literal_string_end), or a
# run of regular characters (a number, a keyword, "R"); anything else is one character the parser
# would stop at.
_TOKEN: Final = re.compile(
    rb"(?:%b++|%%[^\r\n]*+)*+(<<|>>|[\[\]{}]|/%b*+|<[0-9A-Fa-f\x00\t\n\x0c\r ]*+>|\(|%b++|[\s\S])?"
    % (_WS_CLASS, _REGULAR, _REGULAR)
)
_STRING_STOP: Final = re.compile(rb"[()\\]")
_NAME_ESCAPE: Final = re.compile(rb"#([0-9A-Fa-f]{2})")


@dataclass(frozen=True, slots=True)
class Name:
    """A PDF name (``/FlateDecode``), its ``#xx`` escapes decoded."""

    value: bytes


@dataclass(frozen=True, slots=True)
class Ref:
    """An indirect reference (``5 0 R``)."""

    number: int
    generation: int


PdfValue = Name | Ref | int | bytes | list["PdfValue"] | dict[bytes, "PdfValue"] | None
"""What the lexer reads: names, references, integers, strings and other keywords as bytes,
arrays, dictionaries (keyed by the name's bytes); ``None`` for what it cannot tell."""


class _Unreadable(Exception):
    """The object is not what this lexer reads (or is over its bounds)."""


class _Lexer:
    """Reads PDF objects from ``data`` at a position: enough of the syntax to find a stream's
    dictionary and what its filters are, bounded in tokens and nesting."""

    def __init__(self, data: bytes, position: int, end: int) -> None:
        self.data = data
        self.position = position
        self.end = end
        self.tokens = 0

    def token(self) -> bytes:
        """The next token that is not whitespace or a comment (``b""`` at the end)."""
        match = _TOKEN.match(self.data, self.position, self.end)
        assert match is not None  # every part of it may be empty
        self.tokens += 1
        if self.tokens > MAX_DICTIONARY_TOKENS:
            raise _Unreadable("too many tokens")
        token = match.group(1)
        if token is None:
            self.position = self.end
            return b""
        if token == b"(":  # the whole string is the token
            self.position = _literal_string_end(self.data, match.end(), self.end)
            return self.data[match.start(1) : self.position]
        self.position = match.end()
        return token

    def value(self, depth: int = 0, token: bytes | None = None) -> PdfValue:
        """The next object (an integer followed by another and ``R`` is a reference); ``token``:
        its first token, already read."""
        if depth > 32:
            raise _Unreadable("nested too deep")
        if token is None:
            token = self.token()
        if token == b"<<":
            return self._dictionary(depth)
        if token == b"[":
            return self._array(depth)
        if token.startswith(b"/"):
            return Name(_NAME_ESCAPE.sub(lambda m: bytes.fromhex(m.group(1).decode()), token[1:]))
        if token.isdigit() and len(token) <= 10:
            saved = self.position, self.tokens
            generation, keyword = self.token(), self.token()
            if generation.isdigit() and len(generation) <= 5 and keyword == b"R":
                return Ref(int(token), int(generation))
            self.position, self.tokens = saved
            return int(token)
        if token in (b"", b">>", b"]", b"{", b"}") or token.startswith(b">"):
            raise _Unreadable(f"unexpected {token[:8]!r}")
        return token  # a string, a real number, true/false/null, another keyword

    def _dictionary(self, depth: int) -> dict[bytes, PdfValue]:
        entries: dict[bytes, PdfValue] = {}
        while True:
            token = self.token()
            if token == b">>":
                return entries
            if not token.startswith(b"/"):
                raise _Unreadable("a dictionary key that is not a name")
            key = self.value(depth + 1, token)
            assert isinstance(key, Name)
            if key.value in entries:
                entries[key.value] = None  # said twice: which one a reader keeps is not told
                self.value(depth + 1)
            else:
                entries[key.value] = self.value(depth + 1)

    def _array(self, depth: int) -> list[PdfValue]:
        items: list[PdfValue] = []
        while True:
            token = self.token()
            if token == b"]":
                return items
            items.append(self.value(depth + 1, token))


def _literal_string_end(data: bytes, position: int, end: int) -> int:
    """Where a literal string whose ``(`` ends at ``position`` ends: after its balancing ``)``,
    escapes skipped (the end of the data if it is never closed)."""
    depth = 1
    while depth:
        found = _STRING_STOP.search(data, position, end)
        if found is None:
            return end
        position = found.end()
        character = data[found.start()]
        if character == ord("\\"):
            position += 1
        else:
            depth += 1 if character == ord("(") else -1
    return position


class _Objects:
    """The file's ``N G obj`` definitions: where each object's body starts, for finding the object a
    ``stream`` keyword belongs to and for resolving references. Kept in arrays of machine integers
    (a file of nothing but object headers has millions); the index by number is made on the first
    reference resolved."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.bodies = array("I" if len(data) < 1 << 32 else "Q")  # ascending
        self.numbers = array("q")
        backwards = data[::-1]
        for keyword in _OBJ_KEYWORD.finditer(data):
            header = _HEADER_REVERSED.match(backwards, len(data) - keyword.start())
            if header is not None:
                self.bodies.append(keyword.end())
                self.numbers.append(int(header.group(1)[::-1]))
        self._by_number: array[int] | None = None
        self._values: dict[int, PdfValue] = {}
        self._unreadable: set[int] = set()

    def body_before(self, position: int) -> int | None:
        """Where the body of the last object whose header is before ``position`` starts."""
        index = bisect.bisect_right(self.bodies, position) - 1
        return self.bodies[index] if index >= 0 else None

    def resolve(self, value: PdfValue) -> PdfValue:
        """``value`` with a reference replaced by the object it refers to. :class:`_Unreadable` if
        that is not here (in an object stream), defined more than once (which one counts is the
        cross-reference table's to say, which this does not read), or not readable."""
        for _ in range(8):
            if not isinstance(value, Ref):
                return value
            value = self._value(value.number)
        raise _Unreadable("references refer to references")

    def _value(self, number: int) -> PdfValue:
        if number in self._unreadable:
            raise _Unreadable(f"object {number} cannot be resolved")
        if number not in self._values:
            try:
                self._values[number] = _compact(_Lexer(self.data, self._body(number), len(self.data)).value())
            except _Unreadable:
                self._unreadable.add(number)
                raise
        return self._values[number]

    def _body(self, number: int) -> int:
        if self._by_number is None:
            order = sorted(range(len(self.numbers)), key=self.numbers.__getitem__)
            self._by_number = array("q", order)
        found = bisect.bisect_left(self._by_number, number, key=self.numbers.__getitem__)
        after = found + 1
        if found == len(self._by_number) or self.numbers[self._by_number[found]] != number:
            raise _Unreadable(f"no object {number} outside object streams")
        if after < len(self._by_number) and self.numbers[self._by_number[after]] == number:
            raise _Unreadable(f"object {number} is defined more than once")
        return self.bodies[self._by_number[found]]


_KEPT_KEYS: Final = frozenset({b"Predictor", b"Colors", b"BitsPerComponent", b"Columns", b"EarlyChange"})


def _compact(value: PdfValue, depth: int = 0) -> PdfValue:
    """What of a resolved object a filter or its parameters can use: names, references, integers,
    parameter dictionaries' numbers, the first entries of an array. Resolved objects are kept for
    other streams that refer to them, and an object may be a dictionary of thousands of entries."""
    if isinstance(value, list):
        return [_compact(item, depth + 1) for item in value[: MAX_LAYERS + 1]] if depth < 2 else None
    if isinstance(value, dict):
        return {key: item for key, item in value.items() if key in _KEPT_KEYS and isinstance(item, int)}
    if isinstance(value, bytes):
        return b""
    return value


# -- finding streams and their filters -------------------------------------------------------------

_ABBREVIATIONS: Final = {
    b"Fl": b"FlateDecode", b"LZW": b"LZWDecode", b"AHx": b"ASCIIHexDecode", b"A85": b"ASCII85Decode",
    b"RL": b"RunLengthDecode", b"DCT": b"DCTDecode", b"CCF": b"CCITTFaxDecode",
}  # fmt: skip
_DECODERS: Final = frozenset(
    {b"FlateDecode", b"LZWDecode", b"ASCIIHexDecode", b"ASCII85Decode", b"RunLengthDecode", b"Crypt"}
)
_IMAGE_CODECS: Final = frozenset({b"DCTDecode", b"JPXDecode", b"JBIG2Decode", b"CCITTFaxDecode"})
_STREAM_END: Final = re.compile(rb"endstream|endobj")
_ENDSTREAM_AFTER: Final = re.compile(_WS_CLASS + rb"*+endstream")


@dataclass(frozen=True, slots=True)
class Layer:
    """One filter of a stream: its name (abbreviations spelt out) and its parameters."""

    name: bytes
    predictor: int = 1
    colors: int = 1
    bits: int = 8
    columns: int = 1
    early_change: int = 1


@dataclass(frozen=True, slots=True)
class Stream:
    """A stream to measure: where its data starts and ends, the filters to decode it with (None: to
    be found from the data), and whether all of its output counts (not only text-like chunks)."""

    start: int
    end: int
    layers: tuple[Layer, ...] | None
    count_all: bool = False


def streams(data: bytes) -> Iterator[Stream]:
    """Every stream of ``data`` that may decode to more than it holds, in file order (see the
    module's doc): those without filters, or whose filters end in an image codec, or that a reader
    would not decode (an unknown filter) are left out.

    A stream's data ends where its ``/Length`` says if ``endstream`` follows there, else at the
    first ``endstream`` or ``endobj`` after its start, as PDFium reads it."""
    objects = _Objects(data)
    body: int | None = None
    dictionary: tuple[int, dict[bytes, PdfValue]] | None = None  # that object's: keyword at, entries
    line_end = stream_end = -1
    last_start = -1
    for keyword in _STREAM_KEYWORD.finditer(data):
        # The first line end (and stream end) after each keyword, each found once: they only move on.
        if line_end < keyword.end():
            found = _END_OF_LINE.search(data, keyword.end())
            line_end = found.end() if found is not None else len(data)
        if stream_end < line_end:
            found = _STREAM_END.search(data, line_end)
            stream_end = found.start() if found is not None else len(data)
        before = objects.body_before(keyword.start())
        if before != body:
            body, dictionary = before, None if before is None else _stream_dictionary(data, before)
        if dictionary is None:
            # Not read (or no object header): what the data itself says, once per start.
            sniffed = line_end != last_start and _may_sniff(data, line_end)
            if sniffed and _sniff(data[line_end : line_end + 64]) is not None:
                last_start = line_end
                yield Stream(line_end, stream_end, None)
        elif dictionary[0] == keyword.start():
            end = _declared_end(data, line_end, dictionary[1], objects) or stream_end
            stream = _measured(line_end, end, dictionary[1], objects)
            if stream is not None:
                yield stream
        # else: the word "stream" inside an object's data or strings, not a stream


def _stream_dictionary(data: bytes, body: int) -> tuple[int, dict[bytes, PdfValue]] | None:
    """The object at ``body`` if it is a dictionary followed by the ``stream`` keyword: where that
    keyword is, and the dictionary. None if it cannot be read, or is no stream."""
    lexer = _Lexer(data, body, len(data))
    try:
        value = lexer.value()
        if not isinstance(value, dict) or lexer.token() != b"stream":
            return None
    except _Unreadable:
        return None
    return lexer.position - len(b"stream"), value


def _declared_end(
    data: bytes, start: int, dictionary: dict[bytes, PdfValue], objects: _Objects
) -> int | None:
    try:
        length = objects.resolve(dictionary.get(b"Length"))
    except _Unreadable:
        return None
    fits = isinstance(length, int) and 0 < length <= len(data) - start
    if fits and isinstance(length, int) and _ENDSTREAM_AFTER.match(data, start + length):
        return start + length
    return None


def _measured(start: int, end: int, dictionary: dict[bytes, PdfValue], objects: _Objects) -> Stream | None:
    try:
        layers = _layers(dictionary, objects)
    except _Unreadable:
        return Stream(start, end, None)
    if layers is None:
        return None
    image = dictionary.get(b"Subtype") == Name(b"Image")
    return Stream(start, end, layers, count_all=layers[-1].predictor > 1 and not image)


def _layers(dictionary: dict[bytes, PdfValue], objects: _Objects) -> tuple[Layer, ...] | None:
    """The stream's filters, as PDFium reads them (None: nothing to decode, an image, or a filter
    no reader decodes); :class:`_Unreadable` if they cannot be told."""
    filters = objects.resolve(dictionary.get(b"Filter"))
    if filters is None:
        return None  # no filter: what is there is all there is
    entries = filters if isinstance(filters, list) else [filters]
    names = [objects.resolve(entry) for entry in entries]
    if not 0 < len(names) <= MAX_LAYERS:
        raise _Unreadable("no filters or too many")
    spelt: list[bytes] = []
    for name in names:
        if not isinstance(name, Name):
            raise _Unreadable("a filter that is not a name")
        spelt.append(_ABBREVIATIONS.get(name.value, name.value))
    if spelt[-1] in _IMAGE_CODECS or not all(name in _DECODERS for name in spelt):
        return None  # an image, or a filter no reader decodes
    given = objects.resolve(dictionary.get(b"DecodeParms"))
    if isinstance(filters, list):
        parameters = (
            [objects.resolve(entry) for entry in given[: len(spelt)]] if isinstance(given, list) else []
        )
    else:
        parameters = [given]
    parameters += [None] * (len(spelt) - len(parameters))
    return tuple(
        _layer(name, given if isinstance(given, dict) else {})
        for name, given in zip(spelt, parameters, strict=True)
    )


def _layer(name: bytes, parameters: dict[bytes, PdfValue]) -> Layer:
    def number(key: bytes, default: int, low: int, high: int) -> int:
        value = parameters.get(key)
        return min(max(value, low), high) if isinstance(value, int) else default

    return Layer(
        name=name,
        predictor=number(b"Predictor", 1, 1, 15) if name in (b"FlateDecode", b"LZWDecode") else 1,
        colors=number(b"Colors", 1, 1, 32),
        bits=number(b"BitsPerComponent", 8, 1, 16),
        columns=number(b"Columns", 1, 1, 1 << 20),
        early_change=number(b"EarlyChange", 1, 0, 1),
    )


# -- decoding --------------------------------------------------------------------------------------


def decoded_text_bytes(data: bytes, stream: Stream, budget: int, max_ratio: float) -> tuple[int, int]:
    """How many text-like bytes (see :data:`TEXT_LIKE_SHARE`; all of them for ``count_all``) the
    stream decodes to, and how many of its raw bytes were fed for them; it stops as soon as that is
    over ``budget`` or over ``max_ratio`` times what was fed. Decoded a chunk at a time: memory
    stays a few MiB and time a few milliseconds past the limits, whatever the ratio."""
    fed = 0

    def raw() -> Iterator[bytes]:
        nonlocal fed
        view = memoryview(data)
        for offset in range(stream.start, stream.end, _FEED_CHUNK):
            piece = bytes(view[offset : min(offset + _FEED_CHUNK, stream.end)])
            fed += len(piece)
            yield piece

    pieces = _decoded(raw(), stream.layers)
    counted = 0
    for piece in pieces:
        if stream.count_all or len(piece.translate(None, _PRINTABLE)) <= len(piece) * (1 - TEXT_LIKE_SHARE):
            counted += len(piece)
            if counted > budget or _over_ratio(counted, fed, max_ratio):
                break
    return counted, fed


def _decoded(pieces: Iterator[bytes], layers: tuple[Layer, ...] | None) -> Iterator[bytes]:
    if layers is None:
        return _sniffed(pieces)
    for index, layer in enumerate(layers):
        pieces = _DECODE[layer.name](pieces, layer)
        if layer.predictor > 1 and index < len(layers) - 1:
            pieces = _unpredicted(pieces, layer)
    return pieces


def _sniffed(pieces: Iterator[bytes]) -> Iterator[bytes]:
    """The layers of a stream whose filters are not known, found from the data: while its first
    bytes are a zlib header (or one written in hexadecimal or ASCII85), one more layer."""
    for _ in range(MAX_LAYERS):
        head, pieces = _peek(pieces, 64)
        decoder = _sniff(head)
        if decoder is None:
            break
        pieces = _DECODE[decoder](pieces, Layer(decoder))
    return pieces


def _may_sniff(data: bytes, start: int) -> bool:
    """A first look at one byte: whether the data at ``start`` may open with a zlib header, written
    as it is, in hexadecimal or in ASCII85 (:func:`_sniff` then looks closer)."""
    if start >= len(data):
        return False
    first = data[start]
    return first & 0x0F == 8 or first in _MAY_OPEN_SNIFFED


def _sniff(head: bytes) -> bytes | None:
    if _is_zlib_header(head):
        return b"FlateDecode"
    compact = head.translate(None, _WS)
    digits = compact[:4]
    if (
        len(digits) == 4
        and not digits.translate(None, _NOT_HEX)
        and _is_zlib_header(bytes.fromhex(digits.decode()))
    ):
        return b"ASCIIHexDecode"
    group = compact.removeprefix(b"<~")[:5]
    if len(group) == 5 and not group.translate(None, _ASCII85) and _is_zlib_header(_a85_group(group)):
        return b"ASCII85Decode"
    return None


def _a85_group(group: bytes) -> bytes:
    try:
        return base64.a85decode(group)
    except ValueError:  # five characters over 2**32
        return b""


def _is_zlib_header(head: bytes) -> bool:
    return len(head) >= 2 and head[0] & 0x0F == 8 and head[0] >> 4 <= 7 and (head[0] << 8 | head[1]) % 31 == 0


def _peek(pieces: Iterator[bytes], size: int) -> tuple[bytes, Iterator[bytes]]:
    """The first ``size`` bytes of ``pieces`` (fewer at its end), and ``pieces`` whole again."""
    taken: list[bytes] = []
    length = 0
    for piece in pieces:
        taken.append(piece)
        length += len(piece)
        if length >= size:
            break
    return b"".join(taken)[:size], itertools.chain(taken, pieces)


def _inflate(pieces: Iterator[bytes], layer: Layer) -> Iterator[bytes]:
    """FlateDecode, lazily: at most :data:`_OUT_CHUNK` bytes out per step. Ends at the end of the
    zlib stream or at the first error (a broken stream is the PDF library's to judge)."""
    decoder = zlib.decompressobj()
    try:
        for piece in pieces:
            pending = piece
            while True:
                out = decoder.decompress(pending, _OUT_CHUNK)
                if out:
                    yield out
                pending = decoder.unconsumed_tail
                if decoder.eof:
                    return
                if not pending and len(out) < _OUT_CHUNK:
                    break
    except zlib.error:
        return


_NOT_HEX: Final = bytes(c for c in range(256) if chr(c) not in "0123456789abcdefABCDEF")
_ASCII85: Final = bytes(range(33, 118))
# The first bytes of a zlib header (its first byte is 0x08, 0x18, ... 0x78) in hexadecimal and in
# ASCII85, whitespace (allowed before both) and "<" (ASCII85's "<~").
_MAY_OPEN_SNIFFED: Final = frozenset(
    b"01234567<"
    + _WS
    + bytes({33 + ((cmf << 24) | low) // 85**4 for cmf in range(0x08, 0x80, 0x10) for low in (0, 0xFFFFFF)})
)


def _unhex(pieces: Iterator[bytes], layer: Layer) -> Iterator[bytes]:
    """ASCIIHexDecode: hexadecimal digits up to ``>``, anything else between them skipped."""
    odd = b""
    for piece in pieces:
        end = piece.find(b">")
        digits = odd + (piece if end < 0 else piece[:end]).translate(None, _NOT_HEX)
        odd = digits[len(digits) // 2 * 2 :]
        if digits:
            yield binascii.unhexlify(digits[: len(digits) - len(odd)])
        if end >= 0:
            break
    if odd:
        yield binascii.unhexlify(odd + b"0")


_A85_GROUPS: Final = re.compile(rb"(?:z|[!-u]{5})*+")


def _un85(pieces: Iterator[bytes], layer: Layer) -> Iterator[bytes]:
    """ASCII85Decode: groups of five characters (``z`` for four zero bytes) up to ``~``."""
    pending = b""
    for index, given in enumerate(pieces):
        piece = given.lstrip(_WS).removeprefix(b"<~") if index == 0 else given
        end = piece.find(b"~")
        pending += (piece if end < 0 else piece[:end]).translate(None, _WS)
        whole = _A85_GROUPS.match(pending)
        cut = whole.end() if whole is not None else 0
        if cut:
            yield base64.a85decode(pending[:cut])
        pending = pending[cut:]
        if end >= 0 or len(pending) >= 5:  # the end, or a character that is no ASCII85
            break
    if 1 < len(pending) < 5 and not pending.translate(None, _ASCII85):
        yield base64.a85decode(pending)


def _unrun(pieces: Iterator[bytes], layer: Layer) -> Iterator[bytes]:
    """RunLengthDecode: a length byte, then that many + 1 literal bytes (under 128), or one byte to
    repeat 257 - length times (over 128); 128 ends it."""
    pending = b""
    out: list[bytes] = []
    size = 0
    for piece in pieces:
        pending += piece
        position = 0
        while position < len(pending):
            length = pending[position]
            if length == 128:
                yield b"".join(out)
                return
            if length < 128:
                if position + length + 2 > len(pending):
                    break
                chunk = pending[position + 1 : position + length + 2]
                position += length + 2
            else:
                if position + 2 > len(pending):
                    break
                chunk = pending[position + 1 : position + 2] * (257 - length)
                position += 2
            out.append(chunk)
            size += len(chunk)
            if size >= _OUT_CHUNK:
                yield b"".join(out)
                out, size = [], 0
        pending = pending[position:]
    if out:
        yield b"".join(out)


def _unlzw(pieces: Iterator[bytes], layer: Layer) -> Iterator[bytes]:
    """LZWDecode (9- to 12-bit codes, a clear code 256, the end 257, ``EarlyChange``)."""
    table: list[bytes] = [bytes((i,)) for i in range(256)] + [b"", b""]
    width = 9
    previous: bytes | None = None
    bits = 0
    count = 0
    out: list[bytes] = []
    size = 0
    for piece in pieces:
        for byte in piece:
            bits = bits << 8 | byte
            count += 8
            while count >= width:
                count -= width
                code = bits >> count
                bits &= (1 << count) - 1
                if code == 256:
                    del table[258:]
                    width, previous = 9, None
                    continue
                if code == 257:
                    if out:
                        yield b"".join(out)
                    return
                if code < len(table):
                    entry = table[code]
                elif code == len(table) and previous is not None:
                    entry = previous + previous[:1]
                else:
                    if out:
                        yield b"".join(out)
                    return  # a code that cannot be: the reader stops here too
                if previous is not None and len(table) < 4096:
                    table.append(previous + entry[:1])
                previous = entry
                out.append(entry)
                size += len(entry)
                if size >= _OUT_CHUNK:
                    yield b"".join(out)
                    out, size = [], 0
                if len(table) + layer.early_change >= 1 << width and width < 12:
                    width += 1
    if out:
        yield b"".join(out)


def _passed(pieces: Iterator[bytes], layer: Layer) -> Iterator[bytes]:
    """Crypt: the identity (a document's own encryption is not undone here)."""
    return pieces


_DECODE: Final = {
    b"FlateDecode": _inflate,
    b"LZWDecode": _unlzw,
    b"ASCIIHexDecode": _unhex,
    b"ASCII85Decode": _un85,
    b"RunLengthDecode": _unrun,
    b"Crypt": _passed,
}


def _unpredicted(pieces: Iterable[bytes], layer: Layer) -> Iterator[bytes]:
    """The data before a PNG (10-15) or TIFF (2) predictor: needed only where another filter
    follows the predicted one (no real file does that; slow, but linear)."""
    pixel = max(1, layer.colors * layer.bits // 8)
    row_bytes = (layer.colors * layer.bits * layer.columns + 7) // 8
    png = layer.predictor >= 10
    stride = row_bytes + png
    previous = bytearray(row_bytes)
    pending = b""
    for piece in pieces:
        pending += piece
        rows: list[bytes] = []
        position = 0
        while position + stride <= len(pending):
            kind = pending[position] if png else 1
            row = bytearray(pending[position + png : position + stride])
            _unpredict_row(row, previous, kind, pixel)
            rows.append(bytes(row))
            previous = row
            position += stride
        pending = pending[position:]
        if rows:
            yield b"".join(rows)


def _unpredict_row(row: bytearray, previous: bytearray, kind: int, pixel: int) -> None:
    for index in range(len(row)):
        left = row[index - pixel] if index >= pixel else 0
        up = previous[index]
        if kind == 1:
            row[index] = (row[index] + left) & 0xFF
        elif kind == 2:
            row[index] = (row[index] + up) & 0xFF
        elif kind == 3:
            row[index] = (row[index] + (left + up) // 2) & 0xFF
        elif kind == 4:
            corner = previous[index - pixel] if index >= pixel else 0
            guess = left + up - corner
            near = min(
                (abs(guess - left), 0, left), (abs(guess - up), 1, up), (abs(guess - corner), 2, corner)
            )
            row[index] = (row[index] + near[2]) & 0xFF
