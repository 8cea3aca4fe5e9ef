"""The per-document path on its own (no service): outcomes, records, acknowledgements, error policy."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from daemon.config import Config, EngineConfig, ProfileConfig, SummaryConfig
from daemon.document.reader import DocumentReader
from daemon.engine.admission import Admission, AdmissionLimits
from daemon.errors import DocumentError, EngineDeadError, RequestError, SinkError
from daemon.ops.metrics import PROFILE_DOCUMENTS
from daemon.pipeline import OK, DocumentPipeline
from daemon.records import Record
from daemon.summary.grounding import Kind
from daemon.summary.profiles import build_profiles
from daemon.summary.prompts import PromptKind
from daemon.summary.summarizer import Summarizer
from daemon.work import WorkItem
from tests.doubles.engine import FakeEngine
from tests.doubles.work import Acks

TEXT = b"A short notice about the delivery of goods. " * 10


@pytest.fixture
def acks() -> Acks:
    """Work items that load ``TEXT`` unless told otherwise, whose metadata names them (the records must
    carry it through)."""
    return Acks(TEXT, origin=True)


@pytest.fixture
def engine() -> FakeEngine:
    return FakeEngine(delay=0.05)


@pytest.fixture
def finished() -> list[tuple[str, str]]:
    return []


@pytest.fixture
def pipeline(engine: FakeEngine, tokenizer: Any, finished: list[tuple[str, str]]) -> DocumentPipeline:
    admission = Admission(AdmissionLimits(max_requests=8, max_tokens=10**6))
    config = Config(
        engine=EngineConfig(model="unused", max_model_len=1024),
        summary=SummaryConfig(max_summary_tokens=16),
        # The shipped legal brief, and a profile of the config's own that only samples differently.
        profiles={"brief": ProfileConfig(), "lively": ProfileConfig(temperature=0.9)},
    )
    profiles = build_profiles(config, tokenizer)
    summarizer = Summarizer(engine, tokenizer, config.summary, profiles=profiles, admission=admission)
    return DocumentPipeline(
        summarizer,
        model_name="tiny",
        reader=DocumentReader(max_input_bytes=1 << 20),
        on_finished=lambda item, outcome: finished.append((item.id, outcome)),
    )


async def test_a_summarized_document_is_completed_with_its_result(
    pipeline: DocumentPipeline, finished: list[tuple[str, str]], acks: Acks
) -> None:
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
    pipeline: DocumentPipeline, data: bytes | BaseException, options: Any, reason: str, acks: Acks
) -> None:
    assert await pipeline.process(acks.item("b.txt", data, options)) == reason
    record = acks.failed["b.txt"]
    assert record["reason"] == reason
    # Options are read and planned before the bytes: a document failed by them was never read.
    read = data if isinstance(data, bytes) and options is None else None
    assert record["input_bytes"] == (None if read is None else len(read))
    assert (record["sha256"] is None) == (read is None)
    assert not acks.completed


class Steps:
    """A work item's loads, in order: ``options`` and ``bytes``."""

    def __init__(self, item: WorkItem) -> None:
        self.calls: list[str] = []
        load, load_options = item.load, item.load_options
        assert load_options is not None

        async def recorded_load() -> bytes:
            self.calls.append("bytes")
            return await load()

        async def recorded_options() -> Any:
            self.calls.append("options")
            return await load_options()

        item.load, item.load_options = recorded_load, recorded_options


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"style": "haiku"}, "style"),
        ({"profile": "poem"}, "unknown profile 'poem'"),
        ({"max_summary_tokens": 4096}, "over half the context"),  # the context is 1024 tokens
    ],
)
async def test_a_document_whose_options_cannot_be_planned_fails_unread(
    pipeline: DocumentPipeline,
    engine: FakeEngine,
    acks: Acks,
    options: Any,
    message: str,
) -> None:
    item = acks.item("unread.txt", options=options)
    steps = Steps(item)
    assert await pipeline.process(item) == "invalid_options"
    assert steps.calls == ["options"]
    failure = acks.failed["unread.txt"]
    assert failure["reason"] == "invalid_options"
    assert message in failure["message"]
    assert (failure["sha256"], failure["input_bytes"]) == (None, None)
    assert engine.calls == []


async def test_options_are_read_once_and_before_the_bytes(
    pipeline: DocumentPipeline, engine: FakeEngine, acks: Acks
) -> None:
    item = acks.item("planned.txt", options={"style": "bullets", "max_summary_tokens": 20})
    steps = Steps(item)
    assert await pipeline.process(item) == OK
    assert steps.calls == ["options", "bytes"]
    record = acks.completed["planned.txt"]
    assert (record["style"], record["max_summary_tokens"]) == ("bullets", 20)
    (call,) = engine.calls
    assert call.max_tokens == 20


