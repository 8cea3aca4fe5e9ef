"""docsumd's vocabulary: the names the schema, a document's options and the summary stage share.

A leaf (it imports nothing of docsumd), so :mod:`daemon.config` and :mod:`daemon.summary` can both
name these types without importing one another (structlog keeps its vocabulary the same way).
"""

from __future__ import annotations

from typing import Annotated, Final, Literal

from pydantic import StringConstraints

Style = Literal["prose", "bullets"]
"""How a summary is written: ``prose`` paragraphs or ``bullets`` (a list of points)."""
PromptStyle = Literal["prose", "bullets", "json"]
"""What a request asks for after the text: a :data:`Style`, or ``json``, one JSON object following the
profile's schema (the final step of a profile with ``json_schema_file``; never a document's option)."""
Strategy = Literal["map_reduce", "head", "head_tail"]
"""What happens to a document longer than the context: summarized in stages, or cut (and said so)."""
OnUnsupported = Literal["flag", "retry", "fail"]
"""What a profile does with a summary whose grounding check finds items its source does not hold: keep
it and list them (``flag``), draw the final step once more and keep the one with fewer (``retry``), or
fail the document with reason ``unsupported_claims`` (``fail``)."""
ProfileName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9_-]{0,31}$")]
"""A profile's name: lower-case letters, digits, ``-`` and ``_``, at most 32 (it is a metric label)."""
DEFAULT_PROFILE: Final = "default"
"""The profile a document gets when nothing names one."""
StopString = Annotated[str, StringConstraints(min_length=1)]
"""A stop string: generation ends before it (empty strings would end every generation at once)."""
