"""Unit tests for daemon.document.text: a long text cleaned a piece at a time gives what cleaning it
whole gives, and a title candidate of millions of words costs what its limit allows.

Their time and memory on 16 MiB of each hostile shape: tests/unit/document/test_hostile_text_scans.py.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daemon.document import text as pieces
from daemon.document.types import MAX_TITLE_CHARS

_TEXTS = st.text(alphabet=st.sampled_from(list("ab \t\n\r\x00\x0c\x85\xa0\u2003\x1f")), max_size=80)


@settings(max_examples=300, deadline=None)
@given(_TEXTS)
def test_long_texts_are_made_one_line_a_piece_at_a_time_as_whole(text: str) -> None:
    whole = " ".join(pieces._CONTROLS.sub(" ", text).split())
    short = pieces.short_line(text, 10)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pieces, "_PIECE", 3)  # every text is long
        assert pieces.one_line(text) == whole
        assert "".join(pieces.line_pieces(text)) == text
        assert all(piece.endswith("\n") for piece in list(pieces.line_pieces(text))[:-1])
    assert short == (whole if len(whole) <= 10 else None)


@settings(max_examples=300, deadline=None)
@given(_TEXTS)
def test_replace_each_a_piece_at_a_time_is_sub_on_the_whole(text: str) -> None:
    pattern = re.compile("[\x00-\x1f]")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pieces, "_PIECE", 3)  # every text is long
        assert pieces.replace_each(pattern, " ", text) == pattern.sub(" ", text)
    assert pieces.replace_each(pattern, " ", text) == pattern.sub(" ", text)


def test_short_line_stops_at_its_limit() -> None:
    assert pieces.short_line(" a \t b\n") == "a b"
    assert pieces.short_line("x" * MAX_TITLE_CHARS) == "x" * MAX_TITLE_CHARS
    assert pieces.short_line("x" * (MAX_TITLE_CHARS + 1)) is None
    assert pieces.short_line("ab " * 2_000_000) is None
