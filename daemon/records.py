"""The records docsumd writes, in one place: their fields, their encoding, their Kafka headers.

* :class:`Summary`: what summarizing one document produced (typed; metrics and records read it).
* :class:`ResultRecord`, :class:`FailureRecord`, :class:`DeadLetterRecord`: each record's fields,
  typed and described: the one home of the records' shape. The builders below are checked against
  them by mypy, :func:`json_schemas` turns them into the JSON Schemas published with the docs, and
  a test validates real records against those.
* :func:`result_record`: the JSON object of a summarized document (result file, output message).
* :func:`failure_record`: the JSON object of a refused or failed document (error file, dead letter).
* :func:`dead_letter`: a failure record wrapped with the Kafka message it came from;
  :func:`reduced_dead_letter`: its smallest form, for when the whole one cannot be written.
* :func:`clip_text` / :func:`carried_bytes`: bounded copies of what a record carries from its input
  (a message, a key), with the original size and a hash where cut.
* :func:`result_headers` / :func:`dead_letter_headers`: the headers of output messages.
* :func:`request_id` / :func:`parse_request_id`: the id of one engine request, ``DOC:KINDN:HEX``.
* :func:`encode_record`: how a record becomes bytes (pretty for files, compact for Kafka); it
  always gives valid UTF-8 JSON.
* :func:`fallback_failure_record`: the failure record of last resort, when a document's own record
  cannot be encoded.

How an OS file name becomes text and JSON fields (ids, ``metadata.file_name``) is
:mod:`daemon.fs.names`' job (:func:`~daemon.fs.names.display_name`, :func:`~daemon.fs.names.name_fields`).

Changing a field of a record means changing its typed record class here (then
``python scripts/gen_docs.py`` regenerates the published schemas and the records reference).
"""

from __future__ import annotations

import base64
import hashlib
import json
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any, Final, Literal, NotRequired, cast, get_args

from pydantic import ConfigDict, Field, with_config
from typing_extensions import TypedDict

from daemon import __version__
from daemon.document.types import Format
from daemon.errors import Reason
from daemon.fs.names import is_utf8
from daemon.typing import Strategy

if TYPE_CHECKING:
    from daemon.document.types import Document
    from daemon.errors import DocumentError

Record = dict[str, Any]
"""A record as a JSON object."""
Headers = list[tuple[str, bytes | None]]
"""Kafka message headers: (name, value) pairs, in order (a value may be null in Kafka's format)."""

MESSAGE_BYTES: Final = 4096
"""A failure record's ``message`` is cut to this many bytes: it may quote the input (a field name)."""
OUTPUT_BYTES: Final = 16384
"""An ``invalid_output`` failure record keeps at most this much of the model's last output, in bytes."""
REDUCED_TEXT_BYTES: Final = 256
"""What a reduced dead letter keeps of its id and message, in bytes."""

NO_CHECKS: Final[dict[str, Any]] = {
    "version": "none",
    "counts": {"supported": 0, "unsupported": 0, "unchecked": 0},
    "by_kind": {},
    "unsupported": [],
}
"""The ``checks`` of a summary no check ran on (a summary built by hand, in tests)."""

RESULT_HEADERS: Final = ("model", "prompt_version", "profile", "profile_version")
"""Headers every output message carries, taken from its result record (input headers of these names
are replaced)."""


