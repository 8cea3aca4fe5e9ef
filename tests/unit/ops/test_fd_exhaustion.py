"""Unit tests for running out of file descriptors: waited out, never fatal, logged at most once in a while.

Running out is simulated where the daemon meets it (``os.scandir`` of the inbox, opening an input, writing
a record) by raising ``OSError(EMFILE)`` for a while; the metrics endpoint's accept is tested with a real
low open-file limit in tests/unit/ops/test_metrics_endpoint.py. Folders and files are real.
"""

from __future__ import annotations

import asyncio
import errno
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from structlog.typing import EventDict

from daemon.errors import DocumentError
from daemon.folder import sink as folder_sink_module
from daemon.fs import durable
from daemon.fs import safe_read as documents
from daemon.fs.dirs import Dir
from daemon.fs.safe_read import read_input_file
from daemon.ops import fd_exhaustion
from daemon.ops.fd_exhaustion import is_fd_exhaustion, note_fd_exhaustion, retry_on_fd_exhaustion
from daemon.ops.throttle import LogThrottle
from tests.doubles.clock import FakeClock
from tests.doubles.sources import WAIT, Collector
from tests.unit.folder.test_folder_source import make_config, make_source, write_old

EMFILE = OSError(errno.EMFILE, "Too many open files")


@pytest.fixture
def recorded(logs: list[EventDict], monkeypatch: pytest.MonkeyPatch) -> list[EventDict]:
    """fd_exhaustion's log events, captured; and a fresh throttle per place, so tests do not share one."""
    monkeypatch.setattr(fd_exhaustion, "_throttles", {})
    monkeypatch.setattr(fd_exhaustion, "RETRY_FIRST_SECONDS", 0.01)
    monkeypatch.setattr(fd_exhaustion, "RETRY_MAX_SECONDS", 0.05)
    return logs


def events(logs: list[EventDict]) -> list[EventDict]:
    """The events fd_exhaustion logged, at any level."""
    return [entry for entry in logs if entry["logger"] == fd_exhaustion.__name__]


def warnings_about(logs: list[EventDict], where: str) -> list[EventDict]:
    """fd_exhaustion's warnings about ``where``."""
    return [
        entry for entry in events(logs) if entry["log_level"] == "warning" and entry.get("where") == where
    ]


def failing(times: int, result: Any = "ok", error: OSError = EMFILE) -> Callable[[], Any]:
    """An operation that raises ``error`` ``times`` times, then returns ``result``."""
    calls = {"n": 0}

    def operation() -> Any:
        calls["n"] += 1
        if calls["n"] <= times:
            raise error
        return result

    return operation


# -- throttle --------------------------------------------------------------------------------------


def test_throttle_lets_one_through_per_interval_and_counts_the_rest() -> None:
    clock = FakeClock()
    throttle = LogThrottle(30.0, clock=clock)
    assert throttle.pass_through() == 0
    for _ in range(999):
        clock.advance(0.01)
        assert throttle.pass_through() is None
    clock.now = 30.0
    assert throttle.pass_through() == 999
    assert throttle.pass_through() is None
    assert throttle.total == 1002


def test_a_thousand_occurrences_make_one_warning(recorded: list[EventDict]) -> None:
    for _ in range(1000):
        note_fd_exhaustion("inbox rescan", EMFILE)
    warnings = warnings_about(recorded, "inbox rescan")
    assert len(warnings) == 1
    assert warnings[0]["open_files_limit"] > 0
    note_fd_exhaustion("writing a record", EMFILE)  # each place has its own throttle
    assert len(warnings_about(recorded, "writing a record")) == 1


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (OSError(errno.EMFILE, "x"), True),
        (OSError(errno.ENFILE, "x"), True),
        (OSError(errno.EACCES, "x"), False),
        (FileNotFoundError(errno.ENOENT, "x"), False),
        (ValueError("x"), False),
    ],
)
def test_is_fd_exhaustion(error: BaseException, expected: bool) -> None:
    assert is_fd_exhaustion(error) is expected


# -- retry -----------------------------------------------------------------------------------------


