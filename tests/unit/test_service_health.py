"""Health means progress: the service with a fake engine that stops answering (tests/doubles/engine.py).

With work in flight and nothing finishing for ``service.stall_seconds``, ``healthy()`` (what /healthz
answers) turns false and the systemd watchdog pings stop; idle with no work, or a long document whose
engine requests keep completing, stays healthy. The real notify socket is used for the pings.

The stall check reads a fake clock that only the test moves: how long the event loop or the process
is held up on a loaded machine changes nothing of what these tests see. What real time remains is
waited for with a generous deadline, never within a short window.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from structlog.typing import EventDict

from daemon.config import Config, EngineConfig, MetricsConfig, ServiceConfig, SummaryConfig
from daemon.contracts import Source
from daemon.folder.files import FilesSource
from daemon.folder.sink import FolderSink
from daemon.intake.progress import ProgressWatch
from daemon.ops.notify import SystemdNotifier
from daemon.service import Service
from tests.doubles.clock import FakeClock
from tests.doubles.engine import FakeEngine
from tests.doubles.sources import IdleSource

STALL = 0.5


def _config(tmp_path: Path, *, fan_out: int = 8, stall: float = STALL) -> Config:
    return Config(
        engine=EngineConfig(model=str(tmp_path / "model"), max_model_len=1024),
        summary=SummaryConfig(max_summary_tokens=16, max_parallel_requests_per_document=fan_out),
        metrics=MetricsConfig(enabled=False),
        service=ServiceConfig(status_interval_seconds=60, stall_seconds=stall, drain_seconds=0),
    )


def _files_source(tmp_path: Path, texts: dict[str, str]) -> FilesSource:
    folder = tmp_path / "in"
    folder.mkdir(exist_ok=True)
    paths = []
    for name, text in texts.items():
        (folder / name).write_text(text)
        paths.append(folder / name)
    outbox = tmp_path / "out"
    return FilesSource(paths, FolderSink(outbox, outbox), max_input_bytes=1 << 20)


@contextlib.asynccontextmanager
async def _running(service: Service) -> AsyncIterator[asyncio.Task[None]]:
    run = asyncio.create_task(service.run())
    try:
        async with asyncio.timeout(10):
            while not service.ready():  # noqa: ASYNC110 - readiness has no event to wait on
                await asyncio.sleep(0.01)
        yield run
    finally:
        service.request_stop()
        service.request_stop()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(run, 10)


async def _wedged(request_id: str) -> None:
    await asyncio.Event().wait()  # an engine that accepted the request and never answers


async def _until(condition: Callable[[], bool], seconds: float = 10) -> None:
    async with asyncio.timeout(seconds):
        while not condition():  # noqa: ASYNC110 - what the tests wait for has no event
            await asyncio.sleep(0.01)


def _service(
    config: Config, engine: FakeEngine, tokenizer: Any, sources: list[Source], **kwargs: Any
) -> Service:
    return Service(config, engine=engine, tokenizer=tokenizer, sources=sources, **kwargs)


async def test_a_wedged_engine_with_work_in_flight_turns_unhealthy_after_the_stall_time(
    tmp_path: Path, tokenizer: Any
) -> None:
    clock = FakeClock()
    engine = FakeEngine(behaviour=_wedged)
    source = _files_source(tmp_path, {"a.txt": "Some words to summarize. " * 10})
    service = _service(_config(tmp_path), engine, tokenizer, [source], clock=clock)
    async with _running(service):
        await _until(lambda: engine.active == 1)
        assert service.healthy()  # work seen: its stall clock starts
        clock.advance(STALL)
        assert service.healthy()  # within the stall time
        clock.advance(0.01)
        assert not service.healthy()
        engine.behaviour = None  # not that this one would come back: its request is stuck


async def test_idle_with_no_work_stays_healthy(tmp_path: Path, tokenizer: Any) -> None:
    clock = FakeClock()
    service = _service(_config(tmp_path), FakeEngine(), tokenizer, [IdleSource()], clock=clock)
    async with _running(service):
        for _ in range(3):
            clock.advance(STALL)
            await asyncio.sleep(0.01)
            assert service.healthy()


async def test_a_long_document_whose_requests_keep_completing_stays_healthy(
    tmp_path: Path, tokenizer: Any
) -> None:
    clock = FakeClock()
    healthy: list[bool] = []

    async def a_third_of_the_stall_time(request_id: str) -> None:
        clock.advance(STALL / 3)
        healthy.append(service.healthy())  # the longest since the last progress, at each request

    engine = FakeEngine(behaviour=a_third_of_the_stall_time)  # one request at a time (fan-out 1)
    long_text = "\n\n".join(f"Paragraph {n}. " + "Words of the contract. " * 60 for n in range(30))
    source = _files_source(tmp_path, {"long.txt": long_text})
    service = _service(_config(tmp_path, fan_out=1), engine, tokenizer, [source], clock=clock)
    run = asyncio.create_task(service.run())
    while not run.done():
        healthy.append(service.healthy())
        await asyncio.sleep(0.05)
    await run
    assert len(engine.calls) >= 8
    assert clock.now > 2 * STALL  # the document took many stall times
    assert all(healthy)
    assert service.stats.succeeded == 1


@pytest.fixture
def notify_socket(tmp_path: Path) -> Iterator[tuple[str, socket.socket]]:
    path = str(tmp_path / "notify.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    server.bind(path)
    server.setblocking(False)
    yield path, server
    server.close()


def _pings(server: socket.socket) -> int:
    count = 0
    with contextlib.suppress(BlockingIOError):
        while True:
            count += server.recv(4096).decode().split("\n").count("WATCHDOG=1")
    return count


async def test_the_watchdog_is_no_longer_fed_once_unhealthy(
    tmp_path: Path, tokenizer: Any, notify_socket: tuple[str, socket.socket], logs: list[EventDict]
) -> None:
    path, server = notify_socket
    notifier = SystemdNotifier(path, watchdog_usec=100_000)  # a ping every 50 ms
    clock = FakeClock()
    engine = FakeEngine(behaviour=_wedged)
    source = _files_source(tmp_path, {"a.txt": "Some words to summarize. " * 10})
    service = _service(_config(tmp_path), engine, tokenizer, [source], notifier=notifier, clock=clock)
    async with _running(service):
        await _until(lambda: engine.active == 1)
        fed = 0

        def fed_twice() -> bool:
            nonlocal fed
            fed += _pings(server)
            return fed >= 2

        await _until(fed_twice)  # healthy, with work in flight: fed
        clock.advance(STALL + 0.1)

        def withheld() -> bool:
            _pings(server)  # read meanwhile: a full socket would block the sender
            return any("watchdog pings withheld" in str(e["event"]) for e in logs)

        await _until(withheld)  # the ping task saw the stall; what it sent before is read
        await asyncio.sleep(0.3)
        assert not service.healthy()
        assert _pings(server) == 0  # stalled: systemd restarts it after WatchdogSec


def test_the_watch_clock_starts_when_work_is_first_seen() -> None:
    clock = FakeClock()
    watch = ProgressWatch(10, clock=clock)
    clock.now = 100.0  # idle for long: no stall, and the clock does not run while idle
    assert not watch.stalled(has_work=False)
    assert not watch.stalled(has_work=True)  # work just seen: its clock starts now
    clock.now = 109.0
    assert not watch.stalled(has_work=True)
    clock.now = 111.0
    assert watch.stalled(has_work=True)
    watch.progressed()
    assert not watch.stalled(has_work=True)
    assert not ProgressWatch(0, clock=clock).stalled(has_work=True)  # 0: off


class _SlowSource(IdleSource):
    """A source whose start (the Kafka source's: connect the producer, join the group and get an
    assignment) takes until the test lets it finish."""

    def __init__(self) -> None:
        self.connected = asyncio.Event()

    async def start(self) -> None:
        await self.connected.wait()


async def test_not_ready_until_every_source_has_connected(tmp_path: Path, tokenizer: Any) -> None:
    # /readyz (and so a Kubernetes readiness probe) answers 503 until the engine is warm AND every
    # source has started: the Kafka source's start returns once its producer is connected and its
    # consumer has joined the group with an assignment.
    slow = _SlowSource()
    engine = FakeEngine()
    service = _service(_config(tmp_path), engine, tokenizer, [IdleSource(), slow])
    run = asyncio.create_task(service.run())
    try:
        async with asyncio.timeout(10):
            while not engine.is_running:  # noqa: ASYNC110 - the fake engine has no event for it
                await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)
        assert service.healthy()
        assert not service.ready()
        slow.connected.set()
        async with asyncio.timeout(10):
            while not service.ready():  # noqa: ASYNC110
                await asyncio.sleep(0.01)
        service.request_stop()
        assert not service.ready()  # draining: no longer ready
    finally:
        service.request_stop()
        await asyncio.wait_for(run, 10)


class _Fleet(FakeEngine):
    """A :class:`~daemon.contracts.FleetEngine`: servers that can all be down at once."""

    def __init__(self) -> None:
        super().__init__()
        self.problem: str | None = None
        self.engines = 2
        self._listeners: list[Callable[[], None]] = []
        self._up = asyncio.Event()
        self._up.set()

    def on_change(self, callback: Callable[[], None]) -> None:
        self._listeners.append(callback)

    async def wait_available(self) -> None:
        await self._up.wait()

    def set_down(self, down: bool) -> None:
        self.problem = "no remote endpoint takes work (all down)" if down else None
        if down:
            self._up.clear()
        else:
            self._up.set()
        for listener in self._listeners:
            listener()


class _PausableIdleSource(IdleSource):
    def __init__(self) -> None:
        self.paused: list[bool] = []

    def pause_intake(self) -> None:
        self.paused.append(True)

    def resume_intake(self) -> None:
        self.paused.append(False)


async def test_with_every_server_down_the_service_is_unhealthy_pauses_intake_and_keeps_the_watchdog(
    tmp_path: Path, tokenizer: Any
) -> None:
    fleet, source, clock = _Fleet(), _PausableIdleSource(), FakeClock()
    service = _service(_config(tmp_path), fleet, tokenizer, [source], clock=clock)
    async with _running(service):
        assert service.healthy()
        assert source.paused == [False]  # told at start: the fleet takes work
        fleet.set_down(True)
        assert source.paused[-1:] == [True]
        assert not service.healthy()  # /healthz: 503
        assert service._alive()  # the watchdog is still fed: a restart cannot bring servers back
        clock.advance(STALL * 3)  # no stall is counted while nothing can progress
        assert service._alive()
        fleet.set_down(False)
        assert source.paused[-1:] == [False]
        assert service.healthy()