@dataclass(frozen=True, slots=True)
class Summary:
    """What summarizing one document produced."""

    text: str
    strategy: str
    style: str
    max_summary_tokens: int
    prompt_version: str
    profile: str
    """The profile it was summarized under (a name from the config)."""
    profile_version: str
    """The version of that profile's wording and sampling (see
    :func:`~daemon.summary.profiles.profile_version`)."""
    parts: int
    depth: int
    requests: int
    prompt_tokens: int
    generated_tokens: int
    summary_tokens: int
    document_tokens: int
    dropped_tokens: int
    cached_prompt_tokens: int
    finish_reason: str | None
    first_token_s: float | None
    engine_s: float
    structured: dict[str, Any] | None = None
    """The summary as an object valid against its profile's JSON schema (profiles with
    ``json_schema_file``; ``text`` is then the JSON as generated), else None."""
    sources: tuple[dict[str, Any], ...] = ()
    """Where in the document each request's text came from, in order: for a staged summary one entry
    per part, else the one span (two for ``head_tail``) that was read. Each has ``part``, ``chars``
    (``[start, end)`` in the document's text) and, for documents with a layout, ``pages`` and/or
    ``section``/``headings`` (:meth:`~daemon.document.types.Layout.source_of`)."""
    reused_document: bool = False
    """Whether the whole summary came from the summary cache (the same bytes under the same settings)."""
    reused_parts: int = 0
    """Parts whose summaries came from the summary cache."""
    reused_requests: int = 0
    """Requests (parts, combine steps, the final one) whose output came from the summary cache; not
    counted in ``requests``."""
    reused_prompt_tokens: int = 0
    """Prompt tokens the reused outputs cost when they were made; not counted in ``prompt_tokens``."""
    reused_generated_tokens: int = 0
    """Tokens the reused outputs generated when they were made; not in ``generated_tokens``."""

    checks: dict[str, Any] | None = None
    """The grounding check of the summary (:class:`SummaryChecks`), None where none ran."""
    evidence: tuple[dict[str, Any], ...] = ()
    """Each summary sentence and the parts it draws on (:class:`EvidenceSentence`)."""
    check_s: float = 0.0
    """Seconds the check and the evidence took beyond the engine's (see ``timings.check_s``)."""

    @property
    def truncated(self) -> bool:
        """Whether part of the document was not read by the model."""
        return self.dropped_tokens > 0


# -- the records' shape: one home for every field, its type and its meaning ------------------------
# typing_extensions' TypedDict: pydantic reads it (and its NotRequired keys) on Python 3.11.


def _doc(description: str, **schema: Any) -> Any:
    """A field's description (and extra JSON Schema keywords), for :func:`json_schemas`."""
    return Field(description=description, json_schema_extra=schema or None)


_STRATEGIES: Final = ("single", *get_args(Strategy))
_STYLES: Final = ("prose", "bullets", "json")
_CLOSED: Final = ConfigDict(extra="forbid")
"""Every record object whose fields docsumd defines refuses others in its schema."""


@with_config(_CLOSED)
class SourceSpan(TypedDict):
    """Where the text of one request came from."""

    part: Annotated[int, _doc("The part's number, from 1 (1 for a document read in one request).")]
    chars: Annotated[list[int], _doc("[start, end) character offsets in the document's text.")]
    pages: NotRequired[Annotated[list[int], _doc("[first, last] page (PDF).")]]
    section: NotRequired[Annotated[list[str], _doc("The heading path at the span's start.")]]
    headings: NotRequired[Annotated[list[str], _doc("Headings that start inside the span.")]]


@with_config(_CLOSED)
class Reused(TypedDict):
    """What of a result came from the summary cache (Guides: The summary cache): work made before
    for the same text under the same model and settings. ``prompt_tokens`` and ``generated_tokens``
    leave it out."""

    document: Annotated[
        bool,
        _doc("The whole result: the same input bytes under the same settings (no engine request made)."),
    ]
    parts: Annotated[int, _doc("Parts whose summaries were reused (of parts).")]
    requests: Annotated[
        int, _doc("Requests whose output was reused: parts, combine steps and the final one.")
    ]
    prompt_tokens: Annotated[int, _doc("Prompt tokens the reused outputs cost when they were made.")]
    generated_tokens: Annotated[int, _doc("Tokens the reused outputs generated when they were made.")]


@with_config(_CLOSED)
class Timings(TypedDict):
    """Seconds spent on the document."""

    queued_s: Annotated[float, _doc("From intake until its first engine request was sent.")]
    first_token_s: Annotated[float | None, _doc("vLLM's time to first token of its first request.")]
    engine_s: Annotated[float, _doc("In the engine, all its requests.")]
    check_s: Annotated[
        float,
        _doc(
            "The grounding check and the evidence after the final summary was made (the source's index "
            "is built while the engine works, and counts here only where the engine finished first)."
        ),
    ]
    total_s: Annotated[float, _doc("From intake to the result written.")]


