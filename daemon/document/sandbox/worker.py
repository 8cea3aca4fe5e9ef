"""A sandboxed extraction worker: ``python -m daemon.document.sandbox.worker``, started and spoken to by
:class:`daemon.document.sandbox.pool.ExtractionPool`, never by hand.

It reads documents on stdin and writes each one's extracted text on stdout, one at a time, for as
long as the pool keeps it (at most ``--max-tasks`` documents), and exits at end of input.

**Hardening**, all before the first byte of input is read (:func:`harden`):

* it dies with the daemon (``PR_SET_PDEATHSIG``: SIGKILL, :mod:`daemon.ops.parent_death`), and exits at
  once if the daemon is already gone; it runs in a session of its own, so a Ctrl-C at a terminal is
  the daemon's alone;
* resource limits: ``RLIMIT_AS`` (``--memory-bytes``: an allocation beyond it fails, and a
  :class:`MemoryError` ends the worker with :data:`EXIT_MEMORY`), ``RLIMIT_CORE`` 0 (a crash
  leaves no core dump of a hostile file's contents), ``RLIMIT_FSIZE`` 0 (it never writes a file;
  Python ignores SIGXFSZ, so a write fails with ``EFBIG``), ``RLIMIT_NOFILE``
  (``--open-files``), ``RLIMIT_NPROC`` 0 (it never starts a process or a thread: for an unprivileged
  user, whose processes are already counted, any ``fork`` or ``clone`` fails), and ``RLIMIT_CPU``:
  a soft limit per document (CPU used so far plus ``--cpu-seconds``: the kernel sends SIGXCPU,
  whose default action ends the worker) under a hard limit for its whole life, since an
  unprivileged process can lower a hard limit but never raise it again;
* ``PR_SET_NO_NEW_PRIVS`` (no exec can gain privileges: set-user-ID binaries, file capabilities);
* its descriptors: only the pipes the pool gave it (the pool starts it with ``close_fds`` and a
  minimal environment, cwd ``/``). The request and reply pipes move to private descriptors; fd 0
  becomes ``/dev/null`` and fd 1 a copy of stderr, so that a library that reads stdin or prints
  cannot corrupt the protocol (stray output ends up in the stderr tail the pool keeps).

Then it imports the extraction target (``--target module:function``) and the ``--preload`` modules,
so that a missing module fails the pool's start rather than the first document, and the first
document does not pay for the imports; and it says it is ready.

**The protocol** (:mod:`daemon.document.sandbox.protocol`): length-prefixed frames, a request in,
one JSON reply out (never pickle); a ready or fatal message once at start.

A :class:`~daemon.errors.DocumentError` from the target becomes an ``error`` reply with its reason
and message; any other exception an ``internal_error`` reply (its repr), and the worker goes on. A
:class:`MemoryError` ends it with :data:`EXIT_MEMORY` (its heap is not worth keeping).

This module imports only the standard library, the protocol, :mod:`daemon.document.types`,
:mod:`daemon.errors` and :mod:`daemon.ops.parent_death` at import time: the pool imports it for its
options and exit statuses.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import faulthandler
import importlib
import math
import os
import resource
import signal
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, BinaryIO, Final

from daemon.document.sandbox.protocol import (
    MAX_MESSAGE_CHARS,
    PROTOCOL_VERSION,
    ProtocolError,
    Request,
    encode_reply,
    error_message,
    extracted_message,
    read_request,
)
from daemon.document.types import Extracted, ExtractLimits, Format
from daemon.errors import DocumentError
from daemon.ops import parent_death

EXIT_MEMORY: Final = 86
"""The worker ran out of memory (RLIMIT_AS) on a document."""
EXIT_PROTOCOL: Final = 87
"""The pool sent something that is not a request (or the input ended inside one)."""
EXIT_PARENT_GONE: Final = parent_death.EXIT_PARENT_GONE
"""The process that started the worker was gone before it could arrange to die with it."""

DEFAULT_OPEN_FILES: Final = 32
"""``RLIMIT_NOFILE``: the worker holds 5 descriptors (stdin, stdout, stderr, its two pipes);
imports open one file at a time, and the extractors open none (measured: 6 at most, with lxml,
pypdfium2 and pdfminer imported and PDFs, DOCX and HTML extracted). Room to spare for a library
that opens one or two files (fonts, locale data)."""
CPU_LIFETIME_SLACK_SECONDS: Final = 10
"""The hard CPU limit is the start-up's CPU plus every document's limit plus this."""

Target = Callable[[bytes, Format, ExtractLimits], Extracted]


@dataclasses.dataclass(frozen=True, slots=True)
class WorkerOptions:
    """What the pool tells a worker on its command line."""

    target: str
    memory_bytes: int
    cpu_seconds: float
    max_tasks: int
    open_files: int = DEFAULT_OPEN_FILES
    parent_pid: int | None = None
    preload: tuple[str, ...] = ()

    def argv(self) -> list[str]:
        """The command-line arguments that :func:`parse_options` reads back."""
        args = [
            f"--target={self.target}",
            f"--memory-bytes={self.memory_bytes}",
            f"--cpu-seconds={self.cpu_seconds!r}",
            f"--max-tasks={self.max_tasks}",
            f"--open-files={self.open_files}",
        ]
        if self.parent_pid is not None:
            args.append(f"--parent-pid={self.parent_pid}")
        args.extend(f"--preload={module}" for module in self.preload)
        return args


def parse_options(argv: Sequence[str]) -> WorkerOptions:
    """The options of a worker's command line (see :meth:`WorkerOptions.argv`)."""
    parser = argparse.ArgumentParser(prog="python -m daemon.document.sandbox.worker")
    parser.add_argument("--target", required=True, help="module:function to extract with")
    parser.add_argument("--memory-bytes", type=int, required=True)
    parser.add_argument("--cpu-seconds", type=float, required=True)
    parser.add_argument("--max-tasks", type=int, required=True)
    parser.add_argument("--open-files", type=int, default=DEFAULT_OPEN_FILES)
    parser.add_argument("--parent-pid", type=int, default=None)
    parser.add_argument("--preload", action="append", default=[])
    ns = parser.parse_args(list(argv))
    return WorkerOptions(
        target=ns.target,
        memory_bytes=ns.memory_bytes,
        cpu_seconds=ns.cpu_seconds,
        max_tasks=ns.max_tasks,
        open_files=ns.open_files,
        parent_pid=ns.parent_pid,
        preload=tuple(ns.preload),
    )


