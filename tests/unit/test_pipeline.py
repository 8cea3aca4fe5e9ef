"""The per-document path on its own (no service): outcomes, records, acknowledgements, error policy."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from daemon.admission import Admission, AdmissionLimits
from daemon.budget import ContextBudget
from daemon.config import SummaryConfig
from daemon.errors import DocumentError, EngineDeadError, RequestError, SinkError
from daemon.pipeline import OK, DocumentPipeline
from daemon.records import Record
from daemon.summarize import Summarizer
from daemon.work import WorkItem
from tests.fakes import FakeEngine

TEXT = b"A short notice about the delivery of goods. " * 10


class Acks:
    """The acknowledgements of work items, as the test sees them."""

    def __init__(self) -> None:
        self.completed: dict[str, Record] = {}
        self.failed: dict[str, Record] = {}

    def item(self, doc_id: str, data: bytes | BaseException = TEXT, options: Any = None) -> WorkItem:
        async def load() -> bytes:
            if isinstance(data, BaseException):
                raise data
            return data

        async def load_options() -> Any:
            if isinstance(options, BaseException):
                raise options
            return options

        async def complete(record: Record) -> None:
            self.completed[doc_id] = record

        async def fail(record: Record) -> None:
            self.failed[doc_id] = record

        return WorkItem(
            id=doc_id,
            source="test",
            load=load,
            on_complete=complete,
            on_fail=fail,
            metadata={"origin": doc_id},
            load_options=load_options,
        )


@pytest.fixture
def engine() -> FakeEngine:
    return FakeEngine()


@pytest.fixture
def finished() -> list[tuple[str, str]]:
    return []


@pytest.fixture
def pipeline(engine: FakeEngine, tokenizer: Any, finished: list[tuple[str, str]]) -> DocumentPipeline:
    admission = Admission(AdmissionLimits(max_requests=8, max_tokens=10**6))
    config = SummaryConfig(max_summary_tokens=16)
    budget = ContextBudget.create(config, 1024, tokenizer)
    summarizer = Summarizer(engine, tokenizer, config, budget=budget, admission=admission)
    return DocumentPipeline(
        summarizer,
        model_name="tiny",
        max_input_bytes=1 << 20,
        on_finished=lambda item, outcome: finished.append((item.id, outcome)),
    )


async def test_a_summarized_document_is_completed_with_its_result(
    pipeline: DocumentPipeline, finished: list[tuple[str, str]]
) -> None:
    acks = Acks()
    assert await pipeline.process(acks.item("a.txt")) == OK
    record = acks.completed["a.txt"]
    assert (record["id"], record["source"], record["model"]) == ("a.txt", "test", "tiny")
    assert record["input_bytes"] == len(TEXT)
    assert record["metadata"] == {"origin": "a.txt"}
    assert not acks.failed
    assert finished == [("a.txt", OK)]


@pytest.mark.parametrize(
    ("data", "options", "reason"),
    [
        (b"", None, "empty"),
        (DocumentError("unreadable", "gone"), None, "unreadable"),
        (TEXT, {"style": "haiku"}, "invalid_options"),
        (TEXT, RuntimeError("a bug reading options"), "internal_error"),
    ],
)
async def test_a_refused_document_is_failed_with_its_reason(
    pipeline: DocumentPipeline, data: bytes | BaseException, options: Any, reason: str
) -> None:
    acks = Acks()
    assert await pipeline.process(acks.item("b.txt", data, options)) == reason
    record = acks.failed["b.txt"]
    assert record["reason"] == reason
    assert record["input_bytes"] == (len(data) if isinstance(data, bytes) else None)
    assert not acks.completed


async def test_an_engine_request_error_fails_only_that_document(
    pipeline: DocumentPipeline, engine: FakeEngine
) -> None:
    engine.behaviour["bad.txt"] = RequestError("refused")
    acks = Acks()
    outcomes = await asyncio.gather(
        pipeline.process(acks.item("bad.txt")), pipeline.process(acks.item("ok.txt"))
    )
    assert list(outcomes) == ["engine_error", OK]
    assert set(acks.failed) == {"bad.txt"}
    assert set(acks.completed) == {"ok.txt"}


@pytest.mark.parametrize("error", [EngineDeadError("gone"), SinkError("disk full")])
async def test_fatal_errors_propagate_and_settle_nothing(
    pipeline: DocumentPipeline, engine: FakeEngine, error: Exception
) -> None:
    acks = Acks()
    if isinstance(error, EngineDeadError):
        engine.behaviour["c.txt"] = error
        item = acks.item("c.txt")
    else:
        item = acks.item("c.txt")

        async def broken_sink(record: Record) -> None:
            raise error

        item.on_complete = broken_sink
    with pytest.raises(type(error)):
        await pipeline.process(item)
    assert not acks.failed
    assert not acks.completed


async def test_cancellation_aborts_the_request_and_settles_nothing(
    pipeline: DocumentPipeline, engine: FakeEngine
) -> None:
    engine.delay = 10.0
    acks = Acks()
    task = asyncio.create_task(pipeline.process(acks.item("d.txt")))
    await asyncio.sleep(0.2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert engine.cancelled == ["d.txt"]
    assert not acks.failed
    assert not acks.completed
