"""``kill -9`` of the daemon's main process at a chosen moment, and every process it started watched
until it is gone: for ``tests/e2e/test_kill_9.py`` and ``bench/kill9.py``.

The moments: ``idle`` (ready, the extraction workers started, nothing in flight), ``start`` (the
engine's worker process has just been started: EngineCore and the worker still loading),
``extraction`` (an extraction worker busy on a PDF), ``map_reduce`` (a long document's parts in the
engine, its worker computing), ``busy`` (both at once), ``draining`` (SIGTERM sent, the engine
shutting down: its processes in vLLM's shutdown and Python's).

What counts as the daemon's: the whole process tree under the main process (psutil, read just
before the kill), plus, after it, any process still in the daemon's process group or naming the main
process as its parent on its command line (the extraction workers: they run in sessions of their own).
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from tests.e2e.harness import DaemonProcess, Layout, drop_file, wait_for

REPO = Path(__file__).resolve().parents[2]
PDFS = REPO / "tests" / "fixtures" / "documents" / "pdf"
DOCX = REPO / "tests" / "fixtures" / "documents" / "docx" / "contract.docx"
MOMENTS = ("idle", "start", "extraction", "map_reduce", "busy", "draining")

GONE_WITHIN_S = 5.0
"""What the tests allow: every process gone this long after the main process (the kernel kills them
at once; the resource tracker exits once they are gone). Generous, for a loaded CI machine."""

_SAMPLE_SECONDS = 0.05


@dataclass
class Kill9:
    """What one ``kill -9`` of the main process left, and when each process went."""

    moment: str
    processes: dict[int, str]
    """Every process of the daemon just before the kill (the main process included), by pid."""
    gone_after_s: dict[int, float] = field(default_factory=dict)
    """Seconds from the kill until each was gone (exited, or a zombie)."""
    left: list[str] = field(default_factory=list)
    """Processes still alive at the deadline (killed afterwards): "pid:name"."""
    busy: list[str] = field(default_factory=list)
    """What was seen computing just before the kill: "pid:name" of processes using CPU."""

    @property
    def slowest_s(self) -> float:
        """When the last one went (the deadline if any was left)."""
        return max(self.gone_after_s.values(), default=0.0)

    def as_json(self) -> dict[str, Any]:
        """For bench/results."""
        return {
            "moment": self.moment,
            "processes": {str(pid): name for pid, name in sorted(self.processes.items())},
            "gone_after_s": {str(pid): round(s, 3) for pid, s in sorted(self.gone_after_s.items())},
            "slowest_s": round(self.slowest_s, 3),
            "left": self.left,
            "busy": self.busy,
        }


def _name(process: psutil.Process) -> str:
    try:
        cmdline = process.cmdline()
        name = process.name()
    except psutil.Error:
        return "?"
    if "daemon.document.sandbox.worker" in cmdline:
        return "extraction-worker"
    if any("resource_tracker" in part for part in cmdline):
        return "resource-tracker"
    return name


def _alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def process_tree(pid: int) -> list[psutil.Process]:
    """``pid`` and every process below it."""
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


def _stragglers(main_pid: int, pgid: int) -> list[psutil.Process]:
    """Processes still in the daemon's group or started as its extraction workers."""
    found = []
    for process in psutil.process_iter():
        try:
            if process.pid == main_pid or not _alive(process):
                continue
            if os.getpgid(process.pid) == pgid or f"--parent-pid={main_pid}" in process.cmdline():
                found.append(process)
        except (psutil.Error, ProcessLookupError):
            continue
    return found


def busy_processes(processes: list[psutil.Process], window: float = 0.2) -> list[psutil.Process]:
    """Those of ``processes`` that used CPU during ``window`` seconds."""
    before: dict[int, float] = {}
    for process in processes:
        try:
            before[process.pid] = sum(process.cpu_times()[:2])
        except psutil.Error:
            continue
    time.sleep(window)
    busy = []
    for process in processes:
        try:
            if sum(process.cpu_times()[:2]) - before.get(process.pid, 0.0) >= 0.02:
                busy.append(process)
        except psutil.Error:
            continue
    return busy


def kill_9(daemon: DaemonProcess, moment: str, busy: list[str], deadline_s: float = 30.0) -> Kill9:
    """SIGKILL the main process; watch every process of the daemon until it is gone or
    ``deadline_s`` passed; kill what is left (and say so in :attr:`Kill9.left`). ``busy``: what
    :func:`reach` saw computing."""
    assert daemon.proc is not None
    main = daemon.proc.pid
    tree = process_tree(main)
    outcome = Kill9(moment=moment, processes={p.pid: _name(p) for p in tree}, busy=busy)
    os.kill(main, signal.SIGKILL)
    killed = time.monotonic()
    watched = list(tree)
    while True:
        for process in watched:
            if process.pid not in outcome.gone_after_s and not _alive(process):
                outcome.gone_after_s[process.pid] = time.monotonic() - killed
        if len(outcome.gone_after_s) == len(watched):
            # All gone: unless one started between the tree's reading and the kill (a scan of
            # every process, too slow to repeat at each look).
            late = [p for p in _stragglers(main, daemon.pgid) if p.pid not in outcome.processes]
            if not late:
                break
            for process in late:
                outcome.processes[process.pid] = _name(process)
                watched.append(process)
        if time.monotonic() - killed > deadline_s:
            break
        time.sleep(_SAMPLE_SECONDS)
    daemon.proc.wait(timeout=30)
    for process in watched:
        if process.pid not in outcome.gone_after_s:
            outcome.left.append(f"{process.pid}:{outcome.processes[process.pid]}")
            outcome.gone_after_s[process.pid] = deadline_s
            with contextlib.suppress(psutil.Error):
                process.kill()
    return outcome