# -- hardening ----------------------------------------------------------------------------------------


class HardeningError(Exception):
    """The worker cannot put itself in its sandbox (it then refuses to start)."""


def die_with_parent(parent_pid: int | None) -> None:
    """SIGKILL when the process that started this one is gone; exit now if it already is (it died
    between the fork and this call, which PR_SET_PDEATHSIG would never see)."""
    try:
        parent_death.die_with_parent(parent_pid)
    except OSError as exc:
        raise HardeningError(f"prctl(PR_SET_PDEATHSIG) failed: {exc.strerror}") from exc


def no_new_privileges() -> None:
    """``PR_SET_NO_NEW_PRIVS`` (Linux only; systemd's ``NoNewPrivileges=yes`` sets it already)."""
    try:
        parent_death.prctl(parent_death.PR_SET_NO_NEW_PRIVS, 1)
    except OSError as exc:
        raise HardeningError(f"prctl(PR_SET_NO_NEW_PRIVS) failed: {exc.strerror}") from exc


def _limit(which: int, name: str, value: int, hard: int | None = None) -> None:
    """Set ``which`` to ``value`` (soft) and ``hard`` (default: ``value``), never above the hard
    limit already in force (only a privileged process could raise it)."""
    _, current_hard = resource.getrlimit(which)
    wanted_hard = value if hard is None else hard
    if current_hard != resource.RLIM_INFINITY:
        wanted_hard = min(wanted_hard, current_hard)
    try:
        resource.setrlimit(which, (min(value, wanted_hard), wanted_hard))
    except (OSError, ValueError) as exc:
        raise HardeningError(f"cannot set {name} to {value}: {exc}") from exc


