"""File names: what the file system allows, and the names docsumd gives what it writes.

A file name on Linux is any bytes except NUL and ``/``, up to 255 bytes (``NAME_MAX``). Python hands
names over as ``str``, bytes that are not UTF-8 as lone surrogates (``surrogateescape``, PEP 383), and
:func:`os.fsencode` gives the exact bytes back. Everything here takes and returns such ``str`` names
and measures them in bytes, never in characters.

* :func:`record_stem`: the stem of an input's record files (``STEM.summary.json``, ``STEM.error.json``):
  the name itself when it is UTF-8 and short enough for the longest record suffix, else a readable
  prefix and a hash of the whole name (:func:`shortened`), so distinct names get distinct stems.
* :func:`numbered`: the ``n``-th candidate for a name that is taken: ``NAME``, ``NAME~2``, ``NAME~3``...,
  shortened when the suffix would pass the limit.
* :func:`first_free`: the first free candidate number, in few checks even after thousands.
* :func:`temp_name`: the hidden temporary name of an atomic write, within the limit whatever the target.
* :func:`display_name` / :func:`name_fields`: the one place an OS file name becomes text and JSON (ids,
  logs, a record's ``metadata``): readable text, plus the exact bytes in base64 when the name is not
  UTF-8 (reversible, see docs/guides/results.md). The records themselves are :mod:`daemon.records`'.
"""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Callable
from typing import Final

MAX_NAME_BYTES: Final = 255
"""The longest file name Linux file systems take (NAME_MAX), in bytes."""
LONGEST_RECORD_SUFFIX: Final = ".summary.json"
MAX_STEM_BYTES: Final = MAX_NAME_BYTES - len(LONGEST_RECORD_SUFFIX)
"""The longest record stem: every record suffix still fits after it."""
SHORT_PREFIX_BYTES: Final = 96
"""How much of a long or undecodable name a shortened name keeps, for people to recognise it."""
HASH_CHARS: Final = 16
"""Hex digits of SHA-256 in a shortened name: 64 bits, so two names sharing a prefix do not meet."""
_TEMP_PREFIX_BYTES: Final = 200
"""How much of the target's name a temporary name keeps (the rest: a dot, 12 hex digits, ``.tmp``)."""


def name_bytes(name: str) -> bytes:
    """The exact bytes of an OS name as Python gives it (undecodable bytes come back as they were)."""
    return os.fsencode(name)


def byte_length(name: str) -> int:
    """The length of ``name`` on disk, in bytes."""
    return len(name_bytes(name))


def is_utf8(name: str) -> bool:
    """Whether the name's bytes are valid UTF-8 (a name holding undecodable bytes is not)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def display_name(name: str) -> str:
    """An OS file name as readable text for ids, logs and records: the name itself when its bytes are
    UTF-8, else with each undecodable byte written as ``\\xNN`` (not reversible on its own: see
    :func:`name_fields`)."""
    return name_bytes(name).decode("utf-8", "backslashreplace")


def name_fields(name: str, field: str = "file_name") -> dict[str, str]:
    """An OS file name as JSON fields: ``{field: name}`` when its bytes are UTF-8, else
    ``{field: display_name(name), field_b64: base64 of the exact bytes}``. Reversible: the bytes are
    ``field_b64`` decoded when present, else ``field`` encoded as UTF-8."""
    raw = name_bytes(name)
    try:
        return {field: raw.decode("utf-8")}
    except UnicodeDecodeError:
        return {field: display_name(name), f"{field}_b64": base64.b64encode(raw).decode("ascii")}


def readable_prefix(name: str, limit: int = SHORT_PREFIX_BYTES) -> str:
    """At most ``limit`` bytes of the start of ``name``, as valid UTF-8: undecodable bytes become ``_``,
    and a character is never cut in half."""
    text = name_bytes(name).decode("utf-8", "replace").replace("\ufffd", "_")
    return _cut_utf8(text, limit)


def shortened(name: str) -> str:
    """A short, valid UTF-8 stand-in for ``name``: a readable prefix, ``~`` and 16 hex digits of the
    SHA-256 of its bytes. Deterministic; distinct names give distinct results (to 64 bits)."""
    digest = hashlib.sha256(name_bytes(name)).hexdigest()[:HASH_CHARS]
    return f"{readable_prefix(name)}~{digest}"


def record_stem(name: str) -> str:
    """The stem of the record files of an input named ``name``: the name itself if it is UTF-8 and at
    most :data:`MAX_STEM_BYTES` bytes, else :func:`shortened` (the full name is inside the record)."""
    if is_utf8(name) and byte_length(name) <= MAX_STEM_BYTES:
        return name
    return shortened(name)


def numbered(name: str, number: int, *, limit: int = MAX_NAME_BYTES) -> str:
    """The ``number``-th candidate name for ``name`` (from 1): ``name`` itself, then ``name~2``,
    ``name~3``, ...; when that would pass ``limit`` bytes, :func:`shortened` of ``name`` with the suffix."""
    if number < 1:
        raise ValueError(f"candidate numbers start at 1, got {number}")
    suffix = "" if number == 1 else f"~{number}"
    candidate = name + suffix
    if byte_length(candidate) <= limit:
        return candidate
    return shortened(name) + suffix


def temp_name(target: str, token: str) -> str:
    """The hidden temporary name of an atomic write of ``target``: ``.TARGET.TOKEN.tmp``, with
    ``TARGET`` cut so the whole stays within :data:`MAX_NAME_BYTES` (``token``: a dozen hex digits)."""
    kept = name_bytes(target)[:_TEMP_PREFIX_BYTES]
    return f".{os.fsdecode(kept)}.{token}.tmp"


def _cut_utf8(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` bytes of UTF-8 on a character boundary."""
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    return data[:limit].decode("utf-8", "ignore")


def first_free(taken: Callable[[int], bool]) -> int:
    """The first number from 1 for which ``taken`` is false, in a logarithmic number of calls when
    the taken numbers are 1..n (a name reused a thousand times costs about twenty checks, not a
    thousand). With gaps (files removed since) it may return a free number past a gap: any free
    number will do, and the caller's atomic create still decides."""
    if not taken(1):
        return 1
    low, high = 1, 2
    while taken(high):
        low, high = high, high * 2
    while high - low > 1:  # taken(low), not taken(high)
        middle = (low + high) // 2
        if taken(middle):
            low = middle
        else:
            high = middle
    return high