_KINDS: Final = ("money", "percent", "date", "duration", "section", "number", "term", "name")
"""The grounding check's kinds of item (:class:`daemon.summary.grounding.Kind`)."""


@with_config(_CLOSED)
class EvidencePart(TypedDict):
    """One passage of the document a summary sentence draws on."""

    part: Annotated[
        int, _doc("The sources[] entry (the part of the document a request read) the passage lies in.")
    ]
    chars: Annotated[list[int], _doc("[start, end) of the passage in the document's extracted text.")]
    pages: NotRequired[Annotated[list[int], _doc("[first, last] page of the passage (PDF).")]]
    section: NotRequired[Annotated[list[str], _doc("The heading path at the passage's start.")]]
    score: Annotated[
        float,
        _doc(
            "How much of the sentence's content (rare words weighing most) the passage holds, or the "
            "weakest combine step leading to it, from 0 to 1."
        ),
    ]


@with_config(_CLOSED)
class EvidenceSentence(TypedDict):
    """One sentence of the summary and the passages it draws on."""

    sentence: Annotated[int, _doc("Its index among the summary's sentences, from 0.")]
    text: Annotated[str, _doc("The sentence, whitespace made single spaces.")]
    chars: Annotated[
        list[int],
        _doc("[start, end) in the summary; for a structured summary, in the string value of field."),
    ]
    field: NotRequired[
        Annotated[str, _doc("Structured summaries: the JSON Pointer of the string value it is in.")]
    ]
    parts: Annotated[list[EvidencePart], _doc("Best first, at most 3; empty: no passage carries its words.")]


@with_config(_CLOSED)
class UnsupportedItem(TypedDict):
    """An item of the summary its source does not hold."""

    text: Annotated[str, _doc("As written in the summary.")]
    kind: Annotated[str, _doc("What it is.", enum=list(_KINDS))]
    sentence: Annotated[int, _doc("The index of its sentence (evidence[].sentence).")]
    chars: Annotated[
        list[int],
        _doc("[start, end) in the summary; for a structured summary, in the string value of field."),
    ]
    field: NotRequired[
        Annotated[str, _doc("Structured summaries: the JSON Pointer of the string value it is in.")]
    ]


@with_config(_CLOSED)
class CheckCounts(TypedDict):
    """Items of the summary, by outcome."""

    supported: Annotated[int, _doc("Items the source holds.")]
    unsupported: Annotated[int, _doc("Items it does not (listed in unsupported).")]
    unchecked: Annotated[int, _doc("Items beyond the check's bound (2,000), not looked up.")]


@with_config(_CLOSED)
class KindCounts(TypedDict):
    """Items of one kind, by outcome."""

    supported: int
    unsupported: int


@with_config(_CLOSED)
class SummaryChecks(TypedDict):
    """The grounding check of a summary against the text its requests read."""

    version: Annotated[str, _doc("The checker's version: what is read as an item and how it is matched.")]
    counts: CheckCounts
    by_kind: Annotated[
        dict[str, KindCounts], _doc("Counts per kind of item (kinds without an item left out).")
    ]
    unsupported: Annotated[list[UnsupportedItem], _doc("The items the source does not hold, in order.")]
    on_unsupported: NotRequired[
        Annotated[str, _doc("The profile's policy: flag, retry or fail.", enum=["flag", "retry", "fail"])]
    ]
    retried: NotRequired[
        Annotated[
            bool,
            _doc("Whether the final step was drawn a second time (retry); the summary kept has fewer items."),
        ]
    ]
    retry_error: NotRequired[
        Annotated[
            str,
            _doc(
                "The reason code of a second draw that gave no summary (an invalid output, an engine "
                "error); the first summary stands. Absent when the second draw gave one."
            ),
        ]
    ]


@with_config(_CLOSED)
class FolderMetadata(TypedDict):
    """``metadata`` of a document from the watched folder."""

    file_name: Annotated[
        str, _doc("The input's file name; undecodable bytes shown as \\xNN (then file_name_b64 is set).")
    ]
    file_name_b64: NotRequired[
        Annotated[str, _doc("The name's exact bytes in base64, when they are not UTF-8.")]
    ]


