"""What a model writes around a summary, taken off: talk about the task before it, sign-offs after it.

Instruction-tuned models, small ones most, frame an answer as a chat: "Here's a concise summary of
the text:" first, "I hope this helps!" last, now and then a marker such as "<<Summary>>" or a
heading that only says "Summary". None of it is the document's content. Left in a part summary it
is combined as if it were (SmolLM2-135M's combine steps then open with "Here's a rewritten version
of your summary condensed into plain prose paragraphs:" and talk about the notes instead of the
document); left in a result it is what a reader sees first.

:func:`tidy` removes only whole lines: those at the start that announce the answer, and everything
from a sign-off line on. It keeps the text as generated when nothing else would be left. Words inside
the summary are never changed.
"""

from __future__ import annotations

import re
from typing import Final

# A line that announces the answer: "Here is a summary of the text:", "Sure! Below is ...:",
# "Summary:", "**Summary of the document**", "<<summary of the document>>", or any short label.
_OPENERS: Final = re.compile(
    r"""^\W*(?:
        (?:sure|certainly|okay|of\ course)\b[^\n]*
      | (?:here(?:'s|’s|\ is|\ are)|below\ (?:is|are)|the\ following\ is)\b[^\n]*?(?::|\.)
      | (?:(?:a|the)\ )?(?:concise\ |brief\ |short\ |final\ |combined\ )?
        (?:summary|summaries|abstract|brief|overview|bullet\ points)\b[^\n]{0,60}?:?
      | [^\n:]{0,30}\b(?:text|summary|version|points|notes)\W*:   # "Original text:", "Key points:"
    )\W*$""",
    re.IGNORECASE | re.VERBOSE,
)
# A line that closes a chat: "I hope this helps!", "Let me know if ...", "Feel free to ask ...".
_CLOSERS: Final = re.compile(
    r"""^\W*(?:
        i\ hope\b | hope\ (?:this|these|that)\ helps? | let\ me\ know\b | feel\ free\b
      | please\ (?:let\ me|feel|go\ ahead)\b | thank\ you\b | thanks(?:\ for\b|\W*$)
      | is\ there\ anything\b | p\.s\.
    )[^\n]*$""",
    re.IGNORECASE | re.VERBOSE,
)
# An opener is a short line: a long first paragraph that starts "Here is" is content.
_MAX_OPENER_CHARS: Final = 160


def tidy(text: str) -> str:
    """``text`` without the chat frame around it (see the module's docstring), stripped.

    Openers are taken off the start; from the first sign-off on, the rest goes (what follows a
    sign-off is more of the chat, often cut off by the length budget)."""
    lines = text.strip().splitlines()
    start = 0
    while start < len(lines) and _is_opener(lines[start]):
        start += 1
    end = next((i for i in range(start + 1, len(lines)) if _is_closer(lines[i])), len(lines))
    kept = _unquoted("\n".join(lines[start:end]).strip())
    return kept or text.strip()


def _unquoted(text: str) -> str:
    """``text`` without the quotation marks a model put around all of it (and only around all of it:
    a quote that closes before the end belongs to the summary)."""
    for opening, closing in (('"', '"'), ("\u201c", "\u201d")):
        if text.startswith(opening) and closing not in text[1:].rstrip(closing):
            return text[1:].rstrip(closing).strip()
    return text


def _is_opener(line: str) -> bool:
    stripped = line.strip()
    return not stripped or (len(stripped) <= _MAX_OPENER_CHARS and _OPENERS.match(stripped) is not None)


def _is_closer(line: str) -> bool:
    return _CLOSERS.match(line.strip()) is not None
