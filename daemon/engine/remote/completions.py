"""One ``POST /v1/completions`` as docsumd sends it, and the streamed answer read back.

The request: the prompt as token ids (the chat template was applied by docsumd's own tokenizer, as
in-process), ``stream: true`` with ``stream_options.include_usage`` so the first event marks the end of
the prefill (admission keeps working) and the last one carries the token counts, and, on vLLM 0.32
and later, ``stream_interval`` as long as any output, so that nothing is sent in between (vLLM
always sends the first and last chunks at once; 0.26 and other servers ignore or do not take the
field, so it is sent only where the server is known to read it).

The answer (:class:`CompletionReader`): every event is a JSON object. One with a top-level ``error``
is the server's refusal or failure *inside* a ``200`` stream: vLLM checks its admission again once the
request is really added, after the response has started, and sends the 503 as an event; a server
shutting down ends a stream with an in-band 500. Its ``code`` is the status. The stream is complete
only with a ``finish_reason`` and ``[DONE]``; anything else is a lost request.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from daemon.contracts import Sampling
from daemon.engine.remote.sse import DONE

PROMPT_TOO_LONG_PARAMS: Final = frozenset({"input_tokens", "max_tokens"})
"""The ``param`` of vLLM's 400 for a prompt as long as the context or longer (``input_tokens``; at
exactly the context length no output token is left, ``max_tokens``)."""


@dataclass(frozen=True, slots=True)
class ServerFeatures:
    """What one endpoint takes beyond the OpenAI completions API (found at start, :mod:`.checks`)."""

    vllm_version: str | None = None
    """vLLM's version (``GET /version``), None for another server."""
    stream_interval: bool = False
    """It reads a per-request ``stream_interval`` (vLLM 0.32 and later)."""

    @property
    def vllm(self) -> bool:
        """Whether the server is vLLM."""
        return self.vllm_version is not None


_UNSENT_AT: Final[Mapping[str, object]] = {"repetition_penalty": 1.0, "stop": [], "seed": None}
"""Sampling settings left out of a request at these values, which change nothing: the body stays
the OpenAI API's own where it can (``repetition_penalty`` is vLLM's and SGLang's extension)."""


def sampling_fields(sampling: Sampling) -> dict[str, Any]:
    """A request's sampling fields (:meth:`~daemon.contracts.Sampling.settings`, the schema aside),
    less those that change nothing."""
    settings = sampling.settings()
    return {
        key: value for key, value in settings.items() if key not in _UNSENT_AT or value != _UNSENT_AT[key]
    }


def request_body(
    prompt_token_ids: list[int],
    sampling: Sampling,
    *,
    model: str,
    features: ServerFeatures,
    stream_interval: int,
    priority: int | None,
) -> dict[str, Any]:
    """The JSON body of one streamed completion. ``priority`` is sent only when given (servers that
    schedule by priority); ``stream_interval`` only where the server reads it."""
    body: dict[str, Any] = {
        "model": model,
        "prompt": prompt_token_ids,
        **sampling_fields(sampling),
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if sampling.json_schema is not None:
        if features.vllm:
            # vLLM's own field (0.26 on); free whitespace off as in-process (read by the guidance
            # backend; xgrammar takes it from the server's --structured-outputs-config).
            body["structured_outputs"] = {"json": sampling.json_schema, "disable_any_whitespace": True}
        else:
            schema = json.loads(sampling.json_schema)
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "summary", "schema": schema, "strict": True},
            }
    if features.stream_interval:
        body["stream_interval"] = stream_interval
    if priority is not None:
        body["priority"] = priority
    return body


@dataclass(frozen=True, slots=True)
class ServerError:
    """An error object the server sent (as the body of an error status, or in-band in a stream)."""

    status: int
    message: str
    param: str | None = None

    @property
    def prompt_too_long(self) -> bool:
        """vLLM's 400 for a prompt that leaves no room in the context (the document's ``too_long``)."""
        return self.status == 400 and self.param in PROMPT_TOO_LONG_PARAMS


