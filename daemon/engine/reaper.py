"""The engine's processes die with the process that started them, whatever kills it.

vLLM 0.32 starts EngineCore from the front end (our main process) with multiprocessing's ``spawn``
(forced on CPU; on GPU whenever CUDA is initialised), and EngineCore starts its workers the same way.
Workers watch EngineCore through a "death pipe", but nothing watches the front end: after a
``kill -9`` of the main process EngineCore and its workers keep running, holding their memory (GPU
memory on a GPU host), until someone kills them.

How the watch gets into the child: the Process target vLLM pickles for EngineCore is
``EngineCoreProc.run_engine_core``, looked up when the engine is built. While
:class:`~daemon.engine.vllm_engine.Engine` builds it, :func:`engine_processes_watched` puts
:func:`run_engine_core_watched` there, a module-level function that pickles by reference, so the
child imports this module and runs it first; it does the same for the worker target inside
EngineCore. Nothing else in vLLM changes.

What the watch is: a daemon thread in each engine process waiting on multiprocessing's *parent
sentinel* (``multiprocessing.parent_process().sentinel``), the read end of a pipe whose write end only
the parent holds: it reads EOF the moment the parent process is gone, however it died. The thread also
polls ``os.getppid()`` once a second (a forked child shares the pipe with its siblings, so for fork
the sentinel alone could stay open). When the parent is gone the process sends itself SIGTERM, which
is vLLM's own clean shutdown (EngineCore stops its workers), and SIGKILL after a grace.

Why not ``prctl(PR_SET_PDEATHSIG)``: it fires when the *thread* that started the child exits, not the
process, and the engine is started from a worker thread; it also needs to be set in the child itself
(spawn's fork+exec runs no ``os.register_at_fork`` hooks), and then races with a parent that died
before the call. The sentinel watch has none of these problems and needs no ctypes.

Signals: SIGHUP, SIGUSR1 and SIGUSR2 are ignored in the engine's processes (a signal sent to the whole
process group is the main process's to handle; their default action would kill EngineCore). They are
also blocked in the thread that starts them
(:func:`daemon.engine.vllm_engine._signals_blocked_in_new_processes`), which covers a vLLM whose
targets this module cannot wrap.

This module imports only the standard library at import time: engine processes import it first.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

IGNORED_SIGNALS = (signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
"""Signals the daemon handles in its main process and its engine processes ignore."""

_POLL_SECONDS = 1.0
_GRACE_SECONDS = 5.0

# The targets replaced in this process: a forked child inherits the replacement, and must still
# reach the original.
_originals: dict[str, Callable[..., Any]] = {}


def _say(message: str) -> None:
    # Engine processes have no docsumd logging (the main process renders their vLLM records only).
    print(f"docsumd engine process {os.getpid()}: {message}", file=sys.stderr, flush=True)


def watch_parent(
    *, poll_seconds: float = _POLL_SECONDS, grace_seconds: float = _GRACE_SECONDS
) -> threading.Thread:
    """Start the thread that ends this process once its parent process is gone (see the module doc)."""
    import multiprocessing
    from multiprocessing.connection import wait

    parent = multiprocessing.parent_process()
    sentinel = parent.sentinel if parent is not None else None
    parent_pid = os.getppid()

    def gone() -> bool:
        return os.getppid() != parent_pid

    def run() -> None:
        while not gone():
            if sentinel is not None:
                try:
                    if wait([sentinel], timeout=poll_seconds):
                        break
                except OSError:  # closed under us: go on polling the parent id
                    time.sleep(poll_seconds)
            else:
                time.sleep(poll_seconds)
        _say(f"the process that started it ({parent_pid}) is gone: shutting down")
        # The kernel ends the process when the alarm fires (SIGALRM's default action), even if
        # the interpreter is stuck in its finalization, where this daemon thread no longer runs.
        signal.alarm(max(1, math.ceil(grace_seconds)))
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(grace_seconds)
        _say("still running after the grace: killing itself")
        os.kill(os.getpid(), signal.SIGKILL)

    thread = threading.Thread(target=run, name="docsumd-parent-watch", daemon=True)
    thread.start()
    return thread


def _prepare_engine_process() -> None:
    for signum in IGNORED_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)
    signal.signal(signal.SIGALRM, signal.SIG_DFL)  # the watch's backstop (see watch_parent)
    watch_parent()


def _original(key: str, current: Callable[[], Any]) -> Callable[..., Any]:
    original = _originals.get(key)
    if original is not None:
        return original
    found: Callable[..., Any] = current()
    if found is run_engine_core_watched or found is run_worker_watched:
        raise RuntimeError(f"the original {key} target is lost")
    return found


def run_engine_core_watched(*args: Any, **kwargs: Any) -> Any:
    """EngineCore's process target: the watch, then vLLM's ``EngineCoreProc.run_engine_core``."""
    _prepare_engine_process()
    with contextlib.suppress(Exception):  # workers have vLLM's death pipe on EngineCore anyway
        _replace_worker_target()

    def current() -> Any:
        from vllm.v1.engine.core import EngineCoreProc

        return EngineCoreProc.run_engine_core

    return _original("engine_core", current)(*args, **kwargs)


def run_worker_watched(*args: Any, **kwargs: Any) -> Any:
    """A worker's process target: the watch, then vLLM's ``WorkerProc.worker_main``."""
    _prepare_engine_process()

    def current() -> Any:
        from vllm.v1.executor.multiproc_executor import WorkerProc

        return WorkerProc.worker_main

    return _original("worker", current)(*args, **kwargs)


def _replace(owner: type, name: str, key: str, replacement: Callable[..., Any]) -> Callable[[], None]:
    """Put ``replacement`` in the static method ``owner.name``; returns how to undo it."""
    original = owner.__dict__.get(name)
    if not isinstance(original, staticmethod):
        raise TypeError(f"{owner.__qualname__}.{name} is not a static method in this vLLM")
    _originals[key] = original.__func__
    setattr(owner, name, staticmethod(replacement))

    def undo() -> None:
        setattr(owner, name, original)
        _originals.pop(key, None)

    return undo


def _replace_worker_target() -> None:
    from vllm.v1.executor.multiproc_executor import WorkerProc

    _replace(WorkerProc, "worker_main", "worker", run_worker_watched)


@contextlib.contextmanager
def engine_processes_watched(warn: Callable[[str], None]) -> Iterator[bool]:
    """While the engine is built: its EngineCore processes start with the parent watch. Yields whether
    they do (False, after ``warn``, on a vLLM whose EngineCore target is not where this expects it)."""
    try:
        from vllm.v1.engine.core import EngineCoreProc

        undo = _replace(EngineCoreProc, "run_engine_core", "engine_core", run_engine_core_watched)
    except (ImportError, TypeError) as exc:
        warn(f"engine processes start without a parent watch: {exc}")
        yield False
        return
    try:
        yield True
    finally:
        undo()


# -- the processes of an engine start ---------------------------------------------------------------


def _stat_fields(stat: Path) -> list[str] | None:
    """The fields of a ``/proc/PID/stat`` after the command name (state first), or None if gone."""
    try:
        return stat.read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def descendants(pid: int | None = None) -> set[int]:
    """Every living process below ``pid`` (default: this process), from /proc."""
    root = os.getpid() if pid is None else pid
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        fields = _stat_fields(stat)
        if fields is not None and fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found: set[int] = set()
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _start_time(pid: int) -> str | None:
    """When ``pid`` started (clock ticks since boot), or None if it is gone or a zombie."""
    fields = _stat_fields(Path(f"/proc/{pid}/stat"))
    return None if fields is None or fields[0] in ("Z", "X") else fields[19]


class Processes:
    """Processes known by id and start time, so that a reused id is not mistaken for one of them."""

    def __init__(self, pids: set[int]) -> None:
        self._started = {pid: t for pid in pids if (t := _start_time(pid)) is not None}

    def alive(self) -> set[int]:
        """The ones still running (an orphan re-parented away from this process included)."""
        return {pid for pid, t in self._started.items() if _start_time(pid) == t}

    def kill(self) -> set[int]:
        """SIGKILL the ones still running; returns them."""
        killed = set()
        for pid in self.alive():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
        return killed


def started_since(before: set[int]) -> Processes:
    """This process's descendants that are not in ``before``, less multiprocessing's resource
    tracker (it is the main process's, and exits by itself)."""
    from multiprocessing import resource_tracker

    tracker = getattr(getattr(resource_tracker, "_resource_tracker", None), "_pid", None)
    return Processes(descendants() - before - {tracker})