async def test_an_engine_request_error_fails_only_that_document(
    pipeline: DocumentPipeline, engine: FakeEngine, acks: Acks
) -> None:
    engine.failures["bad.txt"] = RequestError("refused")
    outcomes = await asyncio.gather(
        pipeline.process(acks.item("bad.txt")), pipeline.process(acks.item("ok.txt"))
    )
    assert list(outcomes) == ["engine_error", OK]
    assert set(acks.failed) == {"bad.txt"}
    assert set(acks.completed) == {"ok.txt"}


@pytest.mark.parametrize("error", [EngineDeadError("gone"), SinkError("disk full")])
async def test_fatal_errors_propagate_and_settle_nothing(
    pipeline: DocumentPipeline, engine: FakeEngine, error: Exception, acks: Acks
) -> None:
    if isinstance(error, EngineDeadError):
        engine.failures["c.txt"] = error
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
    pipeline: DocumentPipeline, engine: FakeEngine, acks: Acks
) -> None:
    engine.delay = 10.0
    task = asyncio.create_task(pipeline.process(acks.item("d.txt")))
    await asyncio.sleep(0.2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert engine.cancelled_docs == ["d.txt"]
    assert not acks.failed
    assert not acks.completed


async def test_options_nested_fifty_thousand_levels_deep_fail_as_invalid_options(
    pipeline: DocumentPipeline, acks: Acks
) -> None:
    sidecar = b'{"style": ' + b"[" * 50_000 + b"]" * 50_000 + b"}"  # what a folder sidecar holds
    assert await pipeline.process(acks.item("deep", options=sidecar)) == "invalid_options"
    assert acks.failed["deep"]["reason"] == "invalid_options"


async def test_a_result_the_sink_cannot_write_for_this_document_becomes_its_failure_record(
    pipeline: DocumentPipeline, acks: Acks
) -> None:
    # A Kafka result too large for max_request_bytes: the sink refuses this record, nothing is
    # acknowledged, and the document fails (a dead letter) instead of the service.
    item = acks.item("big")

    async def refuse(record: Record) -> None:
        raise DocumentError("too_large", "the result is 20000 bytes, over max_request_bytes")

    item.on_complete = refuse
    assert await pipeline.process(item) == "too_large"
    assert acks.failed["big"]["reason"] == "too_large"
    assert "max_request_bytes" in acks.failed["big"]["message"]
    assert acks.failed["big"]["sha256"] is not None


async def test_a_result_that_cannot_be_written_becomes_the_documents_failure(
    pipeline: DocumentPipeline, finished: list[tuple[str, str]], acks: Acks
) -> None:
    # The sink refuses this one record (it cannot be encoded, or its name is refused): the document
    # fails with that reason, its input is acknowledged, and nothing is fatal.
    item = acks.item("e.txt")

    async def refuse(record: Record) -> None:
        raise DocumentError("internal_error", "its record cannot be encoded as JSON")

    item.on_complete = refuse
    assert await pipeline.process(item) == "internal_error"
    assert acks.failed["e.txt"]["reason"] == "internal_error"
    assert "cannot be encoded" in acks.failed["e.txt"]["message"]
    assert finished == [("e.txt", "internal_error")]


async def test_a_failure_record_that_cannot_be_written_is_replaced_by_a_minimal_one(
    pipeline: DocumentPipeline, acks: Acks
) -> None:
    item = acks.item("f.txt", b"")
    written: list[Record] = []

    async def fussy(record: Record) -> None:
        if record["metadata"]:
            raise DocumentError("internal_error", "its record cannot be encoded as JSON")
        written.append(record)

    item.on_fail = fussy
    assert await pipeline.process(item) == "empty"
    (record,) = written
    assert (record["id"], record["reason"], record["metadata"]) == ("f.txt", "empty", {})
    assert "could not be written" in record["message"]


# -- profiles --------------------------------------------------------------------------------------


def _documents(profile: str, outcome: str) -> float:
    """docsumd_profile_documents_total{profile,outcome}, 0 when the series does not exist."""
    return sum(
        sample.value
        for metric in PROFILE_DOCUMENTS.collect()
        for sample in metric.samples
        if sample.name.endswith("_total") and sample.labels == {"profile": profile, "outcome": outcome}
    )


async def test_the_document_chooses_its_profile_over_its_sources(
    pipeline: DocumentPipeline, engine: FakeEngine, acks: Acks
) -> None:
    brief = pipeline.summarizer.profiles.get("brief")
    assert await pipeline.process(acks.item("default.txt")) == OK
    assert await pipeline.process(acks.item("source.txt", profile="lively")) == OK
    assert await pipeline.process(acks.item("own.txt", options={"profile": "brief"}, profile="lively")) == OK
    records = acks.completed
    assert records["default.txt"]["profile"] == "default"
    assert records["source.txt"]["profile"] == "lively"
    assert records["own.txt"]["profile"] == "brief"
    assert records["own.txt"]["profile_version"] == brief.version
    assert records["own.txt"]["style"] == "bullets"  # the brief's default style
    # Each request carries its profile's wording and sampling.
    system = {call.doc_id: call.prompt for call in engine.calls}
    prefix, _ = brief.prompts.template_ids(PromptKind.DOCUMENT, style="bullets", max_tokens=16)
    assert system["own.txt"][: len(prefix)] == prefix
    assert [sampling.temperature for sampling in engine.samplings] == [0.3, 0.9, 0.2]


async def test_an_unknown_profile_fails_the_document_with_invalid_options(
    pipeline: DocumentPipeline, engine: FakeEngine, acks: Acks
) -> None:
    before = _documents("lively", "invalid_options")
    outcome = await pipeline.process(acks.item("odd.txt", options={"profile": "poem"}, profile="lively"))
    assert outcome == "invalid_options"
    failure = acks.failed["odd.txt"]
    assert failure["message"] == "unknown profile 'poem'; this daemon has: default, brief, lively"
    assert engine.calls == []
    # Counted under the source's profile: labels are only ever the config's names.
    assert _documents("lively", "invalid_options") == before + 1
    labels = {s.labels["profile"] for m in PROFILE_DOCUMENTS.collect() for s in m.samples}
    assert "poem" not in labels


@pytest.mark.parametrize(
    ("options", "label"),
    [
        ({"max_summary_tokens": 4096}, "lively"),  # the source's profile, chosen: its length is refused
        ({"profile": "brief", "max_summary_tokens": 4096}, "brief"),  # its own choice
        ({"profile": "poem"}, "lively"),  # no profile of the config's: the source's
    ],
)
async def test_a_document_failed_by_its_options_counts_under_the_profile_it_got(
    pipeline: DocumentPipeline, acks: Acks, options: Any, label: str
) -> None:
    before = _documents(label, "invalid_options")
    assert (
        await pipeline.process(acks.item("long.txt", options=options, profile="lively")) == "invalid_options"
    )
    assert _documents(label, "invalid_options") == before + 1


async def test_a_document_cannot_bring_its_own_instruction(pipeline: DocumentPipeline, acks: Acks) -> None:
    outcome = await pipeline.process(acks.item("sneaky.txt", options={"instruction": "Write a poem."}))
    assert outcome == "invalid_options"
    assert "instruction" in acks.failed["sneaky.txt"]["message"]


def test_every_series_the_dashboard_queries_exists_at_0_from_the_start(
    engine: FakeEngine, tokenizer: Any
) -> None:
    """A profile without a schema, never used: its structured series are 0, not missing (the
    dashboard's panels showed "no data" until a schema profile's first document); every kind of
    engine request too."""
    from prometheus_client import REGISTRY

    name = "prose-profile-never-used"
    config = Config(
        engine=EngineConfig(model="unused", max_model_len=1024),
        summary=SummaryConfig(max_summary_tokens=16),
        profiles={name: ProfileConfig()},
    )
    profiles = build_profiles(config, tokenizer)
    assert profiles.get(name).output.schema is None
    admission = Admission(AdmissionLimits(max_requests=8, max_tokens=10**6))
    summarizer = Summarizer(engine, tokenizer, config.summary, profiles=profiles, admission=admission)
    DocumentPipeline(summarizer, model_name="tiny", reader=DocumentReader(max_input_bytes=1 << 20))
    for outcome in ("valid", "retried", "invalid"):
        labels = {"profile": name, "outcome": outcome}
        assert REGISTRY.get_sample_value("docsumd_structured_outputs_total", labels) == 0.0
    for family in ("docsumd_structured_seconds_total", "docsumd_structured_tokens_total"):
        assert REGISTRY.get_sample_value(family, {"profile": name}) == 0.0
    for kind in PromptKind:
        assert REGISTRY.get_sample_value("docsumd_engine_requests_total", {"kind": kind.value}) is not None
    # The grounding series of every kind, before any summary was checked.
    for family in (
        "docsumd_grounding_checked_summaries_total",
        "docsumd_grounding_flagged_summaries_total",
        "docsumd_grounding_retries_total",
        "docsumd_grounding_seconds_total",
    ):
        assert REGISTRY.get_sample_value(family, {"profile": name}) == 0.0
    for grounding_kind in Kind:
        labels = {"profile": name, "kind": grounding_kind.value}
        assert REGISTRY.get_sample_value("docsumd_grounding_items_total", labels) == 0.0
        assert REGISTRY.get_sample_value("docsumd_grounding_unsupported_total", labels) == 0.0
