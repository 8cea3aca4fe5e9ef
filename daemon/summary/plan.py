"""A document's plan: everything its summary is decided by before its text is seen.

The pipeline makes it before it reads a byte of the document, from the document's own options and
the profile they and its source choose (:meth:`~daemon.summary.profiles.Profiles.choose`): a
document whose options ask for what its profile cannot give fails with ``invalid_options`` unread.
The summarizer then follows the plan; nothing in it depends on the document's text, so the
whole-document cache key is made of it and of the document alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from daemon.contracts import Sampling
from daemon.summary.options import NO_OPTIONS, SummaryOptions
from daemon.summary.profiles import Profile
from daemon.typing import PromptStyle, Strategy


@dataclass(frozen=True, slots=True)
class DocumentPlan:
    """What one document's summary is decided by before its text is seen (:func:`plan_summary`)."""

    profile: Profile
    options: SummaryOptions
    """The options as the document gave them (its whole-document cache key holds them)."""
    max_tokens: int
    """The final summary's length: the options', else the profile's."""
    style: PromptStyle
    """What the final request asks for: the options' style, else the profile's; ``json`` under a
    profile with a schema."""
    strategy: Strategy
    """What happens to a document longer than one request: the options', else the profile's."""
    sampling: Sampling
    """The profile's sampling at ``max_tokens``: what every draw of the final request starts from."""
    final_sampling: Sampling
    """The final request's first draw as its output format asks for it (with its schema, for a
    structured profile): what the final step's cache keys hold."""


def plan_summary(profile: Profile, options: SummaryOptions = NO_OPTIONS) -> DocumentPlan:
    """The plan of a document under ``profile`` with ``options``; DocumentError ``invalid_options``
    for a length the profile's output or context budget cannot hold."""
    max_tokens = options.max_summary_tokens or profile.budget.summary_tokens
    style = profile.output.style(options.style or profile.summary.style)
    profile.output.check_length(max_tokens)
    profile.budget.check_summary(max_tokens, style)
    sampling = profile.sampling(max_tokens)
    return DocumentPlan(
        profile=profile,
        options=options,
        max_tokens=max_tokens,
        style=style,
        strategy=options.strategy or profile.summary.strategy,
        sampling=sampling,
        final_sampling=profile.output.sampling(sampling, 0),
    )
