"""``docsumd check-summary``: the grounding check and the evidence of any summary against its source.

The source is read the way the service reads an input (:class:`~daemon.document.reader.DocumentReader`:
format detected from its bytes, PDF, DOCX, ODT and HTML extracted in sandboxed workers, the same size and
text checks), so a hostile file costs what it would cost the service and no more. The summary is a text
file (UTF-8, or UTF-16/32 with a byte-order mark) of at most :data:`MAX_SUMMARY_BYTES`.

The parts that evidence points to are, with a config whose model's tokenizer loads, the parts the service
would cut the source into for its default profile (``parts.by = "chunks"``); otherwise the source's
sections and paragraphs (``parts.by = "paragraphs"``, :func:`~daemon.summary.evidence.parts_of_text`),
which is also what a summary written by a person or another system is best read against.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from daemon.config import Config, ExtractConfig, LimitsConfig
from daemon.document.decode import decode_text
from daemon.document.types import Document
from daemon.errors import DocumentError
from daemon.fs.safe_read import NotRegularFileError, check_size, read_bounded
from daemon.summary.evidence import Part, evidence_record, link_evidence, parts_of_text
from daemon.summary.grounding import SourceIndex, check_summary
from daemon.summary.sentences import split_sentences

MAX_SUMMARY_BYTES: Final = 1 << 20
"""A summary file larger than this is refused (``too_large``): it is not a summary."""


class BadInput(Exception):
    """An input ``check-summary`` cannot read; ``which`` is ``source`` or ``summary``, ``reason`` a
    reason code of :mod:`daemon.document.decode`."""

    def __init__(self, which: str, path: Path, reason: str, message: str) -> None:
        super().__init__(f"{which} {path}: {message} ({reason})")
        self.which = which
        self.reason = reason


@dataclass(frozen=True, slots=True)
class PartsPlan:
    """How the source is cut into parts: by the served model's chunking (``tokenizer`` and the default
    profile's part length and overlap), or by paragraphs (``tokenizer`` None, with why)."""

    tokenizer: Any = None
    part_tokens: int = 0
    overlap_tokens: int = 0
    why: str = "no --config given"


def audit(
    source: Path,
    summary: Path,
    *,
    limits: LimitsConfig | None = None,
    extract: ExtractConfig | None = None,
    parts: PartsPlan | None = None,
) -> dict[str, Any]:
    """The report of ``summary`` against ``source``: what was read, ``checks`` and ``evidence`` (see
    :mod:`daemon.summary.grounding` and :mod:`daemon.summary.evidence`). Raises :class:`BadInput`."""
    limits = limits or LimitsConfig()
    extract = extract or ExtractConfig()
    plan = parts or PartsPlan()
    summary_text = read_summary(summary)
    document = asyncio.run(read_source(source, limits, extract))
    cut, how = _parts(document, plan)
    checks = check_summary(summary_text, SourceIndex.of(document.text))
    return {
        "source": {
            "file": str(source),
            "format": document.format.value,
            "chars": len(document.text),
            **({"pages": document.layout.pages} if document.layout.pages else {}),
        },
        "summary": {"file": str(summary), "sentences": len(split_sentences(summary_text))},
        "parts": {"count": len(cut), **how},
        "checks": checks.as_record(),
        "evidence": evidence_record(link_evidence(summary_text, cut)),
    }


def read_summary(path: Path) -> str:
    """The summary file's text; :class:`BadInput` when it is not a readable, non-empty text file."""
    data = _read(path, "summary", MAX_SUMMARY_BYTES)
    try:
        text, _ = decode_text(data, MAX_SUMMARY_BYTES)
    except DocumentError as exc:
        raise BadInput("summary", path, exc.reason, str(exc)) from exc
    return text


async def read_source(path: Path, limits: LimitsConfig, extract: ExtractConfig) -> Document:
    """The source as the service reads it (sandboxed extraction); :class:`BadInput` when it cannot."""
    from daemon.service import build_reader

    data = _read(path, "source", limits.max_input_bytes)
    async with build_reader(limits, extract) as reader:
        try:
            return await reader.read(data, doc_id=path.name, source="check-summary", hint=path.name)
        except DocumentError as exc:
            raise BadInput("source", path, exc.reason, str(exc)) from exc


def _read(path: Path, which: str, limit: int) -> bytes:
    """A file the user named (links followed; no FIFO, device or folder), at most ``limit`` bytes."""
    try:
        data = read_bounded(
            path, limit, check_size=lambda size: check_size(size, limit), follow_symlinks=True
        )
        check_size(len(data), limit)
    except DocumentError as exc:
        raise BadInput(which, path, exc.reason, str(exc)) from exc
    except NotRegularFileError as exc:
        raise BadInput(which, path, "not_regular", str(exc)) from exc
    except OSError as exc:
        raise BadInput(which, path, "unreadable", exc.strerror or str(exc)) from exc
    return data


def _parts(document: Document, plan: PartsPlan) -> tuple[list[Part], dict[str, Any]]:
    if plan.tokenizer is None:
        return parts_of_text(document.text, document.layout), {"by": "paragraphs", "why": plan.why}
    from daemon.summary.chunking import split_into_chunks, tokenize_text

    tokens = tokenize_text(plan.tokenizer, document.text)
    chunks = split_into_chunks(tokens, plan.part_tokens, plan.overlap_tokens)
    cut = []
    for number, chunk in enumerate(chunks, 1):
        where = document.layout.source_of(chunk.char_start, chunk.char_end)
        pages = where.get("pages")
        cut.append(
            Part(
                id=number,
                text=document.text[chunk.char_start : chunk.char_end],
                chars=(chunk.char_start, chunk.char_end),
                pages=(pages[0], pages[1]) if pages else None,
                section=tuple(where.get("section") or ()),
            )
        )
    return cut, {"by": "chunks", "part_tokens": plan.part_tokens}


def chunking_plan(config: Config) -> PartsPlan:
    """The default profile's chunking with the served model's tokenizer, or paragraphs (and why) when
    the tokenizer cannot be loaded."""
    from daemon.errors import ConfigError
    from daemon.models.files import load_tokenizer
    from daemon.summary.profiles import build_profiles

    try:
        tokenizer = load_tokenizer(config.engine)
        profile = build_profiles(config, tokenizer).default
    except (OSError, ValueError, ConfigError) as exc:
        return PartsPlan(why=f"the model's tokenizer cannot be loaded: {exc}")
    budget = profile.budget
    return PartsPlan(
        tokenizer=tokenizer, part_tokens=budget.part_input_tokens, overlap_tokens=budget.overlap_tokens
    )
