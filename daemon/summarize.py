"""One document in, one summary out, as engine requests; and the records that results carry.

For now a document goes in one request, its head kept when it is over the context (``truncated``
and ``dropped_tokens`` say so). Staged (map-reduce) summaries of long documents come next and will
keep these records' fields.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from daemon import __version__
from daemon.chunking import PromptFitter
from daemon.config import SummaryConfig
from daemon.documents import Document, DocumentError
from daemon.engine import Engine, RequestError, sampling_params
from daemon.prompts import PROMPT_VERSION, ChatTokenizer, build_template
from daemon.work import Record


@dataclass(frozen=True, slots=True)
class Summary:
    """What summarizing one document produced."""

    text: str
    strategy: str
    prompt_tokens: int
    summary_tokens: int
    document_tokens: int
    dropped_tokens: int
    cached_prompt_tokens: int
    requests: int
    finish_reason: str | None
    first_token_s: float | None
    engine_s: float

    @property
    def truncated(self) -> bool:
        """Whether part of the document was not read by the model."""
        return self.dropped_tokens > 0


class Summarizer:
    """Turns documents into summaries with the engine. Safe to call concurrently."""

    def __init__(self, engine: Engine, tokenizer: ChatTokenizer, config: SummaryConfig, max_model_len: int):
        self._engine = engine
        self._config = config
        self._params = sampling_params(config)
        self.fitter = PromptFitter(
            tokenizer, build_template(tokenizer), max_prompt_tokens=max_model_len - config.max_summary_tokens
        )

    async def summarize(self, document: Document) -> Summary:
        """Summarize ``document``. Raises DocumentError for a request the engine refused."""
        # Tokenizing a long document takes a while (about 0.7 s per MB): keep it off the event loop.
        fitted = await asyncio.to_thread(self.fitter.fit, document.text)
        request_id = f"{document.id}:{uuid.uuid4().hex[:12]}"
        try:
            generation = await self._engine.generate(fitted.token_ids, self._params, request_id)
        except RequestError as exc:
            raise DocumentError("engine_error", f"the engine failed on this document: {exc}") from exc
        return Summary(
            text=generation.text.strip(),
            strategy="head" if fitted.truncated else "single",
            prompt_tokens=generation.prompt_tokens,
            summary_tokens=generation.output_tokens,
            document_tokens=fitted.document_tokens,
            dropped_tokens=fitted.dropped_tokens,
            cached_prompt_tokens=generation.cached_prompt_tokens,
            requests=1,
            finish_reason=generation.finish_reason,
            first_token_s=generation.first_token_s,
            engine_s=generation.total_s,
        )


def utc_now_iso() -> str:
    """The current time as an ISO 8601 UTC string (records carry it)."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def result_record(
    document: Document, summary: Summary, *, model: str, queued_s: float, total_s: float
) -> Record:
    """The JSON object written for a summarized document (folder result file, Kafka message)."""
    return {
        "id": document.id,
        "source": document.source,
        "summary": summary.text,
        "model": model,
        "prompt_version": PROMPT_VERSION,
        "strategy": summary.strategy,
        "truncated": summary.truncated,
        "prompt_tokens": summary.prompt_tokens,
        "summary_tokens": summary.summary_tokens,
        "document_tokens": summary.document_tokens,
        "dropped_tokens": summary.dropped_tokens,
        "cached_prompt_tokens": summary.cached_prompt_tokens,
        "requests": summary.requests,
        "finish_reason": summary.finish_reason,
        "sha256": document.sha256,
        "input_bytes": document.size_bytes,
        "encoding": document.encoding,
        "metadata": document.metadata,
        "timings": {
            "queued_s": round(queued_s, 4),
            "first_token_s": None if summary.first_token_s is None else round(summary.first_token_s, 4),
            "engine_s": round(summary.engine_s, 4),
            "total_s": round(total_s, 4),
        },
        "created_at": utc_now_iso(),
        "docsumd_version": __version__,
    }


def failure_record(
    *,
    doc_id: str,
    source: str,
    error: DocumentError,
    metadata: dict[str, Any],
    sha256: str | None,
    input_bytes: int | None,
) -> Record:
    """The JSON object written for a refused or failed document (error file, dead letter)."""
    return {
        "id": doc_id,
        "source": source,
        "reason": error.reason,
        "message": error.message,
        "sha256": sha256,
        "input_bytes": input_bytes,
        "metadata": metadata,
        "failed_at": utc_now_iso(),
        "docsumd_version": __version__,
    }
