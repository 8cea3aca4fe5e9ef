"""``kill -9`` of the main process leaves no process behind, whatever the daemon was doing.

Real engine, tiny model, the real extraction workers. Each kill costs an engine start, so CI kills at
two moments: while the engine's processes are still starting (EngineCore and its worker loading:
the window before they arm their parent-death signal), and while an extraction worker and the
engine's worker are both computing (a PDF extracted, a long document's parts summarized). The idle
daemon's ``kill -9`` is in ``test_signals.py``; ``bench/kill9.py`` repeats all the moments
(:mod:`tests.e2e.kill9`) as many times as asked.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.e2e.harness import DaemonProcess, Layout
from tests.e2e.kill9 import GONE_WITHIN_S, kill_9, reach

pytestmark = pytest.mark.engine


@pytest.mark.parametrize("moment", ["start", "busy"])
def test_kill_9_of_the_main_process_leaves_no_process(
    moment: str, layout: Layout, start_daemon: Callable[..., DaemonProcess]
) -> None:
    layout.write_config(**{"summary.max_summary_tokens": "128"})
    daemon = start_daemon()
    busy = reach(daemon, moment)

    outcome = kill_9(daemon, moment, busy)

    names = set(outcome.processes.values())
    assert {"VLLM::EngineCore", "resource-tracker"} <= names, outcome
    if moment == "busy":
        assert {"VLLM::Worker", "extraction-worker"} <= names, outcome
    assert not outcome.left, f"left behind by kill -9 at {moment!r}: {outcome}"
    assert outcome.slowest_s <= GONE_WITHIN_S, outcome
    print(f"kill -9 at {moment!r}: {len(outcome.processes)} processes gone within {outcome.slowest_s:.2f} s")
