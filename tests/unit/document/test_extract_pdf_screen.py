"""Screening a PDF's raw bytes (:mod:`daemon.document.extract.pdf_screen`): decompression bombs are
refused however their streams are written (each way checked to be one PDFium reads), real files
pass, and the decoders give what pypdf's give, fed in pieces of any size.

The hidden bombs are made by tests/fixtures/documents/pdf/make_hostile.py (``HIDDEN_BOMBS``); the
files it wrote are in generated/ and listed in the manifest, which test_extract_pdf.py also reads
end to end."""

from __future__ import annotations

import base64
import importlib.util
import random
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from pypdf.filters import LZWDecode

from daemon.document.extract import pdf_screen
from daemon.document.extract.pdf import _pdfium
from daemon.document.extract.pdf_screen import (
    Layer,
    Name,
    Ref,
    decoded_text_bytes,
    screen,
    streams,
)
from daemon.document.types import ExtractLimits
from daemon.errors import DocumentError

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "documents" / "pdf"
LIMITS = ExtractLimits()


def _make_hostile() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_hostile", FIXTURES / "make_hostile.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


MAKE = _make_hostile()
HIDDEN: dict[str, tuple[Callable[..., bytes], str]] = MAKE.HIDDEN_BOMBS


def stream_object(data: bytes, filters: str) -> bytes:
    return (
        b"1 0 obj\n<< /Filter "
        + filters.encode()
        + b" /Length %d >>\nstream\n" % len(data)
        + data
        + b"\nendstream\nendobj\n"
    )


def pdf(*objects: bytes) -> bytes:
    return b"%PDF-1.4\n" + b"".join(objects) + b"%%EOF\n"


# -- the screen ------------------------------------------------------------------------------------


def test_screening_refuses_a_file_without_a_header_or_an_end() -> None:
    with pytest.raises(DocumentError, match="no %PDF- header"):
        screen(b"hello" * 300 + b"%PDF-1.4" + b" " * 2000 + b"%%EOF", LIMITS)
    with pytest.raises(DocumentError, match="truncated"):
        screen(b"%PDF-1.4\n1 0 obj << >> endobj\n" + b"x" * 5000, LIMITS)
    screen(b"junk before the header %PDF-1.4\n%%EOF\n", LIMITS)


@pytest.mark.parametrize("name", sorted(HIDDEN))
def test_a_bomb_is_screened_however_its_stream_is_written(name: str) -> None:
    # The same construction with a small payload is one PDFium reads: it is a way to hide a bomb,
    # not a file no reader would decode.
    make = HIDDEN[name][0]
    small = _pdfium().PdfDocument(make(70_000))
    try:
        assert small[0].get_textpage().get_text_range().count("a") == 10_000
    finally:
        small.close()

    started = time.process_time()
    with pytest.raises(DocumentError) as refused:
        screen((FIXTURES / "generated" / name).read_bytes(), LIMITS)

    assert refused.value.reason == "too_large"
    assert "decompression bomb" in refused.value.message
    assert time.process_time() - started < 2


def test_streams_are_found_with_their_filters_and_images_are_left_alone() -> None:
    twice = zlib.compress(zlib.compress(b"BT (a) Tj ET"))
    data = pdf(
        stream_object(twice, "[/FlateDecode /FlateDecode]"),
        stream_object(b"xyz", "/DCTDecode"),
        stream_object(zlib.compress(b"q Q"), "[/Fl /DCT]"),
        stream_object(zlib.compress(b"q Q"), "/Fl"),
        stream_object(b"q Q", "/NoSuchFilter"),
        b"1 0 obj << /Length 3 >>\nstream\nq Q\nendstream\nendobj\n",
    )

    found = list(streams(data))

    assert [[layer.name for layer in stream.layers or ()] for stream in found] == [
        [b"FlateDecode", b"FlateDecode"],
        [b"FlateDecode"],
    ]
    assert decoded_text_bytes(data, found[0], 1 << 20, 200.0)[0] == len(b"BT (a) Tj ET")


def test_a_stream_ends_where_its_length_says_only_if_endstream_follows() -> None:
    payload = zlib.compress(b"BT (abc) Tj ET")
    right = b"1 0 obj << /Filter /FlateDecode /Length %d >>\nstream\n" % len(payload) + payload
    wrong = b"1 0 obj << /Filter /FlateDecode /Length 3 >>\nstream\n" + payload
    for written in (right, wrong):
        data = pdf(written + b"\nendstream\nendobj\n")
        (found,) = streams(data)
        assert data[found.start : found.end].rstrip() == payload


def test_binary_streams_such_as_images_do_not_count_against_the_limits() -> None:
    pixels = bytes(range(128, 256)) * 100_000  # 12.8 MB that compress to almost nothing
    data = pdf(stream_object(zlib.compress(pixels), "/FlateDecode"))
    (found,) = streams(data)

    assert decoded_text_bytes(data, found, 1 << 30, 200.0)[0] == 0
    screen(data, LIMITS)


def test_a_predicted_stream_counts_whole_unless_it_is_an_image() -> None:
    # PNG predictors turn text into differences, which are never text-like.
    rows = MAKE.png_up(b"BT (a) Tj ET " * 1000, 13)
    params = "/DecodeParms << /Predictor 12 /Columns 13 >>"
    content = pdf(stream_object(zlib.compress(rows), f"/FlateDecode {params}"))
    image = pdf(stream_object(zlib.compress(rows), f"/FlateDecode {params} /Subtype /Image"))

    assert decoded_text_bytes(content, next(streams(content)), 1 << 30, 200.0)[0] == len(rows)
    assert next(streams(image)).count_all is False


