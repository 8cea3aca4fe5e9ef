"""daemon.ops.logging: loggers made at import time follow the configuration made later."""

from __future__ import annotations

import json
import logging
import threading

import pytest
import structlog

from daemon.ops.logging import configure_logging, get_logger


@pytest.fixture(autouse=True)
def _restore_logging() -> object:
    root_handlers = logging.getLogger().handlers[:]
    hook = threading.excepthook
    yield None
    structlog.reset_defaults()
    logging.getLogger().handlers[:] = root_handlers
    threading.excepthook = hook


def test_logger_made_before_configuration_logs_json_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    early = get_logger("daemon.early")  # as a module-level logger, before the entry point configures
    configure_logging("info", "json")
    early.info("engine ready", start_s=1.5)
    captured = capsys.readouterr()
    assert captured.out == ""
    record = json.loads(captured.err.strip().splitlines()[-1])
    assert (record["event"], record["logger"], record["start_s"], record["level"]) == (
        "engine ready",
        "daemon.early",
        1.5,
        "info",
    )


def test_standard_library_records_share_the_renderer(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("info", "json")
    logging.getLogger("vllm.engine").warning("from the library")
    record = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
    assert (record["event"], record["logger"], record["level"]) == (
        "from the library",
        "vllm.engine",
        "warning",
    )


def test_a_threads_uncaught_exception_is_one_json_record(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("info", "json")

    def fail() -> None:
        raise OSError(22, "Invalid argument")

    thread = threading.Thread(target=fail, name="EngineMonitor")
    thread.start()
    thread.join()
    quiet = threading.Thread(target=lambda: (_ for _ in ()).throw(SystemExit()), name="Quiet")
    quiet.start()
    quiet.join()
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines  # the traceback is inside the record, SystemExit is silent
    record = json.loads(lines[0])
    assert (record["event"], record["thread"], record["level"]) == (
        "uncaught exception in a thread",
        "EngineMonitor",
        "error",
    )
    assert "OSError: [Errno 22] Invalid argument" in record["exception"]
