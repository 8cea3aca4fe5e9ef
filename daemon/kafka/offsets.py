"""Which Kafka offsets may be committed when documents finish out of order.

Kafka's committed offset of a partition means "everything below this is done". Documents finish in
any order (a two-page letter overtakes a 300-page contract), so a partition's commit point is the
lowest offset taken in and not yet finished, or one past the last taken offset when all are finished.

:class:`PartitionOffsets` tracks one partition for as long as this consumer owns it. When the
partition is revoked (a rebalance, or the consumer stopping) it is :meth:`~PartitionOffsets.revoke`\\ d:
its last commit point is committed by the caller, and from then on nothing it learns is ever
committed again: documents of that partition still in flight may finish (their results are written,
at least once), but the partition now belongs to another consumer, which reads them again from the
committed offset. A partition assigned again later gets a fresh tracker.

:class:`OffsetBook` holds the trackers of the partitions currently owned. Pure logic, no I/O.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Iterable
from typing import Generic, TypeVar

P = TypeVar("P", bound=Hashable)


class PartitionOffsets:
    """Offsets of one owned partition: taken in, finished, committable."""

    __slots__ = ("_finished", "_next", "_pending", "committed", "revoked")

    def __init__(self, committed: int | None = None) -> None:
        """``committed``: the partition's committed offset when it was assigned, if known."""
        self._pending: deque[int] = deque()  # taken in, not all finished; increasing
        self._finished: set[int] = set()  # finished offsets still behind an unfinished one
        self._next: int | None = committed  # everything below is finished
        self.committed = committed
        self.revoked = False

    @property
    def pending(self) -> int:
        """Offsets taken in and not yet finished."""
        return len(self._pending) - len(self._finished)

    @property
    def commit_point(self) -> int | None:
        """The offset to commit: every offset below it is finished (None if nothing is known)."""
        return self._pending[0] if self._pending else self._next

    def add(self, offset: int) -> None:
        """A message at ``offset`` was taken in. Offsets of a partition arrive in increasing order."""
        last = self._pending[-1] if self._pending else (None if self._next is None else self._next - 1)
        if last is not None and offset <= last:
            raise ValueError(f"offset {offset} taken in after {last}: offsets must increase")
        self._pending.append(offset)

    def finish(self, offset: int) -> None:
        """The message at ``offset`` is finished (result or dead letter written). Ignored once revoked."""
        if self.revoked:
            return
        if not self._pending or offset < self._pending[0] or offset > self._pending[-1]:
            raise ValueError(f"offset {offset} was not taken in or is finished already")
        if offset in self._finished:
            raise ValueError(f"offset {offset} is finished already")
        self._finished.add(offset)
        while self._pending and self._pending[0] in self._finished:
            done = self._pending.popleft()
            self._finished.discard(done)
            self._next = done + 1

    def to_commit(self) -> int | None:
        """The commit point if it is new and the partition is still owned, else None."""
        point = self.commit_point
        if self.revoked or point is None or (self.committed is not None and point <= self.committed):
            return None
        return point

    def mark_committed(self, offset: int) -> None:
        """``offset`` was committed."""
        if self.committed is None or offset > self.committed:
            self.committed = offset

    def revoke(self) -> int | None:
        """The partition is no longer ours: return the last offset to commit (None if nothing new);
        after this, :meth:`to_commit` always says None."""
        last = self.to_commit()
        self.revoked = True
        return last


class OffsetBook(Generic[P]):
    """The trackers of the partitions this consumer owns now."""

    def __init__(self) -> None:
        self._owned: dict[P, PartitionOffsets] = {}

    def __contains__(self, partition: object) -> bool:
        return partition in self._owned

    @property
    def partitions(self) -> list[P]:
        """The partitions owned now."""
        return list(self._owned)

    def tracker(self, partition: P, committed: int | None = None) -> PartitionOffsets:
        """The tracker of an owned partition, created on first use (a newly assigned one)."""
        tracker = self._owned.get(partition)
        if tracker is None:
            tracker = self._owned[partition] = PartitionOffsets(committed)
        return tracker

    def get(self, partition: P) -> PartitionOffsets | None:
        """The tracker of ``partition`` if it is owned and known, else None."""
        return self._owned.get(partition)

    def to_commit(self) -> dict[P, int]:
        """Every owned partition's new commit point."""
        commits = {}
        for partition, tracker in self._owned.items():
            point = tracker.to_commit()
            if point is not None:
                commits[partition] = point
        return commits

    def mark_committed(self, offsets: dict[P, int]) -> None:
        """These commit points were committed (partitions revoked meanwhile are skipped)."""
        for partition, offset in offsets.items():
            tracker = self._owned.get(partition)
            if tracker is not None:
                tracker.mark_committed(offset)

    def revoke(self, partitions: Iterable[P]) -> dict[P, int]:
        """Partitions taken away: forget them and return their last commit points (to commit now)."""
        last: dict[P, int] = {}
        for partition in partitions:
            tracker = self._owned.pop(partition, None)
            if tracker is None:
                continue
            point = tracker.revoke()
            if point is not None:
                last[partition] = point
        return last

    def revoke_all(self) -> dict[P, int]:
        """Every partition taken away (the consumer stops)."""
        return self.revoke(list(self._owned))
