"""A real daemon out of file descriptors: it waits, logs rarely, and carries on once they are back.

The daemon (real vLLM engine, tiny model, the watched folder) runs until ready; then the test lowers
its main process's open-file limit to what it already holds (``prlimit``, as an exhausted
``LimitNOFILE`` would be), so every new descriptor fails with EMFILE. Meanwhile documents arrive in
the inbox (the rescan, every second here, cannot open it; reading them cannot open them) and clients
connect to the metrics endpoint (accepting fails). The daemon must stay up, log the condition a few
times at most (the issue saw 16,108 lines in 10 s, then exit 1), and once the limit is raised again
summarize the documents and serve the endpoint, then stop cleanly. The engine's own processes keep
their limits: this is about the main process, where docsumd's code runs.
"""

from __future__ import annotations

import json
import resource
import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.e2e.harness import DaemonProcess, Layout, drop_file, wait_for

pytestmark = pytest.mark.engine

HOLD_SECONDS = 12.0
SMALL_DOCUMENT = "legal-cal-ms-rl.txt"


def test_out_of_descriptors_is_waited_out(
    layout: Layout, start_daemon: Callable[..., DaemonProcess], corpus: Path
) -> None:
    layout.write_config(**{"sources.folder.rescan_seconds": "1", "summary.max_summary_tokens": "16"})
    daemon = start_daemon()
    daemon.wait_ready()
    assert daemon.proc is not None
    pid = daemon.proc.pid
    soft, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    lines_before = len(daemon.log_path.read_text(errors="replace").splitlines())
    # A new descriptor takes the lowest free number and fails unless that is below the soft limit.
    # A soft limit of 3 fails every new descriptor, as a full table does, while the ones already open
    # keep working: 0-2 are the daemon's stdin (/dev/null) and its log, open for its whole life.
    # (A limit at the lowest free number, taken from /proc/PID/fd, raced: a descriptor open for a
    # moment while the test listed them freed a number below the limit, and a document was read
    # through it. A limit of 0 made poll() fail with EINVAL, as it does for more descriptors than
    # the limit, which a full table does not: vLLM's engine monitor thread, which polls one process
    # sentinel every second, died of it in every run, seen once its traceback split a log line.)
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (3, hard))
    clients: list[socket.socket] = []
    try:
        document = (corpus / "docs" / SMALL_DOCUMENT).read_bytes()
        for index in range(3):
            drop_file(layout.inbox, f"doc-{index}.txt", document)
        held_until = time.monotonic() + HOLD_SECONDS
        while time.monotonic() < held_until:
            # Connections wait in the listen backlog: the daemon cannot accept them.
            clients.append(socket.create_connection(("127.0.0.1", layout.metrics_port), timeout=5))
            assert daemon.proc.poll() is None, daemon.log_tail()
            time.sleep(1.0)
        assert not layout.inputs_in(layout.done), "a document was read although no descriptor was free"
        assert not layout.inputs_in(layout.failed), "a document failed for want of descriptors"
    finally:
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (soft, hard))
        for client in clients:
            client.close()
    lines = daemon.log_path.read_text(errors="replace").splitlines()[lines_before:]
    events = [json.loads(line) for line in lines if line.startswith("{")]
    warnings = [e for e in events if e.get("event") == "out of file descriptors; retrying"]
    places = sorted({str(e.get("where")) for e in warnings})
    print(
        f"{HOLD_SECONDS:.0f} s without descriptors: {len(lines)} log lines, {len(warnings)} warnings "
        f"from {places}"
    )
    assert "inbox rescan" in places
    assert len(warnings) <= 2 * len(places)  # once per place per 30 s (the hold is shorter)
    assert len(lines) < 60  # the status line every 5 s, the warnings, little else

    wait_for(lambda: len(layout.inputs_in(layout.done)) == 3, 120, "the documents once descriptors are back")
    assert daemon.http_get("/metrics")[0] == 200
    daemon.signal(signal.SIGTERM)
    assert daemon.wait_exit() == 0, daemon.log_tail()
    assert not [e for e in daemon.log_events() if e.get("level") in {"error", "critical"}], daemon.log_tail()
