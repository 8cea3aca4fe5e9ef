"""daemon.ops.notify against a real AF_UNIX datagram socket, as systemd gives one in NOTIFY_SOCKET."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
import types
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from structlog.typing import EventDict

from daemon.ops import notify
from daemon.ops.notify import SystemdNotifier


@pytest.fixture
def notify_socket(tmp_path: Path) -> Iterator[tuple[str, socket.socket]]:
    path = str(tmp_path / "notify.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    server.bind(path)
    server.settimeout(2.0)
    yield path, server
    server.close()


def _receive(server: socket.socket) -> list[str]:
    return server.recv(4096).decode().split("\n")


async def test_ready_stopping_and_status_messages(notify_socket: tuple[str, socket.socket]) -> None:
    path, server = notify_socket
    async with SystemdNotifier(path) as notifier:
        assert notifier.enabled
        notifier.ready("ready; backlog 3")
        assert _receive(server) == ["READY=1", "STATUS=ready; backlog 3"]
        notifier.status("12 summarized")
        assert _receive(server) == ["STATUS=12 summarized"]
        notifier.stopping()
        assert _receive(server) == ["STOPPING=1", "STATUS=draining"]


async def test_watchdog_pings_at_half_the_period_until_stopped(
    notify_socket: tuple[str, socket.socket], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, server = notify_socket
    server.setblocking(False)
    # The waits between pings, as the ping task asks for them: how long they really take depends
    # on how loaded the machine is, what is asked for does not.
    waits: list[float] = []

    async def recorded_sleep(seconds: float) -> None:
        waits.append(seconds)
        await asyncio.sleep(seconds)

    monkeypatch.setattr(
        notify, "asyncio", types.SimpleNamespace(**{**vars(asyncio), "sleep": recorded_sleep})
    )
    notifier = SystemdNotifier(path, watchdog_usec=200_000)  # pings every 0.1 s
    started = time.monotonic()
    await notifier.start()
    await notifier.start()  # idempotent: still one ping task
    assert [task.get_name() for task in asyncio.all_tasks()].count("watchdog") == 1
    pings: list[str] = []

    def received() -> int:
        with contextlib.suppress(BlockingIOError):
            while True:
                pings.append(server.recv(64).decode())
        return len(pings)

    async with asyncio.timeout(10):
        while received() < 5:  # noqa: ASYNC110 - a datagram socket polled, as systemd's is not
            await asyncio.sleep(0.01)
    elapsed = time.monotonic() - started
    await notifier.stop()
    received()
    assert set(pings) == {"WATCHDOG=1"}
    assert waits[: len(pings) - 1] == [0.1] * (len(pings) - 1)  # half the watchdog period
    assert len(pings) <= elapsed / 0.1 + 2  # never more often than that
    await asyncio.sleep(0.25)
    with pytest.raises(BlockingIOError):
        server.recv(64)  # no pings after stop
    await notifier.stop()  # idempotent


async def test_abstract_socket_name(tmp_path: Path) -> None:
    name = f"docsumd-test-{uuid.uuid4().hex}"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    server.bind("\0" + name)
    server.settimeout(2.0)
    try:
        async with SystemdNotifier("@" + name) as notifier:
            notifier.ready()
            assert _receive(server)[0] == "READY=1"
    finally:
        server.close()


async def test_without_a_socket_everything_is_a_no_op() -> None:
    async with SystemdNotifier(None, watchdog_usec=1000) as notifier:
        assert not notifier.enabled
        notifier.ready()
        notifier.stopping()


async def test_a_vanished_socket_is_logged_not_raised(tmp_path: Path) -> None:
    async with SystemdNotifier(str(tmp_path / "gone.sock")) as notifier:
        notifier.ready()  # no exception: systemd going away must not take the daemon down


@pytest.mark.timeout(20, method="thread")  # a blocking send hangs here: fail, do not wait forever
async def test_a_receiver_that_stopped_reading_never_blocks_the_sender(
    notify_socket: tuple[str, socket.socket], logs: list[EventDict]
) -> None:
    # The receiver's queue fills (a handful of datagrams) and stays full: each send past it fails at
    # once and is logged; the event loop is never held.
    path, _ = notify_socket
    async with SystemdNotifier(path) as notifier:
        for number in range(200):
            notifier.status(f"message {number}")
    failed = [event for event in logs if event["event"] == "systemd notify failed"]
    assert failed, "the queue never filled"
    assert len(failed) < 200
