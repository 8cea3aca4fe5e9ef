"""What docsumd checks of each server before it sends it a document, at start and when it comes back.

docsumd builds every prompt with its *local* tokenizer and sends token ids, and it cuts documents to
its own ``engine.max_model_len``: a server with another tokenizer would read garbage, and one with a
shorter context would refuse long prompts. So, per endpoint (:func:`check_endpoint`):

1. ``GET /v1/models`` (with the API key: a refused key is found here): the model docsumd will name in
   its requests is served, and its ``max_model_len`` (vLLM reports it) is at least docsumd's;
2. ``GET /version``: vLLM's version, if it is vLLM (what the requests may carry depends on it);
3. ``POST /tokenize`` of a probe text, plain and in the chat form: the server's token ids equal the
   local tokenizer's, and so does its chat template's rendering of a system and a user message;
4. ``GET /metrics``: vLLM's load families (``/health`` or ``/v1/models`` is polled instead where
   there are none: any OpenAI-compatible server works, with docsumd's own counts only);
5. one streamed completion of one token, from the probe's ids: the server takes token-id prompts
   and streams.

A mismatch (or a refused key, or a model that is not served) is a configuration error naming the
endpoint: at start the daemon exits 2; a server that comes back with one later is kept out of use and
logged. A server that cannot be reached is *down*, not misconfigured: it is checked again when it
answers. Servers other than vLLM may lack ``/tokenize`` (vLLM's extension): the tokenizer is then
not checked, and the log says so.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

import aiohttp

from daemon.config import EngineConfig
from daemon.contracts import Sampling
from daemon.engine.remote.completions import ServerFeatures, request_body
from daemon.engine.remote.load import LoadReading, NotVllmMetricsError, read_load
from daemon.engine.remote.transport import (
    Deadlines,
    Failed,
    Lost,
    Refused,
    get_json,
    get_text,
    stream_completion,
)
from daemon.errors import ConfigError

PROBE_TEXT: Final = (
    "docsumd tokenizer probe: Contracts, § 4.2(b) and Article 12 apply; the Licensee shall pay "
    "EUR 1,250.00 within 30 days. Überprüfung: naïve café, 東京, 🙂.\n\tdef f(x): return x ** 2"
)
"""Text whose token ids the local tokenizer and each server must agree on: words, numbers, symbols,
accents, CJK, an emoji, whitespace and code, so that two tokenizers differing anywhere common differ here."""
PROBE_MESSAGES: Final = (
    {"role": "system", "content": "You summarize documents."},
    {"role": "user", "content": "Summarize: the probe."},
)
CHECK_TIMEOUT_SECONDS: Final = 30.0
MIN_VLLM_STREAM_INTERVAL: Final = (0, 32)
"""vLLM reads a per-request ``stream_interval`` from 0.32 on (0.26 logs it as ignored)."""


class LocalTokenizer(Protocol):
    """The local tokenizer, as the checks use it (a Hugging Face tokenizer)."""

    chat_template: Any

    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...

    def apply_chat_template(self, conversation: Any, **kwargs: Any) -> Any: ...


class EndpointDownError(Exception):
    """The endpoint cannot be reached or does not answer usably now (checked again later)."""


@dataclass(frozen=True, slots=True)
class EndpointInfo:
    """What the checks found of one endpoint."""

    model: str
    max_model_len: int | None
    features: ServerFeatures
    reading: LoadReading | None
    """The first load reading, None where the server has no vLLM metrics."""
    health_path: str
    """What is polled where there are no vLLM metrics: ``/health``, else ``/v1/models``."""
    notes: tuple[str, ...] = ()
    """What could not be checked (logged once)."""

    @property
    def vllm_metrics(self) -> bool:
        """Whether the load comes from vLLM's ``/metrics``."""
        return self.reading is not None


