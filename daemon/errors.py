"""Every error docsumd raises on purpose, and what the service does with it.

Three kinds, and only three:

* **Per document** (recoverable): :class:`DocumentError`, with a stable ``reason`` code (every one
  in :data:`REASONS`, with what it means and what to do about it). The document gets a failure
  record (error file, dead letter) and a metric, its input is acknowledged, and the daemon goes on.
  An engine :class:`RequestError` (vLLM refused or failed one request) becomes a
  ``DocumentError("engine_error", ...)`` in the summarizer. A sink that cannot write one document's
  record (it cannot be encoded, the file system refuses its name) raises a ``DocumentError`` too:
  nothing was acknowledged, and the document gets its failure record instead.
* **Fatal** (the whole daemon): :class:`EngineDeadError` (the engine is gone), :class:`SinkError`
  (a result or failure record cannot be written, so nothing may be acknowledged), and
  :class:`FatalError`, which the service raises for any of them. Intake stops, unfinished inputs stay
  unacknowledged, and the process exits 1 so its supervisor restarts it.
* **Configuration**: :class:`ConfigError`. The process exits 2 before or instead of starting;
  restarting would not help (the systemd unit does not restart on exit code 2).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

Reason = Literal[
    "empty",
    "whitespace_only",
    "too_large",
    "too_expanded",
    "binary",
    "encrypted",
    "malformed",
    "no_text",
    "extract_failed",
    "invalid_utf8",
    "invalid_encoding",
    "nul_bytes",
    "unreadable",
    "not_regular",
    "crash_loop",
    "engine_error",
    "too_long",
    "invalid_output",
    "unsupported_claims",
    "invalid_options",
    "internal_error",
    "invalid_message",
]
"""Every reason a document can fail for: the ``reason`` of failure records and dead letters, the
``outcome`` label of the document metrics. Users alert and branch on them: keep them stable."""


@dataclass(frozen=True, slots=True)
class ReasonInfo:
    """What a failure reason tells its reader (the reference page is generated from these)."""

    meaning: str
    """When a document fails with it."""
    action: str
    """What to do about it."""
    cause: Literal["input", "docsumd", "engine", "storage"]
    """Where to look first: the input (its producer), docsumd itself, the engine, the storage."""


REASONS: Final[Mapping[Reason, ReasonInfo]] = {
    "empty": ReasonInfo(
        "The input has zero bytes.",
        "Fix the producer; a writer that creates the file before writing it should write elsewhere and "
        "rename it into the inbox.",
        "input",
    ),
    "whitespace_only": ReasonInfo(
        "Nothing but whitespace after decoding (no-break spaces included).",
        "Fix the producer.",
        "input",
    ),
    "too_large": ReasonInfo(
        "Over limits.max_input_bytes (default 16 MiB; extracted text counted as UTF-8), refused without "
        "being read; a PDF over extract.max_pages or whose streams decode to more than "
        "extract.max_unpacked_bytes or extract.max_compression_ratio allow; a DOCX or ODT whose entries "
        "unpack over them, or extracted text over "
        "extract.max_output_chars. Kafka: a value over max_message_bytes, a key or id over max_key_bytes, "
        "headers over max_header_bytes, or a result that would not fit max_request_bytes (refused after "
        "it was made).",
        "Raise the limit the message names if such inputs are legitimate; otherwise fix the producer.",
        "input",
    ),
    "too_expanded": ReasonInfo(
        "A PDF, DOCX, ODT or HTML file whose extracted text, as UTF-8, would be over "
        "extract.max_expansion_ratio (default 20) times the input's bytes and over "
        "extract.expansion_floor_bytes (default 1 MiB): a small file that stands for a large text (a list "
        "counter of millions of letters, one page content shown on thousands of pages). Extraction stops "
        "as soon as the text passes the cap.",
        "Real documents stay far below the ratio; if such inputs are legitimate, raise "
        "extract.max_expansion_ratio or extract.expansion_floor_bytes (each document is counted at that cap "
        "in limits.max_inflight_bytes while it is extracted); otherwise fix the producer.",
        "input",
    ),
    "binary": ReasonInfo(
        "Not a format docsumd reads: gzip, ZIP (other than DOCX or ODT), bzip2, xz, zstd, images, "
        "executables or legacy .doc by their signature, or many control bytes. PDF, DOCX and ODT too when "
        "extract.enabled is false.",
        "Convert the document to a supported format (Guides: Formats).",
        "input",
    ),
    "encrypted": ReasonInfo(
        "A password-protected PDF, DOCX (an encrypted OOXML container) or ODT, or a ZIP entry with a "
        "password.",
        "Send the document without its password.",
        "input",
    ),
    "malformed": ReasonInfo(
        "A PDF, DOCX, ODT or HTML file that cannot be parsed: truncated, corrupt, garbage behind its "
        "signature, ZIP headers that lie about sizes, PDF streams inside each other's data, XML with a "
        "document type declaration or entities (billion laughs, XXE), nesting deeper than 256, an HTML "
        "attribute value or run of text over libxml2's 10,000,000 characters (the message says which).",
        "Fix or re-export the document; the message says what the parser found.",
        "input",
    ),
    "no_text": ReasonInfo(
        "A PDF, DOCX, ODT or HTML file with no text: a scanned PDF (there is no OCR), a page of scripts "
        "only.",
        "Run OCR before sending scanned documents.",
        "input",
    ),
    "extract_failed": ReasonInfo(
        "The extraction worker died or overran on this input: over extract.memory_mib, "
        "extract.cpu_seconds or extract.timeout_seconds, or crashed; the message says which. The worker "
        "is replaced.",
        "If the document is legitimate and large, raise the extract.* limit the message names; a crash "
        "on one input is worth a bug report with the input.",
        "input",
    ),
    "invalid_utf8": ReasonInfo(
        "Not valid UTF-8 (e.g. Latin-1) and no UTF-16/32 byte-order mark; the message gives the byte offset.",
        "Convert the text to UTF-8 (iconv -f latin1 -t utf-8).",
        "input",
    ),
    "invalid_encoding": ReasonInfo(
        "Starts with a UTF-16/32 byte-order mark but does not decode as that encoding.",
        "Fix the producer's encoding.",
        "input",
    ),
    "nul_bytes": ReasonInfo(
        "Valid UTF-8 that contains NUL characters (usually a corrupted or binary file).",
        "Fix the producer.",
        "input",
    ),
    "unreadable": ReasonInfo(
        "The input could not be read: permissions, vanished, or a read longer than "
        "sources.folder.io_timeout_seconds (a hung NFS or FUSE mount).",
        "Check the file's permissions for docsumd's user and the health of the mount.",
        "storage",
    ),
    "not_regular": ReasonInfo(
        "The input, or its sidecar, is not a regular file with one link: a symbolic link, FIFO, socket "
        "or device dropped into the inbox or put in a file's place, a folder swapped in as it was "
        "claimed, or a file with more than one hard link. Nothing was read from it; it is moved to "
        "failed/ as it is (a link itself, never its target).",
        "Copy files into the inbox (never ln or ln -s them).",
        "input",
    ),
    "crash_loop": ReasonInfo(
        "Folder only: the input was in flight at sources.folder.crash_loop_exits unclean exits of "
        "docsumd in a row, and was set aside unread so that it cannot stop the service again.",
        "Read the journal around those exits (out of memory, a native crash); move the file back into "
        "the inbox to try it again.",
        "docsumd",
    ),
    "engine_error": ReasonInfo(
        "The engine refused or failed this one request (the engine itself went on).",
        "Read the message and the journal; a pattern of them is worth a bug report.",
        "engine",
    ),
    "too_long": ReasonInfo(
        "The document would need more than summary.max_parts parts (default 1,024: about 4 M tokens at a "
        "4 k context).",
        "Raise summary.max_parts or engine.max_model_len, or split the document.",
        "input",
    ),
    "invalid_output": ReasonInfo(
        "A structured profile's final output was cut off or not valid against its schema twice (the "
        "first try and one retry); the record's output keeps the last one (at most 16 KiB).",
        "Cut off: raise the profile's max_summary_tokens. Values the schema refuses: loosen its bounds. "
        "Otherwise the model is too small for the schema.",
        "engine",
    ),
    "unsupported_claims": ReasonInfo(
        "The summary's grounding check found items (numbers, dates, durations, amounts, section "
        "references, terms, names) that its source does not hold, under a profile with on_unsupported = "
        '"fail". The failure record keeps the summary, its checks (the unsupported items) and its '
        "evidence.",
        "Read the unsupported items against the source (Guides: Checking a summary): an invention of the "
        'model calls for a larger model or on_unsupported = "retry"; an item the source holds in a form '
        "the check does not read is worth a bug report with both texts.",
        "engine",
    ),
    "invalid_options": ReasonInfo(
        "The document's options (sidecar or message field) are not valid JSON, have unknown fields or "
        "bad values (a length the profile cannot give), name a profile the config does not have, or the "
        "sidecar is not a regular file or is over 64 KiB. Decided before the document is read.",
        "Fix the options; the message names the field.",
        "input",
    ),
    "internal_error": ReasonInfo(
        "A bug in docsumd met on this document (logged with a traceback), or its result record could not "
        "be written (it cannot be encoded, its name is refused). The daemon goes on.",
        "Report it with the journal's traceback and, if you can, the input.",
        "docsumd",
    ),
    "invalid_message": ReasonInfo(
        "Kafka only: the message is not a document. Not valid JSON or nested too deeply to parse, not an "
        "object, no string text, unknown fields, no value, a header whose value is null, an id or text "
        "with a lone surrogate; a record the Kafka client cannot decode (a header name that is not "
        "UTF-8: one dead letter for the rest of its record batch); a compressed batch that does not "
        "decompress, would inflate past max(max_buffered_bytes, 2 * max_message_bytes), has an unknown "
        "codec or a CRC mismatch (one dead letter for the batch).",
        "Fix the producer; the dead letter keeps the payload (or names the offsets skipped).",
        "input",
    ),
}
"""Every :data:`Reason` with what it means and what to do: the one home of that text."""


class DocumentError(Exception):
    """A per-document failure: the document is refused, recorded and acknowledged; the daemon goes on."""

    def __init__(
        self,
        reason: Reason,
        message: str,
        *,
        output: str | None = None,
        fields: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.output = output
        """What the model wrote, for ``invalid_output`` (bounded); the failure record keeps it."""
        self.fields = dict(fields or {})
        """Further fields of the failure record (``unsupported_claims``: ``summary``, ``checks``,
        ``evidence``), named as :class:`~daemon.records.FailureRecord` declares them."""

    def __str__(self) -> str:
        return f"{self.reason}: {self.message}"


class EngineError(Exception):
    """Base of the engine's errors."""


class RequestError(EngineError):
    """One engine request failed; the engine is still healthy (per document). ``reason`` is the
    document's failure reason: ``engine_error``, or ``too_long`` when the server found the prompt
    longer than its context."""

    def __init__(self, message: str, *, reason: Reason = "engine_error") -> None:
        super().__init__(message)
        self.reason = reason


class EngineDeadError(EngineError):
    """The engine died or cannot start (fatal)."""


class SinkError(Exception):
    """A result or failure record could not be written (fatal: nothing may be acknowledged unwritten)."""


class ProducerFencedError(SinkError):
    """Another Kafka producer with our transactional id started: this daemon must stop (fatal)."""


class FatalError(Exception):
    """The service cannot go on (engine dead, results cannot be written); exit non-zero."""


class ConfigError(Exception):
    """The configuration cannot be used; the message says why, one problem per line (exit 2)."""
