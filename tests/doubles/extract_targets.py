"""Extraction targets for the sandboxed worker pool's tests (tests/unit/document/test_sandbox.py).

Each is an ``extract(data, fmt, limits) -> Extracted`` that a real worker process imports instead of
the real extractor (``ExtractionPool(..., target="tests.doubles.extract_targets:echo")``), and
behaves well or misbehaves in one way: a hostile file's effect, played on purpose.

:func:`scripted` picks the behaviour by the document's bytes, ``b"<name> <argument>"`` (the names
of :data:`SCRIPT`), so that one pool meets every failure in turn and shows that the next document
still works: ``await pool.extract(b"segfault", Format.PDF)``.

This module runs in the worker: standard library and :mod:`daemon.document.types` only.
"""

from __future__ import annotations

import ctypes
import dataclasses
import fcntl
import json
import os
import resource
import stat
import struct
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

from daemon.document.types import Extracted, ExtractLimits, Format, Heading, Layout
from daemon.errors import DocumentError

Target = Callable[[bytes, Format, ExtractLimits], Extracted]

_PR_GET_PDEATHSIG: Final = 2


def echo(data: bytes, fmt: Format, limits: ExtractLimits) -> Extracted:
    """The bytes as text; a page at each form feed (only for PDF), a heading at each ``#`` line."""
    text = data.decode("utf-8", "replace")
    page_starts = (0, *(i + 1 for i, char in enumerate(text) if char == "\f")) if fmt is Format.PDF else ()
    headings: list[Heading] = []
    offset = 0
    for line in text.splitlines(keepends=True):
        marks = len(line) - len(line.lstrip("#"))
        if 0 < marks <= 6 and line[marks : marks + 1] == " ":
            headings.append(Heading(marks, line[marks:].strip(), offset))
        offset += len(line)
    return Extracted(
        text=text,
        format=fmt,
        layout=Layout(page_starts=page_starts, headings=tuple(headings)),
        details={"extractor": "echo", "pid": os.getpid()},
    )


def document_error(data: bytes, fmt: Format, limits: ExtractLimits) -> Extracted:
    """The extractor's refusal: ``malformed``, with the bytes as its message."""
    raise DocumentError("malformed", data.decode("utf-8", "replace") or "malformed on purpose")


def unknown_reason(data: bytes, fmt: Format, limits: ExtractLimits) -> Extracted:
    """A refusal whose reason no extractor gives (the pool treats it as the worker misbehaving)."""
    raise DocumentError("engine_error", "not an extractor's reason")


def value_error(data: bytes, fmt: Format, limits: ExtractLimits) -> Extracted:
    """A bug in the extractor: any exception but a DocumentError."""
    raise ValueError(f"a bug met on purpose ({len(data)} bytes)")


def sleep_forever(data: bytes, fmt: Format, limits: ExtractLimits) -> Extracted:
    """Never answers, using no CPU (only the wall-clock limit stops it)."""
    while True:
        time.sleep(3600)


def spin(data: bytes, fmt: Format, limits: ExtractLimits) -> Extracted:
    """Burns CPU until RLIMIT_CPU stops it."""
    count = 0
    while True:
        count += 1


def allocate(data: bytes, fmt: Format, limits: ExtractLimits) -> Extracted:
    """Allocates 32 MiB blocks until RLIMIT_AS refuses one (MemoryError)."""
    blocks = []
    while True:
        blocks.append(bytearray(32 * 1024 * 1024))


def abort(data: bytes, fmt: Format, limits: ExtractLimits) -> Extracted:
    """A native library's abort(): SIGABRT."""
    os.abort()


def segfault(data: bytes, fmt: Format, limits: ExtractLimits) -> Extracted:
    """A native library's crash: reads address 0 (SIGSEGV)."""
    ctypes.string_at(0)
    raise AssertionError("unreachable")


def exit_now(data: bytes, fmt: Format, limits: ExtractLimits) -> Extracted:
    """Exits at once (``os._exit``) with the status the bytes give (default 3)."""
    os._exit(int(data or b"3"))


def _reply_fd() -> int:
    """The reply pipe, found as a compromised worker would: the descriptor open for writing on a
    pipe that is neither stdout nor stderr (which the worker points at its stderr)."""
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd < 3:
            continue
        with_pipe = False
        try:
            with_pipe = stat.S_ISFIFO(os.fstat(fd).st_mode)
            flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        except OSError:
            continue
        if with_pipe and flags & os.O_ACCMODE == os.O_WRONLY and os.fstat(fd).st_ino != os.fstat(2).st_ino:
            return fd
    raise RuntimeError("no reply pipe found")


def garbage_reply(data: bytes, fmt: Format, limits: ExtractLimits) -> Extracted:
    """Writes garbage on the reply pipe itself (a protocol violation), then sleeps."""
    os.write(_reply_fd(), data or b"garbage, not a reply frame")
    time.sleep(60)
    raise AssertionError("the pool should have killed this worker")


def pickle_reply(data: bytes, fmt: Format, limits: ExtractLimits) -> Extracted:
    """Sends a well-framed pickle instead of JSON (what a hijacked worker would try)."""
    import pickle

    payload = pickle.dumps({"ok": "pwned"})
    os.write(_reply_fd(), struct.pack(">I", len(payload)) + payload)
    time.sleep(60)
    raise AssertionError("the pool should have killed this worker")