def cpu_used() -> float:
    """CPU seconds this process has used (user and system)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def limit_resources(options: WorkerOptions) -> None:
    """Every resource limit but the per-document CPU limit (see the module's doc)."""
    _limit(resource.RLIMIT_CORE, "RLIMIT_CORE", 0)
    _limit(resource.RLIMIT_FSIZE, "RLIMIT_FSIZE", 0)
    _limit(resource.RLIMIT_NOFILE, "RLIMIT_NOFILE", options.open_files)
    _limit(resource.RLIMIT_NPROC, "RLIMIT_NPROC", 0)
    _limit(resource.RLIMIT_AS, "RLIMIT_AS", options.memory_bytes)
    # The whole life's CPU: the soft limit moves per document, under this hard one.
    per_document = math.ceil(options.cpu_seconds) + 1
    lifetime = math.ceil(cpu_used()) + options.max_tasks * per_document + CPU_LIFETIME_SLACK_SECONDS
    _limit(resource.RLIMIT_CPU, "RLIMIT_CPU", lifetime)


def limit_document_cpu(cpu_seconds: float) -> None:
    """The soft CPU limit for the next document: what was used so far plus ``cpu_seconds``
    (rounded up: the kernel counts whole seconds), under the lifetime hard limit."""
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    soft = math.ceil(cpu_used() + cpu_seconds)
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def lift_document_cpu() -> None:
    """Between documents, only the lifetime limit: reading the next request must not run into the
    last document's limit (and be blamed for it)."""
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    resource.setrlimit(resource.RLIMIT_CPU, (hard, hard))


IGNORED_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
"""Signals a worker ignores: the pool ends it by closing its input or with SIGKILL, and nothing
else may end it mid-document. ``systemctl kill -s USR1 docsumd`` (the daemon's status line) reaches
every process of the unit; SIGINT and SIGTERM are the daemon's, which drains first."""


def reset_signals() -> None:
    """Nothing blocked, and SIGXCPU's default action (the end of the worker), which the CPU limit
    relies on: a child inherits the signal mask of the thread that started it, and ignored signals
    across exec. The pool's signals are ignored. A crash (SIGSEGV, SIGABRT, ...) still ends the
    worker, after :mod:`faulthandler` wrote the Python stack to stderr."""
    signal.pthread_sigmask(signal.SIG_SETMASK, set())
    signal.signal(signal.SIGXCPU, signal.SIG_DFL)
    for signum in IGNORED_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)
    # SIGXFSZ stays ignored (Python's own setting): a write over RLIMIT_FSIZE fails with EFBIG.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


def private_pipes() -> tuple[BinaryIO, BinaryIO]:
    """The request and reply pipes, moved off fds 0 and 1 (see the module's doc)."""
    # Nothing but the pipes may be open, whoever started it (close_range: fast over any range).
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    os.closerange(3, max(soft, 1 << 16) if soft != resource.RLIM_INFINITY else 1 << 20)
    request_fd, reply_fd = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    sys.stdin = open(0, closefd=False)  # noqa: SIM115 (the process's own stdin: /dev/null now)
    sys.stdout = sys.stderr
    return os.fdopen(request_fd, "rb"), os.fdopen(reply_fd, "wb")


def harden(options: WorkerOptions) -> None:
    """Everything but the pipes (see the module's doc), before any input is read."""
    reset_signals()
    limit_resources(options)
    no_new_privileges()


def load_target(spec: str) -> Target:
    """The extraction function named ``module:function``."""
    module_name, _, function_name = spec.partition(":")
    if not module_name or not function_name:
        raise ValueError(f"the extraction target {spec!r} is not of the form module:function")
    module = importlib.import_module(module_name)
    target = getattr(module, function_name, None)
    if not callable(target):
        raise ValueError(f"the extraction target {spec!r} is not a function of {module_name}")
    found: Target = target
    return found


