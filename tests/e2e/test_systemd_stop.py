"""Stopping the daemon the way systemd stops the unit as shipped, with documents in flight.

No systemd runs on the development machines, so the test does what systemd's stop does for the
``[Service]`` settings it reads from ``systemd/docsumd.service``: the ``KillSignal`` (followed by
SIGCONT, as systemd sends) to the main process alone (``KillMode=mixed`` or ``process``) or to every
process of the unit (``control-group``; the daemon's process group stands in for the unit's cgroup);
then it waits ``TimeoutStopSec`` for the main process, and at the end sends what systemd's final
SIGKILL would hit. What must hold: exit 0, the documents in flight drained (finished and
acknowledged), no ``internal_error`` record, no error logged, and nothing left for the final
SIGKILL. Change the unit's ``KillMode`` and this test follows it.

A second test does what Ctrl-C at a terminal does: SIGINT to the whole foreground process group,
vLLM's EngineCore included. The engine's processes leave SIGINT to the main process
(:mod:`daemon.engine.vllm_engine`), so this drains too.

Real engine, tiny model, documents from the shared corpus. Prints the stop time with the number of
documents in flight (docs/operations/proven.md quotes it).
"""

from __future__ import annotations

import hashlib
import os
import re
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import REPO, DaemonProcess, Layout, drop_file, wait_for

pytestmark = pytest.mark.engine

UNIT = REPO / "systemd" / "docsumd.service"
DOCUMENTS = 24
_TIMESPAN = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|sec|m|min|h|hr)?")
_UNITS = {None: 1.0, "ms": 0.001, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "hr": 3600.0}


@dataclass(frozen=True)
class StopSettings:
    """What systemd does on ``systemctl stop`` for a unit (its defaults where the unit is silent)."""

    kill_mode: str = "control-group"
    kill_signal: signal.Signals = signal.SIGTERM
    timeout_stop_s: float = 90.0
    send_sigkill: bool = True
    final_kill_signal: signal.Signals = signal.SIGKILL


def timespan_seconds(value: str) -> float:
    """A systemd time span ("120", "2min", "1min 30s") in seconds."""
    parts = _TIMESPAN.findall(value)
    assert parts, f"not a time span: {value!r}"
    return sum(float(number) * _UNITS[unit or None] for number, unit in parts)


def stop_settings(unit: Path) -> StopSettings:
    """The stop-related settings of ``unit``'s [Service] section."""
    values: dict[str, str] = {}
    section = ""
    for raw in unit.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line
            continue
        if section == "[Service]" and "=" in line:
            key, value = line.split("=", 1)
            values[key.strip()] = value.strip()
    settings = StopSettings()
    return StopSettings(
        kill_mode=values.get("KillMode", settings.kill_mode),
        kill_signal=signal.Signals[values.get("KillSignal", settings.kill_signal.name)],
        timeout_stop_s=timespan_seconds(values["TimeoutStopSec"])
        if "TimeoutStopSec" in values
        else settings.timeout_stop_s,
        send_sigkill=values.get("SendSIGKILL", "yes") not in {"no", "false", "0"},
        final_kill_signal=signal.Signals[values.get("FinalKillSignal", settings.final_kill_signal.name)],
    )


@dataclass
class StopOutcome:
    exit_code: int
    stop_s: float  # from the signal to the main process's exit
    left_for_final_kill: list[str]  # processes the final SIGKILL would have had to kill


def stop_like_systemd(daemon: DaemonProcess, settings: StopSettings) -> StopOutcome:
    """``systemctl stop`` for ``settings``; the daemon's process group stands in for the cgroup."""
    assert daemon.proc is not None
    if settings.kill_mode == "control-group":
        targets: Callable[[int], None] = lambda sig: os.killpg(daemon.pgid, sig)  # noqa: E731
    elif settings.kill_mode in {"mixed", "process"}:
        targets = lambda sig: os.kill(daemon.proc.pid, sig)  # type: ignore[union-attr]  # noqa: E731
    else:
        raise AssertionError(f"KillMode={settings.kill_mode}: systemd would send no stop signal at all")
    started = time.monotonic()
    targets(settings.kill_signal)
    targets(signal.SIGCONT)  # systemd follows the kill signal with SIGCONT (stopped processes wake)
    code = daemon.wait_exit(timeout=settings.timeout_stop_s)  # fails (after killing) if it took longer
    stop_s = time.monotonic() - started
    # The rest of TimeoutStopSec for the unit's other processes to go; then systemd's final SIGKILL.
    remaining = max(0.0, started + settings.timeout_stop_s - time.monotonic())
    deadline = time.monotonic() + remaining
    while (left := daemon.group_processes()) and time.monotonic() < deadline:
        time.sleep(0.2)
    if settings.send_sigkill and left:
        daemon.kill_group()
    return StopOutcome(exit_code=code, stop_s=stop_s, left_for_final_kill=left)


