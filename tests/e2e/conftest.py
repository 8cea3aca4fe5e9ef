"""Fixtures of the end-to-end tests: daemon layouts and daemons that are always cleaned up (the tiny
model and the corpus are in tests/conftest.py)."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.e2e.harness import DaemonProcess, Layout, free_port, wait_for


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
            report = daemon.stop_log()
            daemon.kill_group()
            pytest.fail(f"processes left behind by the daemon: {leftovers}\n{report}")


def _group_empty(daemon: DaemonProcess) -> bool:
    return not daemon.group_processes()


@pytest.fixture
def daemons(tiny_model: Path) -> Iterator[Callable[[Layout], DaemonProcess]]:
    """Start daemons on layouts of the test's choosing; every one still alive at teardown is killed
    with its group (as the ``start_daemon`` fixture does for the ``layout`` fixture)."""
    started: list[DaemonProcess] = []

    def start(layout: Layout) -> DaemonProcess:
        daemon = DaemonProcess(layout, layout.root / f"daemon-{len(started)}.log").start()
        started.append(daemon)
        return daemon

    yield start
    leftovers = []
    for daemon in started:
        if daemon.proc is not None and daemon.proc.poll() is None:
            daemon.kill_group()
        # After a clean exit vLLM's resource tracker may outlive the daemon by a moment.
        with contextlib.suppress(AssertionError):
            wait_for(functools.partial(_group_empty, daemon), 15, "the daemon's group to be empty")
        remaining = daemon.group_processes()
        if remaining:
            daemon.kill_group()
            leftovers += remaining
    if leftovers:
        pytest.fail(f"processes left behind by a daemon: {leftovers}")
