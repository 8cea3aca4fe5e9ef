"""What the daemon logs, captured: :func:`captured_logs`, ``structlog.testing.capture_logs`` made
reliable in a process where logging was configured before (the unit tests' ``logs`` fixture).

``capture_logs`` swaps, in place, the processors of the structlog configuration in force. Once
:func:`daemon.ops.logging.configure_logging` has run in the process (the CLI tests run it), two things
escape it: a module logger used since keeps the processor list of *that* configuration, which a later
``structlog.configure`` or ``reset_defaults`` replaces by another list (the logger's events then go
past the capture); and it keeps that configuration's level filter, which drops debug and info events
before any processor sees them. So for the capture, structlog is at its defaults (no level filter)
and the module loggers are unbound, to bind afresh to that configuration; both are put back
afterwards, the loggers as they were bound before.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

import structlog
from structlog.typing import EventDict

# Private, on purpose: unbinding the daemon's module loggers needs their class.
from daemon.ops.logging import _NamedLogger


@contextlib.contextmanager
def captured_logs() -> Iterator[list[EventDict]]:
    """Every structlog event logged inside, at every level, as an event dict (``event``,
    ``log_level``, ``logger``: the module, and the event's own fields), in order."""
    config = structlog.get_config()
    was_configured = structlog.is_configured()
    with _unbound_module_loggers():
        structlog.reset_defaults()
        try:
            with structlog.testing.capture_logs() as entries:
                yield entries
        finally:
            structlog.reset_defaults()
            if was_configured:
                structlog.configure(**config)


@contextlib.contextmanager
def _unbound_module_loggers() -> Iterator[None]:
    """Each of the daemon's module loggers (``log = get_logger(__name__)``) binds afresh when next
    used; put back as they were afterwards."""
    modules = [
        module
        for name, module in list(sys.modules.items())
        if module is not None and (name == "daemon" or name.startswith("daemon."))
    ]
    loggers = {
        id(value): value
        for module in modules
        for value in list(vars(module).values())
        if isinstance(value, _NamedLogger)
    }
    bound: list[tuple[_NamedLogger, Any]] = [(logger, logger._bound) for logger in loggers.values()]
    for logger, _ in bound:
        logger._bound = None
    try:
        yield
    finally:
        for logger, was in bound:
            logger._bound = was
