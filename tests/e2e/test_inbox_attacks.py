"""An inbox writer tries to steer the daemon (issue 19), with the real daemon and engine (tiny model).

One daemon run, the inbox open to any writer (mode 0777, no sticky bit). Before the start a writer
pre-creates ``INBOX/.docsumd-work`` (where earlier versions kept the work folder) with a planted
claim in it. While documents are in flight it swaps the inbox for a link to an outside folder (with a
"secret" and a "config" in it), swaps ``done/`` for such a link, then removes the inbox and makes a
new one. It shows: the work folder is outside the inbox and docsumd's alone (0700); nothing outside
the daemon's folders is read, hashed or moved; the daemon is unhealthy while a folder is gone and
healthy again when it is back, and never exits; every input ends exactly once; SIGTERM exits 0.
The work folder itself renamed away and replaced by a link (as only its owner could) is the same.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.e2e.harness import DaemonProcess, Layout, drop_file, wait_for

pytestmark = pytest.mark.engine

SECRET = b"TOP SECRET: outside the inbox; must never be read, hashed or moved.\n" * 10


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir()) if path.is_file()}


def _doc(number: int) -> bytes:
    return f"Report {number}.\n\n".encode() + b"The committee met and agreed on the budget. " * 40


def _health(daemon: DaemonProcess) -> int:
    return daemon.http_get("/healthz")[0]


def _records(layout: Layout) -> list[str]:
    """The input name of every record written (results and failures)."""
    names = []
    for folder, suffix in ((layout.outbox, ".summary.json"), (layout.failed, ".error.json")):
        for path in folder.glob(f"*{suffix}"):
            names.append(json.loads(path.read_bytes())["metadata"]["file_name"])
    return names


def test_an_inbox_writer_cannot_steer_the_daemon(
    layout: Layout, start_daemon: Callable[..., DaemonProcess], tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_bytes(SECRET)
    (outside / "docsumd.toml").write_bytes(b"[engine]\nmodel = 'x'\n")
    outside_before = _snapshot(outside)

    layout.inbox.mkdir(mode=0o777)
    os.chmod(layout.inbox, 0o777)  # a shared drop folder: any local user may write, rename, delete
    planted = layout.inbox / ".docsumd-work"
    (planted / "1.planted.txt").mkdir(parents=True)
    os.chmod(planted, 0o777)
    (planted / "1.planted.txt" / "planted.txt").write_bytes(SECRET)

    # Long summaries keep each batch in flight for seconds: with the harness's short ones a batch was
    # done in 0.35 s on an idle machine, between two looks for "documents in flight" (a CI failure).
    layout.write_config(
        **{
            "sources.folder.settle_seconds": "0.2",
            "sources.folder.rescan_seconds": "1",
            "summary.max_summary_tokens": "512",
        }
    )
    daemon = start_daemon()
    daemon.wait_ready()

    work = layout.work
    assert not str(work).startswith(str(layout.inbox) + os.sep)
    assert stat.S_IMODE(work.stat().st_mode) == 0o700
    assert (planted / "1.planted.txt" / "planted.txt").read_bytes() == SECRET  # left alone, unread

    names: list[str] = []

    def drop(count: int, folder: Path | None = None) -> None:
        for _ in range(count):
            name = f"doc-{len(names):02d}.txt"
            drop_file(folder or layout.inbox, name, _doc(len(names)))
            names.append(name)

    def finished() -> int:
        return len(_records(layout))

    # 1. The inbox swapped for a link to an outside folder, with documents in flight.
    drop(6)
    wait_for(lambda: bool(layout.inputs_in_work()), 60, "documents in flight")
    real_inbox = tmp_path / "inbox.real"
    layout.inbox.rename(real_inbox)
    layout.inbox.symlink_to(outside)
    wait_for(lambda: _health(daemon) == 503, 30, "/healthz to report the inbox gone")
    layout.inbox.unlink()
    real_inbox.rename(layout.inbox)
    wait_for(lambda: _health(daemon) == 200, 30, "/healthz to recover")
    wait_for(lambda: finished() == 6, 180, "the first six documents")

    # 2. done/ swapped for a link to the outside folder while documents settle.
    drop(4)
    wait_for(lambda: bool(layout.inputs_in_work()), 60, "documents in flight")
    real_done = tmp_path / "done.real"
    layout.done.rename(real_done)
    layout.done.symlink_to(outside)
    wait_for(lambda: _health(daemon) == 503, 30, "/healthz to report done/ replaced")
    layout.done.unlink()
    real_done.rename(layout.done)
    wait_for(lambda: _health(daemon) == 200, 30, "/healthz to recover")
    wait_for(lambda: finished() == 10, 180, "ten documents")

    # 3. The inbox removed and made again while documents are in flight: the new one is used.
    drop(4)
    wait_for(lambda: bool(layout.inputs_in_work()), 60, "documents in flight")
    old_inbox = tmp_path / "inbox.old"
    layout.inbox.rename(old_inbox)
    layout.inbox.mkdir(mode=0o777)
    left_in_old = layout.inputs_in(old_inbox)
    drop(3)
    expected = len(names) - len(left_in_old)
    wait_for(lambda: finished() == expected, 240, "every document of the new inbox")

    # 4. The work folder renamed away and a link to the outside folder put in its place (only its
    # owner could: it is 0700 outside the inbox), with documents in flight; then put back.
    drop(4)
    wait_for(lambda: bool(layout.inputs_in_work()), 60, "documents in flight")
    moved_work = tmp_path / "work.moved"
    work.rename(moved_work)
    work.symlink_to(outside)
    wait_for(lambda: _health(daemon) == 503, 30, "/healthz to report the work folder replaced")
    work.unlink()
    moved_work.rename(work)
    wait_for(lambda: _health(daemon) == 200, 30, "/healthz to recover")
    expected = len(names) - len(left_in_old)
    wait_for(lambda: finished() == expected, 240, "every document")

    assert daemon.proc is not None
    assert daemon.proc.poll() is None, daemon.log_tail()
    assert _health(daemon) == 200
    assert _snapshot(outside) == outside_before  # nothing outside read into it, moved or replaced
    records = _records(layout)
    assert sorted(records) == sorted(set(records)), "an input ended twice"
    assert set(records) == set(names) - left_in_old
    assert layout.inputs_in(layout.done) == set(records) - layout.inputs_in(layout.failed)
    assert not [r for r in records if r.startswith("planted")]
    for path in layout.outbox.glob("*.summary.json"):
        assert json.loads(path.read_bytes())["sha256"] != hashlib.sha256(SECRET).hexdigest()

    daemon.signal(signal.SIGTERM)
    assert daemon.wait_exit() == 0, daemon.log_tail()
    assert list(work.iterdir()) == []
    assert (old_inbox / ".docsumd-work" / "1.planted.txt" / "planted.txt").read_bytes() == SECRET
