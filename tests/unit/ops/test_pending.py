"""``docsumd_prompt_tokens_pending`` (daemon/ops/pending.py): what a document counts at each stage, and
the figure through the real pipeline and summarizer with a fake engine held mid-request."""

from __future__ import annotations

import asyncio
from typing import Any

import prometheus_client
import pytest

from daemon.config import Config, EngineConfig, SummaryConfig
from daemon.document.reader import DocumentReader
from daemon.engine.admission import Admission, AdmissionLimits
from daemon.ops import pending
from daemon.ops.pending import BYTES_PER_TOKEN, PENDING
from daemon.pipeline import OK, DocumentPipeline
from daemon.summary.profiles import build_profiles
from daemon.summary.summarizer import Summarizer
from tests.doubles.engine import FakeEngine
from tests.doubles.work import Acks

LONG = b"".join(
    f"Clause {i}. The supplier delivers item {i} within {i} days. ".encode() * 3 for i in range(300)
)


def _scraped() -> float:
    value = prometheus_client.REGISTRY.get_sample_value("docsumd_prompt_tokens_pending")
    assert value is not None
    return value


def test_a_document_counts_its_bytes_then_its_tokens_then_its_requests() -> None:
    base = PENDING.total()
    with PENDING.document(4000):
        assert PENDING.total() - base == 4000 // BYTES_PER_TOKEN
        pending.resized(8000)
        assert PENDING.total() - base == 8000 // BYTES_PER_TOKEN
        pending.tokenized(1500)
        assert PENDING.total() - base == 1500
        with pending.counted(600):  # the first request: the text is counted through the requests now
            assert PENDING.total() - base == 600
            pending.tokenized(99)  # too late to change anything
            pending.resized(99)
            with pending.counted(700):
                assert PENDING.total() - base == 1300
            assert PENDING.total() - base == 600
        assert PENDING.total() - base == 0
        with pending.counted(200):  # a combine step: its own prompt, while it runs
            assert PENDING.total() - base == 200
    assert PENDING.total() == base
    assert _scraped() == base


def test_outside_a_document_the_reports_do_nothing() -> None:
    base = PENDING.total()
    pending.tokenized(10)
    pending.requested(10)
    pending.finished(10)
    assert PENDING.total() == base


def test_fetched_messages_count_by_their_bytes() -> None:
    base = PENDING.total()
    PENDING.fetched("unit-test", 4 * 1000)
    try:
        assert PENDING.total() - base == 1000
        assert _scraped() - base == 1000
    finally:
        PENDING.fetched("unit-test", 0)
    assert PENDING.total() == base


async def test_through_the_pipeline_the_figure_follows_the_requests_in_flight(tokenizer: Any) -> None:
    released = asyncio.Event()

    async def hold(request_id: str) -> None:
        await released.wait()

    engine = FakeEngine(behaviour=hold)
    config = Config(
        engine=EngineConfig(model="unused", max_model_len=1024),
        summary=SummaryConfig(max_summary_tokens=16, max_parallel_requests_per_document=2),
    )
    admission = Admission(AdmissionLimits(max_requests=8, max_tokens=10**6))
    summarizer = Summarizer(
        engine, tokenizer, config.summary, profiles=build_profiles(config, tokenizer), admission=admission
    )
    pipeline = DocumentPipeline(summarizer, model_name="tiny", reader=DocumentReader(max_input_bytes=1 << 22))
    base = PENDING.total()
    acks = Acks()
    task = asyncio.create_task(pipeline.process(acks.item("long", LONG)))
    for _ in range(500):
        await asyncio.sleep(0.01)
        if len(engine.calls) == 2:
            break
    assert len(engine.calls) == 2  # two parts in the engine, the others held by the fan-out
    parts = [call for call in engine.calls if call.kind == "part"]
    in_engine = sum(len(call.prompt) for call in parts)
    held = _scraped() - base
    # Every part request is made (and counted) though only two run: the figure is the whole
    # document's remaining work, at least the two in the engine and a part's worth more.
    assert held > in_engine + len(parts[0].prompt) / 2, (held, in_engine)
    tokens = len(tokenizer.encode(LONG.decode(), add_special_tokens=False))
    assert tokens <= held <= tokens * 1.5, (held, tokens)
    released.set()
    assert await task == OK
    assert PENDING.total() == pytest.approx(base)