@with_config(_CLOSED)
class FilesMetadata(TypedDict):
    """``metadata`` of a document given to ``docsumd summarize``."""

    path: Annotated[str, _doc("The path the command was given.")]


@with_config(_CLOSED)
class KafkaMetadata(TypedDict):
    """``metadata`` of a Kafka message: where it was, its key and headers (bounded copies)."""

    topic: Annotated[str, _doc("The input topic.")]
    partition: Annotated[int, _doc("Its partition.")]
    offset: Annotated[int, _doc("Its offset.")]
    timestamp_ms: Annotated[int | None, _doc("The message's timestamp, in ms since the epoch.")]
    key: Annotated[str | None, _doc("The key as text (undecodable bytes replaced), at most max_key_bytes.")]
    key_bytes: NotRequired[Annotated[int, _doc("The key's whole size, when it was cut.")]]
    key_sha256: NotRequired[Annotated[str, _doc("The whole key's SHA-256, when it was cut.")]]
    headers: Annotated[
        dict[str, str | None],
        _doc("Headers as text (null: a header without a value), at most max_header_bytes."),
    ]
    headers_bytes: NotRequired[Annotated[int, _doc("The headers' whole size, when some were left out.")]]
    headers_count: NotRequired[Annotated[int, _doc("How many headers there were, when some were left out.")]]


@with_config(_CLOSED)
class ReducedMetadata(TypedDict, total=False):
    """``metadata`` of a reduced dead letter (numbers and hashes only), and of a record of last resort
    (empty)."""

    partition: int
    offset: int
    timestamp_ms: int | None
    key_bytes: int
    key_sha256: str
    headers_bytes: int
    headers_count: int


Metadata = FolderMetadata | KafkaMetadata | FilesMetadata | ReducedMetadata
"""What a record says of its input's origin: one shape per source."""


@with_config(_CLOSED)
class ResultRecord(TypedDict):
    """A summarized document: ``outbox/STEM.summary.json``, or a message on the output topic."""

    id: Annotated[
        str,
        _doc(
            "The document id: the input's file name (folder), or the message's id, else its key, else "
            "TOPIC-PARTITION-OFFSET (Kafka)."
        ),
    ]
    source: Annotated[str, _doc("Where it came from: folder, kafka, or files (docsumd summarize).")]
    summary: Annotated[str, _doc("The summary (for a structured profile: the JSON text as generated).")]
    structured: Annotated[
        dict[str, Any] | None,
        _doc(
            "The summary as an object valid against the profile's JSON Schema (structured profiles), "
            "else null."
        ),
    ]
    model: Annotated[str, _doc("The served model's name (engine.served_model_name).")]
    prompt_version: Annotated[
        str, _doc("Version of the prompts' layout and docsumd's own wording, e.g. summary-v4.")
    ]
    profile: Annotated[str, _doc("The profile the document was summarized under.")]
    profile_version: Annotated[
        str, _doc("12 hex digits versioning the profile's instructions, schema and sampling.")
    ]
    strategy: Annotated[
        str,
        _doc(
            "single (one request read everything), map_reduce (staged; nothing dropped), head or head_tail "
            "(truncated: dropped_tokens were not read).",
            enum=list(_STRATEGIES),
        ),
    ]
    style: Annotated[str, _doc("How the summary is written.", enum=list(_STYLES))]
    max_summary_tokens: Annotated[int, _doc("The final summary's length limit, in tokens.")]
    truncated: Annotated[bool, _doc("Whether part of the document was not read (head, head_tail).")]
    parts: Annotated[int, _doc("Parts the document was cut into (1: it fit one request).")]
    depth: Annotated[int, _doc("Levels of summaries, the final one included.")]
    requests: Annotated[int, _doc("Engine requests made for it, in all (reused outputs not counted).")]
    document_tokens: Annotated[int, _doc("The document's length in the served model's tokenizer.")]
    dropped_tokens: Annotated[int, _doc("Document tokens not read (truncating strategies only).")]
    prompt_tokens: Annotated[
        int, _doc("Prompt tokens the engine read for this result, over all its requests (not reused ones).")
    ]
    generated_tokens: Annotated[
        int, _doc("Tokens the engine generated for this result, over all its requests (not reused ones).")
    ]
    summary_tokens: Annotated[int, _doc("The final summary's length in tokens.")]
    cached_prompt_tokens: Annotated[int, _doc("Prompt tokens vLLM's prefix cache served.")]
    finish_reason: Annotated[
        str | None, _doc("Why the final request stopped: stop (the model ended it) or length (the limit).")
    ]
    reused: Annotated[Reused, _doc("What came from the summary cache instead of the engine.")]
    sha256: Annotated[str, _doc("SHA-256 of the input bytes as received.")]
    input_bytes: Annotated[int, _doc("The input's size in bytes.")]
    encoding: Annotated[str, _doc("How the text was decoded (utf-8, utf-16, ...).")]
    format: Annotated[
        str, _doc("What the input's bytes were read as.", enum=[member.value for member in Format])
    ]
    extraction: Annotated[
        dict[str, Any], _doc("What extraction recorded, e.g. pages and extractor (empty for text).")
    ]
    sources: Annotated[
        list[SourceSpan], _doc("Where each request's text came from, in order: one entry per part.")
    ]
    metadata: Annotated[Metadata, _doc("Where the input came from (one shape per source).")]
    checks: Annotated[
        SummaryChecks,
        _doc(
            "The grounding check: numbers, dates, amounts, names and other items of the summary that the "
            "text its requests read does not hold (Guides: Checking a summary)."
        ),
    ]
    evidence: Annotated[
        list[EvidenceSentence],
        _doc(
            "Each sentence of the summary with the passages of the document it draws on (through the "
            "combine steps of a staged summary)."
        ),
    ]
    timings: Timings
    created_at: Annotated[str, _doc("When the record was made (ISO 8601, UTC).", format="date-time")]
    docsumd_version: Annotated[str, _doc("The docsumd version that wrote it.")]


