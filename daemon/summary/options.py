"""Per-document summary options: a profile, length, style and strategy that override the defaults.

They come from the source: a sidecar ``NAME.options.json`` beside a file in the watched folder, or
the fields of a Kafka message. Every field is optional; unknown fields are refused, so a typo fails
the document with reason ``invalid_options`` instead of being ignored.

``profile`` names one of the config's profiles (:mod:`daemon.summary.profiles` refuses other names, with
``invalid_options`` too); length and style then override that profile's defaults. A document can
only choose among the configured profiles: it never brings wording or sampling of its own.

Example sidecar::

    {"profile": "brief", "max_summary_tokens": 120, "style": "bullets"}
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from daemon.errors import DocumentError
from daemon.records import clip_text
from daemon.typing import ProfileName, Strategy, Style

_QUOTED_BYTES = 64
"""How much of a field name from the input a problem quotes (a name can be megabytes long)."""


class SummaryOptions(BaseModel):
    """What one document asks for; ``None`` means the configured default."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    profile: ProfileName | None = None
    max_summary_tokens: int | None = Field(default=None, ge=16)
    style: Style | None = None
    strategy: Strategy | None = None


NO_OPTIONS = SummaryOptions()


def parse_options(raw: Any) -> SummaryOptions:
    """Validate options given as a JSON object or JSON text; DocumentError ``invalid_options`` if bad,
    whatever the input (nested however deep, fields named however long)."""
    if raw is None:
        return NO_OPTIONS
    if isinstance(raw, bytes | str):
        try:
            raw = json.loads(raw)
        except RecursionError:
            # Python's parser gives up past about a thousand levels: that is the document's problem.
            raise DocumentError("invalid_options", "options are nested too deeply to be read") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise DocumentError("invalid_options", f"options are not valid JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise DocumentError("invalid_options", f"options must be a JSON object, got {type(raw).__name__}")
    try:
        return SummaryOptions.model_validate(raw)
    except RecursionError:
        raise DocumentError("invalid_options", "options are nested too deeply to be read") from None
    except ValidationError as exc:
        problems = "; ".join(
            f"{_location(error['loc'])}: {error['msg']}" for error in exc.errors(include_input=False)
        )
        raise DocumentError("invalid_options", f"invalid options: {problems}") from None


def _location(loc: tuple[int | str, ...]) -> str:
    """Where a problem is, as ``field.sub``; names from the input cut short."""
    return ".".join(clip_text(str(part), _QUOTED_BYTES) for part in loc) or "options"
