"""Extraction from hostile files in sandboxed worker processes: :class:`ExtractionPool`.

PDF, DOCX, ODT and HTML parsers are large native libraries fed with whatever arrives in the inbox or
on the topic, so extraction is the daemon's trust boundary. Each document is extracted in a
long-lived worker process (:mod:`daemon.document.sandbox.worker`: resource limits, no new privileges, no
files, a clean environment, dies with the daemon), never in the daemon itself, and what comes back
is JSON that the pool checks before anything else sees it (:mod:`daemon.document.sandbox.protocol`).

At most ``workers`` extractions run at once; the others wait for a worker, first come first
served. A worker that dies on a document (a signal, RLIMIT_CPU's SIGXCPU, a MemoryError under
RLIMIT_AS, a native crash, an exit), overruns the wall-clock limit, or sends anything but a valid
reply, fails *that* document with ``DocumentError("extract_failed", ...)`` whose message says which,
and is replaced by a fresh one in the background; the daemon never dies from it. A cancelled
extraction kills and replaces its worker (it may be in the middle of anything), then re-raises.
Workers are also replaced after ``max_tasks_per_worker`` documents, to bound leaks and fragmentation.

The extractor's own refusals come back as they were raised (``DocumentError`` with its reason and
message); any other exception in the worker comes back as ``internal_error`` and the worker goes
on. :attr:`ExtractionPool.stats` counts worker starts and replacements by cause, for metrics.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeVar

from daemon.document.sandbox import protocol
from daemon.document.sandbox import worker as worker_module
from daemon.document.sandbox.protocol import InvalidReply, loads_reply, parse_reply, reply_cap
from daemon.document.types import EXTRACTED_FORMATS, Extracted, ExtractLimits, Format
from daemon.errors import DocumentError
from daemon.lifecycle import Lifecycle
from daemon.ops.logging import get_logger

log = get_logger(__name__)

T = TypeVar("T")

MIB: Final = 1024 * 1024
DEFAULT_TARGET: Final = "daemon.document.extract:extract"
DEFAULT_PRELOAD: Final = (
    "lxml.etree",
    "lxml.html",
    "pypdfium2",
    "daemon.document.extract.pdf",
    "daemon.document.extract.office",
    "daemon.document.extract.html",
)
"""What a worker of the real extractor imports at start, besides the target: the extractors import
their libraries on first use, which a worker should pay once, before it is ready (and a missing
library then fails the pool's start, not every PDF)."""

START_SECONDS: Final = 60.0
"""A worker must say it is ready within this (measured: 0.2 s on an idle core, imports included)."""
STOP_GRACE_SECONDS: Final = 2.0
"""How long :meth:`ExtractionPool.stop` (and a recycled worker) gets to exit at end of input."""
EXIT_GRACE_SECONDS: Final = 1.0
"""How long a worker whose reply pipe closed gets to exit before it is killed (and counted as
misbehaving rather than by its exit status)."""
KILL_WAIT_SECONDS: Final = 5.0
"""How long a killed worker's exit is waited for before it is left to the child watcher."""
RESPAWN_FIRST_SECONDS: Final = 0.5
RESPAWN_MAX_SECONDS: Final = 30.0
STDERR_TAIL_BYTES: Final = 4096
"""The end of a worker's stderr that the pool keeps, for the log line when it dies."""
PASSED_ENVIRONMENT: Final = ("LD_LIBRARY_PATH",)
"""The daemon's environment variables a worker gets, if set: an interpreter built with a shared
libpython outside the loader's path needs this one to start. Nothing else of the environment
reaches a worker (only ``PYTHONPATH``, computed)."""
MAX_READY_BYTES: Final = 64 * 1024
STREAM_LIMIT: Final = 1024 * 1024


@dataclasses.dataclass(frozen=True, slots=True)
class SandboxLimits:
    """The extraction workers: how many, and what each may use.

    The defaults suit the real extractors: a worker's baseline after importing lxml, pypdfium2 and
    pdfminer is about 70 MiB of address space (50 MiB resident) and 0.2 s of start-up, so 1 GiB of
    ``RLIMIT_AS`` leaves over 900 MiB for one document; real PDFs of hundreds of pages extract in
    well under a second of CPU, so 60 s of CPU and 120 s of wall clock only stop pathological ones."""

    workers: int = 2
    """Worker processes, so extractions at once (each uses up to one CPU core)."""
    memory_bytes: int = 1024 * MIB
    """A worker's address-space limit (RLIMIT_AS): over it an allocation fails."""
    cpu_seconds: float = 60.0
    """CPU time one document may use (RLIMIT_CPU, per document in a long-lived worker)."""
    timeout_seconds: float = 120.0
    """Wall-clock time one document may take in its worker, from the request sent to the reply read
    (waiting for a free worker not included)."""
    max_tasks_per_worker: int = 200
    """A worker is replaced after this many documents (bounds leaks)."""

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ValueError(f"workers must be at least 1, not {self.workers}")
        if self.memory_bytes < 1 or self.max_tasks_per_worker < 1:
            raise ValueError("memory_bytes and max_tasks_per_worker must be positive")
        if not (self.cpu_seconds > 0 and self.timeout_seconds > 0):
            raise ValueError("cpu_seconds and timeout_seconds must be positive")


@dataclasses.dataclass(slots=True)
class SandboxStats:
    """What the pool has done, for metrics (counters only grow)."""

    started: int = 0
    """Worker processes that started and said they were ready."""
    replaced: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    """Workers replaced, by cause: ``memory``, ``cpu``, ``timeout``, ``crashed`` (a signal),
    ``exited``, ``protocol`` (an invalid reply), ``cancelled``, ``recycled`` (max tasks)."""
    start_failures: int = 0
    """Replacement workers that could not start (retried with a growing pause)."""
    extractions: int = 0
    """Documents a worker answered (text or an extractor's refusal)."""


class SandboxError(RuntimeError):
    """The pool cannot serve: not running, stopped during an extraction, or no worker can start."""


class SandboxStartError(SandboxError):
    """A worker cannot start: a missing module, a memory limit too small for the imports, a
    descriptor or process limit of the host, or the worker is of another version."""


class _Failed(Exception):
    """A worker failed on a document: it is replaced, and the document fails with ``message``."""

    def __init__(self, cause: str, message: str) -> None:
        super().__init__(message)
        self.cause = cause
        self.message = message


class _Unsent(Exception):
    """The worker was gone before it read the document (it died idle, before the pool saw it
    exit): the document never reached it."""


class _WorkerFatal(Exception):
    """The worker said why it cannot start."""


# -- one worker, from the pool's side -------------------------------------------------------------------


class _Worker:
    """A worker process and its pipes. Its stderr is drained all along (a worker blocked on a full
    stderr pipe would look hung), keeping the tail for the log line when it dies."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.pid = process.pid
        self.tasks = 0
        self.stopping = False
        """Set when the pool's stop() ends it (a caller then does not blame its document)."""
        self.ready: dict[str, Any] = {}
        self._tail = bytearray()
        assert process.stderr is not None
        self._drain = asyncio.create_task(
            self._drain_stderr(process.stderr), name=f"docsumd-extract-worker-{self.pid}-stderr"
        )

    @property
    def alive(self) -> bool:
        """Not known to have exited."""
        return self.process.returncode is None

    async def _drain_stderr(self, stream: asyncio.StreamReader) -> None:
        while chunk := await stream.read(65536):
            self._tail += chunk
            del self._tail[:-STDERR_TAIL_BYTES]

    def stderr_tail(self, limit: int = STDERR_TAIL_BYTES) -> str:
        """The last ``limit`` bytes of its stderr, as text."""
        return bytes(self._tail[-limit:]).decode("utf-8", "replace").strip()

    async def send(self, header: bytes, data: bytes) -> None:
        """Write one request (the data is not copied into the header); ConnectionError if the
        worker's input is closed."""
        stdin = self.process.stdin
        assert stdin is not None
        stdin.write(header)
        stdin.write(data)
        await stdin.drain()
        # A write to a worker that is gone closes the pipe at once, but drain() may only raise it
        # some loop turns later.
        if stdin.is_closing():
            raise ConnectionResetError("the extraction worker's input is closed")

    async def read_frame(self, cap: int) -> bytes:
        """One reply frame's JSON. :class:`asyncio.IncompleteReadError` at end of output (the worker
        died); :class:`InvalidReply` for a length over ``cap`` (nothing more is read)."""
        stdout = self.process.stdout
        assert stdout is not None
        (size,) = protocol.REPLY_HEADER.unpack(await stdout.readexactly(protocol.REPLY_HEADER.size))
        if size > cap:
            raise InvalidReply(f"a reply of {size} bytes, over the {cap} bytes a reply may have")
        return await stdout.readexactly(size)

    def kill(self) -> None:
        """SIGKILL, unless it is known to have exited (its pid may be another process's by now)."""
        if self.alive:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()

    def close_input(self) -> None:
        """End its input: between documents a worker then exits (status 0)."""
        stdin = self.process.stdin
        if stdin is not None:
            with contextlib.suppress(Exception):  # a pipe already broken
                stdin.close()

    async def exit_status(self, grace: float) -> int | None:
        """Its exit status once it exits within ``grace``; None if it did not (it is killed)."""
        try:
            return await asyncio.wait_for(self.process.wait(), grace)
        except TimeoutError:
            # Exited, with a pipe still held open elsewhere; or alive, and misbehaving.
            status = self.process.returncode
            self.kill()
            return status

    async def reap(self, grace: float = 0.0) -> int | None:
        """Wait up to ``grace`` for it to exit, kill it if it has not, wait for that; then end the
        stderr drain. Its exit status (None: it would not go, even killed)."""
        if grace > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.process.wait(), grace)
        self.kill()
        self.close_input()
        try:
            await asyncio.wait_for(self.process.wait(), KILL_WAIT_SECONDS)
        except TimeoutError:
            # Exited but a pipe is held open elsewhere, or stuck in the kernel: the child watcher
            # still reaps it when it goes; nothing here waits for it any longer.
            log.warning(
                "extraction worker not gone after SIGKILL",
                pid=self.pid,
                status=_status(self.process.returncode),
            )
        await self._end_drain()
        return self.process.returncode

    async def _end_drain(self) -> None:
        done, _ = await asyncio.wait({self._drain}, timeout=0.5)
        if not done:
            self._drain.cancel()
            await asyncio.wait({self._drain})
        if not self._drain.cancelled() and (error := self._drain.exception()) is not None:
            log.warning("reading an extraction worker's stderr failed", pid=self.pid, error=repr(error))