# -- the moments -------------------------------------------------------------------------------------------


def _metric(daemon: DaemonProcess, name: str, labels: str = "") -> float:
    status, body = daemon.http_get("/metrics")
    if status != 200:
        return 0.0
    pattern = re.compile(rf"^{re.escape(name)}(?:{{[^}}]*{re.escape(labels)}[^}}]*}})? ([0-9.e+-]+)$", re.M)
    return sum(float(value) for value in pattern.findall(body))


def _named(daemon: DaemonProcess, name: str) -> list[psutil.Process]:
    assert daemon.proc is not None
    return [p for p in process_tree(daemon.proc.pid)[1:] if _name(p) == name]


def long_document(paragraphs: int = 400) -> bytes:
    """A text of many model contexts (about 150 kB), the same every time: numbered sections of
    sentences drawn from a fixed vocabulary (the tiny model reads any text alike)."""
    rng = random.Random(36)
    words = [
        "the",
        "committee",
        "budget",
        "library",
        "council",
        "water",
        "supply",
        "report",
        "meeting",
        "contract",
        "party",
        "notice",
        "term",
        "payment",
        "clause",
        "section",
        "schedule",
        "obligation",
        "right",
        "licence",
        "software",
        "source",
        "copy",
        "work",
        "year",
        "month",
        "review",
        "agree",
        "fund",
        "postpone",
        "repair",
        "spring",
        "winter",
        "road",
        "bridge",
        "school",
        "hospital",
    ]
    sections = []
    for number in range(1, paragraphs + 1):
        sentences = (
            " ".join(rng.choice(words) for _ in range(rng.randint(8, 20))).capitalize() + "."
            for _ in range(rng.randint(3, 6))
        )
        sections.append(f"Section {number}.\n\n" + " ".join(sentences))
    return "\n\n".join(sections).encode()


def _engine_worker_started(daemon: DaemonProcess) -> bool:
    """EngineCore has started its worker: a process spawned by multiprocessing below a child of the
    main process (EngineCore runs short-lived commands too while it starts)."""
    assert daemon.proc is not None
    main = daemon.proc.pid
    try:
        return any(
            (p.ppid() != main and any("multiprocessing" in part for part in p.cmdline()))
            or p.name() == "VLLM::Worker"
            for p in process_tree(main)[1:]
        )
    except psutil.Error:
        return False


def _wait_busy(
    daemon: DaemonProcess, name: str, condition: Callable[[], bool], timeout: float, what: str
) -> list[str]:
    """Wait until ``condition`` holds while a process called ``name`` computes; returns those seen
    computing ("pid:name")."""
    seen: list[str] = []

    def busy() -> bool:
        if not condition():
            return False
        seen[:] = [f"{p.pid}:{name}" for p in busy_processes(_named(daemon, name), window=0.1)]
        return bool(seen)

    wait_for(busy, timeout, what, interval=0.0)
    return seen


def _drop_pdfs(layout: Layout, prefix: str) -> list[str]:
    names = []
    for path in sorted(PDFS.glob("*.pdf")):
        names.append(f"{prefix}-{path.name}")
        drop_file(layout.inbox, names[-1], path.read_bytes())
    names.append(f"{prefix}-{DOCX.name}")
    drop_file(layout.inbox, names[-1], DOCX.read_bytes())
    return names


def _start_extraction_workers(daemon: DaemonProcess) -> None:
    """One PDF through, so that the extraction workers run (they start with the first one)."""
    layout = daemon.layout
    path = sorted(PDFS.glob("*.pdf"))[0]
    drop_file(layout.inbox, f"first-{path.name}", path.read_bytes())
    wait_for(lambda: f"first-{path.name}" in layout.inputs_in(layout.done), 180, "the first PDF summarized")


def reach(daemon: DaemonProcess, moment: str, timeout: float = 600) -> list[str]:
    """Bring a just-started daemon to ``moment`` (see the module doc); returns what was seen
    computing at the end ("pid:name"), for :func:`kill_9`."""
    if moment not in MOMENTS:
        raise ValueError(f"no moment {moment!r}: one of {', '.join(MOMENTS)}")
    layout = daemon.layout
    if moment == "start":
        wait_for(
            lambda: _engine_worker_started(daemon), timeout, "the engine's worker process", interval=0.05
        )
        return []
    daemon.wait_ready(timeout)
    _start_extraction_workers(daemon)
    if moment == "idle":
        return []

    def long_unfinished() -> bool:
        return "long.txt" not in layout.inputs_in(layout.done)

    busy: list[str] = []
    if moment in ("map_reduce", "busy", "draining"):
        drop_file(layout.inbox, "long.txt", long_document())

        def parts_sent() -> bool:
            return long_unfinished() and _metric(daemon, "docsumd_engine_requests_total", 'kind="part"') >= 2

        busy = _wait_busy(
            daemon, "VLLM::Worker", parts_sent, timeout, "the long document's parts in the engine"
        )
    if moment == "draining":
        daemon.signal(signal.SIGTERM)
        wait_for(
            lambda: any(e.get("event") == "engine stopping" for e in daemon.log_events()),
            timeout,
            "the engine stopping",
            interval=0.05,
        )
        return []
    if moment in ("extraction", "busy"):
        names = set(_drop_pdfs(layout, "x"))

        def extracting() -> bool:
            finished = layout.inputs_in(layout.done) | layout.inputs_in(layout.failed)
            return not names <= finished and (moment == "extraction" or long_unfinished())

        busy += _wait_busy(daemon, "extraction-worker", extracting, timeout, "an extraction worker busy")
    return busy
