"""Stopping and crashing with work in flight: nothing is lost, nothing is acknowledged unfinished.

Real engine, tiny model. Summaries are long enough (hundreds of tokens) that documents are still
in flight when the test acts.
"""

from __future__ import annotations

import hashlib
import json
import signal
import socket
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.e2e.harness import DaemonProcess, Layout, drop_file, wait_for

pytestmark = pytest.mark.engine


def _fill_inbox(layout: Layout, corpus: Path, count: int) -> dict[str, bytes]:
    """``count`` distinct documents cut from the real corpus (2-12 KB each)."""
    sources = sorted((corpus / "docs").glob("*.txt"))
    inputs: dict[str, bytes] = {}
    for index in range(count):
        text = sources[index % len(sources)].read_text(encoding="utf-8")
        size = 2000 + (index * 997) % 10_000
        data = f"Document {index}.\n\n{text[:size]}".encode()
        name = f"doc-{index:03d}.txt"
        drop_file(layout.inbox, name, data)
        inputs[name] = data
    return inputs


def _check_consistent(layout: Layout, inputs: dict[str, bytes]) -> None:
    """Each input is in exactly one place; acknowledged ones have their complete record. Inputs in
    flight at a crash are in the inbox's work folder (claimed), and count as unacknowledged."""
    inbox, work, done, failed = (
        layout.inputs_in(layout.inbox),
        layout.inputs_in_work(),
        layout.inputs_in(layout.done),
        layout.inputs_in(layout.failed),
    )
    assert inbox | work | done | failed == set(inputs), "an input went missing"
    assert len(inbox) + len(work) + len(done) + len(failed) == len(inputs), "an input is in two places"
    for name in done:
        result = layout.result(name)  # parses: never a partial file
        assert result["sha256"] == hashlib.sha256(inputs[name]).hexdigest()
    for name in failed:
        assert layout.error(name)["reason"]
    for path in layout.outbox.glob("*.summary.json"):
        json.loads(path.read_text(encoding="utf-8"))


