"""daemon.document.types: pages and heading paths of a span of text (the provenance of parts), and
the cap on the text extracted from an input."""

from __future__ import annotations

import pytest

from daemon.document.types import NO_LAYOUT, ExtractLimits, Heading, Layout, utf8_size
from daemon.errors import DocumentError

PAGES = Layout(page_starts=(0, 100, 250))
HEADINGS = Layout(
    headings=(
        Heading(1, "Terms", 0),
        Heading(2, "Scope", 40),
        Heading(2, "Definitions", 90),
        Heading(3, "Goods", 120),
        Heading(1, "Payment", 300),
    )
)


def test_page_range_of_spans_within_across_and_at_the_edges_of_pages() -> None:
    assert PAGES.pages == 3
    assert PAGES.page_range(0, 100) == (1, 1)  # end is exclusive: character 100 is page 2's first
    assert PAGES.page_range(0, 101) == (1, 2)
    assert PAGES.page_range(100, 250) == (2, 2)
    assert PAGES.page_range(99, 400) == (1, 3)
    assert PAGES.page_range(260, 260) == (3, 3)  # an empty span is on the page it starts on
    assert NO_LAYOUT.page_range(0, 10) is None


def test_heading_path_pops_to_the_level_of_each_new_heading() -> None:
    assert HEADINGS.heading_path(0) == ("Terms",)
    assert HEADINGS.heading_path(50) == ("Terms", "Scope")
    assert HEADINGS.heading_path(95) == ("Terms", "Definitions")  # a sibling replaces Scope
    assert HEADINGS.heading_path(130) == ("Terms", "Definitions", "Goods")
    assert HEADINGS.heading_path(300) == ("Payment",)
    assert Layout(headings=(Heading(2, "Preface", 10),)).heading_path(5) == ()


def test_source_of_has_only_what_the_layout_knows() -> None:
    assert NO_LAYOUT.source_of(0, 10) == {}
    assert PAGES.source_of(50, 120) == {"pages": [1, 2]}
    assert HEADINGS.source_of(45, 125) == {
        "section": ["Terms", "Scope"],
        "headings": ["Definitions", "Goods"],
    }


def test_the_text_cap_is_the_floor_the_ratio_or_the_absolute_limit_whichever_applies() -> None:
    limits = ExtractLimits(max_text_bytes=10_000, max_expansion_ratio=4.0, expansion_floor_bytes=1_000)
    tiny, medium, large = limits.text_cap(100), limits.text_cap(2_000), limits.text_cap(5_000)
    assert (tiny.max_bytes, tiny.ratio) == (1_000, 4.0)  # the floor: a tiny input's ratio says nothing
    assert (medium.max_bytes, medium.ratio) == (8_000, 4.0)
    assert (large.max_bytes, large.ratio) == (10_000, None)  # the absolute limit is the lower
    medium.check(100, 8_000, "text")  # at the cap: allowed
    with pytest.raises(DocumentError) as over_ratio:
        medium.check(100, 8_001, "the text")
    assert over_ratio.value.reason == "too_expanded"
    assert "more than 4 times the input's 2000 bytes" in over_ratio.value.message
    with pytest.raises(DocumentError) as over_limit:
        large.check(100, 10_001, "the text")
    assert (over_limit.value.reason, "limits.max_input_bytes" in over_limit.value.message) == (
        "too_large",
        True,
    )
    with pytest.raises(DocumentError) as over_chars:
        ExtractLimits(max_output_chars=10).text_cap(1).check(11, 11, "the text")
    assert over_chars.value.reason == "too_large"


def test_utf8_size_counts_bytes_as_utf8_lone_surrogates_included() -> None:
    assert [utf8_size(text) for text in ("abc", "é", "語", "😀", "\ud800")] == [3, 2, 3, 4, 3]
