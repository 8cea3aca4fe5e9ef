"""Exactly-once mode: finished outputs held until the transaction that commits their offsets.

A document's result or dead letter may not become visible before its input's offset is committed,
and the offset may only be committed once every earlier message of its partition is finished
(:mod:`daemon.kafka.offsets`). So a finished output is *held* here under its partition and
offset; each commit takes the held outputs *covered* by the new commit points (offset below the
point), writes them with those offsets in one transaction, and *releases* them once it succeeded.
A failed transaction releases nothing: the outputs stay held for the next try (one the broker refused
as too large is *replaced* by a smaller one first). Outputs of a partition taken away are *dropped*;
the partition's new owner reads their inputs again.

:class:`HeldOutputs` is the ledger: pure logic, no I/O, generic over the partition (aiokafka's
``TopicPartition`` in the daemon, anything hashable in tests) and over the output.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

P = TypeVar("P", bound=Hashable)
T = TypeVar("T")  # the output


@dataclass(frozen=True, slots=True)
class Held(Generic[P, T]):
    """One held output and the message it is for."""

    partition: P
    offset: int
    output: T


class HeldOutputs(Generic[P, T]):
    """Finished outputs waiting for their transaction, per partition and offset."""

    def __init__(self) -> None:
        self._held: dict[P, dict[int, T]] = {}
        self._count = 0

    def __len__(self) -> int:
        """How many outputs are held (bounded by the caller: it stops taking in work at a limit)."""
        return self._count

    def hold(self, partition: P, offset: int, output: T) -> None:
        """Keep ``output``, the finished output of the message at ``offset`` of ``partition``."""
        outputs = self._held.setdefault(partition, {})
        if offset in outputs:
            raise ValueError(f"an output for offset {offset} is held already")
        outputs[offset] = output
        self._count += 1

    def covered_below(self, offsets: Mapping[P, int]) -> list[Held[P, T]]:
        """The held outputs that committing ``offsets`` covers (offset below its partition's commit
        point), partition by partition in the order of ``offsets``, by increasing offset within one:
        the order they are written in, so a partition's outputs keep their input order."""
        covered: list[Held[P, T]] = []
        for partition, point in offsets.items():
            outputs = self._held.get(partition, {})
            covered += [
                Held(partition, offset, outputs[offset]) for offset in sorted(outputs) if offset < point
            ]
        return covered

    def replace(self, held: Held[P, T], output: T) -> None:
        """Hold ``output`` instead of ``held``'s (the broker refused that one: a smaller one goes)."""
        outputs = self._held.get(held.partition, {})
        if held.offset not in outputs:
            raise ValueError(f"no output is held for offset {held.offset}")
        outputs[held.offset] = output

    def release(self, covered: Iterable[Held[P, T]]) -> None:
        """``covered`` was written and its offsets committed: forget those outputs."""
        for held in covered:
            del self._held[held.partition][held.offset]
            self._count -= 1

    def drop(self, partitions: Iterable[P]) -> int:
        """Forget every output held for ``partitions`` (taken away, or the consumer stops); how many."""
        dropped = sum(len(self._held.pop(partition, {})) for partition in partitions)
        self._count -= dropped
        return dropped

    def drop_all(self) -> int:
        """Forget every held output; how many."""
        return self.drop(list(self._held))