async def check_endpoint(
    session: aiohttp.ClientSession,
    base: str,
    *,
    engine: EngineConfig,
    tokenizer: LocalTokenizer,
    headers: Mapping[str, str],
    clock: Callable[[], float],
) -> EndpointInfo:
    """Check the endpoint at ``base`` (see the module's doc). Raises :class:`ConfigError` naming it
    for a mismatch, :class:`EndpointDownError` when it cannot be reached or does not answer."""
    try:
        return await _check(
            session, base, engine=engine, tokenizer=tokenizer, headers=dict(headers), clock=clock
        )
    except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as exc:
        raise EndpointDownError(f"{type(exc).__name__}: {exc}".rstrip(": ")) from exc


async def _check(
    session: aiohttp.ClientSession,
    base: str,
    *,
    engine: EngineConfig,
    tokenizer: LocalTokenizer,
    headers: dict[str, str],
    clock: Callable[[], float],
) -> EndpointInfo:
    notes: list[str] = []
    model, max_model_len = await _served_model(session, base, engine, headers)
    if max_model_len is None:
        notes.append("the server does not report its max_model_len: context not checked")
    elif max_model_len < engine.max_model_len:
        raise ConfigError(
            f"endpoint {base}: serves {model!r} with a context of {max_model_len} tokens, shorter than "
            f"engine.max_model_len = {engine.max_model_len} (lower it, or start the server with "
            f"--max-model-len {engine.max_model_len} or more)"
        )
    elif max_model_len > engine.max_model_len:
        notes.append(
            f"the server's context is {max_model_len} tokens; docsumd uses {engine.max_model_len} "
            "(engine.max_model_len)"
        )
    features = await _features(session, base, headers)
    notes += await _check_tokenizer(session, base, model, tokenizer, headers)
    reading, health_path = await _load_source(session, base, headers, clock)
    await _check_completion(
        session, base, model=model, features=features, tokenizer=tokenizer, headers=headers
    )
    return EndpointInfo(model, max_model_len, features, reading, health_path, tuple(notes))


async def _served_model(
    session: aiohttp.ClientSession, base: str, engine: EngineConfig, headers: dict[str, str]
) -> tuple[str, int | None]:
    status, models = await get_json(
        session, f"{base}/v1/models", headers=headers, seconds=CHECK_TIMEOUT_SECONDS
    )
    if status in (401, 403):
        raise ConfigError(f"endpoint {base}: the API key was refused (HTTP {status} from /v1/models)")
    if status != 200:
        raise EndpointDownError(f"/v1/models answered HTTP {status}")
    entries = models.get("data") if isinstance(models, dict) else None
    served = {
        entry["id"]: entry
        for entry in entries or ()
        if isinstance(entry, dict) and isinstance(entry.get("id"), str)
    }
    if not served:
        raise EndpointDownError("/v1/models lists no model")
    wanted = (engine.remote.model if engine.remote else None) or engine.served_model_name
    if wanted is None:
        if len(served) > 1:
            raise ConfigError(
                f"endpoint {base}: serves several models ({', '.join(sorted(served))}): name one with "
                "engine.remote.model"
            )
        wanted = next(iter(served))
    if wanted not in served:
        raise ConfigError(
            f"endpoint {base}: does not serve model {wanted!r} (it serves: {', '.join(sorted(served))}; "
            "set engine.remote.model to its name there)"
        )
    length = served[wanted].get("max_model_len")
    return wanted, length if isinstance(length, int) and length > 0 else None


async def _features(session: aiohttp.ClientSession, base: str, headers: dict[str, str]) -> ServerFeatures:
    try:
        status, answer = await get_json(
            session, f"{base}/version", headers=headers, seconds=CHECK_TIMEOUT_SECONDS
        )
    except ValueError:
        return ServerFeatures()
    version = answer.get("version") if status == 200 and isinstance(answer, dict) else None
    if not isinstance(version, str) or not version[:1].isdigit() or len(version) > 64:
        return ServerFeatures()
    numbers = tuple(int(part) for part in version.split(".")[:2] if part.isdigit())
    return ServerFeatures(vllm_version=version, stream_interval=numbers >= MIN_VLLM_STREAM_INTERVAL)


