"""The remote engine: docsumd's :class:`~daemon.contracts.EngineClient` over a fleet of servers.

One request (:meth:`RemoteEngine.generate`): its document's endpoint (:mod:`.affinity`), a streamed
completion there (:mod:`.transport`), and what to do when that goes wrong:

* **refused** (503, 429, 502, an in-band 503): the endpoint takes no new document for a jittered
  backoff (at least its ``Retry-After``), and the request is sent again after a jittered wait that
  grows with its refusals, to another endpoint where one is usable; as often as it takes;
* **the endpoint is down** (a refused connection, failed load reads): every request of docsumd in
  flight there is moved at once to the others, not counted against it;
* **lost** after the server took it (stream cut, timeout, a 500 or 504, an in-band 500): sent again
  elsewhere after a wait; the ``max_lost_tries``-th loss fails the document (``engine_error``), since
  a request that kills every server it reaches must not take the fleet down one server at a time;
* **refused for good** (another 4xx): the document fails; a prompt longer than the server's context
  (vLLM's 400 naming ``input_tokens``) as ``too_long``; a refused API key or a model the server no
  longer serves marks *the endpoint* misconfigured instead, and the request goes elsewhere.

With no endpoint usable, requests wait (nothing is sent, nothing fails) and :attr:`RemoteEngine.problem`
says why: the service reports itself unhealthy and stops taking input until an endpoint is back.

At-least-once, as everywhere in docsumd: a request moved or sent again after it was lost may also have
run to its end on the first server; only one answer is used, and each document still gets exactly one
result written. Each try carries its own ``X-Request-Id`` (the request's id, a hash of it where it is
not a plain token, and the try), so servers' logs tell the tries apart.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import re
import time
from collections.abc import Callable
from typing import Any, Final

from daemon import __version__
from daemon.config import EngineConfig, RemoteEngineConfig, read_config_file
from daemon.contracts import Generation, Sampling
from daemon.engine.backoff import Backoff
from daemon.engine.remote.affinity import Affinity
from daemon.engine.remote.checks import EndpointDownError, LocalTokenizer, check_endpoint
from daemon.engine.remote.completions import request_body
from daemon.engine.remote.endpoints import Endpoint, Moved
from daemon.engine.remote.load import read_load
from daemon.engine.remote.transport import (
    Deadlines,
    Failed,
    Lost,
    Refused,
    deadlines,
    get_json,
    get_text,
    new_session,
    stream_completion,
)
from daemon.errors import ConfigError, EngineDeadError, RequestError
from daemon.lifecycle import Lifecycle
from daemon.ops.logging import get_logger
from daemon.ops.metrics import (
    ENDPOINT_CACHED_TOKENS,
    ENDPOINT_FIRST_OUTPUT_SECONDS,
    ENDPOINT_OUTPUT_TOKENS,
    ENDPOINT_PROMPT_TOKENS,
    ENDPOINT_REJECTIONS,
    ENDPOINT_REQUEST_SECONDS,
    ENDPOINT_REQUESTS,
    ENDPOINT_RETRIES,
    ENDPOINTS_USABLE,
    ENGINE_REJECTIONS,
    ENGINE_UP,
)
from daemon.records import parse_request_id

log = get_logger(__name__)

MAX_API_KEY_BYTES: Final = 64 << 10
RECHECK_MAX_SECONDS: Final = 30.0
"""A down or misconfigured endpoint is checked again at most this long apart (sooner at first)."""
_SAFE_ID: Final = re.compile(r"[A-Za-z0-9._:-]{1,96}")


class RemoteEngine(Lifecycle):
    """Requests to the servers of ``[engine.remote]`` (see the module's doc). ``start()``/``stop()``
    are idempotent."""

    def __init__(
        self,
        config: EngineConfig,
        *,
        tokenizer: LocalTokenizer | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``tokenizer``: the local tokenizer the checks compare each server's with (default: loaded
        from ``config`` at start, as the service loads it)."""
        if config.remote is None:
            raise ValueError("the remote engine needs [engine.remote]")
        self.config = config
        self.remote: RemoteEngineConfig = config.remote
        self._clock = clock
        self._tokenizer = tokenizer
        self.endpoints = [Endpoint(url, self.remote, clock=clock) for url in self.remote.endpoints]
        self.affinity = Affinity(self.endpoints, load_factor=self.remote.load_factor, clock=clock)
        self.backoff = Backoff(
            first_seconds=self.remote.backoff_first_seconds, cap_seconds=self.remote.backoff_max_seconds
        )
        self.start_seconds: float | None = None
        self._session: Any = None
        self._headers: dict[str, str] = {}
        self._watchers: list[asyncio.Task[None]] = []
        self._listeners: list[Callable[[], None]] = []
        self._available: asyncio.Event | None = None
        self._started = False
        self._stopped = False
        for endpoint in self.endpoints:
            endpoint.on_change(self._fleet_changed)

    # -- what the service reads ---------------------------------------------------------------------

    @property
    def is_running(self) -> bool:
        """True once started and until stopped: servers that are down are not a dead engine."""
        return self._started and not self._stopped

    @property
    def usable(self) -> list[Endpoint]:
        """The endpoints that take work now."""
        return [endpoint for endpoint in self.endpoints if endpoint.usable]

    @property
    def engines(self) -> int:
        """How many servers take work now (admission's per-engine bounds are multiplied by it; at
        least 1, so that admission keeps its shape while none does)."""
        return max(1, len(self.usable))

    @property
    def kv_cache_tokens(self) -> int | None:
        """The KV capacity of the usable servers, as their metrics say (None while none says)."""
        known = [endpoint.kv_capacity_tokens for endpoint in self.usable]
        capacities = [tokens for tokens in known if tokens]
        return sum(capacities) if capacities else None

    @property
    def cache_block_tokens(self) -> int | None:
        """The largest KV block size among the servers that report one (prompts align their shared
        prefix to it), None where none does."""
        blocks = [endpoint.block_size for endpoint in self.endpoints if endpoint.block_size]
        return max(blocks) if blocks else None

    @property
    def problem(self) -> str | None:
        """Why no request can be served now (every endpoint down or misconfigured), or None."""
        if not self.is_running or self.usable:
            return None
        reasons = "; ".join(f"{endpoint.url}: {endpoint.problem}" for endpoint in self.endpoints)
        return f"no remote endpoint takes work ({reasons})"

    def on_change(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` whenever an endpoint comes up or goes down (admission resizes itself)."""
        self._listeners.append(callback)

    async def wait_available(self) -> None:
        """Return once an endpoint takes work."""
        assert self._available is not None, "not started"
        await self._available.wait()

    # -- lifecycle ----------------------------------------------------------------------------------

    async def start(self) -> None:
        """Check every endpoint (a mismatch is a :class:`~daemon.errors.ConfigError` naming it) and
        start watching them. Endpoints that cannot be reached are down, not an error: they are
        checked again until they answer, and the daemon takes no input while none does."""
        if self._started:
            return
        if self._stopped:
            raise EngineDeadError("this engine was stopped; build a new RemoteEngine to start again")
        started = self._clock()
        self._available = asyncio.Event()
        ignored = self.config.local_only_keys()
        if ignored:
            log.warning(
                "remote mode: these engine keys are for the local engine and change nothing", keys=ignored
            )
        if not self.remote.verify_tls:
            log.warning("engine.remote.verify_tls is false: servers' certificates are not checked")
        if self._tokenizer is None:
            from daemon.models.files import load_tokenizer

            self._tokenizer = await asyncio.to_thread(load_tokenizer, self.config)
        self._headers = self._auth_headers()
        try:
            self._session = new_session(self.remote, user_agent=f"docsumd/{__version__}")
        except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
            raise ConfigError(
                f"engine.remote: cannot set up TLS (ca_file, client_cert_file): {exc}"
            ) from None
        try:
            results = await asyncio.gather(
                *(self._check(endpoint, at_start=True) for endpoint in self.endpoints), return_exceptions=True
            )
            problems = [result for result in results if isinstance(result, ConfigError)]
            if problems:
                raise ConfigError("\n".join(str(problem) for problem in problems))
            for result in results:
                if isinstance(result, BaseException):
                    raise result
        except BaseException:
            await self._session.close()
            self._session = None
            raise
        self._started = True
        ENGINE_UP.set_function(lambda: 1.0 if self.is_running and self.usable else 0.0)
        ENDPOINTS_USABLE.set_function(lambda: float(len(self.usable)))
        self._watchers = [
            asyncio.create_task(self._watch(endpoint), name=f"endpoint-watch:{endpoint.host}")
            for endpoint in self.endpoints
        ]
        self.start_seconds = self._clock() - started
        log.info(
            "remote engine ready",
            endpoints=len(self.endpoints),
            usable=len(self.usable),
            start_s=round(self.start_seconds, 2),
        )

    async def stop(self) -> None:
        """Stop watching the endpoints and close the connections; idempotent."""
        if self._stopped:
            return
        self._stopped = True
        for task in self._watchers:
            task.cancel()
        await asyncio.gather(*self._watchers, return_exceptions=True)
        self._watchers = []
        if self._session is not None:
            await self._session.close()
            self._session = None
        log.info("remote engine stopped")

    def _auth_headers(self) -> dict[str, str]:
        key = self.remote.api_key.get_secret_value() if self.remote.api_key is not None else None
        path = self.remote.api_key_file
        if path is not None:
            try:
                key = read_config_file(path, MAX_API_KEY_BYTES).decode("utf-8").splitlines()[0].strip()
            except (OSError, ValueError, IndexError) as exc:
                raise ConfigError(
                    f"engine.remote.api_key_file {path}: cannot read the API key: {exc}"
                ) from None
        if key is not None and (not key or any(ord(ch) < 0x21 or ord(ch) > 0x7E for ch in key)):
            raise ConfigError("engine.remote: the API key is empty or not printable ASCII")
        return {"Authorization": f"Bearer {key}"} if key else {}

    # -- the endpoints' checks and load --------------------------------------------------------------

    async def _check(self, endpoint: Endpoint, *, at_start: bool = False) -> bool:
        """Run the checks; True when the endpoint passed and takes work. A mismatch is raised at start
        (exit 2) and keeps the endpoint out later."""
        assert self._tokenizer is not None
        assert self._session is not None
        try:
            info = await check_endpoint(
                self._session,
                endpoint.url,
                engine=self.config,
                tokenizer=self._tokenizer,
                headers=self._headers,
                clock=self._clock,
            )
        except EndpointDownError as exc:
            if endpoint.problem != f"down: {exc}":
                log.warning("remote endpoint down", endpoint=endpoint.url, error=str(exc))
            endpoint.down(f"down: {exc}")
            return False
        except ConfigError as exc:
            if at_start:
                raise
            if not endpoint.misconfigured:
                log.error("remote endpoint refused: kept out of use", endpoint=endpoint.url, error=str(exc))
            endpoint.down(str(exc), misconfigured=True)
            return False
        except Exception as exc:  # an answer no check foresaw: the server's fault, never the watch's end
            log.warning("remote endpoint down", endpoint=endpoint.url, error=f"{type(exc).__name__}: {exc}")
            endpoint.down(f"down: {type(exc).__name__}: {exc}")
            return False
        endpoint.checked(info)
        log.info(
            "remote endpoint checked",
            endpoint=endpoint.url,
            model=info.model,
            vllm=info.features.vllm_version,
            max_model_len=info.max_model_len,
            load_from=("/metrics" if info.vllm_metrics else f"{info.health_path} (docsumd's own counts)"),
            kv_cache_tokens=endpoint.kv_capacity_tokens,
            block_size=endpoint.block_size,
            notes=list(info.notes) or None,
        )
        return True

    async def _watch(self, endpoint: Endpoint) -> None:
        """Keep ``endpoint``'s state fresh: its load every interval while up; checks, at a growing
        interval, while down."""
        interval = self.remote.metrics_interval_seconds
        down_for = 0
        while True:
            if endpoint.needs_check():
                await asyncio.sleep(min(RECHECK_MAX_SECONDS, interval * 2 ** min(down_for, 8)))
                down_for = 0 if await self._check(endpoint) else down_for + 1
                continue
            await asyncio.sleep(interval)
            await self._read_load(endpoint)

    async def _read_load(self, endpoint: Endpoint) -> None:
        assert endpoint.info is not None
        assert self._session is not None
        timeout = max(2.0, 2 * self.remote.metrics_interval_seconds)
        try:
            if endpoint.info.vllm_metrics:
                status, text = await get_text(
                    self._session, f"{endpoint.url}/metrics", headers=self._headers, seconds=timeout
                )
                if status != 200:
                    raise ValueError(f"/metrics answered HTTP {status}")
                endpoint.read(read_load(text, at=self._clock()))
            else:
                path = endpoint.info.health_path
                status, _ = await get_json(
                    self._session, f"{endpoint.url}{path}", headers=self._headers, seconds=timeout
                )
                if status != 200:
                    raise ValueError(f"{path} answered HTTP {status}")
                endpoint.read(None)
        except Exception as exc:  # any failure to read is one failed read (the server is judged, not us)
            if endpoint.read_failed(f"{type(exc).__name__}: {exc}"):
                self._went_down(endpoint)

    def _went_down(self, endpoint: Endpoint) -> None:
        unpinned = self.affinity.unpin_endpoint(endpoint)
        log.warning(
            "remote endpoint down: its requests move to the others",
            endpoint=endpoint.url,
            reason=endpoint.problem,
            documents_moved=unpinned,
        )

    def _fleet_changed(self) -> None:
        if self._available is not None:
            if self.usable:
                self._available.set()
            else:
                self._available.clear()
        for listener in self._listeners:
            listener()

    # -- requests ------------------------------------------------------------------------------------

    async def generate(
        self,
        prompt_token_ids: list[int],
        sampling: Sampling,
        request_id: str,
        *,
        on_prefilled: Callable[[], None] | None = None,
        priority: int = 0,
    ) -> Generation:
        """Run one request on the fleet to completion (see the module's doc for what is retried and
        what fails). Cancellation closes its connection, which makes the server abort it."""
        if not self.is_running:
            raise EngineDeadError("the remote engine is not running (not started, or stopped)")
        document = _document_key(request_id)
        cost = len(prompt_token_ids) + sampling.max_tokens
        limits = deadlines(self.remote, len(prompt_token_ids), sampling.max_tokens)
        sent_priority = priority if self.remote.schedules_by_priority else None
        began = self._clock()
        prefill_told = False
        first_output_at: float | None = None

        def first_output() -> None:
            nonlocal prefill_told, first_output_at
            if not prefill_told:
                prefill_told, first_output_at = True, self._clock()
                if on_prefilled is not None:
                    on_prefilled()

        refusals = lost = unreached = tries = 0
        avoid: frozenset[str] = frozenset()
        while True:
            endpoint = self.affinity.place(document, cost, avoid=avoid)
            if endpoint is None:
                await self.wait_available()
                avoid = frozenset()
                continue
            assert endpoint.info is not None
            tries += 1
            body = request_body(
                prompt_token_ids,
                sampling,
                model=endpoint.info.model,
                features=endpoint.info.features,
                stream_interval=self.config.max_model_len,
                priority=sent_priority,
            )
            headers = {**self._headers, "X-Request-Id": _wire_id(request_id, tries)}
            try:
                generation = await self._try(
                    endpoint, body, headers=headers, limits=limits, cost=cost, first_output=first_output
                )
            except Refused as exc:
                refusals += 1
                # The endpoint rests for a jittered backoff, at least its Retry-After; the request
                # waits a jittered backoff of its own, and longer only when every endpoint rests.
                endpoint.refused(self.backoff.delay(refusals - 1, retry_after=exc.retry_after))
                wait = max(self.backoff.delay(refusals - 1), self._rest_of_fleet())
                self._count_retry(endpoint, "refused", status=exc.status)
                log.debug(
                    "request refused: sending it again",
                    endpoint=endpoint.url,
                    status=exc.status,
                    wait_s=round(wait, 3),
                )
                await asyncio.sleep(wait)
                avoid = frozenset({endpoint.key})
                continue
            except Moved:
                ENDPOINT_REQUESTS.labels(endpoint=endpoint.url, outcome="moved").inc()
                ENDPOINT_RETRIES.labels(endpoint=endpoint.url, reason="moved").inc()
                avoid = frozenset({endpoint.key})
                continue
            except Lost as exc:
                ENDPOINT_REQUESTS.labels(endpoint=endpoint.url, outcome="lost").inc()
                if not exc.started:
                    # It never reached the server: not this request's doing, so not counted. A refused
                    # connection means the server is gone (its other requests move too); a connection
                    # dropped before the answer began is left to the load reads to judge.
                    if exc.connect and endpoint.usable:
                        endpoint.down(f"down: {exc}")
                        self._went_down(endpoint)
                    ENDPOINT_RETRIES.labels(
                        endpoint=endpoint.url, reason="down" if exc.connect else "lost"
                    ).inc()
                    unreached += 1
                    await asyncio.sleep(self.backoff.delay(unreached - 1))
                    avoid = frozenset({endpoint.key})
                    continue
                lost += 1
                if lost >= self.remote.max_lost_tries:
                    raise RequestError(
                        f"the request was lost {lost} times (last on {endpoint.url}: {exc}); it may be what "
                        "brings servers down"
                    ) from None
                ENDPOINT_RETRIES.labels(endpoint=endpoint.url, reason="lost").inc()
                log.info("request lost: sending it again", endpoint=endpoint.url, error=str(exc), lost=lost)
                await asyncio.sleep(self.backoff.delay(lost - 1))
                avoid = frozenset({endpoint.key})
                continue
            except Failed as exc:
                outcome = "too_long" if exc.too_long else "failed"
                ENDPOINT_REQUESTS.labels(endpoint=endpoint.url, outcome=outcome).inc()
                if exc.error.status in (401, 403, 404):
                    # The key was refused or the model is gone: the endpoint's configuration, not
                    # the document's fault. Kept out until a check passes; the request goes elsewhere.
                    log.error(
                        "remote endpoint refused a request: kept out of use",
                        endpoint=endpoint.url,
                        error=str(exc),
                    )
                    endpoint.down(f"refused requests: {exc}", misconfigured=True)
                    self._went_down(endpoint)
                    avoid = frozenset({endpoint.key})
                    continue
                if exc.too_long:
                    raise RequestError(f"{endpoint.url}: {exc.error.message}", reason="too_long") from None
                raise RequestError(f"{endpoint.url} refused the request: {exc}") from None
            ENDPOINT_REQUESTS.labels(endpoint=endpoint.url, outcome="ok").inc()
            now = self._clock()
            return Generation(
                text=generation.text,
                prompt_tokens=generation.prompt_tokens,
                output_tokens=generation.output_tokens,
                cached_prompt_tokens=generation.cached_prompt_tokens,
                finish_reason=generation.finish_reason,
                first_token_s=(first_output_at - began) if first_output_at is not None else None,
                total_s=now - began,
            )

    async def _try(
        self,
        endpoint: Endpoint,
        body: dict[str, Any],
        *,
        headers: dict[str, str],
        limits: Deadlines,
        cost: int,
        first_output: Callable[[], None],
    ) -> Generation:
        """One try on ``endpoint``, in a task of its own so that the endpoint going down can move it
        (:class:`Moved`); a cancelled caller cancels it (the connection closes)."""
        handle_box: list[int] = []

        def on_first() -> None:
            if handle_box:
                endpoint.prefilled(handle_box[0])
            first_output()

        assert self._session is not None
        task: asyncio.Task[Generation] = asyncio.ensure_future(
            stream_completion(
                self._session,
                f"{endpoint.url}/v1/completions",
                body,
                headers=headers,
                limits=limits,
                on_first_output=on_first,
            )
        )
        handle_box.append(endpoint.attach(task, cost))
        moved = False
        try:
            generation = await task
        except asyncio.CancelledError:
            moved = endpoint.detach(handle_box[0])
            current = asyncio.current_task()
            if moved and current is not None and not current.cancelling():
                raise Moved() from None
            raise
        finally:
            if not moved:
                endpoint.detach(handle_box[0])
        ENDPOINT_REQUEST_SECONDS.labels(endpoint=endpoint.url).observe(generation.total_s)
        if generation.first_token_s is not None:
            ENDPOINT_FIRST_OUTPUT_SECONDS.labels(endpoint=endpoint.url).observe(generation.first_token_s)
        ENDPOINT_PROMPT_TOKENS.labels(endpoint=endpoint.url).inc(generation.prompt_tokens)
        ENDPOINT_CACHED_TOKENS.labels(endpoint=endpoint.url).inc(generation.cached_prompt_tokens)
        ENDPOINT_OUTPUT_TOKENS.labels(endpoint=endpoint.url).inc(generation.output_tokens)
        return generation

    def _rest_of_fleet(self) -> float:
        """Seconds until the first usable endpoint stops resting after a refusal (0 if one does not)."""
        usable = self.usable
        if not usable or any(not endpoint.cooling for endpoint in usable):
            return 0.0
        return max(0.0, min(endpoint.cool_until for endpoint in usable) - self._clock())

    @staticmethod
    def _count_retry(endpoint: Endpoint, reason: str, *, status: int) -> None:
        ENGINE_REJECTIONS.inc()
        ENDPOINT_REQUESTS.labels(endpoint=endpoint.url, outcome="refused").inc()
        ENDPOINT_REJECTIONS.labels(endpoint=endpoint.url, status=str(status)).inc()
        ENDPOINT_RETRIES.labels(endpoint=endpoint.url, reason=reason).inc()


def _document_key(request_id: str) -> str:
    """The document a request belongs to (its affinity key): the document id of docsumd's request
    ids (:func:`daemon.records.request_id`), else the whole id."""
    with contextlib.suppress(ValueError):
        return parse_request_id(request_id).doc_id
    return request_id


def _wire_id(request_id: str, attempt: int) -> str:
    """The ``X-Request-Id`` of one try: the request's id where it is a short plain token (docsumd's
    ids carry the document id, which comes from outside), else a hash of it; then the try number."""
    base = (
        request_id
        if _SAFE_ID.fullmatch(request_id)
        else "docsumd-" + hashlib.sha256(request_id.encode("utf-8", "surrogatepass")).hexdigest()[:24]
    )
    return f"{base}-try{attempt}"
