"""Unit tests of daemon.kafka.offsets: commit points under out-of-order completion and rebalances."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from daemon.kafka.offsets import OffsetBook, PartitionOffsets


def test_nothing_known_commits_nothing() -> None:
    tracker = PartitionOffsets()
    assert tracker.commit_point is None
    assert tracker.to_commit() is None
    assert tracker.pending == 0


def test_in_order_completion_advances_the_commit_point() -> None:
    tracker = PartitionOffsets()
    for offset in (10, 11, 12):
        tracker.add(offset)
    assert tracker.commit_point == 10
    tracker.finish(10)
    assert tracker.commit_point == 11
    tracker.finish(11)
    tracker.finish(12)
    assert tracker.commit_point == 13
    assert tracker.pending == 0


def test_out_of_order_completion_commits_only_the_finished_prefix() -> None:
    tracker = PartitionOffsets(committed=10)
    for offset in range(10, 15):
        tracker.add(offset)
    tracker.finish(12)
    tracker.finish(13)
    assert tracker.commit_point == 10  # 10 and 11 still running
    assert tracker.to_commit() is None  # 10 is committed already
    tracker.finish(10)
    assert tracker.to_commit() == 11
    tracker.finish(11)
    assert tracker.to_commit() == 14  # 12 and 13 were finished before
    tracker.mark_committed(14)
    assert tracker.to_commit() is None
    tracker.finish(14)
    assert tracker.to_commit() == 15


def test_gaps_in_offsets_are_allowed() -> None:
    # Compacted topics and transaction markers leave holes in a partition's offsets.
    tracker = PartitionOffsets()
    tracker.add(3)
    tracker.add(7)
    tracker.finish(7)
    assert tracker.commit_point == 3
    tracker.finish(3)
    assert tracker.commit_point == 8


def test_offsets_must_increase_and_finish_once() -> None:
    tracker = PartitionOffsets()
    tracker.add(5)
    with pytest.raises(ValueError, match="must increase"):
        tracker.add(5)
    with pytest.raises(ValueError, match="not taken in"):
        tracker.finish(4)
    tracker.add(6)
    tracker.finish(6)
    with pytest.raises(ValueError, match="already"):
        tracker.finish(6)
    tracker.finish(5)
    with pytest.raises(ValueError, match="must increase"):
        tracker.add(6)


def test_a_revoked_partition_is_never_committed_again() -> None:
    tracker = PartitionOffsets(committed=0)
    for offset in range(4):
        tracker.add(offset)
    tracker.finish(0)
    tracker.finish(2)
    assert tracker.revoke() == 1  # the last commit, made by the rebalance listener
    tracker.finish(1)  # an in-flight document of the partition finishes after the revocation
    tracker.finish(3)
    assert tracker.to_commit() is None
    assert tracker.revoke() is None


def test_book_commits_per_partition_and_forgets_revoked_ones() -> None:
    book: OffsetBook[str] = OffsetBook()
    a, b = book.tracker("a"), book.tracker("b", committed=100)
    for offset in range(3):
        a.add(offset)
        b.add(100 + offset)
    a.finish(1)
    b.finish(100)
    assert book.to_commit() == {"a": 0, "b": 101}
    book.mark_committed({"a": 0, "b": 101})
    assert book.to_commit() == {}
    a.finish(0)
    b.finish(102)
    assert book.revoke(["b"]) == {}  # 101 is still unfinished: nothing new for b
    assert "b" not in book
    assert book.partitions == ["a"]
    b.finish(101)  # finishes after its partition was taken away
    assert book.to_commit() == {"a": 2}
    # Assigned again: a fresh tracker, which the old one's items cannot touch.
    again = book.tracker("b", committed=101)
    assert again is not b
    assert again.to_commit() is None
    assert book.revoke_all() == {"a": 2}
    assert book.partitions == []


def test_book_skips_marking_partitions_revoked_while_committing() -> None:
    book: OffsetBook[str] = OffsetBook()
    tracker = book.tracker("a")
    tracker.add(0)
    tracker.finish(0)
    commits = book.to_commit()
    book.revoke(["a"])
    book.mark_committed(commits)
    assert book.get("a") is None


@given(st.lists(st.integers(min_value=1, max_value=3), min_size=1, max_size=60), st.randoms())
def test_commit_point_is_always_the_lowest_unfinished_offset(gaps: list[int], rnd: random.Random) -> None:
    offsets = []
    offset = 0
    for gap in gaps:
        offset += gap
        offsets.append(offset)
    tracker = PartitionOffsets()
    for value in offsets:
        tracker.add(value)
    order = offsets[:]
    rnd.shuffle(order)
    finished: set[int] = set()
    for value in order:
        tracker.finish(value)
        finished.add(value)
        unfinished = [o for o in offsets if o not in finished]
        expected = unfinished[0] if unfinished else offsets[-1] + 1
        assert tracker.commit_point == expected
        assert all(o in finished for o in offsets if o < expected)  # never past an unfinished one
    assert tracker.pending == 0
