"""Unit tests for daemon.document.decode: decoding, refusal reasons and size limits.

The bad-input corpus lives in ``shared/corpus/bad`` beside the repository checkout; each of its files
must get the documented reason code (or decode, for the valid ones).
"""

from __future__ import annotations

import codecs
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from daemon.document.decode import decode_document, decode_text
from daemon.document.types import Document
from daemon.errors import DocumentError
from daemon.fs.safe_read import check_size, read_input_file
from tests.corpus import BAD_CORPUS_DECODABLE, BAD_CORPUS_REASONS, CORPUS_DIR

LIMIT = 16 * 1024 * 1024


def _corpus(*parts: str) -> Path:
    path = CORPUS_DIR.joinpath(*parts)
    if not CORPUS_DIR.is_dir():
        pytest.skip(f"test corpus not found at {CORPUS_DIR} (expected shared/ beside the repository)")
    return path


def _manifest() -> list[dict[str, Any]]:
    lines = _corpus("bad", "manifest.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def _real_docs() -> list[Any]:
    if not CORPUS_DIR.is_dir():
        reason = f"test corpus not found at {CORPUS_DIR} (expected shared/ beside the repository)"
        return [pytest.param(None, marks=pytest.mark.skip(reason=reason), id="no-corpus")]
    return [pytest.param(path, id=path.name) for path in sorted((CORPUS_DIR / "docs").glob("*.txt"))]


def _refusal(data: bytes, max_input_bytes: int = LIMIT) -> DocumentError:
    with pytest.raises(DocumentError) as caught:
        decode_text(data, max_input_bytes)
    return caught.value


# -- the bad-input corpus ------------------------------------------------------------------------


def test_manifest_lists_exactly_the_files_these_tests_expect() -> None:
    listed = {entry["file"] for entry in _manifest()}
    assert listed == set(BAD_CORPUS_REASONS) | set(BAD_CORPUS_DECODABLE)


def test_manifest_sizes_match_the_files_on_disk() -> None:
    for entry in _manifest():
        assert _corpus("bad", entry["file"]).stat().st_size == entry["bytes"], entry["file"]


@pytest.mark.parametrize(("file_name", "reason"), sorted(BAD_CORPUS_REASONS.items()))
def test_bad_corpus_file_is_refused_with_its_reason(file_name: str, reason: str) -> None:
    data = _corpus("bad", file_name).read_bytes()
    assert _refusal(data).reason == reason


@pytest.mark.parametrize(("file_name", "reason"), sorted(BAD_CORPUS_REASONS.items()))
def test_bad_corpus_file_is_refused_by_decode_document(file_name: str, reason: str) -> None:
    data = _corpus("bad", file_name).read_bytes()
    with pytest.raises(DocumentError) as caught:
        decode_document(data, doc_id=file_name, source="test", max_input_bytes=LIMIT)
    assert caught.value.reason == reason


@pytest.mark.parametrize(("file_name", "reason"), sorted(BAD_CORPUS_REASONS.items()))
def test_refusal_message_is_human_readable(file_name: str, reason: str) -> None:
    error = _refusal(_corpus("bad", file_name).read_bytes())
    assert error.message.strip()
    assert error.message.isprintable()  # one line, no raw bytes or control characters
    assert "b'" not in error.message
    assert "\\x" not in error.message
    assert len(error.message) < 300
    assert str(error) == f"{reason}: {error.message}"


def test_utf16_bom_corpus_file_decodes_to_text() -> None:
    data = _corpus("bad", "utf16_bom.txt").read_bytes()
    document = decode_document(data, doc_id="u16", source="test", max_input_bytes=LIMIT)
    assert document.encoding in BAD_CORPUS_DECODABLE["utf16_bom.txt"]
    assert "\x00" not in document.text
    assert not document.text.startswith("\ufeff")
    assert len(document.text) == (len(data) - 2) // 2  # BMP text: two bytes per character after the BOM
    assert document.text.strip()


def test_one_giant_line_corpus_file_decodes_whole() -> None:
    data = _corpus("bad", "one_giant_line.txt").read_bytes()
    document = decode_document(data, doc_id="giant", source="test", max_input_bytes=LIMIT)
    assert document.encoding == "utf-8"
    assert document.text == data.decode("utf-8")
    assert document.text.rstrip("\n").count("\n") == 0
    assert document.size_bytes == len(data) > 1_000_000


def test_corpus_has_real_documents() -> None:
    assert len(sorted(_corpus("docs").glob("*.txt"))) >= 1


@pytest.mark.parametrize("path", _real_docs())
def test_real_document_decodes_as_utf8(path: Path) -> None:
    data = path.read_bytes()
    text, encoding = decode_text(data, LIMIT)
    assert encoding == "utf-8"
    assert text == data.decode("utf-8-sig")


# -- byte-order marks ------------------------------------------------------------------------------


def test_utf8_bom_is_stripped() -> None:
    text, encoding = decode_text(codecs.BOM_UTF8 + b"Hello, world.", LIMIT)
    assert (text, encoding) == ("Hello, world.", "utf-8")


@pytest.mark.parametrize(
    ("bom", "codec"),
    [
        (codecs.BOM_UTF32_LE, "utf-32-le"),
        (codecs.BOM_UTF32_BE, "utf-32-be"),
        (codecs.BOM_UTF16_LE, "utf-16-le"),
        (codecs.BOM_UTF16_BE, "utf-16-be"),
    ],
)
def test_utf16_and_utf32_boms_select_their_codec(bom: bytes, codec: str) -> None:
    original = "Ein Vertrag über 3 € — signed.\n"
    text, encoding = decode_text(bom + original.encode(codec), LIMIT)
    assert (text, encoding) == (original, codec)


def test_utf32_le_bom_is_not_mistaken_for_utf16_le() -> None:
    data = codecs.BOM_UTF32_LE + "abc".encode("utf-32-le")
    assert decode_text(data, LIMIT) == ("abc", "utf-32-le")


def test_bom_with_undecodable_body_is_invalid_encoding() -> None:
    error = _refusal(codecs.BOM_UTF16_LE + b"a\x00b")  # odd number of bytes after the mark
    assert error.reason == "invalid_encoding"
    assert "UTF-16 LE" in error.message


# -- other refusals --------------------------------------------------------------------------------


def test_too_large_is_refused_before_decoding() -> None:
    error = _refusal(b"x" * 101, max_input_bytes=100)
    assert error.reason == "too_large"
    assert "101" in error.message
    assert "100" in error.message


def test_input_exactly_at_the_limit_is_accepted() -> None:
    assert decode_text(b"x" * 100, 100) == ("x" * 100, "utf-8")


def test_check_size_reasons() -> None:
    with pytest.raises(DocumentError, match="too_large"):
        check_size(11, 10)
    with pytest.raises(DocumentError, match="empty"):
        check_size(0, 10)
    check_size(10, 10)  # at the limit: no exception


def test_no_break_spaces_count_as_whitespace() -> None:
    assert _refusal(" \u00a0\t\n\u2003 ".encode()).reason == "whitespace_only"


def test_nul_bytes_message_names_count_and_position() -> None:
    error = _refusal(b"abc\x00def\x00")
    assert error.reason == "nul_bytes"
    assert "2 NUL" in error.message
    assert "character 3" in error.message


@pytest.mark.parametrize(
    "data",
    [
        b"PK\x03\x04rest of a zip",
        b"\x89PNG\r\n\x1a\n....",
        b"\x7fELF\x02\x01\x01",
        b"\x1f\x8b\x08\x00",
        b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n",
    ],
)
def test_known_binary_signatures_are_binary(data: bytes) -> None:
    assert _refusal(data).reason == "binary"


def test_text_with_a_few_form_feeds_and_escapes_is_text() -> None:
    text = ("A page of prose.\n" * 40 + "\f") * 3 + "\x1b[1mbold\x1b[0m\n"
    assert decode_text(text.encode(), LIMIT) == (text, "utf-8")


def test_many_control_bytes_are_binary() -> None:
    assert _refusal(b"text\x01\x02\x03\x04\x05 more text").reason == "binary"


def test_truncated_multibyte_tail_message_says_truncated() -> None:
    error = _refusal("prix: 3 €".encode()[:-1])
    assert error.reason == "invalid_utf8"
    assert "truncated" in error.message


def test_plain_text_starting_with_bzh_is_text() -> None:
    text = "BZh is how the ticker appears in the 2023 annual report.\n"
    assert decode_text(text.encode(), LIMIT) == (text, "utf-8")


# -- decode_document -------------------------------------------------------------------------------


def test_decode_document_fills_every_field() -> None:
    data = "Résumé of the contract.\n".encode()
    metadata = {"path": "/in/a.txt"}
    document = decode_document(
        data, doc_id="a.txt", source="folder", max_input_bytes=LIMIT, metadata=metadata
    )
    assert document == Document(
        id="a.txt",
        text="Résumé of the contract.\n",
        source="folder",
        sha256=hashlib.sha256(data).hexdigest(),
        size_bytes=len(data),
        encoding="utf-8",
        metadata={"path": "/in/a.txt"},
    )
    metadata["path"] = "changed"
    assert document.metadata == {"path": "/in/a.txt"}  # copied, not shared


# -- property: valid text round-trips -------------------------------------------------------------

# Text a person would write: no control characters except tab/newline/CR (lots of them are refused as
# binary by design), no surrogates (not encodable). NUL is a control character, so it is excluded too.
_TEXT_CHARS = st.characters(codec="utf-8", exclude_categories=("Cc", "Cs")) | st.sampled_from("\t\n\r")


@settings(max_examples=200, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(_TEXT_CHARS, min_size=1, max_size=400))
def test_valid_utf8_text_round_trips(text: str) -> None:
    assume(text.strip())
    assume(not text.startswith("\ufeff"))  # a leading U+FEFF is a UTF-8 BOM and is stripped by design
    assume(not text.startswith("%PDF-"))  # a file signature: refused as binary on purpose
    assert decode_text(text.encode("utf-8"), LIMIT) == (text, "utf-8")


# -- read_input_file -------------------------------------------------------------------------------


async def test_read_input_file_returns_the_bytes(tmp_path: Path) -> None:
    path = tmp_path / "doc.txt"
    path.write_bytes(b"some text\n")
    assert await read_input_file(path, 100) == b"some text\n"


async def test_read_input_file_refuses_too_large_without_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "big.txt"
    path.write_bytes(b"x" * 1000)
    real_open = Path.open

    class NoRead:
        def __init__(self, stream: Any) -> None:
            self.stream = stream

        def __enter__(self) -> NoRead:
            return self

        def __exit__(self, *exc: object) -> None:
            self.stream.close()

        def fileno(self) -> int:
            return int(self.stream.fileno())

        def read(self, *args: object) -> bytes:
            raise AssertionError("a too-large input was read")

    monkeypatch.setattr(Path, "open", lambda self, *a, **k: NoRead(real_open(self, *a, **k)))
    with pytest.raises(DocumentError) as caught:
        await read_input_file(path, 999)
    assert caught.value.reason == "too_large"


async def test_read_input_file_refuses_a_huge_sparse_file_quickly(tmp_path: Path) -> None:
    path = tmp_path / "sparse.txt"
    with path.open("wb") as stream:
        stream.truncate(8 * 1024**3)  # 8 GiB of holes: reading it would take long and fill memory
    with pytest.raises(DocumentError) as caught:
        await read_input_file(path, 1024)
    assert caught.value.reason == "too_large"


async def test_read_input_file_maps_missing_file_to_unreadable(tmp_path: Path) -> None:
    with pytest.raises(DocumentError) as caught:
        await read_input_file(tmp_path / "gone.txt", 100)
    assert caught.value.reason == "unreadable"
    assert "No such file" in caught.value.message


async def test_read_input_file_refuses_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.txt"
    path.touch()
    with pytest.raises(DocumentError) as caught:
        await read_input_file(path, 100)
    assert caught.value.reason == "empty"
