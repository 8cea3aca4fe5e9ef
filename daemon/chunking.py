"""Token-aware chunking with the served model's own tokenizer.

A document is tokenized once, with character offsets, and then cut in token space, so every chunk's
size is exact: ``len(chunk.token_ids)`` is what vLLM will see, and no request is ever larger than
the budget it was cut for.

Cuts prefer the strongest break available in the second half of the budget (so no chunk is less than
half full just to reach a break), in this order:

0. a section break: two or more blank lines, a form feed, or a blank line before a heading-like line
   (``# Title``, ``Article 5``, ``SECTION 2``, ``3.1 Scope``, ``§ 4``, an all-caps line);
1. a paragraph break (a blank line);
2. a line break;
3. the end of a sentence;
4. whitespace between words;
5. any token (text with no breaks at all, e.g. one 1 MB line of base64).

Consecutive chunks overlap by ``overlap`` tokens (snapped forward to a word start when one is near),
so a sentence cut by a token-level break is still read whole by one of the two parts.

Documents are tokenized with special-token parsing off: a document that contains the text
``<|im_end|>`` gets ordinary tokens for it and cannot break out of its place in the template.
"""

from __future__ import annotations

import bisect
import math
import re
from dataclasses import dataclass
from typing import Any, Final

# Strongest first. Each pattern's match is the separator; a cut may fall anywhere inside it.
_HEADING: Final = (
    r"(?:#{1,6}\s|(?:ARTICLE|Article|SECTION|Section|CHAPTER|Chapter|PART|Part|APPENDIX|Appendix|"
    r"ANNEX|Annex|SCHEDULE|Schedule|§)\s*[0-9IVXLC]|\d+(?:\.\d+)*\.?[ \t]+\S|[A-Z][A-Z0-9 ,.;:'()/&-]{3,}\n)"
)
SEPARATOR_LEVELS: Final = (
    re.compile(r"\n[ \t]*\n(?:[ \t]*\n)+[ \t]*|\f\s*|\n[ \t]*\n[ \t]*(?=" + _HEADING + ")"),
    re.compile(r"\n[ \t]*\n[ \t]*"),
    re.compile(r"\n"),
    re.compile(r"(?<=[.!?…;])[\"'”’)\]]*\s+"),
    re.compile(r"\s+"),
)
TOKEN_LEVEL: Final = len(SEPARATOR_LEVELS)
LEVEL_NAMES: Final = ("section", "paragraph", "line", "sentence", "word", "token")


@dataclass(frozen=True, slots=True)
class TokenizedText:
    """A text with its token ids and the character offset where each token starts."""

    text: str
    ids: list[int]
    starts: list[int]

    def __len__(self) -> int:
        return len(self.ids)

    def char_at(self, index: int) -> int:
        """Character offset of the start of token ``index`` (0 at the start, len(text) at the end)."""
        if index <= 0:
            return 0
        if index >= len(self.ids):
            return len(self.text)
        return self.starts[index]


def tokenize_text(tokenizer: Any, text: str) -> TokenizedText:
    """Tokenize ``text`` as document content with offsets (special-token strings are plain text here).

    Needs a fast (Rust) tokenizer, as every model vLLM serves has; about 0.6 s per MB.
    """
    if not getattr(tokenizer, "is_fast", False):
        raise TypeError("chunking needs a fast tokenizer (one with offset mappings)")
    encoding = tokenizer(
        text,
        add_special_tokens=False,
        split_special_tokens=True,
        return_offsets_mapping=True,
        return_attention_mask=False,
    )
    ids = list(encoding["input_ids"])
    starts = _monotonic([start for start, _ in encoding["offset_mapping"]])
    return TokenizedText(text=text, ids=ids, starts=starts)


def _monotonic(starts: list[int]) -> list[int]:
    # Byte-level tokens of one multi-byte character can share or repeat offsets; cuts need order.
    for i in range(1, len(starts)):
        starts[i] = max(starts[i], starts[i - 1])
    return starts


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
        self._levels = [sorted(_cut_points(tokens, pattern)) for pattern in SEPARATOR_LEVELS]

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

    def first_word_start_in(self, low: int, high: int) -> int | None:
        """The first word-or-stronger cut in ``[low, high)``."""
        found = [
            points[i]
            for points in self._levels
            if (i := bisect.bisect_left(points, low)) < len(points) and points[i] < high
        ]
        return min(found) if found else None


def _cut_points(tokens: TokenizedText, pattern: re.Pattern[str]) -> set[int]:
    """Token indices at which ``pattern``'s separators may be cut.

    A cut goes before the first token that starts at or after the separator's end; if the token
    before that one starts inside the separator (e.g. " The" after ". "), the cut goes before it, so
    the separator's whitespace opens the next chunk rather than ending in the middle of a token.
    """
    starts = tokens.starts
    points: set[int] = set()
    for match in pattern.finditer(tokens.text):
        if match.end() >= len(tokens.text):
            continue
        index = bisect.bisect_left(starts, match.end())
        if index > 0 and starts[index - 1] >= match.start():
            index -= 1
        if 0 < index < len(starts):
            points.add(index)
    return points


def split_into_chunks(tokens: TokenizedText, budget: int, overlap: int = 0) -> list[Chunk]:
    """Cut ``tokens`` into chunks of at most ``budget`` tokens, in order, covering all of it.

    Consecutive chunks overlap by about ``overlap`` tokens. Chunks are evened out: a 2.1-budget
    document becomes three chunks of about 0.7 budget, not two full ones and a scrap.
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
    breaks = _Breaks(tokens)
    pieces = math.ceil((total - overlap) / (budget - overlap))
    target = min(budget, math.ceil((total - overlap) / pieces) + overlap + budget // 10)
    chunks: list[Chunk] = []
    start = 0
    while True:
        if total - start <= budget:
            chunks.append(_chunk(tokens, start, total, -1))
            return chunks
        # The evened-out window first; the whole budget's second half when it has a stronger break.
        even = (start + max(1, target // 2), start + target)
        full = (start + max(1, budget // 2), start + budget)
        found = breaks.best_in((even, full))
        end, level = found if found is not None else (start + target, TOKEN_LEVEL)
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
    room = budget - len(gap_ids)
    head = room - room // 2
    tail = room // 2
    return [*tokens.ids[:head], *gap_ids, *tokens.ids[len(tokens) - tail :]]
