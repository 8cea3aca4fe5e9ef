"""bench/grounding.py: injections change one item into a value the source lacks (read as the checker
reads numbers) or holds elsewhere, seeded; PMC's glued labels are set apart."""

from __future__ import annotations

import random

from bench.grounding import (
    Summary,
    _in_source,
    candidates,
    clean_reference,
    inject,
    replacement,
)
from daemon.summary.grounding import SourceIndex

SOURCE = (
    "The Free Software Foundation published it in 2007. Notice is thirty (30) days under Section 4.2. "
    "It cites [18,19] and counts 1,250,000 users; nine of them wrote a weight table."
)


def test_absent_means_absent_however_the_checker_would_read_it() -> None:
    assert _in_source("number", "18", SOURCE)  # inside a citation list
    assert _in_source("number", "1250000", SOURCE)
    assert _in_source("number", "9", SOURCE)  # spelled out
    assert not _in_source("number", "8", SOURCE)  # "weight" is no eight
    assert _in_source("name", "free software foundation", SOURCE)
    assert not _in_source("name", "Free Software Institute", SOURCE)


def test_candidates_cover_each_kind_once() -> None:
    summary = (
        "The Free Software Foundation gives 30 days notice under Section 4.2 since 2007 to 1,250,000 users."
    )
    found = [(kind, written) for kind, _, _, written in candidates(summary, SOURCE)]
    assert found == [
        ("duration", "30"),
        ("section", "4.2"),
        ("date", "2007"),
        ("number", "1,250,000"),
        ("name", "Free Software Foundation"),
    ]


def test_replacements_are_absent_or_swapped_and_seeded() -> None:
    for seed in range(20):
        new = replacement("number", "1,250,000", SOURCE, random.Random(seed), "absent")
        assert new is not None
        assert not _in_source("number", new.replace(",", ""), SOURCE)
        swapped = replacement("date", "2007", SOURCE + " In 2009 too.", random.Random(seed), "swap")
        assert swapped == "2009"
    first = replacement("name", "Free Software Foundation", SOURCE, random.Random(3), "absent")
    assert first == replacement("name", "Free Software Foundation", SOURCE, random.Random(3), "absent")


def test_an_injection_is_caught_when_its_item_is_reported() -> None:
    summary = Summary("test", "doc", "abstract", "Notice is 30 days under Section 4.2.", "doc")
    injections = inject(summary, SOURCE, SourceIndex.of(SOURCE), random.Random(1))
    absent = [i for i in injections if i.mode == "absent"]
    assert {i.kind for i in absent} == {"duration", "section"}
    assert all(i.caught for i in absent)
    assert all(summary.text[: i.chars[0]] + i.after for i in absent)


def test_glued_pmc_labels_are_set_apart() -> None:
    assert (
        clean_reference("BackgroundDespite it.ResultsWe won.")
        == "Background\n\nDespite it.\n\nResults\n\nWe won."
    )
