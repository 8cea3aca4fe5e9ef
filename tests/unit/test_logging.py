"""daemon.ops.logging: loggers made at import time follow the configuration made later."""

from __future__ import annotations

import json
import logging

import pytest
import structlog

from daemon.ops.logging import configure_logging, get_logger


@pytest.fixture(autouse=True)
def _restore_logging() -> object:
    root_handlers = logging.getLogger().handlers[:]
    yield None
    structlog.reset_defaults()
    logging.getLogger().handlers[:] = root_handlers


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