def import_path() -> str:
    """This process's ``sys.path`` as a ``PYTHONPATH``: the worker then finds the very package
    (and test targets) this process runs, whether installed, editable or run from a checkout."""
    entries: list[str] = []
    for entry in sys.path:
        path = os.path.abspath(entry or os.curdir)
        if path not in entries and os.path.exists(path):
            entries.append(path)
    return os.pathsep.join(entries)


# -- the pool -------------------------------------------------------------------------------------------


class ExtractionPool(Lifecycle):
    """Sandboxed extraction workers (see the module's doc). ``start()``/``stop()`` are idempotent,
    ``async with`` does both; it may be started again after a stop.

    Use it from one event loop, the one that started it: its workers are that loop's subprocesses
    (and die with the thread that started them, ``PR_SET_PDEATHSIG``). It installs no signal
    handler."""

    formats: frozenset[Format] = EXTRACTED_FORMATS
    """The formats it extracts (:class:`~daemon.document.reader.Extractor`)."""

    def __init__(
        self,
        limits: SandboxLimits,
        extract_limits: ExtractLimits,
        *,
        target: str = DEFAULT_TARGET,
        preload: tuple[str, ...] | None = None,
    ) -> None:
        """``target`` is the ``module:function`` a worker extracts with (tests pass their doubles);
        ``preload`` what a worker imports besides before it is ready (default: the real extractors'
        libraries for the default target, nothing for another)."""
        self.limits = limits
        self.extract_limits = extract_limits
        self.target = target
        self.preload = (DEFAULT_PRELOAD if target == DEFAULT_TARGET else ()) if preload is None else preload
        self.stats = SandboxStats()
        self._limits_json = protocol.limits_json(extract_limits)
        self._reply_cap = reply_cap(extract_limits)
        self._running = False
        self._lock = asyncio.Lock()
        self._workers: set[_Worker] = set()
        """Every worker process not yet reaped: idle, busy, or being replaced."""
        self._idle: collections.deque[_Worker] = collections.deque()
        self._waiters: collections.deque[asyncio.Future[_Worker]] = collections.deque()
        self._renewals: set[asyncio.Task[None]] = set()
        self._command: tuple[str, ...] = ()
        self._env: dict[str, str] = {}

    # -- state, for metrics and health ------------------------------------------------------------

    @property
    def running(self) -> bool:
        """Started and not stopped."""
        return self._running

    @property
    def idle(self) -> int:
        """Workers ready for a document now."""
        return len(self._idle)

    @property
    def waiting(self) -> int:
        """Extractions waiting for a worker."""
        return sum(1 for waiter in self._waiters if not waiter.done())

    @property
    def pids(self) -> frozenset[int]:
        """The process ids of the workers not yet reaped."""
        return frozenset(worker.pid for worker in self._workers)

    # -- lifecycle --------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start ``workers`` workers and wait until each says it is ready. Raises
        :class:`SandboxStartError` (nothing left running) if any cannot start."""
        async with self._lock:
            if self._running:
                return
            self._prepare_command()
            started = time.monotonic()
            spawns = [asyncio.create_task(self._spawn()) for _ in range(self.limits.workers)]
            try:
                workers = await asyncio.gather(*spawns)
            except BaseException:
                await _uncancelled(self._abandon(spawns))
                raise
            self._workers.update(workers)
            self._idle.extend(workers)
            self.stats.started += len(workers)
            self._running = True
        baseline = workers[0].ready
        log.info(
            "extraction workers started",
            workers=len(workers),
            pids=sorted(worker.pid for worker in workers),
            start_s=round(time.monotonic() - started, 3),
            worker_vm_mib=round(baseline.get("vm_bytes", 0) / MIB, 1),
            worker_rss_mib=round(baseline.get("rss_bytes", 0) / MIB, 1),
            memory_limit_mib=round(self.limits.memory_bytes / MIB, 1),
        )

    @staticmethod
    async def _abandon(spawns: list[asyncio.Task[_Worker]]) -> None:
        """A start failed or was cancelled: end every worker it started or is starting."""
        for spawn in spawns:
            spawn.cancel()
        for result in await asyncio.gather(*spawns, return_exceptions=True):
            if isinstance(result, _Worker):
                await result.reap()

    async def stop(self) -> None:
        """End every worker (at end of input; SIGKILL after :data:`STOP_GRACE_SECONDS`) and reap
        them: no zombie, no orphan. Extractions waiting for a worker, or running, raise
        :class:`SandboxError` (stop the pool after the documents drained)."""
        async with self._lock:
            if not self._running and not self._workers:
                return
            self._running = False
            renewals = set(self._renewals)
            for renewal in renewals:
                renewal.cancel()
            if renewals:
                await asyncio.wait(renewals)
            while self._waiters:
                waiter = self._waiters.popleft()
                if not waiter.done():
                    waiter.set_exception(SandboxError("the extraction pool stopped"))
            workers = list(self._workers)
            self._idle.clear()
            for worker in workers:
                worker.stopping = True
                worker.close_input()
            try:
                await asyncio.gather(*(worker.reap(STOP_GRACE_SECONDS) for worker in workers))
            finally:
                # A cancelled stop still ends them: killed at once, reaped (milliseconds).
                for worker in workers:
                    worker.kill()
                await _uncancelled(asyncio.gather(*(worker.reap() for worker in workers)))
                self._workers.difference_update(workers)
        log.info("extraction workers stopped", workers=len(workers))

    def _prepare_command(self) -> None:
        options = worker_module.WorkerOptions(
            target=self.target,
            memory_bytes=self.limits.memory_bytes,
            cpu_seconds=self.limits.cpu_seconds,
            max_tasks=self.limits.max_tasks_per_worker,
            parent_pid=os.getpid(),
            preload=self.preload,
        )
        # -P: the cwd (/) is not on the path; -s: no user site; -B: no bytecode written (it cannot be).
        self._command = (
            sys.executable,
            "-P",
            "-s",
            "-B",
            "-m",
            "daemon.document.sandbox.worker",
            *options.argv(),
        )
        # Nothing of the daemon's environment (DOCSUMD_* settings may hold Kafka passwords) but
        # what the same interpreter may need to start at all.
        self._env = {"PYTHONPATH": import_path()}
        self._env.update({name: os.environ[name] for name in PASSED_ENVIRONMENT if name in os.environ})

    async def _spawn(self) -> _Worker:
        """One worker, ready. :class:`SandboxStartError` if it cannot start."""
        try:
            process = await asyncio.create_subprocess_exec(
                *self._command,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=self._env,
                cwd="/",
                close_fds=True,
                start_new_session=True,
                limit=STREAM_LIMIT,
            )
        except OSError as exc:
            raise SandboxStartError(f"cannot start an extraction worker: {exc}") from exc
        worker = _Worker(process)
        try:
            async with asyncio.timeout(START_SECONDS):
                worker.ready = self._check_ready(await worker.read_frame(MAX_READY_BYTES))
        except BaseException as exc:
            await _uncancelled(worker.reap())
            if not isinstance(exc, Exception):
                raise  # cancelled
            raise SandboxStartError(self._start_failure(worker, exc)) from exc
        return worker

    @staticmethod
    def _check_ready(payload: bytes) -> dict[str, Any]:
        message = loads_reply(payload)
        if isinstance(fatal := message.get("fatal"), str):
            raise _WorkerFatal(fatal)
        ready = message.get("ready")
        if not isinstance(ready, dict):
            raise InvalidReply("the first message is not ready")
        if ready.get("protocol") != protocol.PROTOCOL_VERSION:
            raise InvalidReply(
                f"it speaks protocol {ready.get('protocol')!r}, this daemon {protocol.PROTOCOL_VERSION}: "
                "was docsumd upgraded under the running daemon? Restart it"
            )
        return ready

    def _start_failure(self, worker: _Worker, exc: Exception) -> str:
        what = (
            f"an extraction worker (target {self.target}, memory limit "
            f"{self.limits.memory_bytes / MIB:g} MiB) cannot start"
        )
        if isinstance(exc, _WorkerFatal):
            why = str(exc)
        elif isinstance(exc, TimeoutError):
            why = f"it was not ready within {START_SECONDS:g} s"
        elif isinstance(exc, asyncio.IncompleteReadError):
            why = f"it exited before it was ready ({_status(worker.process.returncode)})"
        else:
            why = f"{exc}"
        tail = worker.stderr_tail(600)
        return f"{what}: {why}" + (f"; its stderr ends: {tail}" if tail else "")

    # -- extraction -------------------------------------------------------------------------------

    async def extract(
        self, data: bytes, fmt: Format, *, before: Callable[[], Awaitable[None]] | None = None
    ) -> Extracted:
        """The text and layout of ``data`` read as ``fmt``, extracted in a worker under the limits;
        ``before`` is awaited once a worker is free for it, before the worker gets it (the service
        waits there for room for the text to come; the wall-clock limit starts after it).

        Raises :class:`DocumentError`: the extractor's own (``malformed``, ``encrypted``, ...),
        ``internal_error`` for any other exception in the worker, ``extract_failed`` when the worker
        died, overran a limit or misbehaved on it (the message says which; it is replaced).
        :class:`SandboxError` if the pool is not running or stops meanwhile. Cancellation kills and
        replaces the worker, then propagates."""
        if not self._running:
            raise SandboxError("the extraction pool is not running")
        header = protocol.encode_request(data, fmt, self._limits_json)
        worker = await self._acquire()
        if before is not None:
            try:
                await before()
            except BaseException:
                self._release(worker)  # untouched: the next document may have it
                raise
        for tries_left in (1, 0):
            try:
                payload = await self._exchange(worker, header, data, resend=tries_left > 0)
                answer = await self._parse(payload)
            except _Unsent:
                # Not the document's doing: one other worker gets it. A second worker gone before
                # it reads the document fails it as any death does.
                self._discard(worker, "exited")
                worker = await self._acquire()
                continue
            except asyncio.CancelledError:
                self._discard(worker, "cancelled")
                raise
            except _Failed as failure:
                self._discard(worker, failure.cause)
                if worker.stopping:
                    raise SandboxError("the extraction pool stopped during this extraction") from None
                raise DocumentError("extract_failed", failure.message) from None
            except BaseException:
                self._discard(worker, "internal")
                raise
            break
        self._finished(worker)
        if isinstance(answer, DocumentError):
            if answer.reason == "internal_error":
                log.warning("the extractor failed on a document", error=answer.message)
            raise answer
        return answer

    async def _acquire(self) -> _Worker:
        """A live idle worker, waiting in turn (FIFO) for one if none is."""
        while True:
            if self._idle and not self._waiters:
                worker = self._idle.popleft()
            else:
                waiter: asyncio.Future[_Worker] = asyncio.get_running_loop().create_future()
                self._waiters.append(waiter)
                try:
                    worker = await waiter
                except asyncio.CancelledError:
                    if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                        self._release(waiter.result())  # handed over just as we were cancelled
                    else:
                        with contextlib.suppress(ValueError):
                            self._waiters.remove(waiter)
                    raise
            if worker.alive:
                return worker
            self._discard(worker, "exited")  # died while idle: killed from outside

    def _release(self, worker: _Worker) -> None:
        """Back to the pool: to the first caller waiting, or idle."""
        if not self._running:
            worker.close_input()  # stop() reaps it
            return
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(worker)
                return
        self._idle.append(worker)

    def _finished(self, worker: _Worker) -> None:
        """A worker answered a document: it serves the next one, or retires at its task limit."""
        worker.tasks += 1
        self.stats.extractions += 1
        if self._running and worker.tasks >= self.limits.max_tasks_per_worker:
            worker.close_input()  # it exits between documents; its replacement starts meanwhile
            self._renew(worker, "recycled")
            return
        self._release(worker)

    async def _exchange(self, worker: _Worker, header: bytes, data: bytes, *, resend: bool = False) -> bytes:
        """Send the request and read the reply frame, under the wall-clock limit. A worker whose input
        is closed already raises :class:`_Unsent` when ``resend`` (the document may go to another);
        otherwise its exit says why."""
        try:
            async with asyncio.timeout(self.limits.timeout_seconds):
                try:
                    await worker.send(header, data)
                except ConnectionError:
                    if resend:
                        raise _Unsent from None
                return await worker.read_frame(self._reply_cap)
        except TimeoutError:
            raise _Failed(
                "timeout",
                f"the extraction took longer than {self.limits.timeout_seconds:g} s "
                "(extract.timeout_seconds): its worker was stopped",
            ) from None
        except asyncio.IncompleteReadError:
            raise await self._death(worker) from None
        except InvalidReply as exc:
            raise _Failed("protocol", f"the extraction worker sent an invalid reply: {exc}") from None

    async def _parse(self, payload: bytes) -> Extracted | DocumentError:
        # A large reply is parsed off the event loop (tens of megabytes of JSON take a while).
        try:
            if len(payload) < MIB:
                return parse_reply(payload, self.extract_limits)
            return await asyncio.to_thread(parse_reply, payload, self.extract_limits)
        except InvalidReply as exc:
            raise _Failed("protocol", f"the extraction worker sent an invalid reply: {exc}") from None

    async def _death(self, worker: _Worker) -> _Failed:
        """Why a worker's output ended in the middle of a document, from its exit status."""
        status = await worker.exit_status(EXIT_GRACE_SECONDS)
        limits = self.limits
        if status is None:
            return _Failed("protocol", "the extraction worker closed its reply pipe without exiting")
        if status == worker_module.EXIT_MEMORY:
            cause, what = (
                "memory",
                f"went over its memory limit ({limits.memory_bytes / MIB:g} MiB, extract.memory_mib)",
            )
        elif status == -signal.SIGXCPU:
            cause, what = (
                "cpu",
                f"went over its CPU time limit ({limits.cpu_seconds:g} s, extract.cpu_seconds)",
            )
        elif status < 0:
            cause, what = "crashed", f"crashed ({_status(status)})"
        else:
            cause, what = "exited", f"exited ({_status(status)})"
        return _Failed(cause, f"the extraction worker {what} on this document; it was replaced")

    # -- replacing workers ------------------------------------------------------------------------

    def _discard(self, worker: _Worker, cause: str) -> None:
        """A worker that failed, was cancelled or died: kill it now; replace it in the background
        (unless the pool is stopping: stop() reaps it)."""
        worker.kill()
        if self._running and not worker.stopping:
            self._renew(worker, cause)

    def _renew(self, old: _Worker | None, cause: str) -> None:
        task = asyncio.create_task(self._replace(old, cause), name="docsumd-extract-worker-replace")
        self._renewals.add(task)
        task.add_done_callback(self._renewal_done)

    def _renewal_done(self, task: asyncio.Task[None]) -> None:
        self._renewals.discard(task)
        if task.cancelled():
            return
        if (error := task.exception()) is not None:
            # A bug: the slot must not be lost (callers would wait for it forever).
            log.error("replacing an extraction worker failed; starting another", error=repr(error))
            if self._running:
                self._renew(None, "respawn")

    async def _replace(self, old: _Worker | None, cause: str) -> None:
        if old is not None:
            status = await old.reap(STOP_GRACE_SECONDS if cause == "recycled" else 0.0)
            self._workers.discard(old)
            self.stats.replaced[cause] += 1
            level = log.info if cause in ("recycled", "cancelled") else log.warning
            level(
                "extraction worker replaced",
                cause=cause,
                pid=old.pid,
                documents=old.tasks,
                status=_status(status),
                stderr=old.stderr_tail(1000) or None,
            )
        worker = await self._respawn()
        self._workers.add(worker)
        self._release(worker)

    async def _respawn(self) -> _Worker:
        """A new worker, trying again with a growing pause while none can start (the host out of
        memory or processes: a condition to wait out; callers wait for a worker meanwhile)."""
        pause = RESPAWN_FIRST_SECONDS
        while True:
            try:
                worker = await self._spawn()
            except Exception as exc:
                self.stats.start_failures += 1
                log.error("cannot start an extraction worker; retrying", error=str(exc), retry_s=pause)
            else:
                self.stats.started += 1
                return worker
            await asyncio.sleep(pause)
            pause = min(2 * pause, RESPAWN_MAX_SECONDS)


async def _uncancelled(coro: Awaitable[T]) -> T:
    """Run the clean-up ``coro`` to its end even if the caller is cancelled meanwhile (a reap cut
    short leaves a killed worker unreaped), then re-raise that cancellation. Only for clean-ups that
    end by themselves within seconds (waiting for a killed process)."""
    task = asyncio.ensure_future(coro)
    cancelled = False
    while not task.done():
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError:
            cancelled = True
    if cancelled:
        if not task.cancelled():
            task.exception()  # seen: the cancellation is what the caller gets
        raise asyncio.CancelledError
    return task.result()


def _status(status: int | None) -> str:
    """An exit status in words: ``signal SIGSEGV``, ``status 3``."""
    if status is None:
        return "still running"
    if status < 0:
        try:
            return f"signal {signal.Signals(-status).name}"
        except ValueError:
            return f"signal {-status}"
    return f"status {status}"
