"""Token-aware chunking with the served model's own tokenizer.

A document is tokenized once, with character offsets, and then cut in token space, so every chunk's
size is exact: ``len(chunk.token_ids)`` is what vLLM will see, and no request is ever larger than
the budget it was cut for.

Parts follow the document, so that an edit does not shift every later part: the document is first
divided at **anchors**, breaks chosen by the text around them alone (the strongest break within
twice the budget either side, ties settled by a hash of the tokens around it: section headings where
the document has them), and each span between anchors is cut from its start. Unchanged text so
yields the same parts, and the summary cache (:mod:`daemon.cache`) reuses their summaries.

Cuts prefer the strongest break available in the second half of the budget (so no chunk is less than
half full just to reach a break), in this order:

0. a section break: two or more blank lines, a form feed, or a blank line before a heading-like line
   (``# Title``, ``Article 5``, ``SECTION 2``, ``3.1 Scope``, ``§ 4``, an all-caps line);
1. a paragraph break (a blank line);
2. a line break;
3. the end of a sentence;
4. whitespace between words;
5. any token (text with no breaks at all, e.g. one 1 MB line of base64).

Consecutive chunks within a span overlap by ``overlap`` tokens (snapped forward to a word start when
one is near), so a sentence cut by a word- or token-level break is still read whole by one of the
two parts; a chunk that starts at an anchor (a sentence end or stronger) repeats nothing.

Documents are tokenized with special-token parsing off: a document that contains the text
``<|im_end|>`` gets ordinary tokens for it and cannot break out of its place in the template. This
uses a private copy of the tokenizer's Rust backend with that setting fixed once
(:func:`content_backend`): transformers' ``split_special_tokens=True`` sets a flag on the backend the
whole process shares for each call, so our prompt templates, encoded elsewhere with the flag off,
could flip it between another thread's setting it and its encoding. Calling the copy's
``encode_batch`` directly also skips transformers' conversion of each call's output (per-token Python
work under the interpreter lock); the Rust encoding itself runs without the lock, so documents are
tokenized in parallel threads (``bench/intake.py`` measures a backlog's intake).

Memory: a tokenizer's output for one call costs some 500-650 bytes per token in the main process
(its token strings, offsets as Python tuples); a 5 MiB document in one call is over a million tokens,
and that peak was the largest part of the process's memory (``bench/memory.py``). So a long text is
tokenized in segments of about :data:`SEGMENT_CHARS` characters, cut where the tokenizer's own
pre-tokenization would split anyway (before a space or after a line break between two non-blank
characters), and what is kept is compact: token ids as one list sharing one int object per distinct
id, character offsets and cut points in arrays of machine integers.
"""

from __future__ import annotations

import bisect
import contextlib
import copy
import itertools
import math
import re
import threading
import weakref
import zlib
from array import array
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final

from daemon.errors import DocumentError

# Strongest first. Each pattern's match is the separator; a cut may fall anywhere inside it.
# Repeated groups are possessive (``++``, ``*+``): a greedy group repeat keeps a backtracking entry
# per repetition in the regex engine, about 145 bytes each, so one run of a million newlines (or a
# heading number "1.1.1..." as long) cost some 145 MiB while it was matched. The matches are the same.
_HEADING: Final = (
    r"(?:#{1,6}\s|(?:ARTICLE|Article|SECTION|Section|CHAPTER|Chapter|PART|Part|APPENDIX|Appendix|"
    r"ANNEX|Annex|SCHEDULE|Schedule|§)\s*[0-9IVXLC]|\d+(?:\.\d+)*+\.?[ \t]+\S|[A-Z][A-Z0-9 ,.;:'()/&-]{3,}\n)"
)
SEPARATOR_LEVELS: Final = (
    re.compile(r"\n[ \t]*\n(?:[ \t]*\n)++[ \t]*|\f\s*|\n[ \t]*\n[ \t]*(?=" + _HEADING + ")"),
    re.compile(r"\n[ \t]*\n[ \t]*"),
    re.compile(r"\n"),
    re.compile(r"(?<=[.!?…;])[\"'”’)\]]*\s+"),
    re.compile(r"\s+"),
)
TOKEN_LEVEL: Final = len(SEPARATOR_LEVELS)
LEVEL_NAMES: Final = ("section", "paragraph", "line", "sentence", "word", "token")
ANCHOR_LEVELS: Final = 4
"""Breaks at these levels (section, paragraph, line, sentence) may anchor parts (see
:func:`split_into_chunks`)."""
ANCHOR_CONTEXT_TOKENS: Final = 8
"""Token ids hashed on either side of a break for its anchor score."""