def server_error(payload: object, status: int) -> ServerError:
    """The error in ``payload`` (a parsed JSON body, or anything) under HTTP ``status``: vLLM's
    ``{"error": {"message", "type", "param", "code"}}``, a bare ``{"message": ...}``, or text."""
    inner = payload.get("error") if isinstance(payload, dict) else None
    if isinstance(inner, dict):
        code = inner.get("code")
        message = inner.get("message")
        param = inner.get("param")
        return ServerError(
            status=code if isinstance(code, int) and 100 <= code <= 599 else status,
            message=_clip(message if isinstance(message, str) else json.dumps(inner)[:500]),
            param=param if isinstance(param, str) else None,
        )
    if isinstance(inner, str):
        return ServerError(status, _clip(inner))
    if isinstance(payload, dict) and isinstance(payload.get("message"), str):
        return ServerError(status, _clip(payload["message"]))
    return ServerError(status, _clip(str(payload)))


class InBandError(Exception):
    """The stream carried an error event (its ``code`` is the status)."""

    def __init__(self, error: ServerError) -> None:
        super().__init__(f"{error.status}: {error.message}")
        self.error = error


class MalformedStreamError(Exception):
    """The stream does not follow the protocol (not JSON, not an object, wrong types)."""


@dataclass(slots=True)
class CompletionReader:
    """Puts one streamed completion together from its events' payloads (:meth:`add`)."""

    parts: list[str] = field(default_factory=list)
    events: int = 0
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    cached_prompt_tokens: int = 0
    done: bool = False
    first_seen: bool = False

    def add(self, payload: str) -> bool:
        """Take one event's payload; True when it is the completion's first output (its prefill is
        done). Raises :class:`InBandError` for an error event and :class:`MalformedStreamError` for one
        that is not a completion chunk."""
        if payload.strip() == DONE:
            self.done = True
            return False
        try:
            event = json.loads(payload)
        except (json.JSONDecodeError, RecursionError) as exc:
            raise MalformedStreamError(f"an event that is not JSON: {payload[:120]!r}") from exc
        if not isinstance(event, dict):
            raise MalformedStreamError(f"an event that is not a JSON object: {payload[:120]!r}")
        if "error" in event:
            raise InBandError(server_error(event, 500))
        self._usage(event.get("usage"))
        choices = event.get("choices")
        if not isinstance(choices, list):
            raise MalformedStreamError("an event without a choices list")
        if not choices:
            return False  # the usage event
        choice = choices[0]
        if not isinstance(choice, dict):
            raise MalformedStreamError("a choice that is not an object")
        text = choice.get("text", "")
        if not isinstance(text, str):
            raise MalformedStreamError("a choice whose text is not a string")
        self.parts.append(text)
        self.events += 1
        reason = choice.get("finish_reason")
        if isinstance(reason, str):
            self.finish_reason = reason
        first = not self.first_seen
        self.first_seen = True
        return first

    def _usage(self, usage: object) -> None:
        if not isinstance(usage, dict):
            return
        prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
        if isinstance(prompt, int) and prompt >= 0:
            self.prompt_tokens = prompt
        if isinstance(completion, int) and completion >= 0:
            self.output_tokens = completion
        details = usage.get("prompt_tokens_details")
        cached = details.get("cached_tokens") if isinstance(details, dict) else None
        if isinstance(cached, int) and cached >= 0:
            self.cached_prompt_tokens = cached

    @property
    def complete(self) -> bool:
        """Whether the completion finished (a finish reason came; ``[DONE]`` is not required of
        servers that end the stream without it, vLLM sends it)."""
        return self.finish_reason is not None

    @property
    def text(self) -> str:
        """The output so far."""
        return "".join(self.parts)


def _clip(text: str, limit: int = 500) -> str:
    """A server's message, bounded (it goes into logs and failure records)."""
    return text if len(text) <= limit else text[: limit - 1] + "…"