def raw_reply(data: bytes, fmt: Format, limits: ExtractLimits) -> Extracted:
    """Sends ``data`` as a well-framed reply (tests give it JSON that breaks the rules), then sleeps
    (the pool should kill it)."""
    os.write(_reply_fd(), struct.pack(">I", len(data)) + data)
    time.sleep(60)
    raise AssertionError("the pool should have killed this worker")


def huge_reply(data: bytes, fmt: Format, limits: ExtractLimits) -> Extracted:
    """Announces a reply of almost 4 GiB (the pool must not try to read it)."""
    os.write(_reply_fd(), struct.pack(">I", 2**32 - 1) + b"{")
    time.sleep(60)
    raise AssertionError("the pool should have killed this worker")


def overlong_text(data: bytes, fmt: Format, limits: ExtractLimits) -> Extracted:
    """Returns more text than ``limits.max_output_chars`` allows."""
    return Extracted(text="x" * (limits.max_output_chars + 1), format=fmt)


def bad_offsets(data: bytes, fmt: Format, limits: ExtractLimits) -> Extracted:
    """Returns a heading that starts beyond the end of the text."""
    return Extracted(text="short", format=fmt, layout=Layout(headings=(Heading(1, "Beyond", 99),)))


def stray_output(data: bytes, fmt: Format, limits: ExtractLimits) -> Extracted:
    """Prints to stdout (sys.stdout and fd 1) and stderr, as chatty libraries do, then answers."""
    print("stray output on sys.stdout")
    os.write(1, b"stray output on fd 1\n")
    print("stray output on stderr", file=sys.stderr, flush=True)
    return echo(data, fmt, limits)


def read_env(data: bytes, fmt: Format, limits: ExtractLimits) -> Extracted:
    """Its environment as JSON text (to prove no secret reached it)."""
    return Extracted(text=json.dumps(dict(os.environ)), format=fmt)


def write_file(data: bytes, fmt: Format, limits: ExtractLimits) -> Extracted:
    """Writes to the file the bytes name (RLIMIT_FSIZE 0: the write fails with EFBIG)."""
    with open(data.decode(), "wb") as file:
        file.write(b"written by an extraction worker")
    return Extracted(text="written", format=fmt)


def start_process(data: bytes, fmt: Format, limits: ExtractLimits) -> Extracted:
    """Tries to fork (RLIMIT_NPROC 0: refused unless it runs as root, whom the limit spares)."""
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return Extracted(text="forked", format=fmt)


def _pdeathsig() -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    signum = ctypes.c_int(0)
    libc.prctl(_PR_GET_PDEATHSIG, ctypes.byref(signum), 0, 0, 0)
    return signum.value


def sandbox(data: bytes, fmt: Format, limits: ExtractLimits) -> Extracted:
    """What the worker's sandbox looks like from inside, in ``details``: its resource limits, open
    descriptors, cwd, environment, session, no-new-privileges and parent-death signal; the request's
    format and limits."""
    rlimits = {
        name: list(resource.getrlimit(getattr(resource, name)))
        for name in (
            "RLIMIT_AS",
            "RLIMIT_CORE",
            "RLIMIT_FSIZE",
            "RLIMIT_NOFILE",
            "RLIMIT_NPROC",
            "RLIMIT_CPU",
        )
    }
    status = dict(
        line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line
    )
    return Extracted(
        text="sandbox",
        format=fmt,
        details={
            "rlimits": rlimits,
            "fds": sorted(int(fd) for fd in os.listdir("/proc/self/fd")),
            "cwd": os.getcwd(),
            "env": sorted(os.environ),
            "session_leader": os.getsid(0) == os.getpid(),
            "no_new_privs": status.get("NoNewPrivs", "").strip(),
            "pdeathsig": _pdeathsig(),
            "format": fmt.value,
            "limits": dataclasses.asdict(limits),
            "cpu_used": sum(os.times()[:2]),
        },
    )


def timed(data: bytes, fmt: Format, limits: ExtractLimits) -> Extracted:
    """Sleeps as many seconds as the bytes say, and says when it started and ended
    (``time.monotonic``, one clock for every process of the machine) and in which process."""
    started = time.monotonic()
    time.sleep(float(data or b"0"))
    return Extracted(
        text="timed",
        format=fmt,
        details={"started": started, "ended": time.monotonic(), "pid": os.getpid()},
    )


SCRIPT: Final[dict[str, Target]] = {
    "echo": echo,
    "document_error": document_error,
    "unknown_reason": unknown_reason,
    "value_error": value_error,
    "sleep_forever": sleep_forever,
    "spin": spin,
    "allocate": allocate,
    "abort": abort,
    "segfault": segfault,
    "exit": exit_now,
    "garbage_reply": garbage_reply,
    "pickle_reply": pickle_reply,
    "raw_reply": raw_reply,
    "huge_reply": huge_reply,
    "overlong_text": overlong_text,
    "bad_offsets": bad_offsets,
    "stray_output": stray_output,
    "read_env": read_env,
    "write_file": write_file,
    "start_process": start_process,
    "sandbox": sandbox,
    "timed": timed,
}


def scripted(data: bytes, fmt: Format, limits: ExtractLimits) -> Extracted:
    """The behaviour :data:`SCRIPT` names in the first word of ``data``, given the rest."""
    name, _, rest = data.partition(b" ")
    return SCRIPT[name.decode()](rest, fmt, limits)


def ignores_caps(data: bytes, fmt: Format, limits: ExtractLimits) -> Extracted:
    """``int(data)`` letters of text, whatever the limits say (a worker that does not stop at them)."""
    return Extracted(text="A" * int(data.split()[-1]), format=fmt)