async def _check_tokenizer(
    session: aiohttp.ClientSession,
    base: str,
    model: str,
    tokenizer: LocalTokenizer,
    headers: dict[str, str],
) -> list[str]:
    plain = {"model": model, "prompt": PROBE_TEXT, "add_special_tokens": False}
    status, answer = await get_json(
        session, f"{base}/tokenize", headers=headers, body=plain, seconds=CHECK_TIMEOUT_SECONDS
    )
    if status in (404, 405):
        return ["the server has no /tokenize: its tokenizer was not checked against the local one"]
    ids = _token_ids(answer) if status == 200 else None
    if ids is None:
        raise EndpointDownError(f"/tokenize answered HTTP {status} without token ids")
    local = list(await asyncio.to_thread(tokenizer.encode, PROBE_TEXT, add_special_tokens=False))
    if ids != local:
        raise ConfigError(
            f"endpoint {base}: its tokenizer differs from the local one (engine.tokenizer or engine.model): "
            f"the probe text is {len(ids)} tokens there, {len(local)} here, first difference at token "
            f"{_first_difference(ids, local)}; docsumd sends token ids, so both must be the same tokenizer"
        )
    if not getattr(tokenizer, "chat_template", None):
        return []
    chat = {
        "model": model,
        "messages": list(PROBE_MESSAGES),
        "add_generation_prompt": True,
        "add_special_tokens": False,
    }
    status, answer = await get_json(
        session, f"{base}/tokenize", headers=headers, body=chat, seconds=CHECK_TIMEOUT_SECONDS
    )
    ids = _token_ids(answer) if status == 200 else None
    if ids is None:
        return [f"the server's chat template was not checked (/tokenize of messages: HTTP {status})"]
    rendered = await asyncio.to_thread(
        tokenizer.apply_chat_template, list(PROBE_MESSAGES), tokenize=False, add_generation_prompt=True
    )
    local = list(await asyncio.to_thread(tokenizer.encode, str(rendered), add_special_tokens=False))
    if ids != local:
        raise ConfigError(
            f"endpoint {base}: its chat template renders a system and a user message differently from the "
            f"local tokenizer's ({len(ids)} tokens there, {len(local)} here, first difference at token "
            f"{_first_difference(ids, local)}): not the same model files"
        )
    return []


async def _load_source(
    session: aiohttp.ClientSession, base: str, headers: dict[str, str], clock: Callable[[], float]
) -> tuple[LoadReading | None, str]:
    try:
        status, text = await get_text(
            session, f"{base}/metrics", headers=headers, seconds=CHECK_TIMEOUT_SECONDS
        )
        if status == 200:
            return read_load(text, at=clock()), "/metrics"
    except (NotVllmMetricsError, ValueError):
        pass
    status, _ = await get_json(session, f"{base}/health", headers=headers, seconds=CHECK_TIMEOUT_SECONDS)
    return None, "/health" if status == 200 else "/v1/models"


async def _check_completion(
    session: aiohttp.ClientSession,
    base: str,
    *,
    model: str,
    features: ServerFeatures,
    tokenizer: LocalTokenizer,
    headers: dict[str, str],
) -> None:
    ids = list(await asyncio.to_thread(tokenizer.encode, PROBE_TEXT, add_special_tokens=False))
    sampling = Sampling(max_tokens=1, temperature=0.0, top_p=1.0, repetition_penalty=1.0)
    body = request_body(ids, sampling, model=model, features=features, stream_interval=1, priority=None)
    try:
        await stream_completion(
            session,
            f"{base}/v1/completions",
            body,
            headers={**headers, "X-Request-Id": "docsumd-check"},
            limits=Deadlines(CHECK_TIMEOUT_SECONDS, CHECK_TIMEOUT_SECONDS),
        )
    except Refused:
        return  # busy: it took the request's shape, which is what is checked
    except Failed as exc:
        raise ConfigError(
            f"endpoint {base}: refused a streamed completion of token ids ({exc}); docsumd needs "
            "/v1/completions with a token-id prompt and stream: true"
        ) from None
    except Lost as exc:
        raise EndpointDownError(f"a test completion was lost: {exc}") from None


def _token_ids(answer: Any) -> list[int] | None:
    tokens = answer.get("tokens") if isinstance(answer, dict) else None
    if isinstance(tokens, list) and all(isinstance(token, int) for token in tokens):
        return tokens
    return None


def _first_difference(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