@with_config(_CLOSED)
class FailureRecord(TypedDict):
    """A refused or failed document: ``failed/STEM.error.json`` (with ``summarize``:
    ``OUTBOX/STEM.error.json``)."""

    id: Annotated[str, _doc("The document id, as in a result.")]
    source: Annotated[str, _doc("Where it came from: folder, kafka, or files.")]
    reason: Annotated[Reason, _doc("Why it failed: a stable code (Reference: Reason codes).")]
    message: Annotated[str, _doc("What went wrong, for people (at most 4 KiB; may quote the input).")]
    sha256: Annotated[str | None, _doc("SHA-256 of the input bytes, when they were read.")]
    input_bytes: Annotated[int | None, _doc("The input's size, when known.")]
    metadata: Annotated[Metadata, _doc("Where the input came from; empty in a record of last resort.")]
    failed_at: Annotated[str, _doc("When the record was made (ISO 8601, UTC).", format="date-time")]
    docsumd_version: Annotated[str, _doc("The docsumd version that wrote it.")]
    output: NotRequired[
        Annotated[str, _doc("invalid_output only: the model's last output (at most 16 KiB).")]
    ]
    summary: NotRequired[Annotated[str, _doc("unsupported_claims only: the summary that failed its check.")]]
    checks: NotRequired[Annotated[SummaryChecks, _doc("unsupported_claims only: its grounding check.")]]
    evidence: NotRequired[Annotated[list[EvidenceSentence], _doc("unsupported_claims only: its evidence.")]]


@with_config(_CLOSED)
class DeadLetterRecord(FailureRecord):
    """A failure of a Kafka document: the failure record with the message it came from, on the
    dead-letter topic. Reduced (``reduced: true``) when the whole one cannot be written: id and
    message cut to 256 bytes, no payload, metadata with numbers and hashes only."""

    topic: Annotated[str, _doc("The input topic.")]
    partition: Annotated[int, _doc("Its partition.")]
    offset: Annotated[int, _doc("Its offset.")]
    payload: Annotated[
        str | None,
        _doc("The first dead_letter_payload_bytes of the message's value (null: no value, or reduced)."),
    ]
    payload_encoding: Annotated[
        Literal["utf-8", "base64"], _doc("utf-8 text, or base64 when the value is not text.")
    ]
    payload_bytes: Annotated[int, _doc("The value's whole size.")]
    payload_truncated: Annotated[bool, _doc("Whether payload holds less than the whole value.")]
    payload_sha256: Annotated[str | None, _doc("SHA-256 of the whole value (null: no value).")]
    reduced: Annotated[bool, _doc("Whether this is the reduced form.")]