def memory_now() -> dict[str, int]:
    """This process's virtual and resident size, in bytes (from /proc; empty where there is none)."""
    sizes: dict[str, int] = {}
    with contextlib.suppress(OSError), open("/proc/self/status") as status:
        for line in status:
            key, _, value = line.partition(":")
            if key in ("VmSize", "VmRSS"):
                sizes["vm_bytes" if key == "VmSize" else "rss_bytes"] = int(value.split()[0]) * 1024
    return sizes


# -- the loop -----------------------------------------------------------------------------------------


def handle(target: Target, request: Request) -> bytes:
    """The reply frame to ``request``. MemoryError propagates (the worker then ends)."""
    try:
        return encode_reply(extracted_message(target(request.data, request.format, request.limits)))
    except DocumentError as error:
        return encode_reply(error_message(str(error.reason), str(error.message)))
    except MemoryError:
        raise
    except Exception as exc:
        return encode_reply(error_message("internal_error", _safe_repr(exc)))


def _safe_repr(exc: BaseException) -> str:
    try:
        return repr(exc)[: MAX_MESSAGE_CHARS * 2]
    except Exception:  # a hostile object's __repr__ may raise too
        return type(exc).__name__


def send(stream: BinaryIO, frame: bytes) -> None:
    """Write one reply frame and flush it."""
    stream.write(frame)
    stream.flush()


def serve(target: Target, options: WorkerOptions, requests: BinaryIO, replies: BinaryIO) -> int:
    """Answer requests until the input ends; the exit status."""
    while True:
        lift_document_cpu()
        try:
            request = read_request(requests)
        except ProtocolError as exc:
            print(f"docsumd extraction worker: {exc}", file=sys.stderr, flush=True)
            return EXIT_PROTOCOL
        if request is None:
            return 0
        limit_document_cpu(options.cpu_seconds)
        frame = handle(target, request)
        del request  # the document's bytes: not kept while the reply is written
        send(replies, frame)


def start(options: WorkerOptions) -> tuple[Target, dict[str, Any]]:
    """Harden, import, measure: the target and the ready message's content."""
    started = time.monotonic()
    harden(options)
    target = load_target(options.target)
    for module in options.preload:
        importlib.import_module(module)
    return target, {
        "protocol": PROTOCOL_VERSION,
        "pid": os.getpid(),
        "start_seconds": round(time.monotonic() - started, 4),
        "cpu_seconds": round(cpu_used(), 4),
        "open_files": len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else -1,
        **memory_now(),
    }


def main(argv: Sequence[str] | None = None) -> int:
    """The worker's life: see the module's doc."""
    options = parse_options(sys.argv[1:] if argv is None else argv)
    die_with_parent(options.parent_pid)
    requests, replies = private_pipes()
    faulthandler.enable()  # a native crash's Python stack, in the stderr tail the pool logs
    try:
        target, ready = start(options)
    except MemoryError:
        with contextlib.suppress(Exception):
            send(
                replies,
                encode_reply(
                    {
                        "fatal": f"out of memory while starting, under RLIMIT_AS "
                        f"{options.memory_bytes // (1024 * 1024)} MiB"
                    }
                ),
            )
        return EXIT_MEMORY
    except BaseException as exc:  # the pool must hear why, whatever it was
        send(replies, encode_reply({"fatal": _safe_repr(exc)}))
        return 1
    send(replies, encode_reply({"ready": ready}))
    try:
        return serve(target, options, requests, replies)
    except MemoryError:
        # Nothing more is allocated: the exit status says it all, and the pool says which limit.
        os._exit(EXIT_MEMORY)
    except BrokenPipeError:
        return 0  # the pool stopped listening (it is stopping, or killed us already)


if __name__ == "__main__":
    sys.exit(main())
