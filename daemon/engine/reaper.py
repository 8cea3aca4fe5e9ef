"""The engine's processes die with the process that started them, whatever kills it.

vLLM 0.32 starts EngineCore from the front end (our main process) with multiprocessing's ``spawn``
(forced on CPU; on GPU whenever CUDA is initialised), and EngineCore starts its workers the same way.
Workers watch EngineCore through a "death pipe" read by a thread, but nothing watches the front end;
and a thread does not run once the interpreter is in its shutdown: a worker stuck there outlived a
``kill -9`` of the main process by minutes, holding its memory (GPU memory on a GPU host) and,
through the descriptor it inherited, multiprocessing's resource tracker.

So each engine process arms ``PR_SET_PDEATHSIG`` (SIGKILL) for itself (:mod:`daemon.ops.parent_death`):
the kernel kills EngineCore the moment its parent goes, and each worker the moment EngineCore goes,
stuck or not. How it gets into processes that vLLM starts: the Process target vLLM pickles for
EngineCore is ``EngineCoreProc.run_engine_core``, looked up when the engine is built. While
:class:`~daemon.engine.vllm_engine.Engine` builds it, :func:`engine_processes_watched` puts a
:class:`WatchedTarget` there. Pickled, it is a call of :func:`arrive`, so the child arms the signal
while it unpickles its Process object, before the target's arguments (the engine's config, whose
classes take vLLM's imports: seconds); the parent's pid travels with it, so a parent that died
before is caught too. Called, it arms again (for ``fork``, where nothing is pickled), puts itself in
place of the worker target (in EngineCore), and runs vLLM's own target. Nothing else in vLLM changes.

The signal fires when the *thread* that started the process ends, not its process: EngineCore is
started from a :class:`ParentThread` that the engine owns and ends only once its processes are gone
(ending it kills any left, which is what a cancelled start wants too); EngineCore starts its workers
from its main thread. Multiprocessing's resource tracker (the main process's) is not ours to arm: it
exits by itself once every process holding its pipe is gone, after removing the shared memory they
leave behind.

Signals: SIGHUP, SIGUSR1 and SIGUSR2 are ignored in the engine's processes (a signal sent to the whole
process group is the main process's to handle; their default action would kill EngineCore). They are
also blocked in the thread that starts them
(:func:`daemon.engine.vllm_engine._signals_blocked_in_new_processes`), which covers a vLLM whose
targets this module cannot wrap.

This module imports only the standard library (and :mod:`daemon.ops.parent_death`) at import time:
engine processes import it first.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import os
import queue
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from daemon.ops import parent_death

T = TypeVar("T")

IGNORED_SIGNALS = (signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
"""Signals the daemon handles in its main process and its engine processes ignore."""

# The targets replaced in this process: a forked child inherits the replacement, and must still
# reach the original.
_originals: dict[str, Callable[..., Any]] = {}


def _say(message: str) -> None:
    # Engine processes have no docsumd logging (the main process renders their vLLM records only).
    print(f"docsumd engine process {os.getpid()}: {message}", file=sys.stderr, flush=True)


def _arm(parent_pid: int | None) -> None:
    """Die with the parent (see the module doc); say so where that cannot be arranged."""
    try:
        if parent_death.die_with_parent(parent_pid):
            return
        why = "no prctl on this system"
    except OSError as exc:
        why = str(exc)
    _say_once(f"it will not die with its parent ({why}): kill it if the daemon is killed")


@functools.cache
def _say_once(message: str) -> None:
    _say(message)


def _prepare_engine_process() -> None:
    for signum in IGNORED_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)
    import multiprocessing

    parent = multiprocessing.parent_process()
    _arm(parent.pid if parent is not None else None)


def _original(key: str, current: Callable[[], Any]) -> Callable[..., Any]:
    original = _originals.get(key)
    if original is not None:
        return original
    found: Callable[..., Any] = current()
    if isinstance(found, WatchedTarget):
        raise RuntimeError(f"the original {key} target is lost")
    return found


def _engine_core_target() -> Any:
    from vllm.v1.engine.core import EngineCoreProc

    return EngineCoreProc.run_engine_core


def _worker_target() -> Any:
    from vllm.v1.executor.multiproc_executor import WorkerProc

    return WorkerProc.worker_main


_CURRENT: dict[str, Callable[[], Any]] = {"engine_core": _engine_core_target, "worker": _worker_target}


class WatchedTarget:
    """An engine process's target: arms the parent-death signal, then runs vLLM's own target
    (``key``: ``engine_core`` or ``worker``). See the module doc."""

    def __init__(self, key: str) -> None:
        if key not in _CURRENT:
            raise ValueError(f"no engine process target {key!r}")
        self.key = key

    def __reduce__(self) -> tuple[Callable[[str, int], WatchedTarget], tuple[str, int]]:
        # Pickled in the parent as it starts the child: its pid is the parent the child expects.
        return arrive, (self.key, os.getpid())

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        _prepare_engine_process()
        if self.key == "engine_core":
            with contextlib.suppress(Exception):  # workers have vLLM's death pipe on EngineCore anyway
                _replace_worker_target()
        return _original(self.key, _CURRENT[self.key])(*args, **kwargs)


def arrive(key: str, parent_pid: int) -> WatchedTarget:
    """Unpickling a :class:`WatchedTarget` in the child: arm the signal now (exit if the parent is
    already gone), before the rest of the Process object is unpickled."""
    _arm(parent_pid)
    return WatchedTarget(key)


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

    _replace(WorkerProc, "worker_main", "worker", WatchedTarget("worker"))


@contextlib.contextmanager
def engine_processes_watched(warn: Callable[[str], None]) -> Iterator[bool]:
    """While the engine is built: its EngineCore processes (and their workers) die with their
    parent. Yields whether they do (False, after ``warn``, on a vLLM whose EngineCore target is not
    where this expects it). Use it in a :class:`ParentThread`."""
    try:
        from vllm.v1.engine.core import EngineCoreProc

        undo = _replace(EngineCoreProc, "run_engine_core", "engine_core", WatchedTarget("engine_core"))
    except (ImportError, TypeError) as exc:
        warn(f"engine processes start without a parent-death signal: {exc}")
        yield False
        return
    try:
        yield True
    finally:
        undo()


class ParentThread:
    """A thread to start processes from, that lives until :meth:`close`: a process that arms the
    parent-death signal dies when the thread that started it ends (see :mod:`daemon.ops.parent_death`),
    so that thread must outlive it. Ending it (:meth:`close`) kills every such process it started.

    Jobs run one at a time, in order. A daemon thread: at interpreter exit it ends with the process.
    """

    def __init__(self, name: str) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], concurrent.futures.Future[Any]] | None]
        self._jobs = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._closed = False

    @property
    def alive(self) -> bool:
        """Started and not yet ended."""
        return self._thread.is_alive()

    @property
    def ident(self) -> int | None:
        """The thread's id (None before the first job)."""
        return self._thread.ident

    def run(self, job: Callable[[], T]) -> asyncio.Future[T]:
        """Run ``job`` in the thread; its result or exception, for awaiting from the event loop.
        Cancelling the awaitable does not stop the job."""
        if self._closed:
            raise RuntimeError("this parent thread is closed")
        if self._thread.ident is None:
            self._thread.start()
        done: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._jobs.put((job, done))
        return asyncio.wrap_future(done)

    def close(self) -> None:
        """End the thread once the jobs given to it are done (at once if idle). Idempotent."""
        if not self._closed:
            self._closed = True
            self._jobs.put(None)

    def _serve(self) -> None:
        while (item := self._jobs.get()) is not None:
            self._run_one(*item)
            del item  # hold nothing of a finished job while waiting for the next one

    @staticmethod
    def _run_one(job: Callable[[], Any], done: concurrent.futures.Future[Any]) -> None:
        if not done.set_running_or_notify_cancel():
            return
        try:
            result = job()
        except BaseException as exc:  # the caller's to see
            done.set_exception(exc)
        else:
            done.set_result(result)


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

    def with_descendants(self) -> Processes:
        """These and every living process below them now: a child one of them started after they
        were recorded (a fork that never exec'd keeps its parent's name) dies with them."""
        pids = self.alive()
        for pid in list(pids):
            pids |= descendants(pid)
        return Processes(pids)

    def describe(self) -> list[str]:
        """``pid:name:state:wchan`` of each one still running, for a log line."""
        described = []
        for pid in sorted(self.alive()):
            proc = Path(f"/proc/{pid}")
            fields = []
            for name in ("comm", "wchan"):
                try:
                    fields.append((proc / name).read_text().strip() or "-")
                except OSError:
                    fields.append("?")
            state = (_stat_fields(proc / "stat") or ["?"])[0]
            described.append(f"{pid}:{fields[0]}:{state}:{fields[1]}")
        return described


def started_since(before: set[int]) -> Processes:
    """This process's descendants that are not in ``before``, less multiprocessing's resource
    tracker (it is the main process's, and exits by itself)."""
    from multiprocessing import resource_tracker

    tracker = getattr(getattr(resource_tracker, "_resource_tracker", None), "_pid", None)
    return Processes(descendants() - before - {tracker})
