"""Every error docsumd raises on purpose, and what the service does with it.

Three kinds, and only three:

* **Per document** (recoverable): :class:`DocumentError`, with a stable ``reason`` code (listed in
  :mod:`daemon.document.decode`). The document gets a failure record (error file, dead letter) and a metric,
  its input is acknowledged, and the daemon goes on. An engine :class:`RequestError` (vLLM refused or
  failed one request) becomes a ``DocumentError("engine_error", ...)`` in the summarizer. A sink that
  cannot write one document's record (it cannot be encoded, the file system refuses its name) raises
  a ``DocumentError`` too: nothing was acknowledged, and the document gets its failure record instead.
* **Fatal** (the whole daemon): :class:`EngineDeadError` (the engine is gone), :class:`SinkError`
  (a result or failure record cannot be written, so nothing may be acknowledged), and
  :class:`FatalError`, which the service raises for any of them. Intake stops, unfinished inputs stay
  unacknowledged, and the process exits 1 so its supervisor restarts it.
* **Configuration**: :class:`ConfigError`. The process exits 2 before or instead of starting;
  restarting would not help (the systemd unit does not restart on exit code 2).
"""

from __future__ import annotations


class DocumentError(Exception):
    """A per-document failure: the document is refused, recorded and acknowledged; the daemon goes on."""

    def __init__(self, reason: str, message: str, *, output: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.output = output
        """What the model wrote, for ``invalid_output`` (bounded); the failure record keeps it."""

    def __str__(self) -> str:
        return f"{self.reason}: {self.message}"


class EngineError(Exception):
    """Base of the engine's errors."""


class RequestError(EngineError):
    """One engine request failed; the engine is still healthy (per document). ``reason`` is the
    document's failure reason: ``engine_error``, or ``too_long`` when the server found the prompt
    longer than its context."""

    def __init__(self, message: str, *, reason: str = "engine_error") -> None:
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
