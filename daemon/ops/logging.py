"""structlog setup: JSON lines for machines (journald, files, pipes), readable lines on a terminal.

Every line about a document carries ``doc_id``: code binds it with ``log.bind(doc_id=...)`` or
``structlog.contextvars.bound_contextvars(doc_id=...)`` around the work on that document.
"""

from __future__ import annotations

import logging
import sys
import threading
from typing import Any, Literal, cast

import structlog

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def configure_logging(
    level: Literal["debug", "info", "warning", "error"] = "info",
    fmt: Literal["auto", "json", "console"] = "auto",
) -> None:
    """Configure structlog and the standard library's logging (vLLM logs through it) once, at start."""
    use_json = fmt == "json" or (fmt == "auto" and not sys.stderr.isatty())
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer() if use_json else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            *shared,
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        # One write per line (print() writes the newline apart): a line is never split by text that
        # another thread writes to stderr at the same moment, so every line stays valid JSON.
        logger_factory=structlog.WriteLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    # Route the standard library's records (vLLM, aiohttp, transformers) through the same renderer.
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[*shared, structlog.stdlib.add_logger_name],
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(_LEVELS[level])
    # vLLM installs its own handler on the "vllm" logger; let its records reach ours instead.
    vllm_logger = logging.getLogger("vllm")
    vllm_logger.handlers[:] = []
    vllm_logger.propagate = True
    for noisy in ("aiohttp.access", "httpx", "filelock", "watchfiles"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    threading.excepthook = _log_thread_exception


def _log_thread_exception(args: threading.ExceptHookArgs) -> None:
    """A thread's uncaught exception (ours or a library's, e.g. vLLM's engine monitor) as one log
    record, not Python's default traceback text written to stderr in pieces between log lines."""
    if issubclass(args.exc_type, SystemExit):
        return  # as the default hook: a thread that exits quietly
    get_logger("daemon.threads").error(
        "uncaught exception in a thread",
        thread=args.thread.name if args.thread is not None else None,
        exc_info=(args.exc_type, args.exc_value, args.exc_traceback),
    )


def get_logger(name: str) -> structlog.stdlib.BoundLogger:
    """A structlog logger named after its module.

    Lazy: modules create their logger at import, often before :func:`configure_logging` runs, and
    the logger must take the configuration in force when it is used, not structlog's default (which
    would print console lines to stdout in the middle of a JSON log).
    """
    return cast(structlog.stdlib.BoundLogger, _NamedLogger(name))


class _NamedLogger:
    """Binds ``logger=name`` on first use after logging is configured, and keeps that logger."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._bound: Any = None

    def __getattr__(self, attribute: str) -> Any:
        bound = self._bound
        if bound is None:
            bound = structlog.get_logger().bind(logger=self._name)
            if structlog.is_configured():
                self._bound = bound
        return getattr(bound, attribute)
