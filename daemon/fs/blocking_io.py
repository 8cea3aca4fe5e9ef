"""Blocking file-system calls off the event loop, each bounded by a timeout, on threads of their own.

Why not ``asyncio.to_thread``: it shares the loop's default executor with everything else (vLLM's
engine shutdown runs there), and the interpreter joins its threads at exit. One read from a hung file
system (a FIFO, a stale NFS or FUSE mount) would then hold up the engine's shutdown and the process's
exit. Here:

* calls run on this pool's own daemon threads, so nothing waits for them at exit;
* a call that has not returned within its timeout raises :class:`TimeoutError` to its caller (who
  fails that one document, or treats a hung output folder as fatal); its thread is given up on and
  replaced, so a few stuck calls do not starve the rest (at most :attr:`BlockingIO.max_stuck` threads
  are ever given up on; past that, calls queue behind the stuck ones and time out);
* a call not yet started when its caller gave up is skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, Generic, TypeVar

from daemon.ops.logging import get_logger

log = get_logger(__name__)

T = TypeVar("T")

DEFAULT_WORKERS: Final = 8
DEFAULT_MAX_STUCK: Final = 32


@dataclass(eq=False)
class Job(Generic[T]):
    """One call handed to the pool; ``future`` resolves on the caller's loop."""

    call: Callable[[], T]
    future: asyncio.Future[T]
    loop: asyncio.AbstractEventLoop
    started: bool = False
    skipped: bool = False
    stuck: bool = False
    name: str = field(default="")


class BlockingIO:
    """A small pool of daemon threads for blocking file-system calls. Thread-safe; shared by loops."""

    def __init__(
        self, name: str = "docsumd-io", *, workers: int = DEFAULT_WORKERS, max_stuck: int = DEFAULT_MAX_STUCK
    ) -> None:
        """``workers``: threads serving calls; ``max_stuck``: threads that may be given up on in all."""
        self.name = name
        self.workers = workers
        self.max_stuck = max_stuck
        self._jobs: queue.SimpleQueue[Job[Any]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0  # alive, including stuck ones
        self._idle = 0
        self._stuck = 0  # given up on and not yet returned
        self._given_up = 0  # ever given up on

    @property
    def stuck(self) -> int:
        """Threads given up on that have not come back."""
        return self._stuck

    def submit(self, function: Callable[..., T], *args: Any) -> Job[T]:
        """Queue ``function(*args)``; the job's future resolves on the running loop."""
        loop = asyncio.get_running_loop()
        job: Job[T] = Job(functools.partial(function, *args), loop.create_future(), loop)
        job.name = getattr(function, "__name__", repr(function))
        self._jobs.put(job)
        self._add_worker_if_needed()
        return job

    async def wait(self, job: Job[T], time_limit: float) -> T:
        """The job's result within ``time_limit`` seconds, else :class:`TimeoutError` (the job is given
        up on). Cancelling the wait gives the job up too (a started call still runs to its end)."""
        # asyncio.timeout, not wait_for: on Python 3.11, wait_for loses a cancellation that arrives as
        # the call finishes, and a source's generator would then run on after being cancelled.
        deadline = asyncio.timeout(time_limit)
        try:
            async with deadline:
                return await asyncio.shield(job.future)
        except TimeoutError:
            if not deadline.expired():
                raise  # the call's own TimeoutError
            self._give_up(job, timed_out=True)
            raise TimeoutError(f"{job.name} did not finish within {time_limit:g} s") from None
        except asyncio.CancelledError:
            self._give_up(job, timed_out=False)
            raise

    async def run(self, function: Callable[..., T], *args: Any, time_limit: float) -> T:
        """Run ``function(*args)`` on the pool; its result, or :class:`TimeoutError` after
        ``time_limit`` seconds."""
        return await self.wait(self.submit(function, *args), time_limit)

    # -- threads -----------------------------------------------------------------------------------

    def _add_worker_if_needed(self) -> None:
        with self._lock:
            serving = self._threads - self._stuck
            if self._idle > 0 or serving >= self.workers:
                return
            self._threads += 1
            number = self._threads
        threading.Thread(target=self._serve, name=f"{self.name}-{number}", daemon=True).start()

    def _give_up(self, job: Job[Any], *, timed_out: bool) -> None:
        # Nobody reads the outcome now: take it when it comes, so asyncio does not report it as lost.
        job.future.add_done_callback(_consume)
        with self._lock:
            if not job.started:
                job.skipped = True  # never runs; its future ends cancelled
                job.loop.call_soon(_cancel, job.future)
                return
            if not timed_out or job.stuck or job.future.done():
                return
            if self._given_up >= self.max_stuck:
                log.error("a file-system call is stuck and no more threads may be given up on", call=job.name)
                return
            job.stuck = True
            self._stuck += 1
            self._given_up += 1
        log.warning("a file-system call is stuck; its thread is given up on", call=job.name)
        self._add_worker_if_needed()

    def _serve(self) -> None:
        while True:
            with self._lock:
                self._idle += 1
            job = self._jobs.get()
            with self._lock:
                self._idle -= 1
                if job.skipped:
                    continue
                job.started = True
            outcome: tuple[Any, BaseException | None]
            try:
                outcome = (job.call(), None)
            except BaseException as exc:  # handed to the caller, whatever it is
                outcome = (None, exc)
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is waiting any more
                job.loop.call_soon_threadsafe(_resolve, job.future, *outcome)
            with self._lock:
                if job.stuck:
                    # Came back after all: it may serve again unless the pool is full without it.
                    job.stuck = False
                    self._stuck -= 1
                    if self._threads - self._stuck > self.workers:
                        self._threads -= 1
                        return


def _resolve(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


def _consume(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


def _cancel(future: asyncio.Future[Any]) -> None:
    if not future.done():
        future.cancel()


_default: BlockingIO | None = None
_default_lock = threading.Lock()


def file_io() -> BlockingIO:
    """The process's pool for document file I/O (inputs, sidecars, records, moves)."""
    global _default  # noqa: PLW0603 - one pool per process, made on first use
    with _default_lock:
        if _default is None:
            _default = BlockingIO("docsumd-file-io")
        return _default
