"""The service's own logic with a fake engine: in-flight bound, error kinds, drain, fatal stop.

A narrow unit test of our scheduling and error handling. The real engine is exercised end to end
in tests/e2e; here the engine is replaced so that timing and failures are under the test's control.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from daemon.config import (
    Config,
    EngineConfig,
    FolderSourceConfig,
    MetricsConfig,
    ServiceConfig,
    SummaryConfig,
)
from daemon.errors import EngineDeadError, FatalError, RequestError
from daemon.folder.files import FilesSource
from daemon.folder.sink import FolderSink
from daemon.folder.source import FolderSource
from daemon.records import parse_request_id
from daemon.service import Service
from tests.doubles.engine import FakeEngine


async def _until(condition: Callable[[], bool]) -> None:
    """Wait for ``condition`` with a deadline that a loaded machine cannot reach, not for a while."""
    async with asyncio.timeout(10):
        while not condition():  # noqa: ASYNC110 - the fake engine has no event for it
            await asyncio.sleep(0.01)


@pytest.fixture
def fake_engine() -> FakeEngine:
    return FakeEngine(delay=0.05)


def _config(tmp_path: Path, **service: Any) -> Config:
    return Config(
        engine=EngineConfig(model=str(tmp_path / "model"), max_model_len=1024),
        summary=SummaryConfig(max_summary_tokens=16),
        metrics=MetricsConfig(enabled=False),
        service=ServiceConfig(status_interval_seconds=60, **service),
    )


def _files(tmp_path: Path, count: int) -> list[Path]:
    folder = tmp_path / "in"
    folder.mkdir(exist_ok=True)
    paths = []
    for index in range(count):
        path = folder / f"doc-{index:02d}.txt"
        path.write_text(f"Document number {index}. " * 20)
        paths.append(path)
    return paths


@pytest.fixture
def make_service(fake_engine: FakeEngine, tokenizer: Any) -> Callable[..., tuple[Service, Path]]:
    """A service over ``paths`` (a files source) with the fake engine and the tiny tokenizer passed in."""

    def make(tmp_path: Path, paths: list[Path], **service: Any) -> tuple[Service, Path]:
        outbox = tmp_path / "out"
        source = FilesSource(paths, FolderSink(outbox, outbox), max_input_bytes=1 << 20)
        config = _config(tmp_path, **service)
        return Service(config, engine=fake_engine, tokenizer=tokenizer, sources=[source]), outbox

    return make


async def test_in_flight_documents_never_exceed_the_bound(
    tmp_path: Path, fake_engine: FakeEngine, make_service: Callable[..., tuple[Service, Path]]
) -> None:
    service, outbox = make_service(tmp_path, _files(tmp_path, 20), max_inflight_documents=3)
    await asyncio.wait_for(service.run(), 30)
    assert fake_engine.max_active == 3
    assert len(list(outbox.glob("*.summary.json"))) == 20
    assert service.stats.succeeded == 20
    assert fake_engine.stopped


async def test_request_error_fails_one_document_and_the_rest_go_on(
    tmp_path: Path, fake_engine: FakeEngine, make_service: Callable[..., tuple[Service, Path]]
) -> None:
    fake_engine.failures["doc-03.txt"] = RequestError("refused")
    fake_engine.failures["doc-05.txt"] = RuntimeError("a bug in our code")
    service, outbox = make_service(tmp_path, _files(tmp_path, 8))
    await asyncio.wait_for(service.run(), 30)
    assert len(list(outbox.glob("*.summary.json"))) == 6
    assert json.loads((outbox / "doc-03.txt.error.json").read_text())["reason"] == "engine_error"
    assert json.loads((outbox / "doc-05.txt.error.json").read_text())["reason"] == "internal_error"
    assert (service.stats.succeeded, service.stats.failed) == (6, 2)


async def test_dead_engine_is_fatal_and_acknowledges_nothing_more(
    tmp_path: Path, fake_engine: FakeEngine, make_service: Callable[..., tuple[Service, Path]]
) -> None:
    # doc-00 finds the engine dead while the five others are still running: they must be cancelled,
    # not completed, and nothing at all acknowledged.
    fake_engine.delay = 10.0
    fake_engine.delays["doc-00.txt"] = 0.0

    async def dies_once_all_six_run(request_id: str) -> None:
        if parse_request_id(request_id).doc_id == "doc-00.txt":
            await _until(lambda: fake_engine.active == 6)

    fake_engine.behaviour = dies_once_all_six_run
    fake_engine.failures["doc-00.txt"] = EngineDeadError("gone")
    paths = _files(tmp_path, 6)
    service, outbox = make_service(tmp_path, paths, max_inflight_documents=6)
    with pytest.raises(FatalError, match="gone"):
        await asyncio.wait_for(service.run(), 30)
    assert not list(outbox.glob("*.json"))
    assert sorted(fake_engine.cancelled_docs) == sorted(p.name for p in paths[1:])
    assert fake_engine.stopped


async def test_drain_deadline_cancels_unfinished_documents(
    tmp_path: Path, fake_engine: FakeEngine, make_service: Callable[..., tuple[Service, Path]]
) -> None:
    fake_engine.delay = 5.0
    service, outbox = make_service(tmp_path, _files(tmp_path, 4), drain_seconds=0.2)
    run = asyncio.create_task(service.run())
    await _until(lambda: fake_engine.active == 4)  # every document in the engine
    service.request_stop()
    await asyncio.wait_for(run, 10)  # returns normally: a drained stop is not an error
    assert sorted(fake_engine.cancelled_docs) == [f"doc-{i:02d}.txt" for i in range(4)]
    assert not list(outbox.glob("*.json"))


async def test_second_stop_request_cuts_the_drain_short(
    tmp_path: Path, fake_engine: FakeEngine, make_service: Callable[..., tuple[Service, Path]]
) -> None:
    fake_engine.delay = 5.0
    service, _ = make_service(tmp_path, _files(tmp_path, 2), drain_seconds=60)
    run = asyncio.create_task(service.run())
    await _until(lambda: fake_engine.active == 2)
    service.request_stop()
    await asyncio.sleep(0.2)
    assert not run.done()  # draining, within its 60 s deadline
    service.request_stop()
    await asyncio.wait_for(run, 5)
    assert len(fake_engine.cancelled_docs) == 2


async def test_generous_drain_lets_in_flight_documents_finish(
    tmp_path: Path, fake_engine: FakeEngine, make_service: Callable[..., tuple[Service, Path]]
) -> None:
    fake_engine.delay = 0.5
    service, outbox = make_service(tmp_path, _files(tmp_path, 5), drain_seconds=30)
    run = asyncio.create_task(service.run())
    await _until(lambda: len({call.doc_id for call in fake_engine.calls}) == 5)  # all taken in
    service.request_stop()
    await asyncio.wait_for(run, 10)
    assert not fake_engine.cancelled
    assert len(list(outbox.glob("*.summary.json"))) == 5


# -- the folder source's crash-loop guard, through the service ---------------------------------------


def _folder_service(
    tmp_path: Path, engine: FakeEngine, tokenizer: Any, **service: Any
) -> tuple[Service, FolderSourceConfig]:
    folder = FolderSourceConfig(
        inbox=tmp_path / "inbox",
        outbox=tmp_path / "outbox",
        done=tmp_path / "done",
        failed=tmp_path / "failed",
        settle_seconds=0.0,
    )
    source = FolderSource(folder, FolderSink(folder.outbox, folder.failed), max_input_bytes=1 << 20)
    config = _config(tmp_path, **service)
    return Service(config, engine=engine, tokenizer=tokenizer, sources=[source]), folder


async def test_a_document_that_kills_the_engine_is_set_aside_after_three_fatal_exits(
    tmp_path: Path, fake_engine: FakeEngine, tokenizer: Any
) -> None:
    fake_engine.failures["poison.txt"] = EngineDeadError("the engine died on this document")
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "poison.txt").write_text("A document that takes the engine down. " * 5)
    for _ in range(3):  # each start dies on it: a fatal exit, with the input in flight
        service, folder = _folder_service(tmp_path, fake_engine, tokenizer)
        with pytest.raises(FatalError, match="died on this document"):
            await asyncio.wait_for(service.run(), 30)
    (inbox / "fine.txt").write_text("An ordinary notice about the delivery of goods. " * 5)
    service, folder = _folder_service(tmp_path, fake_engine, tokenizer)
    run = asyncio.create_task(service.run())
    for _ in range(200):
        if (folder.done / "fine.txt").exists():
            break
        await asyncio.sleep(0.05)
    service.request_stop()
    await asyncio.wait_for(run, 30)  # the fourth start lives
    record = json.loads((folder.failed / "poison.txt.error.json").read_text())
    assert record["reason"] == "crash_loop"
    assert (folder.failed / "poison.txt").exists()
    assert (folder.outbox / "fine.txt.summary.json").exists()


async def test_a_clean_stop_gives_unfinished_folder_inputs_back_to_the_inbox(
    tmp_path: Path, fake_engine: FakeEngine, tokenizer: Any
) -> None:
    fake_engine.delay = 5.0
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    for index in range(3):
        (inbox / f"doc-{index}.txt").write_text(f"Document {index}. " * 20)
    service, folder = _folder_service(tmp_path, fake_engine, tokenizer, drain_seconds=0.2)
    run = asyncio.create_task(service.run())
    for _ in range(200):
        if len(fake_engine.cancelled) + fake_engine.active >= 3:
            break
        await asyncio.sleep(0.05)
    service.request_stop()
    await asyncio.wait_for(run, 10)
    assert sorted(path.name for path in inbox.iterdir()) == ["doc-0.txt", "doc-1.txt", "doc-2.txt"]
    assert not list(folder.done.iterdir())
