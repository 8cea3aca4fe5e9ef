"""Fixtures of the end-to-end tests: daemon layouts and daemons that are always cleaned up (the tiny
model and the corpus are in tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.e2e.harness import DaemonProcess, Layout, free_port


@pytest.fixture
def layout(tmp_path: Path, tiny_model: Path) -> Layout:
    """Folders and a config for one daemon under tmp_path."""
    return Layout(root=tmp_path, model=tiny_model, metrics_port=free_port())


@pytest.fixture
def start_daemon(layout: Layout) -> Iterator[Callable[..., DaemonProcess]]:
    """Start daemons on ``layout``; every one still alive at teardown is killed with its group."""
    started: list[DaemonProcess] = []

    def start(extra_env: dict[str, str] | None = None) -> DaemonProcess:
        if not layout.config.exists():
            layout.write_config()
        daemon = DaemonProcess(layout, layout.root / f"daemon-{len(started)}.log").start(extra_env)
        started.append(daemon)
        return daemon

    yield start
    for daemon in started:
        if daemon.proc is not None and daemon.proc.poll() is None:
            daemon.kill_group()
        leftovers = daemon.leftover_processes()
        if leftovers:
            daemon.kill_group()
            pytest.fail(f"processes left behind by the daemon: {leftovers}")
