"""Sentences of a summary or a document, with where each one is in the text: the one splitter that
the grounding check, the evidence, the extractive ranking and the quality benchmark's
sentence-level overlap score (rouge-score's ``rougeLsum``) share, so that "sentence 3" means the
same thing in all of them.

Rules, in order:

* a **block** ends at a blank line, a form feed, or before a line that opens a list item
  (``- ``, ``* ``, ``• ``, ``1. ``, ``(a) ``, ``iv) ``) or a Markdown heading (``## ``); inside a
  block, line breaks are spaces (hard-wrapped text, as licences are, reads as its paragraphs);
* a block is cut after ``.``, ``!``, ``?`` or ``…`` (closing quotes and brackets after them go with
  the sentence) followed by whitespace and then something that can open a sentence: an upper-case
  letter, a digit, a quote or an opening bracket. Not after an abbreviation (``e.g.``, ``Dr.``,
  ``Inc.``, ``Sec.``, ``et al.``) or a single initial (``J. Smith``), and never inside a number
  (``4.2``);
* every bullet and every heading is a sentence of its own, its marker (``-``, ``1.``, ``##``) left out;
* a block without a letter or digit (``***``, ``---``) is no sentence.

A sentence's ``text`` is its characters with runs of whitespace made one space (it never holds a line
break, which is what ``rougeLsum``'s newline-split sentences need); ``start`` and ``end`` are its
character range in the text as given.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

_LINE: Final = re.compile(r"[^\n\f]+")
_LIST_MARKER: Final = re.compile(
    r"[ \t]*(?:[-*•‣◦–—+]|\(?(?:\d{1,3}|[a-zA-Z]|[ivxlcIVXLC]{1,6})[.)])[ \t]+(?=\S)"
)
_HEADING_MARKER: Final = re.compile(r"[ \t]*#{1,6}[ \t]+(?=\S)")
# The lookbehind makes a run of marks one candidate: no quadratic rescans of a long run.
_SENTENCE_END: Final = re.compile(r"(?<![.!?…])[.!?…]++[\"'”’)\]]*+(?=\s++[\"'“‘(\[]?[A-Z0-9À-ÖØ-Þ])")
# fmt: off
_ABBREVIATIONS: Final = frozenset(
    [
        "e.g", "i.e", "cf", "vs", "etc", "al", "approx", "ca", "fig", "figs", "eq", "eqs", "no",
        "nos", "vol", "pp", "p", "ed", "eds", "mr", "mrs", "ms", "dr", "prof", "st", "jr", "sr",
        "inc", "ltd", "co", "corp", "llc", "plc", "bros", "dept", "univ", "sec", "secs", "art",
        "arts", "para", "paras", "cl", "ch", "chap", "sch", "app", "ex", "exh", "jan", "feb", "mar",
        "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec", "u.s", "u.k", "e.u", "u.n",
    ]
)
# fmt: on
_WORD_BEFORE: Final = re.compile(r"([A-Za-z][A-Za-z.]*)$")
_HAS_CONTENT: Final = re.compile(r"\w")


@dataclass(frozen=True, slots=True)
class Sentence:
    """One sentence: its position in the list (0-based), its text with whitespace made single spaces,
    and its character range ``[start, end)`` in the text it was split from."""

    index: int
    text: str
    start: int
    end: int


def split_sentences(text: str) -> list[Sentence]:
    """The sentences of ``text``, in order (see the module's doc for the rules)."""
    spans: list[tuple[int, int]] = []
    for block_start, block_end in _blocks(text):
        spans.extend(_sentences_in(text, block_start, block_end))
    sentences: list[Sentence] = []
    for start, end in spans:
        piece = text[start:end]
        if _HAS_CONTENT.search(piece):
            sentences.append(Sentence(len(sentences), " ".join(piece.split()), start, end))
    return sentences


def sentence_per_line(text: str) -> str:
    """``text`` with one sentence a line: what rouge-score's ``rougeLsum`` reads."""
    return "\n".join(sentence.text for sentence in split_sentences(text))


def _blocks(text: str) -> list[tuple[int, int]]:
    """Character ranges of the blocks of ``text``, each without its list or heading marker."""
    blocks: list[tuple[int, int]] = []
    block: list[int] = []  # [start, end] of the block being read
    for line in _LINE.finditer(text):
        start, end = line.span()
        if not _HAS_CONTENT.search(text, start, end):  # a blank line, or a rule such as ``***``
            _close(text, block, blocks)
            block = []
            continue
        gap = text[block[1] : start] if block else ""
        marker = _HEADING_MARKER.match(text, start, end) or _LIST_MARKER.match(text, start, end)
        if block and (marker or gap.count("\n") > 1 or "\f" in gap or _is_heading(block, text)):
            _close(text, block, blocks)
            block = []
        if block:
            block[1] = end
        else:
            block = [marker.end() if marker else start, end]
            if _HEADING_MARKER.match(text, start, end):
                block.append(1)  # a heading: nothing joins it
    _close(text, block, blocks)
    return blocks


def _is_heading(block: list[int], text: str) -> bool:
    return len(block) > 2


def _close(text: str, block: list[int], blocks: list[tuple[int, int]]) -> None:
    if block:
        start, end = _stripped(text, block[0], block[1])
        if start < end:
            blocks.append((start, end))


def _sentences_in(text: str, start: int, end: int) -> list[tuple[int, int]]:
    spans = []
    begin = start
    for match in _SENTENCE_END.finditer(text, start, end):
        if _is_abbreviation(text, begin, match.start(), match.group()):
            continue
        spans.append(_stripped(text, begin, match.end()))
        begin = match.end()
    spans.append(_stripped(text, begin, end))
    return [(a, b) for a, b in spans if a < b]


def _is_abbreviation(text: str, begin: int, at: int, mark: str) -> bool:
    """Whether the full stop at ``at`` ends an abbreviation or an initial rather than a sentence."""
    if not mark.startswith(".") or mark.startswith(".."):
        return False
    word = _WORD_BEFORE.search(text, max(begin, at - 12), at)  # abbreviations are short
    if word is None:
        return False
    token = word.group(1).lower().rstrip(".")
    if token in _ABBREVIATIONS:
        return True
    # A single initial ("J. Smith", "U. S."), not the one-letter last word of a sentence ("... type A.").
    return len(token) == 1 and word.group(1)[0].isupper() and at - word.start() == 1 and at - begin > 1


def _stripped(text: str, start: int, end: int) -> tuple[int, int]:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end
