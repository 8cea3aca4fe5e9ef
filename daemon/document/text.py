"""Long, untrusted text cleaned in linear time and bounded memory, a piece at a time.

Both the daemon's process (the heading scans of :mod:`daemon.document.headings`, the clean-up of
extracted text in :mod:`daemon.document.reader`) and the extractors (:mod:`daemon.document.extract`)
use it.

It uses the standard library only. ``str.split`` and ``re.sub`` make an object of every word, line or stretch
between matches; done on a whole text of millions of them, that is many times its size, so each
function here works on pieces of :data:`_PIECE` characters, or stops at a bound.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Final

from daemon.document.types import MAX_TITLE_CHARS

# C0/C1 controls (tab and line breaks included: they become spaces in a line of text), no-break and
# other odd spaces: everything that ``str.split`` might not treat as a word break, or that must not
# reach the text (a form feed is the page separator, and only PDF text has pages).
# (A regular expression, not str.translate: translate looks every character up in a dict.)
_CONTROLS: Final = re.compile("[\x00-\x1f\x7f-\x9f]+")
# What one_line breaks words at (``\s`` is what ``str.split`` splits at), and a word between them.
_BREAK: Final = re.compile("[\\s\x00-\x1f\x7f-\x9f]")
_WORD: Final = re.compile("[^\\s\x00-\x1f\x7f-\x9f]+")
_PIECE: Final = 1 << 16
"""A longer text is cleaned a piece of about this many characters at a time (:func:`one_line`,
:func:`replace_each`, :func:`line_pieces`): ``str.split`` makes an object of every word or line,
``re.sub`` of every stretch between matches (some 50 bytes each), so memory follows the piece, not
the text."""


def one_line(text: str) -> str:
    """``text`` as one line: control characters out, every run of whitespace one space, stripped."""
    if len(text) <= _PIECE:
        return " ".join(_CONTROLS.sub(" ", text).split())
    pieces: list[str] = []
    start = 0
    while start < len(text):
        # Pieces end at a break, so that no word is cut in two.
        found = _BREAK.search(text, min(start + _PIECE, len(text)))
        end = found.end() if found is not None else len(text)
        piece = " ".join(_CONTROLS.sub(" ", text[start:end]).split())
        if piece:
            pieces.append(piece)
        start = end
    return " ".join(pieces)


def replace_each(pattern: re.Pattern[str], replacement: str, text: str) -> str:
    """``pattern.sub(replacement, text)`` for a ``pattern`` that matches one character, a piece of the
    text at a time: ``re.sub`` holds an object for every stretch between two matches until it joins
    them (a text of millions of matches: many times its size)."""
    if len(text) <= _PIECE:
        return pattern.sub(replacement, text)
    step = _PIECE
    return "".join(
        [pattern.sub(replacement, text[start : start + step]) for start in range(0, len(text), step)]
    )


def line_pieces(text: str) -> Iterator[str]:
    """``text`` in pieces of about :data:`_PIECE` characters, each ending just after a line break
    (the last one at the end of the text): what is done a line at a time can be done a piece at a time, with
    the memory of a piece's lines."""
    start = 0
    while start < len(text):
        found = text.find("\n", start + _PIECE)
        end = len(text) if found < 0 else found + 1
        yield text[start:end]
        start = end


def short_line(text: str, limit: int = MAX_TITLE_CHARS) -> str | None:
    """:func:`one_line` of ``text`` when that is at most ``limit`` characters, else None; its cost
    follows ``limit``, not ``text`` (a title candidate may be a line of millions of words)."""
    words: list[str] = []
    length = -1
    for word in _WORD.finditer(text):
        length += word.end() - word.start() + 1
        if length > limit:
            return None
        words.append(word.group())
    return " ".join(words)
