"""daemon.document.types: pages and heading paths of a span of text (the provenance of parts)."""

from __future__ import annotations

from daemon.document.types import NO_LAYOUT, Heading, Layout

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