async def test_retry_waits_out_exhaustion_and_logs_once(recorded: list[EventDict]) -> None:
    assert await retry_on_fd_exhaustion(failing(20), where="x") == "ok"
    assert len(warnings_about(recorded, "x")) == 1


async def test_retry_raises_other_errors_at_once(recorded: list[EventDict]) -> None:
    with pytest.raises(PermissionError):
        await retry_on_fd_exhaustion(failing(1, error=PermissionError(errno.EACCES, "no")), where="x")
    assert events(recorded) == []


async def test_retry_is_cancellable_while_waiting(recorded: list[EventDict]) -> None:
    task = asyncio.create_task(retry_on_fd_exhaustion(failing(10**9), where="x"))
    await asyncio.sleep(0.2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, WAIT)


# -- where the daemon meets it ---------------------------------------------------------------------


async def test_reading_an_input_out_of_descriptors_is_retried_not_failed(
    tmp_path: Path, recorded: list[EventDict], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "doc.txt"
    path.write_bytes(b"hello")
    real = documents._read_input_file
    tries = {"n": 0}

    def flaky(p: Path, limit: int) -> bytes:
        tries["n"] += 1
        if tries["n"] <= 5:
            raise EMFILE
        return real(p, limit)

    monkeypatch.setattr(documents, "_read_input_file", flaky)
    assert await read_input_file(path, 100) == b"hello"  # not DocumentError("unreadable")
    assert len(warnings_about(recorded, "reading an input")) == 1


def test_reading_an_input_raises_exhaustion_not_unreadable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "doc.txt"
    path.write_bytes(b"hello")

    def no_descriptors(*args: Any, **kwargs: Any) -> Any:
        raise EMFILE

    monkeypatch.setattr(Path, "open", no_descriptors)
    with pytest.raises(OSError, match="Too many open files") as caught:
        documents._read_input_file(path, 100)
    assert not isinstance(caught.value, DocumentError)


async def test_writing_a_record_out_of_descriptors_is_retried(
    tmp_path: Path, recorded: list[EventDict], monkeypatch: pytest.MonkeyPatch
) -> None:
    real = durable.write_atomic_at
    tries = {"n": 0}

    def flaky(folder: int, name: str, data: bytes) -> None:
        tries["n"] += 1
        if tries["n"] <= 3:
            raise EMFILE
        real(folder, name, data)

    monkeypatch.setattr(folder_sink_module, "write_atomic_at", flaky)  # what the sink writes with
    sink = folder_sink_module.FolderSink(tmp_path / "out", tmp_path / "failed")
    await sink.start()
    written = await sink.write_result("doc.txt", {"id": "doc.txt"})
    assert written.exists()
    assert len(warnings_about(recorded, "writing a record")) == 1


async def test_inbox_rescan_out_of_descriptors_keeps_running_and_logs_rarely(
    tmp_path: Path, recorded: list[EventDict], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue's case: the inbox rescan meets EMFILE. The source starts anyway, keeps trying (every
    second, not once per rescan period), logs once, and finds the waiting files as soon as the
    descriptors are back; nothing raises."""
    config = make_config(tmp_path, rescan=3600.0)  # only the retry can find the file, not a periodic rescan
    write_old(config.inbox / "waiting.txt")  # there before the start: no file-system event will name it
    real_scandir = Dir.scandir
    exhausted = True
    scans = {"failed": 0}

    def scandir(folder: Dir, name: str = ".") -> Any:
        if exhausted and folder.path == config.inbox:
            scans["failed"] += 1
            raise EMFILE
        return real_scandir(folder, name)

    monkeypatch.setattr(Dir, "scandir", scandir)  # how the folder source lists the inbox
    async with make_source(config) as source:  # the start-up scan fails: no exception
        collector = Collector(source)
        try:
            await asyncio.sleep(3.5)
            assert not collector.task.done(), "the source stopped"
            assert collector.queue.empty()
            assert scans["failed"] >= 3  # tried again about once a second
            exhausted = False
            started = time.monotonic()
            item = await collector.next(wait=WAIT)
            assert item.id == "waiting.txt"
            assert time.monotonic() - started < 3  # at the next retry, not after rescan_seconds
        finally:
            await collector.close()
    assert len(warnings_about(recorded, "inbox rescan")) == 1
