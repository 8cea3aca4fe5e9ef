"""The sandboxed extraction pool against real worker processes (daemon/document/sandbox/pool.py and
daemon/document/sandbox/worker.py), with the misbehaving targets of tests/doubles/extract_targets.py.

Every failure must fail its document with the right reason and message, replace the worker, and
leave the pool serving the next document. Most cases share one pool (module scope), which is the
point: one pool meets every failure in turn. Limits are small (1 s of CPU, 400 MiB) so the file
runs in seconds.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import pytest_asyncio

from daemon.document.sandbox.pool import ExtractionPool, SandboxError, SandboxLimits, SandboxStartError
from daemon.document.sandbox.protocol import InvalidReply, parse_reply
from daemon.document.sandbox.worker import DEFAULT_OPEN_FILES
from daemon.document.types import Extracted, ExtractLimits, Format, Heading
from daemon.errors import DocumentError

in_module_loop = pytest.mark.asyncio(loop_scope="module")
"""Every async test runs in the module's event loop: the shared pool's workers are its subprocesses."""

SCRIPTED = "tests.doubles.extract_targets:scripted"
MIB = 1024 * 1024
MEMORY = 400 * MIB
LIMITS = SandboxLimits(workers=1, memory_bytes=MEMORY, cpu_seconds=1, timeout_seconds=8)
"""The shared pool's: a wall clock well above the CPU limit (a spin on a busy core gets half of
it), so that the CPU limit, not the clock, stops a spin."""
EXTRACT_LIMITS = ExtractLimits(max_pages=50, max_output_chars=10_000)


def make_pool(limits: SandboxLimits = LIMITS, target: str = SCRIPTED) -> ExtractionPool:
    """A pool of the scripted target (the first word of a document picks its behaviour)."""
    return ExtractionPool(limits, EXTRACT_LIMITS, target=target)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def pool() -> AsyncIterator[ExtractionPool]:
    """One pool for the module: every failure meets it in turn."""
    async with make_pool() as shared:
        yield shared


async def echo_pid(pool: ExtractionPool, text: str = "still serving") -> int:
    """Extract an echo and check it: the pool serves; the pid of the worker that answered."""
    extracted = await pool.extract(f"echo {text}".encode(), Format.HTML)
    assert extracted.text == text
    pid: int = extracted.details["pid"]
    return pid


def gone(pids: set[int] | frozenset[int]) -> bool:
    """None of ``pids`` is a process any more (zombies count as processes)."""
    return not any(psutil.pid_exists(pid) for pid in pids)


# -- answers -----------------------------------------------------------------------------------------


@in_module_loop
async def test_echo_comes_back_with_its_layout(pool: ExtractionPool) -> None:
    text = "# Title\n\nfirst page\f## Part\n\nsecond page"
    extracted = await pool.extract(f"echo {text}".encode(), Format.PDF)
    assert extracted.text == text
    assert extracted.format is Format.PDF
    assert extracted.layout.page_starts == (0, text.index("\f") + 1)
    assert extracted.layout.headings == (Heading(1, "Title", 0), Heading(2, "Part", text.index("## ")))
    assert extracted.details["extractor"] == "echo"


@in_module_loop
async def test_document_error_comes_back_as_raised(pool: ExtractionPool) -> None:
    before = await echo_pid(pool)
    with pytest.raises(DocumentError) as raised:
        await pool.extract(b"document_error this PDF lies about its xref table", Format.PDF)
    assert raised.value.reason == "malformed"
    assert raised.value.message == "this PDF lies about its xref table"
    assert await echo_pid(pool) == before  # the worker survives its extractor's refusal


@in_module_loop
async def test_other_exception_is_an_internal_error_and_the_worker_survives(pool: ExtractionPool) -> None:
    before = await echo_pid(pool)
    with pytest.raises(DocumentError) as raised:
        await pool.extract(b"value_error", Format.DOCX)
    assert raised.value.reason == "internal_error"
    assert raised.value.message == "ValueError('a bug met on purpose (0 bytes)')"
    assert await echo_pid(pool) == before


@in_module_loop
async def test_stray_output_does_not_corrupt_the_protocol(pool: ExtractionPool) -> None:
    before = await echo_pid(pool)
    extracted = await pool.extract(b"stray_output chatty", Format.HTML)
    assert extracted.text == "chatty"
    assert await echo_pid(pool) == before


@in_module_loop
async def test_writing_a_file_fails(pool: ExtractionPool, tmp_path: Path) -> None:
    target = tmp_path / "written"
    with pytest.raises(DocumentError) as raised:
        await pool.extract(f"write_file {target}".encode(), Format.HTML)
    assert raised.value.reason == "internal_error"
    assert "File too large" in raised.value.message  # EFBIG: RLIMIT_FSIZE is 0
    assert not target.exists() or target.stat().st_size == 0
    await echo_pid(pool)


@pytest.mark.skipif(os.geteuid() == 0, reason="root is spared RLIMIT_NPROC")
@in_module_loop
async def test_starting_a_process_fails(pool: ExtractionPool) -> None:
    with pytest.raises(DocumentError) as raised:
        await pool.extract(b"start_process", Format.HTML)
    assert raised.value.reason == "internal_error"
    assert "Resource temporarily unavailable" in raised.value.message


# -- failures: the document fails, the worker is replaced, the next document works ------------------

FAILURES = [
    ("spin", "cpu", "went over its CPU time limit (1 s, extract.cpu_seconds)"),
    ("allocate", "memory", "went over its memory limit (400 MiB, extract.memory_mib)"),
    ("segfault", "crashed", "crashed (signal SIGSEGV)"),
    ("abort", "crashed", "crashed (signal SIGABRT)"),
    ("exit 3", "exited", "exited (status 3)"),
    ("garbage_reply", "protocol", "sent an invalid reply: a reply of 1734439522 bytes, over the"),
    ("pickle_reply", "protocol", "sent an invalid reply: not JSON"),
    ("huge_reply", "protocol", "sent an invalid reply: a reply of 4294967295 bytes"),
    ("overlong_text", "protocol", "the text is not a string of at most 10000 characters"),
    ("bad_offsets", "protocol", "a heading's start is not an integer from 0 to 5"),
    ("unknown_reason", "protocol", "an error's reason is not one an extractor gives"),
]


@pytest.mark.parametrize(("script", "cause", "message"), FAILURES, ids=[case[0] for case in FAILURES])
@in_module_loop
async def test_failure_fails_the_document_and_replaces_the_worker(
    pool: ExtractionPool, script: str, cause: str, message: str
) -> None:
    before = await echo_pid(pool)
    replaced = pool.stats.replaced[cause]
    with pytest.raises(DocumentError) as raised:
        await pool.extract(script.encode(), Format.PDF)
    assert raised.value.reason == "extract_failed"
    assert message in raised.value.message
    after = await echo_pid(pool)  # waits for the replacement
    assert after != before
    assert pool.stats.replaced[cause] == replaced + 1
    assert gone({before})


@in_module_loop
async def test_wall_clock_timeout_fails_the_document_and_replaces_the_worker() -> None:
    limits = SandboxLimits(workers=1, memory_bytes=MEMORY, cpu_seconds=1, timeout_seconds=1)
    async with make_pool(limits) as pool:
        before = await echo_pid(pool)
        started = time.monotonic()
        with pytest.raises(DocumentError) as raised:
            await pool.extract(b"sleep_forever", Format.PDF)
        assert 1 <= time.monotonic() - started < 3
        assert raised.value.reason == "extract_failed"
        assert "took longer than 1 s (extract.timeout_seconds)" in raised.value.message
        assert await echo_pid(pool) != before
        assert pool.stats.replaced["timeout"] == 1
        assert gone({before})


@in_module_loop
async def test_worker_killed_while_idle_is_replaced(pool: ExtractionPool) -> None:
    before = await echo_pid(pool)
    psutil.Process(before).kill()
    async with asyncio.timeout(10):  # the pool sees it exit (its child watcher), however loaded the machine
        while all(worker.alive for worker in pool._idle):  # noqa: ASYNC110 - no event for it
            await asyncio.sleep(0.01)
    assert await echo_pid(pool) != before


@in_module_loop
async def test_a_document_handed_to_a_worker_that_died_idle_goes_to_another(pool: ExtractionPool) -> None:
    # Killed while idle, and the document comes before the pool has seen the exit (the loop has not
    # run since): the document did not reach it, so it is not failed for it.
    before = await echo_pid(pool)
    exited = pool.stats.replaced["exited"]
    psutil.Process(before).kill()
    deadline = time.monotonic() + 10
    while psutil.pid_exists(before) and psutil.Process(before).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline
        time.sleep(0.01)  # noqa: ASYNC251 - blocking on purpose: the loop must not see the exit yet
    assert all(worker.alive for worker in pool._idle)  # the pool does not know
    assert await echo_pid(pool, "served by another") != before
    assert pool.stats.replaced["exited"] == exited + 1


# -- the sandbox ---------------------------------------------------------------------------------------


@in_module_loop
async def test_the_worker_is_sandboxed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCSUMD_SOURCES__KAFKA__SASL_PASSWORD", "hunter2")
    async with make_pool() as pool:
        env = json.loads((await pool.extract(b"read_env", Format.HTML)).text)
        sandbox: dict[str, Any] = (await pool.extract(b"sandbox", Format.ODT)).details
    assert not [name for name in env if name.startswith("DOCSUMD_")]
    assert "hunter2" not in json.dumps(env)
    # LC_CTYPE: Python's own C-locale coercion; LD_LIBRARY_PATH: passed on if set (not here)
    assert set(env) <= {"PYTHONPATH", "LC_CTYPE", "LD_LIBRARY_PATH"}
    rlimits = sandbox["rlimits"]
    assert rlimits["RLIMIT_AS"] == [MEMORY, MEMORY]
    assert rlimits["RLIMIT_CORE"] == [0, 0]
    assert rlimits["RLIMIT_FSIZE"] == [0, 0]
    assert rlimits["RLIMIT_NOFILE"] == [DEFAULT_OPEN_FILES, DEFAULT_OPEN_FILES]
    assert rlimits["RLIMIT_NPROC"] == [0, 0]
    soft, hard = rlimits["RLIMIT_CPU"]
    assert sandbox["cpu_used"] + 1 <= soft <= sandbox["cpu_used"] + 2 < hard  # per document, under a life's
    # stdin (/dev/null), stdout (stderr's copy), stderr, the request and reply pipes; and the
    # descriptor listing them
    assert sandbox["fds"] == [0, 1, 2, 3, 4, 5]
    assert sandbox["cwd"] == "/"
    assert sandbox["session_leader"]
    assert sandbox["no_new_privs"] == "1"
    assert sandbox["pdeathsig"] == 9  # SIGKILL
    assert sandbox["format"] == "odt"
    assert sandbox["limits"] == {
        "max_pages": 50,
        "max_output_chars": 10_000,
        "max_text_bytes": EXTRACT_LIMITS.max_text_bytes,
        "max_expansion_ratio": EXTRACT_LIMITS.max_expansion_ratio,
        "expansion_floor_bytes": EXTRACT_LIMITS.expansion_floor_bytes,
        "max_unpacked_bytes": EXTRACT_LIMITS.max_unpacked_bytes,
        "max_compression_ratio": EXTRACT_LIMITS.max_compression_ratio,
        "max_zip_entries": EXTRACT_LIMITS.max_zip_entries,
        "max_xml_depth": EXTRACT_LIMITS.max_xml_depth,
    }


# -- concurrency and cancellation -----------------------------------------------------------------------


@in_module_loop
async def test_at_most_workers_extractions_at_once_in_arrival_order() -> None:
    async with make_pool(
        SandboxLimits(workers=2, memory_bytes=MEMORY, cpu_seconds=1, timeout_seconds=8)
    ) as pool:
        tasks = []
        for _ in range(5):
            tasks.append(asyncio.create_task(pool.extract(b"timed 0.4", Format.PDF)))
            await asyncio.sleep(0)  # arrival order is creation order
        answers = [answer.details for answer in await asyncio.gather(*tasks)]
    events = sorted([(a["started"], 1) for a in answers] + [(a["ended"], -1) for a in answers])
    running, most = 0, 0
    for _, change in events:
        running += change
        most = max(most, running)
    assert most == 2
    assert len({answer["pid"] for answer in answers}) == 2
    starts = [answer["started"] for answer in answers]
    # The third and fourth get the two workers as they come free, together; the fifth waits its turn
    # behind them (first come, first served), and nothing starts before a worker is free.
    assert max(starts[2], starts[3]) < starts[4]
    assert min(starts[2:]) >= min(answer["ended"] for answer in answers[:2]) - 0.05


@in_module_loop
async def test_cancelled_running_extraction_kills_and_replaces_its_worker(pool: ExtractionPool) -> None:
    before = await echo_pid(pool)
    cancelled = pool.stats.replaced["cancelled"]
    task = asyncio.create_task(pool.extract(b"sleep_forever", Format.PDF))
    await asyncio.sleep(0.3)
    assert pool.idle == 0
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await echo_pid(pool) != before
    assert pool.stats.replaced["cancelled"] == cancelled + 1
    assert gone({before})


@in_module_loop
async def test_cancelled_waiting_extraction_leaks_nothing(pool: ExtractionPool) -> None:
    before = await echo_pid(pool)
    replaced = sum(pool.stats.replaced.values())
    running = asyncio.create_task(pool.extract(b"timed 0.3", Format.PDF))
    # A few turns of the loop each, not a while: the running one must still hold the worker.
    async with asyncio.timeout(10):
        while pool.idle > 0:  # noqa: ASYNC110 - the pool has no event for it
            await asyncio.sleep(0)
        waiting = asyncio.create_task(pool.extract(b"echo never", Format.PDF))
        while not (waiting.done() or pool.waiting > 0):  # noqa: ASYNC110
            await asyncio.sleep(0)
    assert pool.waiting == 1
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert pool.waiting == 0
    assert (await running).details["pid"] == before
    assert pool.idle == 1
    assert await echo_pid(pool) == before
    assert sum(pool.stats.replaced.values()) == replaced


@in_module_loop
async def test_before_runs_once_a_worker_is_free_and_a_failed_one_hands_the_worker_on(
    pool: ExtractionPool,
) -> None:
    worker = await echo_pid(pool)
    replaced = sum(pool.stats.replaced.values())
    events: list[str] = []
    running = asyncio.create_task(pool.extract(b"timed 0.3", Format.PDF))
    await asyncio.sleep(0.05)

    async def before() -> None:
        events.append(f"before, {pool.idle} idle")

    extracted = await pool.extract(b"echo after", Format.PDF, before=before)
    assert events == ["before, 0 idle"]  # awaited once the running one gave the worker back
    assert extracted.text == "after"
    await running

    async def refuse() -> None:
        raise RuntimeError("no room")

    with pytest.raises(RuntimeError):
        await pool.extract(b"echo never", Format.PDF, before=refuse)
    assert pool.idle == 1
    assert await echo_pid(pool) == worker  # the worker was never used, so never replaced
    assert sum(pool.stats.replaced.values()) == replaced


@in_module_loop
async def test_worker_is_recycled_after_max_tasks() -> None:
    limits = SandboxLimits(
        workers=1, memory_bytes=MEMORY, cpu_seconds=1, timeout_seconds=8, max_tasks_per_worker=2
    )
    async with make_pool(limits) as pool:
        pids = [await echo_pid(pool) for _ in range(5)]
        assert pool.stats.replaced["recycled"] == 2
    assert pids[0] == pids[1] != pids[2] == pids[3] != pids[4]
    assert gone(set(pids))


# -- start and stop ----------------------------------------------------------------------------------------


@in_module_loop
async def test_start_and_stop_are_idempotent_and_leave_no_process() -> None:
    pool = make_pool(SandboxLimits(workers=2, memory_bytes=MEMORY, cpu_seconds=1, timeout_seconds=8))
    await pool.stop()  # before any start: nothing to do
    await pool.start()
    pids = pool.pids
    await pool.start()
    assert pool.pids == pids
    assert len(pids) == 2
    assert pids <= {child.pid for child in psutil.Process().children()}
    await echo_pid(pool)
    await pool.stop()
    await pool.stop()
    assert gone(pids)
    assert not pool.pids
    with pytest.raises(SandboxError, match="not running"):
        await pool.extract(b"echo late", Format.PDF)
    await pool.start()  # again after a stop
    await echo_pid(pool)
    again = pool.pids
    await pool.stop()
    assert gone(again)


@in_module_loop
async def test_stop_during_extractions_ends_them_and_every_worker() -> None:
    pool = make_pool()
    await pool.start()
    pids = pool.pids
    running = asyncio.create_task(pool.extract(b"sleep_forever", Format.PDF))
    await asyncio.sleep(0.1)
    waiting = asyncio.create_task(pool.extract(b"echo never", Format.PDF))
    await asyncio.sleep(0.1)
    started = time.monotonic()
    await pool.stop()
    assert time.monotonic() - started < 4  # the grace, then SIGKILL
    with pytest.raises(SandboxError, match="stopped"):
        await running
    with pytest.raises(SandboxError, match="stopped"):
        await waiting
    assert gone(pids)
    assert not pool.pids
    assert sum(pool.stats.replaced.values()) == 0  # nothing replaced during a stop


@pytest.mark.parametrize(
    ("target", "limits", "message"),
    [
        ("tests.doubles.no_such_module:extract", LIMITS, "No module named 'tests.doubles.no_such_module'"),
        (
            "tests.doubles.extract_targets:nothing",
            LIMITS,
            "is not a function of tests.doubles.extract_targets",
        ),
        (
            SCRIPTED,
            SandboxLimits(workers=2, memory_bytes=8 * MIB),
            "(target tests.doubles.extract_targets:scripted, memory limit 8 MiB) cannot start",
        ),
    ],
    ids=["missing-module", "missing-function", "memory-too-small"],
)
@in_module_loop
async def test_a_worker_that_cannot_start_fails_the_start(
    target: str, limits: SandboxLimits, message: str
) -> None:
    before = {child.pid for child in psutil.Process().children()}
    pool = make_pool(limits, target)
    with pytest.raises(SandboxStartError) as raised:
        await pool.start()
    assert message in str(raised.value)
    assert not pool.running
    assert not pool.pids
    assert {child.pid for child in psutil.Process().children()} <= before
    await pool.stop()


# -- what the pool accepts from a worker (no process needed) -------------------------------------------


def ok(text: str = "hello", **changes: Any) -> bytes:
    """An ``ok`` reply, with members of it replaced."""
    body: dict[str, Any] = {
        "text": text,
        "format": "pdf",
        "layout": {"page_starts": [0], "headings": [[1, "hello", 0]]},
        "details": {"pages": 1},
    }
    body.update(changes)
    return json.dumps({"ok": body}).encode()


def test_a_valid_reply_is_read() -> None:
    extracted = parse_reply(ok(), EXTRACT_LIMITS)
    assert isinstance(extracted, Extracted)
    assert extracted == Extracted(
        text="hello",
        format=Format.PDF,
        layout=extracted.layout,
        details={"pages": 1},
    )
    assert extracted.layout.page_starts == (0,)
    assert extracted.layout.headings == (Heading(1, "hello", 0),)
    refusal = parse_reply(b'{"error":{"reason":"encrypted","message":"locked"}}', EXTRACT_LIMITS)
    assert isinstance(refusal, DocumentError)
    assert (refusal.reason, refusal.message) == ("encrypted", "locked")


def test_lone_surrogates_pass_in_text_and_are_replaced_elsewhere() -> None:
    payload = ok(
        "a\ud800b",
        layout={"page_starts": [], "headings": [[1, "t\udc00", 0]]},
        details={"k\ud800": "v\udfff"},
    )
    extracted = parse_reply(payload, EXTRACT_LIMITS)
    assert isinstance(extracted, Extracted)
    assert extracted.text == "a\ud800b"  # offsets kept: the reader replaces it (clean_extracted)
    assert extracted.layout.headings[0].title == "t\ufffd"
    assert extracted.details == {"k\ufffd": "v\ufffd"}


INVALID = {
    "not-json": b"not json",
    "not-utf8": b'{"ok": "\xff"}',
    "pickle": b"\x80\x04\x95",
    "not-an-object": b"[1, 2]",
    "two-members": b'{"ok": {}, "error": {}}',
    "neither": b'{"ready": {}}',
    "ok-not-an-object": b'{"ok": "text"}',
    "extra-member": ok(evil=1),
    "missing-member": json.dumps({"ok": {"text": "a", "format": "pdf", "layout": {}}}).encode(),
    "text-not-a-string": ok(text=5),  # type: ignore[arg-type]
    "text-too-long": ok("x" * 10_001),
    "unknown-format": ok(format="exe"),
    "format-not-a-string": ok(format=["pdf"]),
    "nan": ok(details={"x": float("nan")}),
    "infinity": ok().replace(b'"pages": 1', b'"pages": 1e999'),
    "huge-integer": ok().replace(b'"pages": 1', b'"pages": ' + b"9" * 5000),
    "deep-nesting": ok().replace(b'"pages": 1', b'"pages": ' + b"[" * 100_000 + b"]" * 100_000),
    "details-too-deep": ok(details={"x": [[[[[[[[[[1]]]]]]]]]]}),
    "details-too-many": ok(details={"x": list(range(2000))}),
    "details-not-an-object": ok(details=[1]),
    "page-start-a-bool": ok(layout={"page_starts": [False], "headings": []}),
    "first-page-not-at-0": ok(layout={"page_starts": [1], "headings": []}),
    "pages-descending": ok(layout={"page_starts": [0, 3, 2], "headings": []}),
    "page-beyond-text": ok(layout={"page_starts": [0, 6], "headings": []}),
    "too-many-pages": ok("x" * 100, layout={"page_starts": list(range(51)), "headings": []}),
    "heading-beyond-text": ok(layout={"page_starts": [], "headings": [[1, "t", 6]]}),
    "heading-negative": ok(layout={"page_starts": [], "headings": [[1, "t", -1]]}),
    "heading-level-0": ok(layout={"page_starts": [], "headings": [[0, "t", 0]]}),
    "heading-not-a-triple": ok(layout={"page_starts": [], "headings": [[1, "t"]]}),
    "heading-title-too-long": ok(layout={"page_starts": [], "headings": [[1, "t" * 301, 0]]}),
    "headings-descending": ok(layout={"page_starts": [], "headings": [[1, "a", 3], [1, "b", 2]]}),
    "error-unknown-reason": b'{"error":{"reason":"engine_error","message":"m"}}',
    "error-message-not-a-string": b'{"error":{"reason":"malformed","message":1}}',
    "error-message-too-long": json.dumps({"error": {"reason": "malformed", "message": "m" * 2001}}).encode(),
    "error-extra-member": b'{"error":{"reason":"malformed","message":"m","code":1}}',
}


@pytest.mark.parametrize("payload", INVALID.values(), ids=INVALID.keys())
def test_an_invalid_reply_is_refused(payload: bytes) -> None:
    with pytest.raises(InvalidReply):
        parse_reply(payload, EXTRACT_LIMITS)


def test_limits_are_checked() -> None:
    with pytest.raises(ValueError, match="workers"):
        SandboxLimits(workers=0)
    with pytest.raises(ValueError, match="positive"):
        SandboxLimits(cpu_seconds=0)