def _fill_inbox(layout: Layout, corpus: Path, count: int) -> dict[str, bytes]:
    """``count`` distinct documents of 2-6 KB cut from the corpus (one or two engine requests each)."""
    sources = sorted((corpus / "docs").glob("*.txt"))
    inputs: dict[str, bytes] = {}
    for index in range(count):
        text = sources[index % len(sources)].read_text(encoding="utf-8")
        data = f"Document {index}.\n\n{text[: 2000 + (index * 677) % 4000]}".encode()
        name = f"doc-{index:03d}.txt"
        drop_file(layout.inbox, name, data)
        inputs[name] = data
    return inputs


def _inflight(daemon: DaemonProcess) -> int:
    match = re.search(r"^docsumd_inflight_documents (\S+)$", daemon.http_get("/metrics")[1], re.M)
    return int(float(match.group(1))) if match else 0


def _errors_logged(daemon: DaemonProcess) -> list[str]:
    """Error-level lines: ours and vLLM's records (JSON), and the engine processes' plain lines."""
    found = [
        str(event)
        for event in daemon.log_events()
        if str(event.get("level", "")).lower() in {"error", "critical", "exception"}
    ]
    for line in daemon.log_path.read_text(errors="replace").splitlines():
        if not line.startswith("{") and re.search(r"\b(ERROR|CRITICAL)\b|Traceback", line):
            found.append(line)
    return found


def _stop_with_documents_in_flight(
    layout: Layout,
    start_daemon: Callable[..., DaemonProcess],
    corpus: Path,
    stop: Callable[[DaemonProcess], StopOutcome],
    what: str,
) -> StopOutcome:
    inputs = _fill_inbox(layout, corpus, DOCUMENTS)
    layout.write_config(**{"summary.max_summary_tokens": "96"})  # drain_seconds stays 60, as shipped
    daemon = start_daemon()
    daemon.wait_ready()
    wait_for(lambda: _inflight(daemon) > 0, 60, "documents in flight")
    inflight = _inflight(daemon)
    outcome = stop(daemon)

    assert outcome.exit_code == 0, daemon.log_tail()
    assert outcome.left_for_final_kill == [], "processes outlived the main process"
    events = daemon.log_events()
    drains = [e for e in events if e.get("event") == "draining in-flight documents"]
    assert drains, "nothing was in flight at the stop: the test proved nothing"
    assert drains[0]["inflight"] > 0
    assert not any(str(e.get("event", "")).startswith("fatal error") for e in events), daemon.log_tail()
    # Drained: every document in flight finished and was acknowledged (the drain deadline, 60 s,
    # was not reached); none was left half-done or failed.
    assert not any(str(e.get("event", "")).startswith("drain deadline passed") for e in events)
    done, failed, inbox = (layout.inputs_in(f) for f in (layout.done, layout.failed, layout.inbox))
    assert not failed, {name: layout.error(name)["reason"] for name in failed}
    assert done | inbox == set(inputs)
    assert len(done) >= inflight
    for name in done:
        assert layout.result(name)["sha256"] == hashlib.sha256(inputs[name]).hexdigest()
    assert _errors_logged(daemon) == []
    stats: dict[str, Any] = drains[0]
    print(
        f"{what}: {stats['inflight']} documents in flight at the signal, stopped in {outcome.stop_s:.1f} s "
        f"(exit {outcome.exit_code}); {len(done)} done, {len(inbox)} not yet taken in"
    )
    return outcome


def test_unit_stop_settings_are_read() -> None:
    settings = stop_settings(UNIT)
    assert settings.kill_mode in {"control-group", "mixed", "process", "none"}
    assert settings.timeout_stop_s > 60  # the drain deadline (60 s by default) plus the engine's shutdown
    assert timespan_seconds("2min 30s") == 150
    assert timespan_seconds("90") == 90


def test_stopping_the_unit_as_shipped_drains(
    layout: Layout, start_daemon: Callable[..., DaemonProcess], corpus: Path
) -> None:
    settings = stop_settings(UNIT)
    outcome = _stop_with_documents_in_flight(
        layout,
        start_daemon,
        corpus,
        lambda daemon: stop_like_systemd(daemon, settings),
        f"systemctl stop (KillMode={settings.kill_mode}, {settings.kill_signal.name})",
    )
    assert outcome.stop_s < settings.timeout_stop_s


def test_ctrl_c_at_a_terminal_drains(
    layout: Layout, start_daemon: Callable[..., DaemonProcess], corpus: Path
) -> None:
    """Ctrl-C signals the whole foreground process group: the engine's processes must leave it to
    the main process (they would abort everything and exit, and the daemon would exit 1)."""

    def ctrl_c(daemon: DaemonProcess) -> StopOutcome:
        engine = [p for p in daemon.group_processes() if "EngineCor" in p]
        assert engine, daemon.group_processes()
        return stop_like_systemd(daemon, StopSettings(kill_mode="control-group", kill_signal=signal.SIGINT))

    _stop_with_documents_in_flight(layout, start_daemon, corpus, ctrl_c, "Ctrl-C (SIGINT to the group)")
