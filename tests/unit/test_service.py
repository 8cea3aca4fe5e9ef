"""The service's own logic with a fake engine: in-flight bound, error kinds, drain, fatal stop.

A narrow unit test of our scheduling and error handling. The real engine is exercised end to end
in tests/e2e; here the engine is replaced so that timing and failures are under the test's control.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

import daemon.service as service_module
from daemon.config import Config, EngineConfig, MetricsConfig, ServiceConfig, SummaryConfig
from daemon.contracts import Generation
from daemon.errors import EngineDeadError, FatalError, RequestError
from daemon.service import Service
from daemon.sinks.folder import FolderSink
from daemon.sources.files import FilesSource


class FakeEngine:
    """Stands in for daemon.engine.Engine; behaviour per document is set by the test."""

    def __init__(self, *_: Any, **__: Any) -> None:
        self.running = False
        self.concurrent = 0
        self.max_concurrent = 0
        self.cancelled: list[str] = []
        self.delay = 0.05
        self.behaviour: dict[str, BaseException] = {}  # doc id -> exception to raise
        self.delays: dict[str, float] = {}  # doc id -> its own delay
        self.stopped = False
        self.kv_cache_tokens: int | None = None

    @property
    def is_running(self) -> bool:
        return self.running

    async def start(self) -> None:
        self.running = True

    async def stop(self) -> None:
        self.running = False
        self.stopped = True

    async def generate(self, prompt_token_ids: list[int], params: Any, request_id: str) -> Generation:
        doc_id = request_id.rsplit(":", 2)[0]  # DOC:KINDN:HEX
        self.concurrent += 1
        self.max_concurrent = max(self.max_concurrent, self.concurrent)
        try:
            await asyncio.sleep(self.delays.get(doc_id, self.delay))
            if doc_id in self.behaviour:
                raise self.behaviour[doc_id]
        except asyncio.CancelledError:
            self.cancelled.append(doc_id)
            raise
        finally:
            self.concurrent -= 1
        return Generation(
            text="a summary",
            prompt_tokens=len(prompt_token_ids),
            output_tokens=2,
            cached_prompt_tokens=0,
            finish_reason="stop",
            first_token_s=0.01,
            total_s=self.delay,
        )


@pytest.fixture
def fake_engine(monkeypatch: pytest.MonkeyPatch, tokenizer: Any) -> FakeEngine:
    engine = FakeEngine()
    monkeypatch.setattr(service_module, "Engine", lambda *_a, **_k: engine)
    monkeypatch.setattr(service_module, "load_tokenizer", lambda _config: tokenizer)
    return engine


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


def _service(tmp_path: Path, paths: list[Path], **service: Any) -> tuple[Service, Path]:
    outbox = tmp_path / "out"
    source = FilesSource(paths, FolderSink(outbox, outbox), max_input_bytes=1 << 20)
    return Service(_config(tmp_path, **service), sources=[source]), outbox


async def test_in_flight_documents_never_exceed_the_bound(tmp_path: Path, fake_engine: FakeEngine) -> None:
    service, outbox = _service(tmp_path, _files(tmp_path, 20), max_inflight_documents=3)
    await asyncio.wait_for(service.run(), 30)
    assert fake_engine.max_concurrent == 3
    assert len(list(outbox.glob("*.summary.json"))) == 20
    assert service.stats.succeeded == 20
    assert fake_engine.stopped


async def test_request_error_fails_one_document_and_the_rest_go_on(
    tmp_path: Path, fake_engine: FakeEngine
) -> None:
    fake_engine.behaviour["doc-03.txt"] = RequestError("refused")
    fake_engine.behaviour["doc-05.txt"] = RuntimeError("a bug in our code")
    service, outbox = _service(tmp_path, _files(tmp_path, 8))
    await asyncio.wait_for(service.run(), 30)
    assert len(list(outbox.glob("*.summary.json"))) == 6
    assert json.loads((outbox / "doc-03.txt.error.json").read_text())["reason"] == "engine_error"
    assert json.loads((outbox / "doc-05.txt.error.json").read_text())["reason"] == "internal_error"
    assert (service.stats.succeeded, service.stats.failed) == (6, 2)


async def test_dead_engine_is_fatal_and_acknowledges_nothing_more(
    tmp_path: Path, fake_engine: FakeEngine
) -> None:
    # doc-00 finds the engine dead while the five others are still running: they must be cancelled,
    # not completed, and nothing at all acknowledged.
    fake_engine.delay = 2.0
    fake_engine.delays["doc-00.txt"] = 0.05
    fake_engine.behaviour["doc-00.txt"] = EngineDeadError("gone")
    paths = _files(tmp_path, 6)
    service, outbox = _service(tmp_path, paths, max_inflight_documents=6)
    with pytest.raises(FatalError, match="gone"):
        await asyncio.wait_for(service.run(), 30)
    assert not list(outbox.glob("*.json"))
    assert sorted(fake_engine.cancelled) == sorted(p.name for p in paths[1:])
    assert fake_engine.stopped


async def test_drain_deadline_cancels_unfinished_documents(tmp_path: Path, fake_engine: FakeEngine) -> None:
    fake_engine.delay = 5.0
    service, outbox = _service(tmp_path, _files(tmp_path, 4), drain_seconds=0.2)
    run = asyncio.create_task(service.run())
    await asyncio.sleep(0.3)
    service.request_stop()
    await asyncio.wait_for(run, 10)  # returns normally: a drained stop is not an error
    assert sorted(fake_engine.cancelled) == [f"doc-{i:02d}.txt" for i in range(4)]
    assert not list(outbox.glob("*.json"))


async def test_second_stop_request_cuts_the_drain_short(tmp_path: Path, fake_engine: FakeEngine) -> None:
    fake_engine.delay = 5.0
    service, _ = _service(tmp_path, _files(tmp_path, 2), drain_seconds=60)
    run = asyncio.create_task(service.run())
    await asyncio.sleep(0.3)
    service.request_stop()
    await asyncio.sleep(0.2)
    assert not run.done()  # draining, within its 60 s deadline
    service.request_stop()
    await asyncio.wait_for(run, 5)
    assert len(fake_engine.cancelled) == 2


async def test_generous_drain_lets_in_flight_documents_finish(
    tmp_path: Path, fake_engine: FakeEngine
) -> None:
    fake_engine.delay = 0.5
    service, outbox = _service(tmp_path, _files(tmp_path, 5), drain_seconds=30)
    run = asyncio.create_task(service.run())
    await asyncio.sleep(0.2)
    service.request_stop()
    await asyncio.wait_for(run, 10)
    assert not fake_engine.cancelled
    assert len(list(outbox.glob("*.summary.json"))) == 5