RECORD_TYPES: Final = {"result": ResultRecord, "failure": FailureRecord, "dead-letter": DeadLetterRecord}
"""Every record docsumd writes, by the name its published JSON Schema carries."""


def json_schemas() -> dict[str, dict[str, Any]]:
    """The JSON Schema (draft 2020-12) of each record of :data:`RECORD_TYPES`, by name. Unknown fields
    are refused in every object whose fields docsumd defines, so a record and its schema cannot drift
    apart unnoticed."""
    from pydantic import TypeAdapter

    schemas = {}
    for name, kind in RECORD_TYPES.items():
        schema = TypeAdapter(kind).json_schema()
        schemas[name] = {"$schema": "https://json-schema.org/draft/2020-12/schema", **_without_titles(schema)}
    return schemas


def _without_titles(node: Any) -> Any:
    """``node`` without pydantic's generated ``title`` of each property (the names say it)."""
    if isinstance(node, dict):
        return {
            key: _without_titles(value)
            for key, value in node.items()
            if not (key == "title" and isinstance(value, str) and "properties" not in node)
        }
    if isinstance(node, list):
        return [_without_titles(value) for value in node]
    return node


def utc_now_iso() -> str:
    """The current time as an ISO 8601 UTC string (records carry it)."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def result_record(
    document: Document, summary: Summary, *, model: str, queued_s: float, total_s: float
) -> Record:
    """The JSON object written for a summarized document (folder result file, Kafka message)."""
    record: ResultRecord = {
        "id": document.id,
        "source": document.source,
        "summary": summary.text,
        "structured": summary.structured,
        "model": model,
        "prompt_version": summary.prompt_version,
        "profile": summary.profile,
        "profile_version": summary.profile_version,
        "strategy": summary.strategy,
        "style": summary.style,
        "max_summary_tokens": summary.max_summary_tokens,
        "truncated": summary.truncated,
        "parts": summary.parts,
        "depth": summary.depth,
        "requests": summary.requests,
        "document_tokens": summary.document_tokens,
        "dropped_tokens": summary.dropped_tokens,
        "prompt_tokens": summary.prompt_tokens,
        "generated_tokens": summary.generated_tokens,
        "summary_tokens": summary.summary_tokens,
        "cached_prompt_tokens": summary.cached_prompt_tokens,
        "finish_reason": summary.finish_reason,
        "reused": {
            "document": summary.reused_document,
            "parts": summary.reused_parts,
            "requests": summary.reused_requests,
            "prompt_tokens": summary.reused_prompt_tokens,
            "generated_tokens": summary.reused_generated_tokens,
        },
        "sha256": document.sha256,
        "input_bytes": document.size_bytes,
        "encoding": document.encoding,
        "format": document.format.value,
        "extraction": document.extraction,
        "sources": cast("list[SourceSpan]", list(summary.sources)),
        "metadata": cast("Metadata", document.metadata),
        "checks": cast("SummaryChecks", summary.checks or NO_CHECKS),
        "evidence": cast("list[EvidenceSentence]", list(summary.evidence)),
        "timings": {
            "queued_s": round(queued_s, 4),
            "first_token_s": None if summary.first_token_s is None else round(summary.first_token_s, 4),
            "engine_s": round(summary.engine_s, 4),
            "check_s": round(summary.check_s, 4),
            "total_s": round(total_s, 4),
        },
        "created_at": utc_now_iso(),
        "docsumd_version": __version__,
    }
    return cast(Record, record)


def failure_record(
    *,
    doc_id: str,
    source: str,
    error: DocumentError,
    metadata: dict[str, Any],
    sha256: str | None,
    input_bytes: int | None,
) -> Record:
    """The JSON object written for a refused or failed document (error file, dead letter); an
    ``invalid_output`` failure also has ``output``, the model's last output (cut to
    :data:`OUTPUT_BYTES`)."""
    record: FailureRecord = {
        "id": doc_id,
        "source": source,
        "reason": error.reason,
        "message": clip_text(error.message, MESSAGE_BYTES),
        "sha256": sha256,
        "input_bytes": input_bytes,
        "metadata": cast("Metadata", metadata),
        "failed_at": utc_now_iso(),
        "docsumd_version": __version__,
    }
    if error.output is not None:
        record["output"] = clip_text(error.output, OUTPUT_BYTES)
    merged: Record = {**record, **error.fields}
    return merged


def fallback_failure_record(failure: Record, problem: str) -> Record:
    """A failure record that encodes whatever ``failure`` held: its id made ASCII-safe, its reason
    kept, its message telling why the full record could not be written, and no metadata."""
    doc_id = failure.get("id")
    record: FailureRecord = {
        "id": doc_id if isinstance(doc_id, str) and is_utf8(doc_id) else ascii(doc_id),
        "source": str(failure.get("source", "")),
        "reason": cast("Reason", str(failure.get("reason", "internal_error"))),
        "message": f"{failure.get('message', '')} (its full failure record could not be written: {problem})",
        "sha256": failure.get("sha256") if isinstance(failure.get("sha256"), str) else None,
        "input_bytes": failure.get("input_bytes") if isinstance(failure.get("input_bytes"), int) else None,
        "metadata": {},
        "failed_at": utc_now_iso(),
        "docsumd_version": __version__,
    }
    return cast(Record, record)


def dead_letter(
    failure: Record,
    *,
    topic: str,
    partition: int,
    offset: int,
    value: bytes | None,
    payload_bytes: int,
    value_sha256: str | None = None,
) -> Record:
    """``failure`` with the Kafka message it came from: coordinates and the first ``payload_bytes`` of
    its value (UTF-8 text, or base64 when not text), with the value's full size and SHA-256 (pass
    ``value_sha256`` when it is known, to hash a large value once)."""
    whole = value or b""
    if value is not None and value_sha256 is None:
        value_sha256 = hashlib.sha256(whole).hexdigest()
    kept = whole[:payload_bytes]
    try:
        payload, encoding = kept.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        payload, encoding = base64.b64encode(kept).decode("ascii"), "base64"
    return {
        **failure,
        "topic": topic,
        "partition": partition,
        "offset": offset,
        "payload": payload if value is not None else None,
        "payload_encoding": encoding,
        "payload_bytes": len(whole),
        "payload_truncated": len(kept) < len(whole),
        "payload_sha256": value_sha256,
        "reduced": False,
    }


def reduced_dead_letter(letter: Record) -> Record:
    """The smallest form of a dead letter made by :func:`dead_letter`, for when the whole one cannot be
    written (it does not fit ``max_request_bytes``, or the broker refused it as too large): id and
    message cut to :data:`REDUCED_TEXT_BYTES`, no payload (its size and hash stay), no key or headers
    in the metadata (their sizes and hashes stay when they were cut), and ``"reduced": true``. A few
    kilobytes at most, whatever the input."""
    metadata = letter.get("metadata")
    kept = metadata if isinstance(metadata, dict) else {}
    return {
        "id": clip_text(str(letter.get("id", "")), REDUCED_TEXT_BYTES),
        "source": letter.get("source"),
        "reason": letter.get("reason"),
        "message": clip_text(str(letter.get("message", "")), REDUCED_TEXT_BYTES),
        "sha256": letter.get("sha256"),
        "input_bytes": letter.get("input_bytes"),
        "metadata": {name: value for name, value in kept.items() if name in _REDUCED_METADATA},
        "failed_at": letter.get("failed_at"),
        "docsumd_version": letter.get("docsumd_version"),
        "topic": clip_text(str(letter.get("topic", "")), REDUCED_TEXT_BYTES),
        "partition": letter.get("partition"),
        "offset": letter.get("offset"),
        "payload": None,
        "payload_encoding": letter.get("payload_encoding"),
        "payload_bytes": letter.get("payload_bytes"),
        "payload_truncated": bool(letter.get("payload_bytes")),
        "payload_sha256": letter.get("payload_sha256"),
        "reduced": True,
    }


_REDUCED_METADATA: Final = frozenset(
    {"partition", "offset", "timestamp_ms", "key_bytes", "key_sha256", "headers_bytes", "headers_count"}
)
"""Metadata a reduced dead letter keeps: numbers and hashes only, whatever the input."""


def clip_text(text: str, max_bytes: int) -> str:
    """``text`` cut to at most ``max_bytes`` of UTF-8, on a character boundary, ending in "…" when cut.
    Lone surrogates (which UTF-8 cannot hold) become "?", so the result always encodes."""
    head = text[: max_bytes + 1]  # a character is at least one byte: this covers max_bytes and more
    data = head.encode("utf-8", "replace")
    if len(head) == len(text) and len(data) <= max_bytes:
        return data.decode("utf-8")
    return data[: max(0, max_bytes - 3)].decode("utf-8", "ignore") + "…"


def carried_bytes(name: str, data: bytes | None, limit: int) -> Record:
    """A bounded copy of ``data`` (a key) as record fields: ``{name: text}`` (UTF-8, undecodable bytes
    replaced; None for None) of its first ``limit`` bytes and, when that cut it, ``NAME_bytes`` (its
    whole size) and ``NAME_sha256``."""
    if data is None:
        return {name: None}
    fields: Record = {name: data[:limit].decode("utf-8", "replace")}
    if len(data) > limit:
        fields[f"{name}_bytes"] = len(data)
        fields[f"{name}_sha256"] = hashlib.sha256(data).hexdigest()
    return fields


def result_headers(input_headers: Iterable[tuple[str, bytes | None]], result: Record) -> Headers:
    """An output message's headers: the input's, then those of :data:`RESULT_HEADERS` from the result."""
    headers: Headers = [(key, value) for key, value in input_headers if key not in RESULT_HEADERS]
    headers += [(name, str(result.get(name, "")).encode("utf-8")) for name in RESULT_HEADERS]
    return headers


def dead_letter_headers(input_headers: Iterable[tuple[str, bytes | None]], failure: Record) -> Headers:
    """A dead letter's headers: the input's, then ``reason``."""
    return [*input_headers, ("reason", str(failure.get("reason", "")).encode("utf-8"))]


def encode_record(record: Record, *, pretty: bool = False) -> bytes:
    """A record as UTF-8 JSON: indented with a final newline for files, compact for messages.

    Always valid UTF-8: a string that still holds lone surrogates (an undecodable OS name that did
    not go through :func:`daemon.fs.names.name_fields`) is written with JSON ``\\u`` escapes instead
    of failing. A value JSON cannot hold (an object, a circular reference) raises :class:`TypeError`
    or :class:`ValueError`."""
    try:
        return _dumps(record, pretty=pretty, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return _dumps(record, pretty=pretty, ensure_ascii=True).encode("ascii")


def _dumps(record: Record, *, pretty: bool, ensure_ascii: bool) -> str:
    if pretty:
        return json.dumps(record, ensure_ascii=ensure_ascii, indent=2) + "\n"
    return json.dumps(record, ensure_ascii=ensure_ascii, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class RequestId:
    """The parts of an engine request id: the document, the request's kind, its number in the document."""

    doc_id: str
    kind: str
    number: int


def request_id(doc_id: str, kind: str, number: int) -> str:
    """The id of a document's ``number``-th engine request: ``DOC:KINDN:HEX`` (HEX keeps ids unique
    when a document is processed again while an earlier request of it is still being aborted)."""
    return f"{doc_id}:{kind}{number}:{uuid.uuid4().hex[:8]}"


def parse_request_id(value: str) -> RequestId:
    """The parts of an id made by :func:`request_id` (a document id may itself contain ``:``)."""
    doc_id, kind_number, _ = value.rsplit(":", 2)
    kind = kind_number.rstrip("0123456789")
    return RequestId(doc_id, kind, int(kind_number[len(kind) :]))
