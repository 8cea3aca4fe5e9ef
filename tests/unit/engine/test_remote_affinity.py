"""Document affinity (daemon/engine/remote/affinity.py): one endpoint per document, consistent
hashing with a load bound, pins that move only when their endpoint goes down."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import pytest

from daemon.engine.remote.affinity import Affinity
from tests.doubles.clock import FakeClock


@dataclass
class FakeEndpoint:
    key: str
    usable: bool = True
    busy: bool = False
    cooling: bool = False
    load: int = 0


def _fleet(count: int = 3) -> list[FakeEndpoint]:
    return [FakeEndpoint(f"http://server-{i}:8000") for i in range(count)]


def test_every_request_of_a_document_goes_to_the_same_endpoint() -> None:
    fleet = _fleet()
    affinity = Affinity(fleet)
    first = affinity.place("contract-17.pdf", 4000)
    assert first is not None
    first.load += 4000  # its parts are running there
    for _ in range(10):
        assert affinity.place("contract-17.pdf", 4000) is first


def test_the_same_document_lands_on_the_same_endpoint_in_another_process() -> None:
    # The ring is built from stable hashes, not Python's salted hash(): a restarted daemon (or its
    # retry after a crash) sends a document where its prefix may still be cached.
    one, two = Affinity(_fleet()), Affinity(_fleet())
    for doc in (f"doc-{i}" for i in range(50)):
        placed_one, placed_two = one.place(doc, 100), two.place(doc, 100)
        assert placed_one is not None
        assert placed_two is not None
        assert placed_one.key == placed_two.key


def test_documents_spread_over_the_fleet() -> None:
    fleet = _fleet(3)
    affinity = Affinity(fleet)
    counts = Counter(affinity.order(f"doc-{i}")[0].key for i in range(3000))
    assert min(counts.values()) > 0.6 * 1000, counts  # each about a third


def test_the_load_bound_sends_a_new_document_elsewhere_but_keeps_the_pinned_ones() -> None:
    fleet = _fleet(2)
    affinity = Affinity(fleet, load_factor=1.25)
    home = affinity.order("big")[0]
    other = next(endpoint for endpoint in fleet if endpoint is not home)
    assert affinity.place("big", 1000) is home
    home.load = 10_000  # the home endpoint is far over the fleet's mean
    # A new document whose first choice is that endpoint goes to the other one...
    newcomer = next(f"doc-{i}" for i in range(1000) if affinity.order(f"doc-{i}")[0] is home)
    assert affinity.place(newcomer, 1000) is other
    # ...while the pinned document's requests still go home.
    assert affinity.place("big", 1000) is home


def test_a_busy_endpoint_takes_no_new_document_while_another_can() -> None:
    fleet = _fleet(2)
    affinity = Affinity(fleet)
    home = affinity.order("doc")[0]
    home.busy = True
    placed = affinity.place("doc", 10)
    assert placed is not None
    assert placed is not home
    for endpoint in fleet:
        endpoint.busy = True
    # Every endpoint busy: the least loaded takes it rather than nobody.
    fleet[0].load, fleet[1].load = 500, 100
    assert affinity.place("doc-new", 10) is fleet[1]


def test_a_document_moves_as_a_whole_when_its_endpoint_goes_down() -> None:
    fleet = _fleet(3)
    affinity = Affinity(fleet)
    home = affinity.place("doc", 10)
    assert home is not None
    home.usable = False
    assert affinity.unpin_endpoint(home) == 1
    new_home = affinity.place("doc", 10)
    assert new_home is not None
    assert new_home is not home
    home.usable = True  # back: the document stays where it went (its prefix is cached there now)
    assert affinity.place("doc", 10) is new_home


def test_a_refused_request_tries_another_endpoint_without_moving_its_document() -> None:
    fleet = _fleet(2)
    affinity = Affinity(fleet)
    home = affinity.place("doc", 10)
    assert home is not None
    elsewhere = affinity.place("doc", 10, avoid=frozenset({home.key}))
    assert elsewhere is not None
    assert elsewhere is not home
    assert affinity.pinned_to("doc") is home
    home.cooling = True  # refused lately: the document's next requests go elsewhere too...
    assert affinity.place("doc", 10) is elsewhere
    assert affinity.pinned_to("doc") is home
    elsewhere.busy = True  # ...unless nothing else is free
    assert affinity.place("doc", 10) is home


def test_nothing_is_placed_while_no_endpoint_is_usable() -> None:
    fleet = _fleet(2)
    for endpoint in fleet:
        endpoint.usable = False
    assert Affinity(fleet).place("doc", 10) is None


def test_pins_are_forgotten_after_pin_seconds_unused() -> None:
    clock = FakeClock()
    fleet = _fleet(2)
    affinity = Affinity(fleet, pin_seconds=60, clock=clock)
    home = affinity.place("doc", 10)
    assert home is not None
    clock.advance(61)
    assert affinity.pinned_to("doc") is None


def test_a_load_factor_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        Affinity(_fleet(), load_factor=0.9)
