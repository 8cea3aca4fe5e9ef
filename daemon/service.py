"""The service: lifecycle, intake and drain of sources -> pipeline -> sinks, under one owner.

:class:`Service` starts the metrics endpoint, the engine and the sources (built by
:mod:`daemon.factory` unless passed in); pulls work items from every source while fewer than
``inflight_documents`` are in flight; hands each to the :class:`~daemon.pipeline.DocumentPipeline`
in its own task; and on :meth:`request_stop` drains: it stops pulling, gives in-flight documents
``drain_seconds`` to finish, cancels the rest (their vLLM requests are aborted and their inputs stay
unacknowledged), and shuts the engine down.

With an engine of servers that can all be down at once (the remote mode,
:class:`~daemon.contracts.FleetEngine`), the service takes no new input while none takes work
(Kafka partitions are paused once the consumer's buffer is full, no more files are claimed), reports
itself unhealthy on ``/healthz``, and waits: documents in flight wait for a server too, none fails for
it. The systemd watchdog is still fed meanwhile: a restart cannot bring remote servers back.

Errors (:mod:`daemon.errors`): the pipeline settles per-document errors itself. An
:class:`~daemon.errors.EngineDeadError` or :class:`~daemon.errors.SinkError` is fatal: intake stops,
nothing more is acknowledged, and :meth:`run` raises :class:`~daemon.errors.FatalError` so the
process exits non-zero and its supervisor restarts it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, Final

from daemon.cache import SummaryCache
from daemon.config import Config, ExtractConfig, LimitsConfig
from daemon.contracts import (
    CachingEngine,
    EngineClient,
    FleetEngine,
    PausableSource,
    ReleasingSource,
    Source,
    TroubledSource,
)
from daemon.document.reader import DocumentReader
from daemon.document.sandbox.pool import SandboxLimits
from daemon.document.types import ExtractLimits
from daemon.engine.admission import AdmissionControl, admission_for_engine, admission_limits
from daemon.errors import EngineDeadError, FatalError, SinkError
from daemon.factory import build_cache, build_engine, build_sources
from daemon.intake.byte_budget import ByteBudget, Holding
from daemon.intake.progress import ProgressWatch
from daemon.models.files import load_tokenizer
from daemon.ops.logging import get_logger
from daemon.ops.metrics import ENGINE_STARTING, ENGINE_UP, INFLIGHT, QUEUED, READY, MetricsServer
from daemon.ops.notify import SystemdNotifier
from daemon.pipeline import OK, DocumentPipeline, OnFinished
from daemon.summary.chunking import prepare_tokenizer
from daemon.summary.profiles import Profiles, build_profiles
from daemon.summary.prompts import ChatTokenizer
from daemon.summary.summarizer import Summarizer
from daemon.work import WorkItem

log = get_logger(__name__)

PAD_PREFIXES_TO_BLOCKS: Final = False
"""Off: the newline padding between the instructions and the document derailed the demo model's
bullet summaries (tests/e2e/test_real_model.py); it stays off until its quality is measured."""

_ENGINE_POLL_SECONDS = 2.0


def extract_limits(limits: LimitsConfig, section: ExtractConfig) -> ExtractLimits:
    """What one extraction may cost under a config's ``[limits]`` and ``[extract]`` (the text must also
    fit ``limits.max_input_bytes``)."""
    return ExtractLimits(
        max_pages=section.max_pages,
        max_output_chars=section.max_output_chars,
        max_text_bytes=limits.max_input_bytes,
        max_expansion_ratio=section.max_expansion_ratio,
        expansion_floor_bytes=section.expansion_floor_bytes,
        max_unpacked_bytes=section.max_unpacked_bytes,
        max_compression_ratio=section.max_compression_ratio,
    )


def build_reader(limits: LimitsConfig, section: ExtractConfig) -> DocumentReader:
    """The document reader of a config's ``[limits]`` and ``[extract]``: its extraction limits, or no
    extraction when it is off."""
    sandbox = SandboxLimits(
        workers=section.workers,
        memory_bytes=section.memory_mib * 1024 * 1024,
        cpu_seconds=section.cpu_seconds,
        timeout_seconds=section.timeout_seconds,
        max_tasks_per_worker=section.max_tasks_per_worker,
    )
    return DocumentReader(
        max_input_bytes=limits.max_input_bytes,
        sandbox=sandbox if section.enabled else None,
        extract=extract_limits(limits, section),
    )


class Stats:
    """Counters for the periodic status line and the closing summary."""

    def __init__(self) -> None:
        self.started_at = time.monotonic()
        self.succeeded = 0
        self.failed = 0

    @property
    def finished(self) -> int:
        """Documents with a result or a failure record."""
        return self.succeeded + self.failed


class Service:
    """Owns every long-lived component of the daemon. Use :meth:`run`; stop it with :meth:`request_stop`."""

    def __init__(
        self,
        config: Config,
        *,
        engine: EngineClient | None = None,
        tokenizer: ChatTokenizer | None = None,
        profiles: Profiles | None = None,
        sources: list[Source] | None = None,
        on_finished: OnFinished | None = None,
        notifier: SystemdNotifier | None = None,
        reader: DocumentReader | None = None,
        cache: SummaryCache | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Everything not passed in is built from ``config``: the vLLM ``engine``, the served model's
        ``tokenizer``, the ``profiles`` with their context budgets
        (:func:`~daemon.summary.profiles.build_profiles`, checked before the engine starts) and the
        ``sources`` (:func:`~daemon.factory.build_sources`). ``on_finished(item, outcome)`` is told
        of each finished document (outcome ``ok`` or a failure reason), e.g. for a progress bar;
        ``notifier`` tells systemd of readiness, the drain and the status, and pings its watchdog;
        ``reader`` reads every input's bytes (:class:`~daemon.document.reader.DocumentReader`, whose
        extraction workers start with the first document that needs them); ``cache``: the summary
        cache (:mod:`daemon.cache`), which the service starts and stops; built from ``[cache]`` once
        the engine is up when the service builds its own engine, else none unless passed in;
        ``clock``: the monotonic time the stall check reads (:mod:`daemon.intake.progress`)."""
        self.config = config
        self.cache = cache
        self._build_cache = engine is None and cache is None
        self.engine: EngineClient = engine if engine is not None else build_engine(config.engine)
        self.sources: list[Source] = sources if sources is not None else build_sources(config)
        self.reader = reader or build_reader(config.limits, config.extract)
        self._tokenizer = tokenizer
        self._profiles = profiles
        self._on_finished = on_finished
        self.notifier = notifier or SystemdNotifier(None)
        self.metrics = (
            MetricsServer(config.metrics.host, config.metrics.port, healthy=self.healthy, ready=self.ready)
            if config.metrics.enabled
            else None
        )
        self.stats = Stats()
        self._pipeline: DocumentPipeline | None = None
        self._stop_requested = asyncio.Event()
        self._drain_cut = asyncio.Event()
        self._slots = asyncio.Semaphore(config.inflight_documents)
        self._inflight: set[asyncio.Task[None]] = set()
        self._fatal: BaseException | None = None
        self._ready = False
        self._bytes = ByteBudget(config.limits.max_inflight_bytes)
        self._progress = ProgressWatch(config.service.stall_seconds, clock=clock)
        self.notifier.watch_health(self._alive)
        self._drained = False  # stopped cleanly: drained with no fatal error
        self._intake_paused = False

    # -- health ----------------------------------------------------------------------------------

    def healthy(self) -> bool:
        """Process alive, engine not dead (a starting engine counts as healthy), some server taking
        work (remote mode), and work moving: with documents in flight or waiting, one finished or an
        engine request completed within ``service.stall_seconds`` (:mod:`daemon.intake.progress`)."""
        return self._engine_problem() is None and self._alive()

    def _alive(self) -> bool:
        """:meth:`healthy`, except that servers all down is not a failure here: what the systemd
        watchdog is fed on (restarting docsumd cannot bring remote servers back), and no stall while
        they are down (nothing can progress)."""
        if self._fatal is not None or not (self.engine.is_running or not self._ready):
            return False
        if any(isinstance(source, TroubledSource) and source.problem for source in self.sources):
            return False
        has_work = (bool(self._inflight) or self.backlog > 0) and self._engine_problem() is None
        return not (self._ready and self._progress.stalled(has_work=has_work))

    def _engine_problem(self) -> str | None:
        """Why the engine serves no request now although it runs (every remote server down), or None."""
        return self.engine.problem if isinstance(self.engine, FleetEngine) else None

    def ready(self) -> bool:
        """Engine warm, sources running, not draining."""
        return self._ready and self.healthy() and not self._stop_requested.is_set()

    @property
    def backlog(self) -> int:
        """Documents waiting at the sources, not yet taken in."""
        return sum(source.backlog for source in self.sources)

    def request_stop(self) -> None:
        """Begin a graceful drain (the entry point's signal handler calls this).

        A second request while draining cuts the drain short: unfinished documents are aborted and
        stay unacknowledged.
        """
        if not self._stop_requested.is_set():
            log.info("stop requested: draining", inflight=len(self._inflight))
            self.notifier.stopping(f"draining {len(self._inflight)} documents")
            self._stop_requested.set()
        elif not self._drain_cut.is_set():
            log.warning("second stop request: cutting the drain short")
            self._drain_cut.set()

    # -- lifecycle -------------------------------------------------------------------------------

    async def run(self) -> None:
        """Run until a stop is requested (returns) or a fatal error (raises :class:`FatalError`)."""
        try:
            await self.notifier.start()
            self.notifier.status("starting the engine")
            if self.metrics is not None:
                try:
                    await self.metrics.start()
                except OSError as exc:
                    where = f"{self.metrics.host}:{self.metrics.port}"
                    raise FatalError(f"cannot serve metrics on {where}: {exc.strerror or exc}") from exc
            tokenizer, profiles = await self._prepare_profiles()
            await self.reader.start()
            await self._start_engine(tokenizer, profiles)
            if self._stop_requested.is_set():
                return
            for source in self.sources:
                await source.start()
            if isinstance(self.engine, FleetEngine):
                self.engine.on_change(self._pause_or_resume_intake)
                self._pause_or_resume_intake()
            self._ready = True
            self._progress.progressed()  # the stall clock starts now, not at the engine's start
            READY.set(1)
            QUEUED.set(self.backlog)
            log.info("docsumd ready", inflight_limit=self.config.inflight_documents)
            self.notifier.ready(f"ready; backlog {self.backlog}")
            async with asyncio.TaskGroup() as group:
                pumps = [group.create_task(self._pump(source), name="pump") for source in self.sources]
                watchdog = group.create_task(self._watch_engine(), name="engine-watch")
                status = group.create_task(self._log_status(), name="status")
                await self._until_stop_or_exhausted(pumps)
                self._ready = False
                READY.set(0)
                for task in (*pumps, watchdog, status):
                    task.cancel()
            await self._drain()
            self._drained = self._fatal is None
        finally:
            self._ready = False
            READY.set(0)
            await self._shutdown()
            await self.notifier.stop()
        if self._fatal is not None:
            raise FatalError(str(self._fatal)) from self._fatal

    async def _until_stop_or_exhausted(self, pumps: list[asyncio.Task[None]]) -> None:
        """Wait for a stop request, or for every source to run out (finite sources) and their work."""
        stop = asyncio.create_task(self._stop_requested.wait())
        try:
            while not stop.done():
                running = {pump for pump in pumps if not pump.done()}
                if not running and not self._inflight:
                    return
                await asyncio.wait({stop, *running, *self._inflight}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()

    async def _prepare_profiles(self) -> tuple[ChatTokenizer, Profiles]:
        """The tokenizer and the profiles with their context budgets, before the engine starts: a
        configuration whose budget cannot work raises :class:`~daemon.errors.ConfigError` in seconds,
        not after minutes of engine start-up."""
        tokenizer: ChatTokenizer
        if self._tokenizer is not None:
            tokenizer = self._tokenizer
        else:
            tokenizer = await asyncio.to_thread(load_tokenizer, self.config.engine)
        await asyncio.to_thread(prepare_tokenizer, tokenizer)
        profiles = self._profiles or build_profiles(self.config, tokenizer)
        for profile in profiles:
            log.info(
                "context budget", profile=profile.name, version=profile.version, **profile.budget.as_dict()
            )
        return tokenizer, profiles

    async def _start_engine(self, tokenizer: ChatTokenizer, profiles: Profiles) -> None:
        ENGINE_STARTING.set(1)
        try:
            await self._bring_up_engine(tokenizer, profiles)
        finally:
            ENGINE_STARTING.set(0)

    async def _bring_up_engine(self, tokenizer: ChatTokenizer, profiles: Profiles) -> None:
        start = asyncio.create_task(self.engine.start(), name="engine-start")
        stop = asyncio.create_task(self._stop_requested.wait(), name="stop-wait")
        try:
            await asyncio.wait({start, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
        if not start.done():
            # Stop asked for during start-up: a start takes minutes on a GPU host, longer than the
            # unit's TimeoutStopSec. Cancel it: the engine kills the processes it had started and
            # ends its build (daemon.engine.vllm_engine.Engine._abandon_start); run() then stops with exit 0.
            log.info("stop requested while the engine starts: abandoning the start")
            start.cancel()
            await asyncio.wait({start})
            if not start.cancelled() and (exc := start.exception()) is not None:
                log.info("the abandoned engine start ended with an error", error=str(exc))
            return
        try:
            await start
        except EngineDeadError as exc:
            raise FatalError(str(exc)) from exc
        ENGINE_UP.set(1)
        if self._build_cache:
            self.cache = await build_cache(self.config)
        if self.cache is not None:
            await self.cache.start()
        self._pipeline = self._build_pipeline(tokenizer, self._aligned_profiles(tokenizer, profiles))

    def _aligned_profiles(self, tokenizer: ChatTokenizer, profiles: Profiles) -> Profiles:
        """The profiles again, with each prompt's shared prefix padded to the running engine's KV block
        size where it knows one (:class:`~daemon.summary.prompts.PromptBuilder`); profiles passed in
        are kept as they are."""
        block = self.engine.cache_block_tokens if isinstance(self.engine, CachingEngine) else None
        if not PAD_PREFIXES_TO_BLOCKS or self._profiles is not None or not block:
            return profiles
        aligned = build_profiles(self.config, tokenizer, cache_block_tokens=block)
        log.info("prompt prefixes aligned to the engine's KV blocks", block_tokens=block)
        return aligned

    def _admission(self) -> AdmissionControl:
        """Admission on the running engine (sized from its KV cache); for a fleet of servers, sized
        for those that take work, and resized as they come and go."""
        config, engine = self.config, self.engine
        engines = engine.engines if isinstance(engine, FleetEngine) else 1
        admission = admission_for_engine(
            config.admission, config.engine, kv_cache_tokens=engine.kv_cache_tokens, engines=engines
        )
        if isinstance(engine, FleetEngine):

            def resize() -> None:
                admission.resize(
                    admission_limits(
                        config.admission,
                        config.engine,
                        kv_cache_tokens=engine.kv_cache_tokens,
                        engines=engine.engines,
                    )
                )

            engine.on_change(resize)
        return admission

    def _build_pipeline(self, tokenizer: ChatTokenizer, profiles: Profiles) -> DocumentPipeline:
        """The per-document path on the running engine (admission sizes itself from its KV cache)."""
        config = self.config
        admission = self._admission()
        summarizer = Summarizer(
            self._progress.watching(self.engine),
            tokenizer,
            config.summary,
            profiles=profiles,
            admission=admission,
            cache=self.cache,
        )
        return DocumentPipeline(
            summarizer,
            model_name=config.engine.model_name,
            reader=self.reader,
            on_finished=self._on_finished,
        )

    async def _shutdown(self) -> None:
        for source in self.sources:
            if isinstance(source, ReleasingSource):
                if self._drained:
                    await source.release_unsettled()  # a clean stop: not counted against its inputs
                elif isinstance(self._fatal, SinkError):
                    await source.uncount_unsettled()  # the outputs failed, not the inputs
            await source.stop()
        if self.cache is not None:
            await self.cache.stop()
        await self.engine.stop()
        ENGINE_UP.set(0)
        await self.reader.stop()
        if self.metrics is not None:
            await self.metrics.stop()
        elapsed = time.monotonic() - self.stats.started_at
        log.info(
            "docsumd stopped",
            succeeded=self.stats.succeeded,
            failed=self.stats.failed,
            uptime_s=round(elapsed, 1),
        )

    async def _drain(self) -> None:
        if not self._inflight:
            return
        deadline = self.config.service.drain_seconds
        log.info("draining in-flight documents", inflight=len(self._inflight), deadline_s=deadline)
        loop = asyncio.get_running_loop()
        end = loop.time() + deadline
        while self._inflight and not self._drain_cut.is_set() and (remaining := end - loop.time()) > 0:
            cut = asyncio.create_task(self._drain_cut.wait())
            try:
                await asyncio.wait(
                    {*self._inflight, cut}, timeout=remaining, return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                cut.cancel()
        pending = set(self._inflight)
        if pending:
            log.warning(
                "drain deadline passed; aborting unfinished documents (their inputs stay unacknowledged)",
                aborted=len(pending),
            )
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

    def _fail_fatally(self, exc: BaseException) -> None:
        if self._fatal is None:
            self._fatal = exc
            log.error(
                "fatal error: stopping intake, leaving unfinished inputs unacknowledged", error=str(exc)
            )
        ENGINE_UP.set(1 if self.engine.is_running else 0)
        # Nothing more may be acknowledged: cancel in-flight work now instead of draining it.
        for task in self._inflight:
            task.cancel()
        self._stop_requested.set()

    # -- work ------------------------------------------------------------------------------------

    async def _pump(self, source: Source) -> None:
        """Pull items from one source while there is room in flight."""
        items = source.items()
        try:
            while not self._stop_requested.is_set():
                await self._until_engine_available()
                await self._slots.acquire()
                try:
                    item = await anext(items)
                    # A known size waits for its bytes here, so nothing more is pulled meanwhile (a
                    # Kafka message's text is in memory already); an unknown one once it is read.
                    held = await self._bytes.reserve(item.size)
                except BaseException:
                    self._slots.release()
                    raise
                task = asyncio.create_task(self._process(item, held), name=f"doc:{item.id}")
                self._inflight.add(task)
                INFLIGHT.set(len(self._inflight))
                task.add_done_callback(self._on_done)
        except StopAsyncIteration:
            return
        except Exception as exc:
            self._fail_fatally(exc)
        finally:
            await _aclose(items)

    def _pause_or_resume_intake(self) -> None:
        """Sources take no input in while no engine server takes work (:class:`PausableSource`);
        called whenever a server comes or goes."""
        problem = self._engine_problem()
        paused = problem is not None
        if paused != self._intake_paused:
            self._intake_paused = paused
            if paused:
                log.warning("intake paused: no engine server takes work", problem=problem)
                self.notifier.status(f"intake paused: {problem}")
            else:
                log.info("intake resumed: an engine server takes work again")
        for source in self.sources:
            if isinstance(source, PausableSource):
                if paused:
                    source.pause_intake()
                else:
                    source.resume_intake()

    async def _until_engine_available(self) -> None:
        """Pull nothing from a source while the engine serves no request (every remote server down)."""
        engine = self.engine
        if isinstance(engine, FleetEngine) and engine.problem is not None:
            await engine.wait_available()

    def _on_done(self, task: asyncio.Task[None]) -> None:
        self._inflight.discard(task)
        self._slots.release()
        INFLIGHT.set(len(self._inflight))
        QUEUED.set(self.backlog)
        if not task.cancelled() and (exc := task.exception()) is not None:
            self._fail_fatally(exc)

    async def _process(self, item: WorkItem, held: Holding) -> None:
        assert self._pipeline is not None
        try:
            if item.size is None:
                item = dataclasses.replace(item, load=held.reading(item.load))
            outcome = await self._pipeline.process(item, room=held.hold_text)
        finally:
            held.release()
        self._progress.progressed()
        if outcome == OK:
            self.stats.succeeded += 1
        else:
            self.stats.failed += 1

    # -- background ------------------------------------------------------------------------------

    async def _watch_engine(self) -> None:
        """Notice an engine that died while no request was running."""
        # Polling: vLLM offers no awaitable for "engine died"; requests in flight notice it sooner.
        while self.engine.is_running:  # noqa: ASYNC110
            await asyncio.sleep(_ENGINE_POLL_SECONDS)
        self._fail_fatally(EngineDeadError("the vLLM engine is no longer running"))

    async def _log_status(self) -> None:
        """One line every status_interval_seconds: done, rate, backlog."""
        interval = self.config.service.status_interval_seconds
        last_finished, last_at = 0, time.monotonic()
        while True:
            await asyncio.sleep(interval)
            now = time.monotonic()
            backlog = self.backlog
            QUEUED.set(backlog)
            rate = (self.stats.finished - last_finished) / (now - last_at)
            self.notifier.status(
                f"{self.stats.succeeded} summarized, {self.stats.failed} failed, {rate:.2f} docs/s, "
                f"{len(self._inflight)} in flight, backlog {backlog}"
            )
            log.info(
                "status",
                succeeded=self.stats.succeeded,
                failed=self.stats.failed,
                docs_per_s=round(rate, 3),
                inflight=len(self._inflight),
                backlog=backlog,
            )
            last_finished, last_at = self.stats.finished, now


async def _aclose(iterator: AsyncIterator[Any]) -> None:
    aclose = getattr(iterator, "aclose", None)
    if aclose is not None:
        with contextlib.suppress(Exception):
            await aclose()
