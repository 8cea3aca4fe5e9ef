"""Unit tests of daemon.kafka.held: exactly-once outputs held until their transaction."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from daemon.kafka.held import Held, HeldOutputs


def test_nothing_held_covers_nothing() -> None:
    held: HeldOutputs[str, str] = HeldOutputs()
    assert len(held) == 0
    assert held.covered_below({"a": 10}) == []
    assert held.drop(["a"]) == 0


def test_commit_point_covers_the_outputs_below_it_in_offset_order() -> None:
    held: HeldOutputs[str, str] = HeldOutputs()
    for offset in (12, 10, 11, 13):  # finished out of order
        held.hold("a", offset, f"a{offset}")
    held.hold("b", 5, "b5")
    covered = held.covered_below({"a": 12, "b": 5})
    assert covered == [Held("a", 10, "a10"), Held("a", 11, "a11")]  # b's point 5 covers below 5 only
    assert len(held) == 5  # covering is a question: nothing is released yet


def test_partitions_come_in_the_order_of_the_offsets() -> None:
    held: HeldOutputs[str, str] = HeldOutputs()
    held.hold("a", 0, "a0")
    held.hold("b", 0, "b0")
    assert [h.partition for h in held.covered_below({"b": 1, "a": 1})] == ["b", "a"]


def test_release_forgets_the_covered_outputs_and_keeps_the_rest() -> None:
    held: HeldOutputs[str, str] = HeldOutputs()
    for offset in range(4):
        held.hold("a", offset, f"a{offset}")
    held.release(held.covered_below({"a": 2}))
    assert len(held) == 2
    assert held.covered_below({"a": 2}) == []
    assert [h.output for h in held.covered_below({"a": 4})] == ["a2", "a3"]


def test_unreleased_outputs_stay_held_for_the_next_commit() -> None:
    held: HeldOutputs[str, str] = HeldOutputs()
    held.hold("a", 0, "a0")
    first = held.covered_below({"a": 1})
    # The transaction failed: nothing is released, the next commit covers the same outputs.
    assert held.covered_below({"a": 1}) == first
    assert len(held) == 1


def test_drop_forgets_only_the_given_partitions() -> None:
    held: HeldOutputs[str, str] = HeldOutputs()
    held.hold("a", 0, "a0")
    held.hold("a", 1, "a1")
    held.hold("b", 7, "b7")
    assert held.drop(["a", "unknown"]) == 2
    assert len(held) == 1
    assert held.covered_below({"a": 9, "b": 9}) == [Held("b", 7, "b7")]
    assert held.drop_all() == 1
    assert len(held) == 0


def test_holding_an_offset_twice_is_refused() -> None:
    held: HeldOutputs[str, str] = HeldOutputs()
    held.hold("a", 3, "first")
    with pytest.raises(ValueError, match="held already"):
        held.hold("a", 3, "second")
    assert len(held) == 1
    assert held.covered_below({"a": 4}) == [Held("a", 3, "first")]


@given(
    st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 50)), unique=True, max_size=60),
    st.dictionaries(st.sampled_from("abc"), st.integers(0, 51)),
    st.lists(st.sampled_from("abc"), max_size=2),
)
def test_count_always_matches_what_is_held(
    holds: list[tuple[str, int]], points: dict[str, int], dropped: list[str]
) -> None:
    held: HeldOutputs[str, tuple[str, int]] = HeldOutputs()
    for partition, offset in holds:
        held.hold(partition, offset, (partition, offset))
    assert len(held) == len(holds)
    covered = held.covered_below(points)
    expected = sorted(
        (p, o) for p, o in holds if p in points and o < points[p]
    )  # every covered output, each once, below its point
    assert sorted(h.output for h in covered) == expected
    for partition in points:  # within a partition, increasing offsets
        offsets = [h.offset for h in covered if h.partition == partition]
        assert offsets == sorted(offsets)
    held.release(covered)
    remaining = [(p, o) for p, o in holds if (p, o) not in expected]
    assert len(held) == len(remaining)
    assert held.drop(dropped) == sum(1 for p, _ in remaining if p in set(dropped))
    assert len(held) == sum(1 for p, _ in remaining if p not in set(dropped))
    assert len(held) <= len(holds)
