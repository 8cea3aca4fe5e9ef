"""Container formats read in the daemon process, without extracting anything: the ZIP structure
(central directory, local headers, a stored entry's first bytes) and OLE2 compound files' entry
names. Format detection (:mod:`daemon.document.formats`) uses them in-process to tell DOCX, ODT and
encrypted OOXML apart; the DOCX and ODT extractors (:mod:`daemon.document.extract.office`, in the
sandboxed worker) read their archives through them. No XML parser is imported here.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from typing import Final

# -- ZIP structure ---------------------------------------------------------------------------------

_EOCD: Final = b"PK\x05\x06"
_EOCD64_LOCATOR: Final = b"PK\x06\x07"
_EOCD64: Final = b"PK\x06\x06"
_CENTRAL: Final = b"PK\x01\x02"
_LOCAL: Final = b"PK\x03\x04"
_EOCD_MAX_COMMENT: Final = 0xFFFF
FLAG_ENCRYPTED: Final = 0x1
_FLAG_DESCRIPTOR: Final = 0x8
_FLAG_UTF8: Final = 0x800
STORED: Final = 0
DEFLATED: Final = 8
_ZIP64_EXTRA: Final = 0x0001
"""An entry may always unpack to this many bytes, whatever its ratio: a small, very regular XML part
(a styles table) can compress 300:1 and is no bomb."""


@dataclass(frozen=True, slots=True)
class ZipEntry:
    """One entry of a ZIP central directory, as the directory states it (claims, not facts), with
    ``header_offset`` already moved by any bytes prepended to the archive."""

    name: str
    flags: int
    method: int
    crc: int
    compressed_size: int
    size: int
    header_offset: int


def zip_entries(data: bytes, max_entries: int) -> list[ZipEntry] | None:
    """The central directory's entries, at most ``max_entries + 1`` of them (more than
    ``max_entries``: the archive has too many); None when there is no readable central directory
    (not a ZIP, or a truncated one). Reads nothing but the directory."""
    located = _central_directory(data)
    if located is None:
        return None
    position, end, shift = located
    entries: list[ZipEntry] = []
    while position + 46 <= end and data[position : position + 4] == _CENTRAL and len(entries) <= max_entries:
        flags, method = struct.unpack_from("<HH", data, position + 8)
        crc, compressed, size, name_length, extra_length, comment_length = struct.unpack_from(
            "<IIIHHH", data, position + 16
        )
        (offset,) = struct.unpack_from("<I", data, position + 42)
        name_end = position + 46 + name_length
        name = data[position + 46 : name_end].decode("utf-8" if flags & _FLAG_UTF8 else "cp437", "replace")
        size, compressed, offset = _zip64_sizes(
            data[name_end : name_end + extra_length], size, compressed, offset
        )
        entries.append(ZipEntry(name, flags, method, crc, compressed, size, offset + shift))
        position = name_end + extra_length + comment_length
    return entries


def _zip64_sizes(extra: bytes, size: int, compressed: int, offset: int) -> tuple[int, int, int]:
    """The sizes and offset from a ZIP64 extra field, for those the directory marks 0xFFFFFFFF."""
    position = 0
    while position + 4 <= len(extra):
        kind, length = struct.unpack_from("<HH", extra, position)
        field_data = extra[position + 4 : position + 4 + length]
        if kind == _ZIP64_EXTRA:
            values = list(struct.unpack_from(f"<{len(field_data) // 8}Q", field_data))
            if size == 0xFFFFFFFF and values:
                size = values.pop(0)
            if compressed == 0xFFFFFFFF and values:
                compressed = values.pop(0)
            if offset == 0xFFFFFFFF and values:
                offset = values.pop(0)
        position += 4 + length
    return size, compressed, offset


def _central_directory(data: bytes) -> tuple[int, int, int] | None:
    """Where the central directory starts and ends, and by how much the archive is shifted (bytes
    prepended, as in a self-extractor), or None. Like :mod:`zipfile`, it trusts the end record's
    size of the directory over its stated offset."""
    eocd = data.rfind(_EOCD, max(0, len(data) - 22 - _EOCD_MAX_COMMENT))
    if eocd < 0 or eocd + 22 > len(data):
        return None
    size, offset = struct.unpack_from("<II", data, eocd + 12)
    end = eocd
    locator = eocd - 20
    zip64 = size == 0xFFFFFFFF or offset == 0xFFFFFFFF
    if zip64 and data[max(locator, 0) : locator + 4] == _EOCD64_LOCATOR:
        end = locator - 56
        if end < 0 or data[end : end + 4] != _EOCD64:
            return None
        size, offset = struct.unpack_from("<QQ", data, end + 40)
    start = end - size
    if start < 0 or start > end:
        return None
    return start, end, start - offset


def local_entries(data: bytes, max_entries: int) -> list[ZipEntry]:
    """The entries at the start of a ZIP, read from their local headers one after the other, for
    an archive without a readable central directory (truncated): enough to tell what it was. Stops
    at the first entry whose size is not in its header (a data descriptor), or at ``max_entries``."""
    entries: list[ZipEntry] = []
    position = 0
    while (
        len(entries) < max_entries and position + 30 <= len(data) and data[position : position + 4] == _LOCAL
    ):
        flags, method = struct.unpack_from("<HH", data, position + 6)
        crc, compressed, size, name_length, extra_length = struct.unpack_from("<IIIHH", data, position + 14)
        raw_name = data[position + 30 : position + 30 + name_length]
        name = raw_name.decode("utf-8" if flags & _FLAG_UTF8 else "cp437", "replace")
        entries.append(ZipEntry(name, flags, method, crc, compressed, size, position))
        if flags & _FLAG_DESCRIPTOR:  # sizes follow the data: the next header cannot be found
            break
        position += 30 + name_length + extra_length + compressed
    return entries


def data_span(data: bytes, entry: ZipEntry) -> tuple[int, int] | None:
    """Where an entry's compressed bytes are (after its local header), or None if they are not all
    in ``data``."""
    position = entry.header_offset
    if position < 0 or position + 30 > len(data) or data[position : position + 4] != _LOCAL:
        return None
    name_length, extra_length = struct.unpack_from("<HH", data, position + 26)
    start = position + 30 + name_length + extra_length
    end = start + entry.compressed_size
    return (start, end) if end <= len(data) else None


def stored_prefix(data: bytes, entry: ZipEntry, limit: int) -> bytes | None:
    """The first ``limit`` bytes of an entry (stored or deflated), or None when they cannot be read.
    For detection (an ODT's ``mimetype``): unchecked, and never more than ``limit`` bytes."""
    span = data_span(data, entry)
    if span is None:
        return None
    raw = data[span[0] : min(span[1], span[0] + limit * 4 + 64)]
    if entry.method == STORED:
        return raw[:limit]
    if entry.method == DEFLATED:
        try:
            return zlib.decompressobj(-15).decompress(raw, limit)
        except zlib.error:
            return None
    return None


# -- OLE2 (compound files): encrypted OOXML ----------------------------------------------------

OLE2_MAGIC: Final = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_OLE2_END_OF_CHAIN: Final = 0xFFFFFFFE
_OLE2_MAX_DIRECTORY_SECTORS: Final = 4096


def ole2_entry_names(data: bytes) -> frozenset[str]:
    """The names of the storages and streams in an OLE2 compound file's directory (empty when it is
    not one, or its directory cannot be read). Follows the file's sector chains with bounds and loop
    checks of its own, reading nothing but the header, the FAT sectors needed and the directory."""
    if len(data) < 512 or not data.startswith(OLE2_MAGIC):
        return frozenset()
    (sector_shift,) = struct.unpack_from("<H", data, 30)
    if sector_shift not in (9, 12):
        return frozenset()
    sector_size = 1 << sector_shift
    (first_directory,) = struct.unpack_from("<I", data, 48)
    fat = _ole2_fat(data, sector_size)
    names: set[str] = set()
    sector, seen = first_directory, set[int]()
    while sector < len(fat) and sector not in seen and len(seen) < _OLE2_MAX_DIRECTORY_SECTORS:
        seen.add(sector)
        base = (sector + 1) * sector_size
        for entry in range(base, min(base + sector_size, len(data) - 127), 128):
            (name_length,) = struct.unpack_from("<H", data, entry + 64)
            kind = data[entry + 66]
            if kind in (1, 2, 5) and 2 <= name_length <= 64:
                names.add(data[entry : entry + name_length - 2].decode("utf-16-le", "replace"))
        sector = fat[sector]
    return frozenset(names)


def _ole2_fat(data: bytes, sector_size: int) -> list[int]:
    """The file allocation table: the next sector of each sector (missing sectors: end of chain)."""
    per_sector = sector_size // 4
    fat_sectors = [s for s in struct.unpack_from("<109I", data, 76) if s < _OLE2_END_OF_CHAIN]
    (difat, difat_count) = struct.unpack_from("<II", data, 68)
    seen: set[int] = set()
    while difat < _OLE2_END_OF_CHAIN and difat not in seen and len(seen) < difat_count:
        seen.add(difat)
        base = (difat + 1) * sector_size
        if base + sector_size > len(data):
            break
        listed = struct.unpack_from(f"<{per_sector}I", data, base)
        fat_sectors.extend(s for s in listed[:-1] if s < _OLE2_END_OF_CHAIN)
        difat = listed[-1]
    fat: list[int] = []
    for sector in fat_sectors[: len(data) // sector_size + 1]:
        base = (sector + 1) * sector_size
        if base + sector_size > len(data):
            break
        fat.extend(struct.unpack_from(f"<{per_sector}I", data, base))
    return fat


def is_encrypted_ooxml(data: bytes) -> bool:
    """Whether ``data`` is a password-protected Office Open XML file (DOCX, XLSX, PPTX): an OLE2
    compound file with an ``EncryptedPackage`` stream (MS-OFFCRYPTO), not a ZIP at all."""
    return "EncryptedPackage" in ole2_entry_names(data)


_ODF_MIMETYPES: Final = frozenset(
    {"application/vnd.oasis.opendocument.text", "application/vnd.oasis.opendocument.text-template"}
)


def is_odt_mimetype(content: bytes | None) -> bool:
    """Whether the content of an ODF ``mimetype`` entry names a text document (ODT or OTT)."""
    return content is not None and content.strip().decode("ascii", "replace") in _ODF_MIMETYPES
