"""Documents: raw bytes in, checked text out.

:func:`decode_document` turns the bytes a source read into text, or refuses them with a
:class:`DocumentError` that carries a stable ``reason`` code (for dead-letter records, metrics and
alerting) and a message for people. The reason codes are part of docsumd's interface; every one,
with what it means and what to do about it, is in :data:`daemon.errors.REASONS`.
"""

from __future__ import annotations

import codecs
import hashlib
from typing import Any, Final

from daemon.document.types import Document
from daemon.errors import DocumentError
from daemon.fs.safe_read import check_size

# Byte-order marks, longest first (the UTF-32 LE BOM starts with the UTF-16 LE one).
_BOMS: Final = (
    (codecs.BOM_UTF32_LE, "utf-32-le", "UTF-32 LE"),
    (codecs.BOM_UTF32_BE, "utf-32-be", "UTF-32 BE"),
    (codecs.BOM_UTF8, "utf-8", "UTF-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le", "UTF-16 LE"),
    (codecs.BOM_UTF16_BE, "utf-16-be", "UTF-16 BE"),
)

# Signatures of common binary formats that are often misnamed as .txt.
_MAGIC: Final = (
    (b"\x1f\x8b", "gzip-compressed data"),
    (b"PK\x03\x04", "a ZIP archive (or a .docx/.xlsx/.odt file)"),
    (b"%PDF-", "a PDF file (extract its text first)"),
    (b"\xfd7zXZ\x00", "xz-compressed data"),
    (b"(\xb5/\xfd", "zstd-compressed data"),
    (b"\x89PNG\r\n\x1a\n", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"\x7fELF", "an ELF executable"),
    (b"\xd0\xcf\x11\xe0", "an OLE2 file (e.g. a legacy .doc)"),
)

# Control bytes that never appear in text (everything below 0x20 except tab, LF, VT, FF, CR, ESC; DEL).
# NUL is left out: valid UTF-8 with a few NULs gets its own reason (nul_bytes) after decoding. As
# bytes, so that bytes.translate counts them at C speed.
_NON_TEXT_BYTES: Final = bytes(sorted(set(range(1, 0x20)) - {0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x1B} | {0x7F}))
_SNIFF_BYTES: Final = 64 * 1024
# Random bytes have about 11% such bytes; real text none. 2% leaves room for odd but real text.
_BINARY_CONTROL_RATIO: Final = 0.02


def too_many_control_bytes(head: bytes) -> int | None:
    """How many of ``head``'s bytes are control bytes that text does not have, when that is too many
    for text; None when it is few enough (the rule decoding and format sniffing share)."""
    control = len(head) - len(head.translate(None, _NON_TEXT_BYTES))
    return control if control > _BINARY_CONTROL_RATIO * len(head) else None


def sha256_hex(data: bytes) -> str:
    """The SHA-256 of ``data`` as lowercase hex (results and failure records carry it)."""
    return hashlib.sha256(data).hexdigest()


def max_text_bytes(data: bytes) -> int:
    """The most bytes the text decoded from ``data`` can take as UTF-8: as many as ``data`` has,
    but for UTF-16, whose two-byte characters can take three (UTF-32's four take at most four)."""
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)) and not data.startswith(
        codecs.BOM_UTF32_LE
    ):
        return len(data) * 3 // 2
    return len(data)


def decode_text(data: bytes, max_input_bytes: int) -> tuple[str, str]:
    """Decode and check raw input; return ``(text, encoding)`` or raise :class:`DocumentError`."""
    check_size(len(data), max_input_bytes)
    for bom, codec, label in _BOMS:
        if data.startswith(bom):
            text = _decode_strict(data[len(bom) :], codec, label)
            break
    else:
        _refuse_binary(data)
        text = _decode_strict(data, "utf-8", "UTF-8")
        codec = "utf-8"
    check_text(text)
    return text, codec


def check_text(text: str) -> None:
    """The checks of decoded text: no NUL characters, not whitespace only. Raises DocumentError."""
    if "\x00" in text:
        position = text.index("\x00")
        raise DocumentError(
            "nul_bytes",
            f"input contains {text.count(chr(0))} NUL character(s), the first at character {position}; "
            "it is probably corrupted or not a text file",
        )
    if not text.strip():
        raise DocumentError("whitespace_only", "input contains only whitespace")


def decode_document(
    data: bytes,
    *,
    doc_id: str,
    source: str,
    max_input_bytes: int,
    metadata: dict[str, Any] | None = None,
) -> Document:
    """Build a :class:`Document` from raw bytes, or raise :class:`DocumentError`."""
    text, encoding = decode_text(data, max_input_bytes)
    return Document(
        id=doc_id,
        text=text,
        source=source,
        sha256=sha256_hex(data),
        size_bytes=len(data),
        encoding=encoding,
        metadata=dict(metadata or {}),
    )


def _refuse_binary(data: bytes) -> None:
    for magic, what in _MAGIC:
        if data.startswith(magic):
            raise DocumentError("binary", f"input is {what}, not text")
    if _is_bzip2(data):
        raise DocumentError("binary", "input is bzip2-compressed data, not text")
    head = data[:_SNIFF_BYTES]
    control = too_many_control_bytes(head)
    if control is not None:
        raise DocumentError(
            "binary",
            f"input does not look like text: {control} of its first {len(head)} bytes are control bytes",
        )


def _is_bzip2(data: bytes) -> bool:
    # "BZh", a block-size digit 1-9, then the block magic: plain text starting "BZh" is still text.
    return len(data) >= 10 and data[:3] == b"BZh" and data[3:4] in b"123456789" and data[4:10] == b"1AY&SY"


def _decode_strict(data: bytes, codec: str, label: str) -> str:
    try:
        return data.decode(codec)
    except UnicodeDecodeError as exc:
        if codec == "utf-8":
            hint = (
                "re-encode it as UTF-8 (it may be Latin-1 or Windows-1252)"
                if exc.end < len(data)
                else "the file ends in the middle of a multi-byte character (truncated?)"
            )
            raise DocumentError(
                "invalid_utf8",
                f"input is not valid UTF-8: {exc.reason} at byte {exc.start}; {hint}",
            ) from None
        raise DocumentError(
            "invalid_encoding",
            f"input starts with a {label} byte-order mark but does not decode as {label}: "
            f"{exc.reason} at byte {exc.start} after the mark",
        ) from None
