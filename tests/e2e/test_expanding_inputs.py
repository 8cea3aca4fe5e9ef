"""Small files that expand (issue 36), against the real daemon (real vLLM engine, tiny model): its main
process's memory follows the text, not the bytes, through the inbox and a Kafka topic at once.

One daemon with both sources and ``limits.max_inflight_bytes`` of 2 MiB is flooded, through each, with
issue 36's hostile files (a 1.6 KB DOCX of 12 M letters, 10 KB of HTML of 15.4 M, a 21 KB PDF of
7.6 M) and with files of each kind whose text (up to 1 MiB) is within the expansion cap: about 17 MiB
of text in all, against 2 MiB of budget. The hostile ones fail with ``too_expanded``, the others
are summarized, the daemon stays healthy, and the main process's resident memory, sampled
throughout (its own, not its engine's or its workers'), stays within the sizing guide's bound for that
budget. Before this was built every one of them was in flight at once.

The figures of the bound are the sizing rule (docs/guides/sizing.md); the summaries use the
``head`` strategy (one engine request per document) so that the engine's time does not make the
test slow: the text and its tokens are held all the same (the whole text is tokenized), and
256-token summaries keep the documents in flight side by side for seconds. With the code before
(86f0068, which counted input bytes only), the capped files alone grew the main process past this
test's bound; the figures of both runs are in bench/RESULTS.md.
"""

from __future__ import annotations

import asyncio
import json
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import psutil
import pytest

from tests.e2e.harness import DaemonProcess, Layout, configure_kafka, drop_file, wait_for_progress
from tests.expanding_inputs import docx_list_label, html_ordered_list, pdf_shared_stream
from tests.kafka_broker import KafkaBroker, Topics, create_topics, produce, read_all

pytestmark = [pytest.mark.kafka]

MIB = 1024 * 1024
BUDGET_MIB = 2
MAIN_PROCESS_MIB_PER_TEXT_MIB = 45
"""The sizing rule (K, with the copies an extracted text makes on its way in), and the
input bytes besides: what the main process may grow by, per MiB of budget."""
SLACK_MIB = 64
"""What else moves the main process's resident memory while it works (the engine's front end, the
sources' clients, the allocator's arenas): measured at about 20 MiB."""


def _inputs() -> dict[str, tuple[bytes, str]]:
    """name -> (bytes, the outcome it must have)."""
    hostile = {
        "list-label.docx": docx_list_label(12_000_000),
        "ordered-list.html": html_ordered_list(400),
        "shared-stream.pdf": pdf_shared_stream(1999),
    }
    # Within the cap (1 MiB, the floor): about 1 MiB, 1 MiB and 0.4 MiB of text.
    capped = {
        "docx": docx_list_label(1_000_000),
        "html": html_ordered_list(26),
        "pdf": pdf_shared_stream(100),
    }
    inputs = {
        f"hostile-{index}-{name}": (data, "too_expanded")
        for index in range(2)
        for name, data in hostile.items()
    }
    for index in range(4):
        for suffix, data in capped.items():
            if suffix == "pdf" and index >= 2:
                continue  # the slowest to extract: two are enough
            inputs[f"capped-{index}.{suffix}"] = (data, "ok")
    return inputs


class PeakRss(threading.Thread):
    """Samples one process's resident memory every few milliseconds; keeps the peak."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.process = psutil.Process(pid)
        self.peak: int = self.process.memory_info().rss
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.is_set():
            try:
                self.peak = max(self.peak, self.process.memory_info().rss)
            except psutil.Error:
                return
            time.sleep(0.01)

    def stop(self) -> int:
        self._done.set()
        self.join()
        return self.peak


@pytest.mark.engine
def test_a_flood_of_small_expanding_files_stays_within_the_memory_bound(
    layout: Layout, start_daemon: Callable[..., DaemonProcess], kafka_broker: KafkaBroker
) -> None:
    topics = Topics()
    asyncio.run(create_topics(kafka_broker.bootstrap, [topics.input, topics.output, topics.dead]))
    configure_kafka(
        layout,
        kafka_broker,
        topics,
        **{
            "limits.max_inflight_bytes": str(BUDGET_MIB * MIB),
            "summary.strategy": '"head"',
            # Long enough that the documents wait for the engine side by side, holding their text.
            "summary.max_summary_tokens": "256",
        },
    )
    daemon = start_daemon()
    daemon.wait_ready()
    assert daemon.proc is not None
    time.sleep(2)  # settled after the engine's start
    baseline: int = psutil.Process(daemon.proc.pid).memory_info().rss
    sampler = PeakRss(daemon.proc.pid)
    sampler.start()
    inputs = _inputs()
    for name, (data, _) in inputs.items():
        drop_file(layout.inbox, name, data)
    asyncio.run(
        produce(
            kafka_broker.bootstrap,
            topics.input,
            [(name.encode(), data, []) for name, (data, _) in inputs.items()],
        )
    )

    def kafka_records() -> tuple[list[Any], list[Any]]:
        return (
            asyncio.run(read_all(kafka_broker.bootstrap, topics.output)),
            asyncio.run(read_all(kafka_broker.bootstrap, topics.dead)),
        )

    def finished() -> int:
        in_folder = len(layout.names(layout.outbox, ".summary.json")) + len(
            layout.names(layout.failed, ".error.json")
        )
        return in_folder + sum(map(len, kafka_records()))

    try:
        wait_for_progress(finished, 2 * len(inputs), stall=180, what="a record for every input")
    finally:
        peak = sampler.stop()
    assert daemon.proc.poll() is None, daemon.log_tail()
    assert daemon.http_get("/healthz")[0] == 200

    outcomes: dict[str, str] = {}
    for name in inputs:
        if (layout.outbox / f"{name}.summary.json").exists():
            outcomes[f"folder:{name}"] = "ok"
        else:
            outcomes[f"folder:{name}"] = layout.error(name)["reason"]
    results, letters = kafka_records()
    for record in results:
        outcomes[f"kafka:{record.key.decode()}"] = "ok"
    for record in letters:
        letter = json.loads(record.value)
        outcomes[f"kafka:{letter['id']}"] = letter["reason"]
    expected = {
        f"{where}:{name}": outcome for name, (_, outcome) in inputs.items() for where in ("folder", "kafka")
    }
    assert outcomes == expected

    grown_mib = (peak - baseline) / MIB
    bound_mib = MAIN_PROCESS_MIB_PER_TEXT_MIB * BUDGET_MIB + SLACK_MIB
    print(f"main process: baseline {baseline / MIB:.0f} MiB, peak {peak / MIB:.0f} MiB (+{grown_mib:.0f})")
    assert grown_mib <= bound_mib, f"the main process grew by {grown_mib:.0f} MiB, over {bound_mib} MiB"
    daemon.signal(signal.SIGTERM)
    assert daemon.wait_exit() == 0, daemon.log_tail()