SEGMENT_CHARS: Final = 32 * 1024
"""A long text is tokenized in segments of about this many characters (see the module's doc)."""
_SAFE_CUT: Final = re.compile(r"(?<=\S)[ \n](?=\S)")
"""Where a segment may end: a space (cut before it: it opens the next word's token) or a line break
(cut after it) between two non-blank characters. Pre-tokenizers split there whatever follows."""


@dataclass(frozen=True, slots=True)
class TokenizedText:
    """A text with its token ids and the character offset where each token starts.

    ``offsets`` is None for a text tokenized without them (:func:`tokenize_text`'s
    ``offsets_beyond``): one that is never cut, so whose characters are never mapped to tokens.
    """

    text: str
    ids: list[int]
    offsets: Sequence[int] | None

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def starts(self) -> Sequence[int]:
        """The character offset where each token starts (non-decreasing)."""
        if self.offsets is None:
            raise ValueError("this text was tokenized without character offsets (offsets_beyond)")
        return self.offsets

    def char_at(self, index: int) -> int:
        """Character offset of the start of token ``index`` (0 at the start, len(text) at the end)."""
        if index <= 0:
            return 0
        if index >= len(self.ids):
            return len(self.text)
        return self.starts[index]


def tokenize_text(tokenizer: Any, text: str, *, offsets_beyond: int = 0) -> TokenizedText:
    """Tokenize ``text`` as document content with offsets (special-token strings are plain text here).

    Needs a fast (Rust) tokenizer, as every model vLLM serves has; about 0.6 s per MB. Long texts go
    in segments, so memory stays near what is kept (see the module's doc).

    ``offsets_beyond``: character offsets are kept only for a text of more tokens than this (one its
    caller may cut). Reading a token's offsets is most of the per-token work done under the
    interpreter lock, which a backlog's documents share while their encoding runs in parallel
    threads; a text that fits one request never needs them.
    """
    backend = content_backend(tokenizer)
    ids: list[int] = []
    starts: array[int] | None = None
    unread: list[tuple[int, Any]] = []  # encoded segments whose offsets are not read yet
    shared: dict[int, int] = {}  # one int object per distinct id: a list then costs a pointer a token
    begin = 0
    for end in _segment_ends(text, SEGMENT_CHARS):
        (encoding,) = backend.encode_batch([text[begin:end]], add_special_tokens=False)
        new_ids = encoding.ids
        ids += map(shared.setdefault, new_ids, new_ids)
        unread.append((begin, encoding))
        if len(ids) > offsets_beyond:
            if starts is None:
                starts = array("I" if len(text) < 1 << 32 else "Q")
            for segment_begin, segment in unread:
                _append_starts(starts, segment_begin, segment.offsets)
            unread.clear()
        begin = end
    return TokenizedText(text=text, ids=ids, offsets=starts)


def _append_starts(starts: array[int], begin: int, offsets: list[tuple[int, int]]) -> None:
    """Append the text offsets where a segment's tokens start; the segment starts at ``begin``."""
    floor = starts[-1] if starts else 0
    for start, _ in offsets:
        # Byte-level tokens of one multi-byte character can share or repeat offsets; cuts need order.
        floor = max(floor, begin + start)
        starts.append(floor)


def prepare_tokenizer(tokenizer: Any) -> None:
    """Make :func:`content_backend`'s copy of ``tokenizer``'s backend now, if it has one: the copy
    takes 0.1-0.2 s for a vocabulary of 150,000 tokens, which the first document tokenized would
    otherwise wait for, and every document tokenized beside it too (they wait for its lock)."""
    with contextlib.suppress(TypeError):  # not a fast tokenizer: tokenize_text says so when used
        content_backend(tokenizer)