def test_text_streams_over_the_total_limit_are_too_large() -> None:
    operators = b"(some text) Tj 1 0 0 1 72 700 Tm " * 40_000  # 1.3 MB, compresses about 200 times
    data = pdf(stream_object(zlib.compress(operators), "/FlateDecode"))

    with pytest.raises(DocumentError, match="max_unpacked_bytes"):
        screen(data, ExtractLimits(max_unpacked_bytes=1_000_000))
    screen(data, ExtractLimits(max_unpacked_bytes=2_000_000))


def test_streams_that_overlap_over_and_over_are_malformed() -> None:
    # Each stream's /Length runs to the one endstream at the end: reading each would read the file
    # once per stream.
    payload = b"\x00" * 20_000
    nested = [b"%d 0 obj << /Filter /RL /Length %d >>\nstream\n" % (n, 999) for n in range(1, 400)]
    data = pdf(b"".join(nested) + b"\x7f" + payload + b"\nendstream\nendobj\n")

    started = time.process_time()
    with pytest.raises(DocumentError) as refused:
        screen(data, LIMITS)
    assert refused.value.reason == "malformed"
    assert time.process_time() - started < 2


def test_a_filter_that_cannot_be_resolved_is_found_from_the_data() -> None:
    # Object 9 is nowhere (or defined twice): which filters PDFium applies cannot be told, so the
    # zlib header at the start of the data says.
    twice = zlib.compress(zlib.compress(b"BT (a) Tj ET"))
    missing = pdf(stream_object(twice, "9 0 R"))
    twice_defined = pdf(
        b"9 0 obj /DCTDecode endobj\n9 0 obj /FlateDecode endobj\n", stream_object(twice, "[9 0 R /Fl]")
    )
    for data in (missing, twice_defined):
        (found,) = streams(data)
        assert found.layers is None
        assert decoded_text_bytes(data, found, 1 << 20, 200.0)[0] == len(b"BT (a) Tj ET")


def test_real_pdfs_pass_the_screen() -> None:
    for path in sorted(FIXTURES.glob("*.pdf")):
        screen(path.read_bytes(), LIMITS)


# -- the lexer -------------------------------------------------------------------------------------


def test_the_lexer_reads_pdf_syntax() -> None:
    text = (
        b"<< /A#20B (a (nested) string \\) with obj) /C [1 0 R 2 -3.5 /D <4142> true] % comment >>\n"
        b"/E << /F null >> >>"
    )
    lexer = pdf_screen._Lexer(text, 0, len(text))

    assert lexer.value() == {
        b"A B": b"(a (nested) string \\) with obj)",
        b"C": [Ref(1, 0), 2, b"-3.5", Name(b"D"), b"<4142>", b"true"],
        b"E": {b"F": b"null"},
    }


def test_a_key_said_twice_is_not_trusted() -> None:
    text = b"<< /Filter /DCTDecode /Filter /FlateDecode >>"
    assert pdf_screen._Lexer(text, 0, len(text)).value() == {b"Filter": None}


# -- the decoders ----------------------------------------------------------------------------------


def pieces_of(data: bytes, size: int) -> Iterator[bytes]:
    return iter([data[i : i + size] for i in range(0, len(data), size)])


def decode(name: bytes, data: bytes, size: int, **parameters: Any) -> bytes:
    return b"".join(pdf_screen._DECODE[name](pieces_of(data, size), Layer(name, **parameters)))


SAMPLES = [
    b"",
    b"hello hello hello",
    b"BT (a) Tj ET " * 5000,
    random.Random(7).randbytes(50_000),
    b"\x00" * 300_000,
]


@pytest.mark.parametrize("size", [1, 7, 16 * 1024])
@pytest.mark.parametrize("sample", range(len(SAMPLES)))
def test_decoders_undo_their_encoders_in_pieces_of_any_size(sample: int, size: int) -> None:
    data = SAMPLES[sample]
    encoded = MAKE.lzw(data)
    assert LZWDecode.decode(encoded) == data  # the encoder is PDF's LZW
    assert decode(b"LZWDecode", encoded, size) == data
    assert decode(b"ASCIIHexDecode", data.hex().encode() + b">", size) == data
    assert decode(b"ASCIIHexDecode", b" ".join(bytes((c,)) for c in data.hex().encode()) + b">", size) == data
    assert decode(b"ASCII85Decode", base64.a85encode(data, wrapcol=70) + b"~>", size) == data
    assert decode(b"RunLengthDecode", MAKE.run_length(data), size) == data
    assert decode(b"RunLengthDecode", b"\xfd\x41\x02xyz\x80tail", size) == b"AAAAxyz"
    assert decode(b"FlateDecode", zlib.compress(data), size) == data


def test_the_png_predictor_is_undone_between_two_layers() -> None:
    data = random.Random(3).randbytes(10_000)
    rows = MAKE.png_up(data, 32)
    layer = Layer(b"FlateDecode", predictor=12, columns=32)
    assert b"".join(pdf_screen._unpredicted(pieces_of(rows, 100), layer))[: len(data)] == data


def test_decoding_stops_at_the_budget() -> None:
    data = pdf(stream_object(zlib.compress(b"(a) Tj " * 1_000_000), "/FlateDecode"))
    (found,) = streams(data)
    counted, _ = decoded_text_bytes(data, found, 100_000, 1e9)
    assert 100_000 < counted <= 100_000 + 1024 * 1024
