"""The watched folder against hostile and odd inputs (issue 10), with real folders and no engine.

Each case once took the whole daemon down, read outside the inbox, or lost or overwrote an input:
links and FIFOs swapped in at claim time, FIFO and link sidecars, files renamed over while in
flight, names reused in ``done/`` and ``failed/``, ``p`` and ``p.error.json`` both failing, names that
were folders or FIFOs before a file took them, editors' lock files, hung reads, and inputs that were
in flight at one unclean exit after another. Every wait is bounded, so a hang fails the test.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from daemon.config import FolderSourceConfig
from daemon.errors import ConfigError, DocumentError
from daemon.folder import source as folder_module
from daemon.folder.inbox import InboxWatcher
from daemon.folder.sink import FolderSink
from daemon.folder.source import FolderSource, is_candidate_name
from daemon.records import Record
from daemon.work import WorkItem
from tests.doubles.sources import WAIT, Collector

SECRET = b"a file outside the inbox that must never be read\n"


def make_config(tmp_path: Path, **overrides: object) -> FolderSourceConfig:
    values: dict[str, object] = {
        "inbox": tmp_path / "inbox",
        "outbox": tmp_path / "outbox",
        "done": tmp_path / "done",
        "failed": tmp_path / "failed",
        "settle_seconds": 0.1,
        "rescan_seconds": 3600.0,
        **overrides,
    }
    return FolderSourceConfig.model_validate(values)


def make_source(config: FolderSourceConfig) -> FolderSource:
    sink = FolderSink(config.outbox, config.failed, io_timeout=config.io_timeout_seconds)
    return FolderSource(config, sink, max_input_bytes=1 << 20)


def write_old(path: Path, data: bytes = b"some text\n", *, age: float = 600.0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    stamp = time.time() - age
    os.utime(path, (stamp, stamp), follow_symlinks=False)
    return path


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    path = tmp_path / "elsewhere" / "secret.json"
    path.parent.mkdir()
    path.write_bytes(SECRET)
    return path


@contextlib.asynccontextmanager
async def running(config: FolderSourceConfig) -> AsyncIterator[tuple[FolderSource, Collector]]:
    source = make_source(config)
    await source.start()
    items = Collector(source)
    try:
        yield source, items
    finally:
        await items.close()
        await source.stop()


def failure(item: WorkItem, reason: str) -> Record:
    return {"id": item.id, "reason": reason, "metadata": item.metadata}


def entries(folder: Path) -> dict[str, bytes]:
    """Regular files in ``folder`` and their bytes (links and FIFOs as markers)."""
    found: dict[str, bytes] = {}
    for path in sorted(folder.iterdir()):
        if path.is_symlink():
            found[path.name] = b"<symlink>"
        elif path.is_fifo():
            found[path.name] = b"<fifo>"
        elif path.is_file():
            found[path.name] = path.read_bytes()
    return found


def all_output_bytes(tmp_path: Path) -> bytes:
    """Everything docsumd wrote or moved, regular files only, concatenated."""
    parts = []
    for folder in ("outbox", "done", "failed"):
        for path in sorted((tmp_path / folder).rglob("*")):
            if path.is_file() and not path.is_symlink():
                parts.append(path.read_bytes())
    return b"\n".join(parts)


async def claim_swapped(source: FolderSource, name: str, swap: object) -> WorkItem:
    """Let ``name`` settle as a regular file, run ``swap()`` (the attacker), then claim it."""
    await source.watcher.scan()
    assert await source.watcher.next_ready(1) == [name]
    swap()  # type: ignore[operator]
    claims = await source._claim_all([name])
    assert len(claims) == 1
    return source._work_item(claims[0])


# -- what is read is what is acknowledged ---------------------------------------------------------


async def prepared(config: FolderSourceConfig) -> FolderSource:
    """A source with its folders made and nothing running: the test drives each step itself."""
    source = make_source(config)
    await source.open_folders()
    return source


async def test_a_symlink_swapped_in_at_claim_time_is_refused_unread(tmp_path: Path, secret: Path) -> None:
    config = make_config(tmp_path)
    write_old(config.inbox / "doc.txt", b"inside\n")
    source = await prepared(config)

    def swap() -> None:
        (config.inbox / ".staged").symlink_to(secret)
        os.replace(config.inbox / ".staged", config.inbox / "doc.txt")

    item = await claim_swapped(source, "doc.txt", swap)
    with pytest.raises(DocumentError) as caught:
        await item.load()
    assert caught.value.reason == "not_regular"
    await item.fail(failure(item, "not_regular"))
    assert (config.failed / "doc.txt").is_symlink()  # the link itself was set aside
    assert SECRET not in all_output_bytes(tmp_path)
    assert secret.read_bytes() == SECRET  # noqa: ASYNC240 - a test's check


async def test_a_fifo_swapped_in_at_claim_time_is_refused_without_blocking(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    write_old(config.inbox / "doc.txt")
    source = await prepared(config)

    def swap() -> None:
        os.mkfifo(config.inbox / ".fifo")
        os.replace(config.inbox / ".fifo", config.inbox / "doc.txt")

    item = await claim_swapped(source, "doc.txt", swap)
    with pytest.raises(DocumentError) as caught:
        await asyncio.wait_for(item.load(), WAIT)
    assert caught.value.reason == "not_regular"
    assert "FIFO" in caught.value.message
    await asyncio.wait_for(item.fail(failure(item, "not_regular")), WAIT)
    assert (config.failed / "doc.txt").is_fifo()


async def test_a_fifo_sidecar_fails_its_document_without_blocking(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    write_old(config.inbox / "doc.txt")
    os.mkfifo(config.inbox / "doc.txt.options.json")
    async with running(config) as (_, items):
        item = await items.next()
        assert item.load_options is not None
        with pytest.raises(DocumentError) as caught:
            await asyncio.wait_for(item.load_options(), WAIT)
        await asyncio.wait_for(item.fail(failure(item, "invalid_options")), WAIT)
    assert caught.value.reason == "invalid_options"
    assert "doc.txt.options.json" in caught.value.message
    assert "FIFO" in caught.value.message
    assert (config.failed / "doc.txt.options.json").is_fifo()  # moved with its document


async def test_a_symlink_sidecar_is_not_followed(tmp_path: Path, secret: Path) -> None:
    config = make_config(tmp_path)
    secret.write_bytes(b'{"private_key_name": 1, "another_secret_field": 2}')  # noqa: ASYNC240
    write_old(config.inbox / "doc.txt")
    (config.inbox / "doc.options.json").symlink_to(secret)
    async with running(config) as (_, items):
        item = await items.next()
        assert item.load_options is not None
        with pytest.raises(DocumentError) as caught:
            await item.load_options()
        await item.fail(failure(item, "invalid_options"))
    assert caught.value.reason == "invalid_options"
    assert "symbolic link" in caught.value.message
    assert "private_key_name" not in caught.value.message
    assert (config.failed / "doc.options.json").is_symlink()


async def test_a_file_renamed_over_while_in_flight_is_a_new_input(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    write_old(config.inbox / "doc.txt", b"version one\n")
    async with running(config) as (_, items):
        first = await items.next()
        staged = write_old(config.inbox / ".doc.txt.tmp", b"version two\n")
        os.replace(staged, config.inbox / "doc.txt")
        second = await items.next()
        assert await first.load() == b"version one\n"  # the bytes it was claimed with
        assert await second.load() == b"version two\n"
        await first.complete({"v": 1})
        await second.complete({"v": 2})
    assert entries(config.done) == {"doc.txt": b"version one\n", "doc.txt~2": b"version two\n"}
    assert json.loads((config.outbox / "doc.txt.summary.json").read_bytes()) == {"v": 1}
    assert json.loads((config.outbox / "doc.txt~2.summary.json").read_bytes()) == {"v": 2}


# -- nothing is overwritten --------------------------------------------------------------------------


async def test_a_name_reused_never_overwrites_earlier_inputs_or_results(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    for version in (1, 2, 3):
        write_old(config.inbox / "p", f"version {version}\n".encode())
        async with running(config) as (_, items):
            item = await items.next()
            await item.complete({"v": version})
    assert entries(config.done) == {"p": b"version 1\n", "p~2": b"version 2\n", "p~3": b"version 3\n"}
    results = {path.name: json.loads(path.read_bytes()) for path in config.outbox.iterdir()}
    assert results == {"p.summary.json": {"v": 1}, "p~2.summary.json": {"v": 2}, "p~3.summary.json": {"v": 3}}


async def test_p_and_p_error_json_that_both_fail_keep_their_inputs_and_records(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    write_old(config.inbox / "p", b"input p\n", age=900)
    write_old(config.inbox / "p.error.json", b"input p.error.json\n", age=800)
    async with running(config) as (_, items):
        for _ in range(2):
            item = await items.next()
            await item.fail(failure(item, "empty"))
    files = entries(config.failed)
    records = {name: json.loads(data) for name, data in files.items() if name.endswith(".error.json")}
    inputs = {name: data for name, data in files.items() if name not in records}
    assert sorted(inputs.values()) == [b"input p\n", b"input p.error.json\n"]
    assert sorted(record["id"] for record in records.values()) == ["p", "p.error.json"]
    assert inputs["p.error.json~2"] == b"input p.error.json\n"  # an input never takes a record's name


async def test_a_failed_name_reused_keeps_every_input_and_record(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    for version in (1, 2):
        write_old(config.inbox / "bad.txt", f"v{version}".encode())
        async with running(config) as (_, items):
            item = await items.next()
            await item.fail({"v": version})
    assert entries(config.failed) == {
        "bad.txt": b"v1",
        "bad.txt.error.json": b'{\n  "v": 1\n}\n',
        "bad.txt~2": b"v2",
        "bad.txt~2.error.json": b'{\n  "v": 2\n}\n',
    }


# -- which names are documents ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["~$report.docx", "report.txt~", ".report.txt.swp", "report.txt.swo", "report.txt.swx", "report.swn",
     "#report.txt#", ".#report.txt", ".~lock.report.odt#", "report.txt.bak", "report.txt.kate-swp"],
)  # fmt: skip
def test_editor_lock_swap_and_backup_names_are_not_documents(name: str) -> None:
    assert not is_candidate_name(name)


@pytest.mark.parametrize("name", ["#1 report.txt", "report#.txt", "~report.txt", "a~b.txt", "#"])
def test_names_that_only_look_like_editor_files_are_documents(name: str) -> None:
    assert is_candidate_name(name)


async def test_editor_files_in_the_inbox_are_left_alone(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    ignored = ["~$report.docx", "report.txt~", "report.txt.swx", "#report.txt#", "report.bak"]
    for name in ignored:
        write_old(config.inbox / name, age=900)
    write_old(config.inbox / "report.txt", age=10)
    async with running(config) as (source, items):
        assert source.backlog == 1
        assert (await items.next()).id == "report.txt"
    assert sorted(entries(config.inbox)) == sorted(ignored)


async def test_a_name_that_was_a_folder_is_picked_up_once_a_file_takes_it(tmp_path: Path) -> None:
    config = make_config(tmp_path, rescan_seconds=0.2)
    config.inbox.mkdir()
    path = config.inbox / "later.txt"
    path.mkdir()
    async with running(config) as (source, items):
        source.watcher.add("later.txt")  # as a watcher event for it would
        for _ in range(200):  # looked at, and let go of (bounded: a loaded machine may be slow)
            if source.backlog == 0:
                break
            await asyncio.sleep(0.05)
        assert source.backlog == 0
        assert await items.none_within(0.3)
        assert path.is_dir()  # never entered, never moved
        path.rmdir()
        write_old(path, b"a real file now\n")
        item = await items.next()
    assert item.id == "later.txt"


def _lexists(path: Path) -> bool:
    """Whether ``path`` is there, whatever it is (a link to nothing included)."""
    return os.path.lexists(path)


def _socket(path: Path) -> None:
    import socket

    with socket.socket(socket.AF_UNIX) as listening:
        listening.bind(str(path))  # the entry stays after the socket is closed


def _device(path: Path) -> None:
    import stat

    try:
        os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 3))  # what /dev/null is
    except PermissionError:
        pytest.skip("making a device node needs CAP_MKNOD")


@pytest.mark.parametrize("kind", ["symlink", "dangling symlink", "fifo", "socket", "device"])
async def test_a_link_fifo_socket_or_device_dropped_in_is_moved_to_failed_unopened(
    tmp_path: Path, kind: str, secret: Path
) -> None:
    """The README's promise: what is not a regular file is refused as not_regular, with a failure
    record, and the entry itself (never a link's target) moves to failed/. It used to stay in the
    inbox for good, with no record."""
    config = make_config(tmp_path)
    config.inbox.mkdir()
    path = config.inbox / "dropped.txt"
    if kind == "symlink":
        path.symlink_to(secret)
    elif kind == "dangling symlink":
        path.symlink_to(tmp_path / "nothing-there")
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        _socket(path)
    else:
        _device(path)
    described = {
        "symlink": "a symbolic link",
        "dangling symlink": "a symbolic link",
        "fifo": "a FIFO (named pipe)",
        "socket": "a socket",
        "device": "a character device",
    }[kind]
    async with running(config) as (_, items):
        item = await items.next()
        assert item.id == "dropped.txt"
        with pytest.raises(DocumentError) as caught:
            await asyncio.wait_for(item.load(), WAIT)
        await asyncio.wait_for(item.fail(failure(item, caught.value.reason)), WAIT)
    assert caught.value.reason == "not_regular"
    assert caught.value.message == f"the input is not read: it is {described}, not a regular file"
    assert not _lexists(path)
    moved = config.failed / "dropped.txt"
    assert _lexists(moved)
    assert moved.is_symlink() == ("symlink" in kind)
    assert json.loads((config.failed / "dropped.txt.error.json").read_bytes())["reason"] == "not_regular"
    assert secret.read_bytes() == SECRET  # noqa: ASYNC240 - a test's check: the target stays
    assert SECRET not in all_output_bytes(tmp_path)


# -- hung reads ------------------------------------------------------------------------------------


@pytest.fixture
def hang() -> Iterator[threading.Event]:
    release = threading.Event()
    yield release
    release.set()


async def test_a_hung_read_fails_its_document_after_the_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hang: threading.Event
) -> None:
    def stuck_read(path: Path, max_bytes: int, **dir_fd: int) -> bytes:
        hang.wait(60)  # a stale NFS or FUSE mount
        return b""

    monkeypatch.setattr(folder_module, "read_regular_file", stuck_read)
    config = make_config(tmp_path, io_timeout_seconds=0.3)
    write_old(config.inbox / "slow.txt")
    write_old(config.inbox / "fine.txt", age=10)
    async with running(config) as (_, items):
        slow = await items.next()
        started = time.monotonic()
        with pytest.raises(DocumentError) as caught:
            await slow.load()
        assert time.monotonic() - started < 5
        assert caught.value.reason == "unreadable"
        assert "longer than 0.3 s" in caught.value.message
        await slow.fail(failure(slow, "unreadable"))
        fine = await items.next()  # the source goes on
    assert fine.id == "fine.txt"
    assert "slow.txt" in entries(config.failed)


# -- unclean exits and the crash-loop guard -------------------------------------------------------


async def crash_with_in_flight(config: FolderSourceConfig, expected: str) -> None:
    """One run that takes ``expected`` in and ends without settling it or stopping cleanly."""
    async with running(config) as (_, items):
        item = await items.next()
        assert item.id == expected


def claim_folders(config: FolderSourceConfig) -> list[str]:
    return sorted(path.name for path in config.work_folder.iterdir())


async def test_an_input_left_in_flight_is_handed_out_first_at_the_next_start(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    write_old(config.inbox / "first.txt", b"first\n", age=900)
    write_old(config.inbox / "doc.options.json", b'{"style": "bullets"}')
    await crash_with_in_flight(config, "first.txt")
    assert claim_folders(config) == ["1.first.txt"]
    write_old(config.inbox / "doc.txt", age=2000)  # older, but the claim left in flight goes first
    async with running(config) as (source, items):
        assert source.backlog == 2
        again = await items.next()
        assert (again.id, await again.load()) == ("first.txt", b"first\n")
        other = await items.next()
        assert claim_folders(config) == ["1.doc.txt", "2.first.txt"]
        assert other.load_options is not None
        assert await other.load_options() == b'{"style": "bullets"}'
        await again.complete({"ok": True})
        await other.complete({"ok": True})
    assert sorted(entries(config.done)) == ["doc.options.json", "doc.txt", "first.txt"]
    assert list(config.work_folder.iterdir()) == []  # beside the inbox, empty, kept


async def test_an_input_in_flight_at_three_unclean_exits_is_set_aside(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    assert config.crash_loop_exits == 3
    write_old(config.inbox / "poison.txt", b"kills the engine\n")
    write_old(config.inbox / "poison.txt.options.json", b"{}")
    for exits in (1, 2, 3):
        await crash_with_in_flight(config, "poison.txt")
        assert claim_folders(config) == [f"{exits}.poison.txt"]
    write_old(config.inbox / "next.txt")
    async with running(config) as (source, items):
        assert source.backlog == 1
        assert (await items.next()).id == "next.txt"  # the poison is not handed out again
    record = json.loads((config.failed / "poison.txt.error.json").read_bytes())
    assert record["reason"] == "crash_loop"
    assert (record["id"], record["metadata"]) == ("poison.txt", {"file_name": "poison.txt"})
    assert "3 unclean exits" in record["message"]
    assert (config.failed / "poison.txt").read_bytes() == b"kills the engine\n"
    assert (config.failed / "poison.txt.options.json").read_bytes() == b"{}"


async def test_a_clean_stop_gives_unsettled_inputs_back_to_the_inbox(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    write_old(config.inbox / "doc.txt", b"unfinished\n")
    write_old(config.inbox / "doc.options.json", b"{}")
    async with running(config) as (source, items):
        await items.next()
        await source.release_unsettled()
    assert entries(config.inbox) == {"doc.txt": b"unfinished\n", "doc.options.json": b"{}"}
    assert list(config.work_folder.iterdir()) == []


async def test_a_clean_stop_keeps_a_claim_whose_name_was_taken_and_resets_its_count(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    write_old(config.inbox / "doc.txt", b"unfinished\n")
    await crash_with_in_flight(config, "doc.txt")  # 1 unclean exit
    async with running(config) as (source, items):
        await items.next()
        await items.close()  # nothing more is taken in: the new file below stays in the inbox
        write_old(config.inbox / "doc.txt", b"a new one\n", age=1)  # takes the name in the inbox
        await source.release_unsettled()
    assert entries(config.inbox) == {"doc.txt": b"a new one\n"}
    assert claim_folders(config) == ["0.doc.txt"]
    async with running(config) as (_, items):  # both are processed; nothing lost
        first, second = await items.next(), await items.next()
        assert sorted([await first.load(), await second.load()]) == [b"a new one\n", b"unfinished\n"]


async def test_a_crash_while_claiming_or_settling_is_finished_at_the_next_start(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    work = config.work_folder
    (work / "1.empty.txt").mkdir(parents=True)  # a crash between creating the claim and the rename
    (work / "1.gone.txt").mkdir()  # a crash after the document was acknowledged, before its sidecar
    write_old(work / "1.gone.txt" / "gone.options.json", b"{}")
    write_old(config.failed / "gone.txt.error.json", b"{}")
    write_old(work / "stray-file")  # not ours: left alone
    async with running(config) as (source, _):
        assert source.backlog == 0
    assert sorted(path.name for path in work.iterdir()) == ["stray-file"]
    assert (config.failed / "gone.options.json").read_bytes() == b"{}"


# -- config ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("work", "message"),
    [
        ("inbox/work", "must not lie inside the inbox"),
        ("inbox/.a/.b", "must not lie inside the inbox"),
        ("done", "folder of its own"),
        ("done/work", "folder of its own"),
        ("inbox", "folder of its own"),
    ],
)
def test_a_work_folder_that_could_be_read_as_input_or_output_is_refused(
    tmp_path: Path, work: str, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        make_config(tmp_path, work=tmp_path / work)


def test_a_work_folder_of_its_own_is_accepted(tmp_path: Path) -> None:
    assert make_config(tmp_path, work=tmp_path / "work").work_folder == tmp_path / "work"
    assert make_config(tmp_path).work_folder == tmp_path / ".inbox.docsumd-work"  # beside the inbox
    with pytest.raises(ValueError, match="must not lie inside the inbox"):
        make_config(tmp_path, work=tmp_path / "inbox" / ".mine")


async def test_a_source_started_again_in_one_process_does_not_count_its_own_claims(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    write_old(config.inbox / "doc.txt")
    source = make_source(config)
    await source.start()
    items = Collector(source)
    item = await items.next()
    await items.close()
    await source.stop()
    await source.start()
    try:
        assert source.backlog == 0  # not taken for one left by an unclean exit
        assert claim_folders(config) == ["1.doc.txt"]
    finally:
        await source.stop()
    await item.complete({"ok": True})
    assert (config.done / "doc.txt").exists()


# -- the watcher -------------------------------------------------------------------------------------


async def test_a_failed_watcher_is_started_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # watchfiles gives up on a batch holding a name that is not UTF-8: the watcher must come back.
    runs: list[float] = []
    watch_once = InboxWatcher._watch_once

    async def flaky(self: InboxWatcher) -> None:
        runs.append(time.monotonic())
        if len(runs) == 1:
            raise RuntimeError('Unable to decode path "inbox/\\xFF"')
        await watch_once(self)

    monkeypatch.setattr(InboxWatcher, "_watch_once", flaky)
    config = make_config(tmp_path)  # no periodic rescan within the test: only the watcher finds files
    async with running(config) as (_, items):
        for _ in range(100):
            if len(runs) >= 2:
                break
            await asyncio.sleep(0.05)
        assert len(runs) == 2
        await items.wait_until_watching(config.inbox)  # the new watch is in place
        (config.inbox / "new.txt").write_bytes(b"new\n")
        assert (await items.next()).id == "new.txt"


async def test_items_ends_when_cancelled_as_a_wakeup_arrives(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    async with running(config) as (source, _):
        for _ in range(20):
            task = asyncio.create_task(next_item(source))
            await asyncio.sleep(0.05)  # waiting for work
            source._wakeup.set()
            if not task.cancel():
                continue
            with pytest.raises(asyncio.CancelledError):
                await asyncio.wait_for(task, WAIT)


async def next_item(source: FolderSource) -> WorkItem:
    return await anext(source.items())


# -- the work folder is docsumd's, and folders are held by descriptor (issue 19) --------------------


async def test_a_work_folder_others_can_write_to_stops_the_start(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    config.work_folder.mkdir(mode=0o777)
    os.chmod(config.work_folder, 0o777)  # pre-created by someone else, open to all
    with pytest.raises(ConfigError, match=r"sources.folder.work .* docsumd's alone.*0777"):
        await make_source(config).start()


@pytest.mark.parametrize("kind", ["file", "link"])
async def test_a_work_folder_that_is_not_a_folder_stops_the_start(tmp_path: Path, kind: str) -> None:
    config = make_config(tmp_path)
    if kind == "file":
        config.work_folder.write_bytes(b"")
    else:
        (tmp_path / "elsewhere").mkdir(mode=0o700)
        config.work_folder.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ConfigError, match=r"sources\.folder\.work"):
        await make_source(config).start()


async def test_an_inbox_swapped_for_a_link_is_not_followed_and_the_source_waits(
    tmp_path: Path, secret: Path
) -> None:
    config = make_config(tmp_path)
    write_old(config.inbox / "a.txt", b"a\n")
    async with running(config) as (source, items):
        first = await items.next()
        config.inbox.rename(tmp_path / "inbox.real")
        config.inbox.symlink_to(secret.parent)  # the folder the secret is in
        await first.complete({"ok": True})  # settled through the descriptors: done/ still
        pull = asyncio.ensure_future(items.next())
        await asyncio.sleep(0.5)
        assert not pull.done()  # nothing taken from the link's target
        problem = problem_of(source)
        assert problem is not None
        assert "sources.folder.inbox" in problem
        assert "symbolic link" in problem
        config.inbox.unlink()
        (tmp_path / "inbox.real").rename(config.inbox)
        write_old(config.inbox / "b.txt", b"b\n")
        second = await asyncio.wait_for(pull, WAIT)
        assert second.id == "b.txt"
        assert problem_of(source) is None
        await second.complete({"ok": True})
    assert sorted(entries(config.done)) == ["a.txt", "b.txt"]
    assert entries(secret.parent) == {"secret.json": SECRET}


def problem_of(source: FolderSource) -> str | None:
    return source.problem


async def test_a_stop_the_outputs_caused_does_not_count_against_the_inputs(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    write_old(config.inbox / "doc.txt", b"doc\n")
    async with running(config) as (source, items):
        await items.next()
        assert claim_folders(config) == ["1.doc.txt"]
        await source.uncount_unsettled()  # what the service does after a fatal SinkError
    assert claim_folders(config) == ["0.doc.txt"]
    async with running(config) as (source, items):
        again = await items.next()
        assert claim_folders(config) == ["1.doc.txt"]  # counted as this run found it, not 2
        await again.complete({"ok": True})


async def test_claims_in_the_old_work_folder_in_the_inbox_are_taken_over(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    legacy = config.inbox / ".docsumd-work" / "1.old.txt"
    legacy.mkdir(parents=True, mode=0o700)
    os.chmod(config.inbox / ".docsumd-work", 0o700)
    (legacy / "old.txt").write_bytes(b"old\n")
    async with running(config) as (_, items):
        item = await items.next()
        assert (item.id, await item.load()) == ("old.txt", b"old\n")
        await item.complete({"ok": True})
    assert not (config.inbox / ".docsumd-work").exists()
    assert entries(config.done) == {"old.txt": b"old\n"}


async def test_a_sidecar_that_comes_after_its_document_never_applies_to_the_next_one(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    write_old(config.inbox / "doc.txt", b"first\n")
    async with running(config) as (_, items):
        first = await items.next()
        await asyncio.sleep(0.05)  # the file system's clock is coarser than time.time_ns()
        write_old(config.inbox / "doc.txt.options.json", b'{"style": "bullets"}', age=0)
        await first.complete({"ok": True})  # the late sidecar goes with it, unused
        write_old(config.inbox / "doc.txt", b"second\n", age=0)
        second = await items.next()
        assert second.load_options is not None
        assert await second.load_options() is None
        await second.complete({"ok": True})
    assert entries(config.done) == {
        "doc.txt": b"first\n",
        "doc.txt.options.json": b'{"style": "bullets"}',
        "doc.txt~2": b"second\n",
    }


async def test_a_hard_link_to_a_file_elsewhere_is_refused_unread(tmp_path: Path, secret: Path) -> None:
    config = make_config(tmp_path)
    config.inbox.mkdir()
    os.link(secret, config.inbox / "alias.txt")  # another name of a file outside the inbox
    async with running(config) as (_, items):
        item = await items.next()
        with pytest.raises(DocumentError, match="hard links") as caught:
            await item.load()
        assert caught.value.reason == "not_regular"
        await item.fail(failure(item, "not_regular"))
    assert entries(secret.parent) == {"secret.json": SECRET}


async def test_a_backlog_is_claimed_in_batches_and_a_clean_stop_gives_back_what_was_not_handed_out(
    tmp_path: Path,
) -> None:
    # One trip to the I/O threads claims up to CLAIM_BATCH ready files (bench/intake.py: one per trip
    # made the source the pace of a backlog's intake); those not handed out yet wait in the work folder
    # and go back to the inbox on a clean stop, uncounted.
    config = make_config(tmp_path)
    total = folder_module.CLAIM_BATCH + 3
    for number in range(total):
        write_old(config.inbox / f"doc{number:03d}.txt", f"text {number}\n".encode(), age=600 - number)
    source = make_source(config)
    await source.start()
    # Pulled by hand, one item, so that what was claimed ahead is exact (items() is a generator).
    pulls = cast("AsyncGenerator[WorkItem, None]", source.items())
    try:
        first = await asyncio.wait_for(anext(pulls), WAIT)
        assert first.id == "doc000.txt"  # oldest first, as before
        assert len(claim_folders(config)) == folder_module.CLAIM_BATCH  # claimed ahead, one trip
        await source.release_unsettled()
    finally:
        await pulls.aclose()
        await source.stop()
    assert sorted(entries(config.inbox)) == [f"doc{number:03d}.txt" for number in range(total)]
    assert list(config.work_folder.iterdir()) == []
    async with running(config) as (_, items):  # nothing was counted against them: all handed out
        ids = [(await items.next()).id for _ in range(total)]
    assert ids == [f"doc{number:03d}.txt" for number in range(total)]


async def test_one_name_that_cannot_be_claimed_does_not_lose_the_rest_of_its_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = make_config(tmp_path)
    for number in range(5):
        write_old(config.inbox / f"doc{number}.txt", f"text {number}\n".encode(), age=600 - number)
    source = make_source(config)
    real_claim = source.work.claim

    def claim(name: str) -> Any:
        if name == "doc2.txt":
            raise RuntimeError("an error nobody foresaw")
        return real_claim(name)

    monkeypatch.setattr(source.work, "claim", claim)
    async with running_source(source) as items:
        ids = sorted([(await items.next()).id for _ in range(4)])
    assert ids == ["doc0.txt", "doc1.txt", "doc3.txt", "doc4.txt"]
    assert "doc2.txt" in entries(config.inbox)  # left where it was, tried again at the next rescan


@contextlib.asynccontextmanager
async def running_source(source: FolderSource) -> AsyncIterator[Collector]:
    await source.start()
    items = Collector(source)
    try:
        yield items
    finally:
        await items.close()
        await source.stop()