_BACKENDS: Final[weakref.WeakKeyDictionary[Any, Any]] = weakref.WeakKeyDictionary()
_BACKENDS_LOCK: Final = threading.Lock()


def content_backend(tokenizer: Any) -> Any:
    """The Rust tokenizer that :func:`tokenize_text` encodes documents with: a private copy of
    ``tokenizer``'s backend that never reads special tokens in text, without truncation or padding
    (see the module's doc). Made once per tokenizer object."""
    if not getattr(tokenizer, "is_fast", False) or getattr(tokenizer, "backend_tokenizer", None) is None:
        raise TypeError("chunking needs a fast tokenizer (one with offset mappings)")
    with _BACKENDS_LOCK:
        backend = _BACKENDS.get(tokenizer)
        if backend is None:
            backend = copy.deepcopy(tokenizer.backend_tokenizer)
            backend.encode_special_tokens = True
            backend.no_truncation()
            backend.no_padding()
            _BACKENDS[tokenizer] = backend
        return backend


def _segment_ends(text: str, size: int) -> Iterator[int]:
    """Where the segments of ``text`` end: about every ``size`` characters, on a safe cut in the
    second half of each window when there is one (else anywhere: a text with no break at all)."""
    begin = 0
    while len(text) - begin > size:
        end = _last_safe_cut(text, begin + size // 2, begin + size) or begin + size
        yield end
        begin = end
    yield len(text)


def _last_safe_cut(text: str, low: int, high: int) -> int | None:
    """The last safe cut in ``(low, high)``: searched near ``high`` first, as breaks are usually close."""
    for width in (256, 4096, high - low):
        last = None
        for last in _SAFE_CUT.finditer(text, max(low, high - width), high):  # noqa: B007
            pass
        if last is not None:
            return last.start() if text[last.start()] == " " else last.end()
    return None


@dataclass(frozen=True, slots=True)
class Chunk:
    """Tokens ``[start, end)`` of a document, the characters they cover, and the break it ends on."""

    start: int
    end: int
    char_start: int
    char_end: int
    level: int
    token_ids: list[int]

    @property
    def tokens(self) -> int:
        """Size of the chunk in tokens."""
        return self.end - self.start

    @property
    def break_name(self) -> str:
        """The kind of break the chunk ends on (``end`` for the last chunk)."""
        return "end" if self.level < 0 else LEVEL_NAMES[self.level]


class _Breaks:
    """Token indices where a cut may fall, per separator level, sorted."""

    def __init__(self, tokens: TokenizedText) -> None:
        self._levels = [_cut_points(tokens, pattern) for pattern in SEPARATOR_LEVELS]

    def best_in(self, windows: tuple[tuple[int, int], ...]) -> tuple[int, int] | None:
        """The strongest cut in any of the ``(low, high]`` windows: (index, level).

        Windows are tried in order for each level before a weaker level is considered; within a
        window the last cut wins (the fullest chunk).
        """
        for level, points in enumerate(self._levels):
            for low, high in windows:
                position = bisect.bisect_right(points, high) - 1
                if position >= 0 and points[position] > low:
                    return points[position], level
        return None

    def anchors(self, ids: Sequence[int], window: int) -> list[tuple[int, int]]:
        """The document's anchors, in order: (token index, level) of each break at a sentence end or
        stronger whose score beats every other such break within ``window`` tokens on either side,
        and that is at least ``window`` tokens from either end of the document.

        A break's score is its strength first (a section break beats a paragraph break, which beats a
        line break, which beats a sentence end), then a hash of the :data:`ANCHOR_CONTEXT_TOKENS`
        token ids either side of it. Whether a break is an anchor so depends only on the text within
        ``window`` tokens (and a few) of it: an edit moves no anchor farther away, and anchors come
        from the document's own structure where it has one."""
        total = len(ids)
        level_of: dict[int, int] = {}
        for level in range(ANCHOR_LEVELS):
            for index in self._levels[level]:
                if window <= index <= total - window:
                    level_of.setdefault(index, level)
        if not level_of:
            return []
        positions = sorted(level_of)
        scores = [_anchor_score(ids, index, level_of[index]) for index in positions]
        beaten_left = _beaten(positions, scores, window)
        beaten_right = _beaten([-p for p in reversed(positions)], scores[::-1], window)[::-1]
        return [
            (index, level_of[index])
            for index, left, right in zip(positions, beaten_left, beaten_right, strict=True)
            if not (left or right)
        ]

    def first_word_start_in(self, low: int, high: int) -> int | None:
        """The first word-or-stronger cut in ``[low, high)``."""
        found = [
            points[i]
            for points in self._levels
            if (i := bisect.bisect_left(points, low)) < len(points) and points[i] < high
        ]
        return min(found) if found else None


def _cut_points(tokens: TokenizedText, pattern: re.Pattern[str]) -> array[int]:
    """Token indices at which ``pattern``'s separators may be cut, increasing, in an array (a text of
    short lines has a cut point every few tokens).

    A cut goes before the first token that starts at or after the separator's end; if the token
    before that one starts inside the separator (e.g. " The" after ". "), the cut goes before it, so
    the separator's whitespace opens the next chunk rather than ending in the middle of a token.
    """
    starts = tokens.starts
    points = array("I")
    for match in pattern.finditer(tokens.text):
        if match.end() >= len(tokens.text):
            continue
        index = bisect.bisect_left(starts, match.end())
        if index > 0 and starts[index - 1] >= match.start():
            index -= 1
        # Matches come in text order, so indices never decrease: a repeat is the only duplicate.
        if 0 < index < len(starts) and (not points or index > points[-1]):
            points.append(index)
    return points


def _anchor_score(ids: Sequence[int], index: int, level: int) -> int:
    """A break's score as an anchor: its strength, then a hash of the token ids around it."""
    around = array("I", ids[max(0, index - ANCHOR_CONTEXT_TOKENS) : index + ANCHOR_CONTEXT_TOKENS])
    return ((ANCHOR_LEVELS - level) << 32) | zlib.crc32(around.tobytes())


def _beaten(positions: Sequence[int], scores: Sequence[int], window: int) -> list[bool]:
    """For each break (increasing ``positions``), whether an earlier one within ``window`` scores at
    least as high: a sliding maximum, one pass."""
    beaten: list[bool] = []
    best: deque[int] = deque()  # indices of breaks within the window, scores decreasing
    for k, position in enumerate(positions):
        while best and positions[best[0]] < position - window:
            best.popleft()
        beaten.append(bool(best) and scores[best[0]] >= scores[k])
        while best and scores[best[-1]] <= scores[k]:
            best.pop()
        best.append(k)
    return beaten


def min_chunks(total: int, budget: int, overlap: int = 0) -> int:
    """The fewest chunks of at most ``budget`` tokens, consecutive ones sharing ``overlap``, that can
    cover ``total`` tokens: no cut can do with fewer, so a count above a limit refuses a document
    before it is cut."""
    if total <= budget:
        return 1
    return math.ceil((total - overlap) / (budget - overlap))


def split_into_chunks(
    tokens: TokenizedText,
    budget: int,
    overlap: int = 0,
    *,
    max_chunks: int | None = None,
    anchor_window: int | None = None,
) -> list[Chunk]:
    """Cut ``tokens`` into chunks of at most ``budget`` tokens, in order, covering all of it.

    The document is first divided at its anchors (:meth:`_Breaks.anchors`): breaks chosen by what
    lies around them alone, at least ``anchor_window`` tokens (default: twice ``budget``) apart and
    from either end. Each span between anchors is then cut on its own (:func:`_cut_span`). So an
    edit changes only the chunks of its span from the edit on (and of a neighbour when it moves an
    anchor): the chunks of the rest of the document, and their cached summaries, stay as they were.
    A wider window holds more chunks per span (fewer chunks in all, each fuller; more of them change
    with an edit).

    Chunks inside a span overlap by about ``overlap`` tokens; a chunk that starts at an anchor (the
    end of a sentence or a stronger break) does not repeat the one before.

    ``max_chunks`` (``summary.max_parts``): when the token count alone says more chunks are needed
    (:func:`min_chunks`), DocumentError ``too_long`` before any cut point is computed. The cut may
    still need more than the minimum; the caller checks the count of what is returned.
    """
    if budget < 2:
        raise ValueError(f"chunk budget must be at least 2 tokens, got {budget}")
    if not 0 <= overlap <= budget // 4:
        raise ValueError(
            f"overlap must be between 0 and a quarter of the budget ({budget // 4}), got {overlap}"
        )
    total = len(tokens)
    if total <= budget:
        return [_chunk(tokens, 0, total, -1)]
    pieces = min_chunks(total, budget, overlap)
    if max_chunks is not None and pieces > max_chunks:
        raise DocumentError(
            "too_long",
            f"the document needs at least {pieces} parts of up to {budget} tokens ({total} tokens); "
            f"summary.max_parts is {max_chunks}",
        )
    breaks = _Breaks(tokens)
    anchors = breaks.anchors(tokens.ids, anchor_window or 2 * budget)
    chunks: list[Chunk] = []
    bounds = [(0, -1), *anchors, (total, -1)]
    for (start, _), (end, level) in itertools.pairwise(bounds):
        chunks += _cut_span(tokens, breaks, (start, end), stop_level=level, budget=budget, overlap=overlap)
    return chunks


def _cut_span(
    tokens: TokenizedText,
    breaks: _Breaks,
    span: tuple[int, int],
    *,
    stop_level: int,
    budget: int,
    overlap: int,
) -> list[Chunk]:
    """Tokens ``span`` (``[begin, stop)``) in chunks of at most ``budget``, from its start: each ends on
    the strongest break in the second half of its budget, so an edit moves only the cuts after it in
    the span. The last chunk ends on ``stop``'s break (``stop_level``)."""
    begin, stop = span
    total = stop - begin
    if total <= budget:
        return [_chunk(tokens, begin, stop, stop_level)]
    chunks: list[Chunk] = []
    start = begin
    while True:
        if stop - start <= budget:
            chunks.append(_chunk(tokens, start, stop, stop_level))
            return chunks
        # The strongest break in the budget's second half; the last of its kind (the fullest chunk).
        found = breaks.best_in(((start + max(1, budget // 2), start + budget),))
        end, level = found if found is not None else (start + budget, TOKEN_LEVEL)
        chunks.append(_chunk(tokens, start, end, level))
        start = _next_start(breaks, start, end, overlap)


def _next_start(breaks: _Breaks, start: int, end: int, overlap: int) -> int:
    if overlap == 0:
        return end
    earliest = max(start + 1, end - overlap)
    # Start the overlap on a word when one begins within its first half; otherwise mid-word.
    word = breaks.first_word_start_in(earliest, earliest + max(1, overlap // 2))
    return word if word is not None and word < end else earliest


def _chunk(tokens: TokenizedText, start: int, end: int, level: int) -> Chunk:
    return Chunk(
        start=start,
        end=end,
        char_start=tokens.char_at(start),
        char_end=tokens.char_at(end),
        level=level,
        token_ids=tokens.ids[start:end],
    )


def head_ids(tokens: TokenizedText, budget: int) -> list[int]:
    """The first ``budget`` tokens."""
    return tokens.ids[:budget]


def head_tail_ids(tokens: TokenizedText, budget: int, gap_ids: list[int]) -> list[int]:
    """The first and last parts of the text, ``gap_ids`` (an omission mark) between, ``budget`` in all."""
    if len(tokens) <= budget:
        return list(tokens.ids)
    head, tail = _head_tail_sizes(budget - len(gap_ids))
    return [*tokens.ids[:head], *gap_ids, *tokens.ids[len(tokens) - tail :]]


def head_tail_spans(tokens: TokenizedText, room: int) -> list[tuple[int, int]]:
    """The character ranges that :func:`head_tail_ids` keeps with ``room`` tokens of text (the budget
    less the gap mark): one range when the whole text fits."""
    if len(tokens) <= room:
        return [(0, len(tokens.text))]
    head, tail = _head_tail_sizes(room)
    return [(0, tokens.char_at(head)), (tokens.char_at(len(tokens) - tail), len(tokens.text))]


def _head_tail_sizes(room: int) -> tuple[int, int]:
    return room - room // 2, room // 2