class NotifyListener:
    """A real datagram socket standing where systemd's NOTIFY_SOCKET would be; keeps every message."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.messages: list[str] = []
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._socket.bind(str(path))
        self._socket.settimeout(0.2)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._listen, daemon=True)
        self._thread.start()

    def _listen(self) -> None:
        while not self._stop.is_set():
            try:
                self.messages.append(self._socket.recv(4096).decode())
            except TimeoutError:
                continue

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._socket.close()

    def index(self, field: str) -> int:
        """Position of the first message holding ``field`` (ValueError if none)."""
        return next(i for i, message in enumerate(self.messages) if field in message.split("\n"))


def test_sigterm_drains_in_flight_documents(
    layout: Layout, start_daemon: Callable[..., DaemonProcess], corpus: Path
) -> None:
    inputs = _fill_inbox(layout, corpus, 12)
    layout.write_config(**{"summary.max_summary_tokens": "192", "service.drain_seconds": "240"})
    # As under systemd Type=notify with WatchdogSec=1: READY, STATUS, STOPPING and watchdog pings.
    notify = NotifyListener(layout.root / "notify.sock")
    daemon = start_daemon({"NOTIFY_SOCKET": str(notify.path), "WATCHDOG_USEC": "1000000"})
    daemon.wait_ready()
    wait_for(lambda: any("READY=1" in m for m in notify.messages), 10, "READY=1 on the notify socket")
    # All twelve are taken in (claimed out of the inbox) at once: the in-flight limit is 128. Stop
    # while they run.
    wait_for(lambda: not layout.inputs_in(layout.inbox), 60, "all twelve to be taken in")
    daemon.signal(signal.SIGTERM)
    assert daemon.wait_exit(timeout=300) == 0, daemon.log_tail()
    assert daemon.leftover_processes() == [], daemon.stop_log()
    drains = [e for e in daemon.log_events() if e.get("event") == "draining in-flight documents"]
    assert drains, "no drain happened: nothing was in flight at SIGTERM, so the test proved nothing"
    assert drains[0]["inflight"] > 0
    # The drain let every in-flight document finish and be acknowledged.
    assert layout.inputs_in(layout.done) == set(inputs), daemon.log_tail()
    _check_consistent(layout, inputs)
    notify.close()
    ready, stopping = notify.index("READY=1"), notify.index("STOPPING=1")
    assert notify.index("STATUS=starting the engine") < ready < stopping
    # The event loop pinged the watchdog all along, also while the engine was starting (>20 s).
    assert notify.messages[:ready].count("WATCHDOG=1") >= 10
    assert "WATCHDOG=1" in notify.messages[stopping:]


def test_drain_deadline_aborts_and_leaves_inputs(
    layout: Layout, start_daemon: Callable[..., DaemonProcess], corpus: Path
) -> None:
    inputs = _fill_inbox(layout, corpus, 12)
    layout.write_config(**{"summary.max_summary_tokens": "1024", "service.drain_seconds": "1"})
    daemon = start_daemon()
    daemon.wait_ready()
    daemon.signal(signal.SIGTERM)
    assert daemon.wait_exit(timeout=120) == 0, daemon.log_tail()
    assert daemon.leftover_processes() == [], daemon.stop_log()
    # Unfinished documents were aborted and stay in the inbox, with no result written for them.
    left = layout.inputs_in(layout.inbox)
    assert left, "expected documents still unfinished after a 1 s drain"
    assert not {f"{name}.summary.json" for name in left} & layout.names(layout.outbox)
    _check_consistent(layout, inputs)
    assert any(e.get("event", "").startswith("drain deadline passed") for e in daemon.log_events())


def test_kill_9_then_restart_loses_nothing(
    layout: Layout, start_daemon: Callable[..., DaemonProcess], corpus: Path
) -> None:
    inputs = _fill_inbox(layout, corpus, 40)
    inputs["bad-latin1.txt"] = "caf\xe9 cr\xe8me".encode("latin-1") * 100
    drop_file(layout.inbox, "bad-latin1.txt", inputs["bad-latin1.txt"])
    # 8 at a time, so the crash finds some done, some in flight and some not started.
    layout.write_config(**{"summary.max_summary_tokens": "128", "service.max_inflight_documents": "8"})
    first = start_daemon()
    first.wait_ready()
    wait_for(lambda: len(layout.inputs_in(layout.done)) >= 3, 240, "a few results before the crash")
    first.kill_group()  # kill -9 of the daemon and its engine processes, as a crash plus systemd would
    assert first.leftover_processes() == [], first.stop_log()
    done_before_crash = layout.inputs_in(layout.done)
    assert layout.pending(), "the crash came too late: nothing was left to redo"
    _check_consistent(layout, inputs)
    # A result written just before the crash, whose input was not yet moved, is simply redone.
    results_before_crash = {
        name: layout.result(name)["created_at"]
        for name in inputs
        if (layout.outbox / f"{name}.summary.json").exists()
    }

    second = start_daemon()
    second.wait_ready()
    wait_for(lambda: not layout.pending(), 300, "the restarted daemon to finish the backlog")
    second.signal(signal.SIGTERM)
    assert second.wait_exit() == 0, second.log_tail()

    _check_consistent(layout, inputs)
    assert layout.inputs_in(layout.failed) == {"bad-latin1.txt"}
    assert layout.inputs_in(layout.done) == set(inputs) - {"bad-latin1.txt"}
    assert done_before_crash <= layout.inputs_in(layout.done)
    # Documents acknowledged before the crash were not summarized again.
    for name in done_before_crash:
        assert layout.result(name)["created_at"] == results_before_crash[name]
    redone = [n for n, created in results_before_crash.items() if n not in done_before_crash]
    print(
        f"kill -9: {len(done_before_crash)} done before the crash, {len(redone)} results rewritten on restart"
    )
