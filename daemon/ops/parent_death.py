"""Processes that die with the process that started them, whatever kills it: ``PR_SET_PDEATHSIG``.

Every process docsumd starts arms this for itself as its first act (:func:`die_with_parent`): the
extraction workers (:mod:`daemon.document.sandbox.worker`), and vLLM's EngineCore and workers
(:mod:`daemon.engine.reaper`). The kernel then sends SIGKILL the moment the parent is gone: nothing
in the child has to run for it (a watch thread does not run while the interpreter is stuck in its
shutdown), and it cannot be caught or ignored. Processes that these start in turn arm it for
themselves, so a whole tree goes down from the top, one link at a time.

Three rules make it hold every time:

* **The parent is a thread.** The signal fires when the *thread* that started the child ends, even if
  its process lives on. So a process must be started from a thread that outlives it: the event
  loop's (the main thread) for the extraction workers, an owned thread for the engine
  (:class:`daemon.engine.reaper.ParentThread`), EngineCore's main thread for vLLM's workers.
* **Fork clears it** (exec keeps it): only the child can arm it, some time after it was started. A
  parent that died in between is caught by comparing :func:`os.getppid` with the parent the child
  expects, after arming: :func:`die_with_parent` exits at once with :data:`EXIT_PARENT_GONE`.
* **Linux only.** Elsewhere nothing is armed (:func:`die_with_parent` returns False).

Under systemd the unit's control group is killed as well; by hand, under a container runtime whose
first process is a shell or an init that only reaps, or in a Kubernetes pod, this is what ends them.

This module imports only the standard library: the processes import it before anything else.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable
from typing import Final

PR_SET_PDEATHSIG: Final = 1
PR_SET_NO_NEW_PRIVS: Final = 38

EXIT_PARENT_GONE: Final = 88
"""The exit status of a process that found its parent already gone when it armed the signal."""


def libc_prctl() -> Callable[..., int] | None:
    """libc's ``prctl``, or None where there is none (not Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    # The interpreter's own symbols include libc's (find_library would run ldconfig in a process).
    libc = ctypes.CDLL(None, use_errno=True)
    function: Callable[..., int] | None = getattr(libc, "prctl", None)
    return function


def prctl(option: int, value: int) -> bool:
    """``prctl(option, value)``: True once set, False where there is no ``prctl``; :class:`OSError`
    if the kernel refuses."""
    function = libc_prctl()
    if function is None:
        return False
    ulong = ctypes.c_ulong
    if function(option, ulong(value), ulong(0), ulong(0), ulong(0)) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"prctl({option}, {value}): {os.strerror(error)}")
    return True


def die_with_parent(parent_pid: int | None, signum: int = signal.SIGKILL) -> bool:
    """Arm ``signum`` (SIGKILL) for the death of the thread that started this process; then exit at
    once with :data:`EXIT_PARENT_GONE` if the parent is no longer ``parent_pid`` (it died before the
    signal was armed, and the signal will never come). Returns whether it is armed (False: not
    Linux; the parent check is still made). :class:`OSError` if the kernel refuses."""
    armed = prctl(PR_SET_PDEATHSIG, signum)
    if parent_pid is not None and os.getppid() != parent_pid:
        os._exit(EXIT_PARENT_GONE)
    return armed
