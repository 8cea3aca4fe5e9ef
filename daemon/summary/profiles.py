"""Summary profiles at run time: each profile of the config resolved once, before the engine starts,
into a :class:`Profile` (wording, context budget, sampling, version), and chosen per document.

A profile is a strategy object: the summarizer asks the document's profile for its prompts, its
lengths and its sampling, and never looks at a profile's name or settings itself.

**Choice** (:meth:`Profiles.choose`), most specific first:

1. the document's own options, ``{"profile": "NAME"}`` (sidecar, Kafka message ``options``);
2. its source's: ``sources.kafka.topic_profiles`` for its topic, else ``sources.kafka.profile``;
   ``sources.folder.profile``; ``docsumd summarize --profile``;
3. ``summary.profile`` (default ``default``).

Only names in the config are accepted: a document asking for another fails with
``invalid_options``. A document never supplies wording or sampling of its own.

**Version** (:func:`profile_version`): the first 12 hex digits of the SHA-256 of the profile's
four instruction texts (system, document, part, combine) and its sampling (temperature, top_p,
repetition, presence and frequency penalties, stop strings, seed) as canonical JSON. Every result
records it beside the profile's name: a change of wording or sampling gives a new version, while a
change of lengths, style, strategy or the layout does not (results record those themselves, and
the layout is ``prompt_version``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

from daemon.config import Config, ProfileConfig, SummaryConfig
from daemon.contracts import Sampling
from daemon.errors import DocumentError
from daemon.summary.budget import ContextBudget
from daemon.summary.prompts import DEFAULT_INSTRUCTIONS, ChatTokenizer, Instructions, PromptBuilder

VERSION_DIGITS: Final = 12


@dataclass(frozen=True, slots=True)
class Profile:
    """One profile, resolved: everything a document summarized under it needs."""

    name: str
    version: str
    """:func:`profile_version` of its wording and sampling."""
    description: str
    summary: SummaryConfig
    """``[summary]`` with the profile's lengths, style and sampling where it sets them."""
    budget: ContextBudget
    """Its context budget: its lengths, and rooms that leave out its own template."""

    @property
    def prompts(self) -> PromptBuilder:
        """Its prompts as token ids (the budget's, so rooms and prompts cannot disagree)."""
        return self.budget.prompts

    @property
    def instructions(self) -> Instructions:
        """Its wording."""
        return self.budget.prompts.instructions

    def sampling(self, max_tokens: int | None = None) -> Sampling:
        """The sampling of one of its requests of at most ``max_tokens`` (default: its summary length)."""
        return summary_sampling(self.summary, max_tokens)


class Profiles:
    """The profiles of one daemon, by name, and the rule that picks one for a document."""

    def __init__(self, profiles: list[Profile], default: str) -> None:
        """``default`` (``summary.profile``) must be the name of one of ``profiles``."""
        self._by_name = {profile.name: profile for profile in profiles}
        self.default = self._by_name[default]

    @property
    def names(self) -> list[str]:
        """The names, in config order (``default`` first)."""
        return list(self._by_name)

    def __iter__(self) -> Iterator[Profile]:
        return iter(self._by_name.values())

    def get(self, name: str) -> Profile:
        """The profile called ``name``; KeyError if the config has none."""
        return self._by_name[name]

    def choose(self, requested: str | None, source: str | None = None) -> Profile:
        """The profile of a document: the one it ``requested`` in its options, else its ``source``'s,
        else the default. ``DocumentError("invalid_options")`` for a name not in the config."""
        name = requested or source
        if name is None:
            return self.default
        profile = self._by_name.get(name)
        if profile is None:
            raise DocumentError(
                "invalid_options", f"unknown profile {name!r}; this daemon has: {', '.join(self._by_name)}"
            )
        return profile

    def label(self, name: str | None) -> str:
        """A metric label for a document whose profile may not be known: ``name`` if the config has
        it, else the default's name (labels stay within the config's names)."""
        return name if name is not None and name in self._by_name else self.default.name


def summary_sampling(summary: SummaryConfig, max_tokens: int | None = None) -> Sampling:
    """The sampling of a summary request of at most ``max_tokens`` (default: the summary's length)."""
    return Sampling(
        max_tokens=max_tokens or summary.max_summary_tokens,
        temperature=summary.temperature,
        top_p=summary.top_p,
        repetition_penalty=summary.repetition_penalty,
        seed=summary.seed,
        presence_penalty=summary.presence_penalty,
        frequency_penalty=summary.frequency_penalty,
        stop=tuple(summary.stop),
    )


def instructions_of(profile: ProfileConfig) -> Instructions:
    """A profile's wording: its own texts where it sets them, docsumd's own elsewhere."""
    own = {
        "system": profile.instruction_text(),
        "document": profile.document_instruction,
        "part": profile.part_instruction,
        "combine": profile.combine_instruction,
    }
    return dataclasses.replace(DEFAULT_INSTRUCTIONS, **{key: text for key, text in own.items() if text})


def profile_version(instructions: Instructions, summary: SummaryConfig) -> str:
    """The version of a profile's wording and sampling (see the module's doc)."""
    sampling = summary_sampling(summary)
    payload = {
        "instructions": dataclasses.asdict(instructions),
        "sampling": {
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "repetition_penalty": sampling.repetition_penalty,
            "presence_penalty": sampling.presence_penalty,
            "frequency_penalty": sampling.frequency_penalty,
            "stop": list(sampling.stop),
            "seed": sampling.seed,
        },
    }
    canonical = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:VERSION_DIGITS]


def build_profile(
    name: str,
    section: ProfileConfig,
    summary: SummaryConfig,
    context_tokens: int,
    tokenizer: ChatTokenizer,
    *,
    sets_length: bool = False,
) -> Profile:
    """Resolve one profile. ``sets_length``: its own section sets max_summary_tokens (errors then
    name that key). Raises :class:`~daemon.errors.ConfigError` naming ``profiles.NAME`` if its
    budget cannot work."""
    effective = section.summary_over(summary)
    instructions = instructions_of(section)
    budget = ContextBudget.create(
        effective,
        context_tokens,
        tokenizer,
        instructions=instructions,
        profile_key=f"profiles.{name}",
        summary_key=f"profiles.{name}.max_summary_tokens" if sets_length else "summary.max_summary_tokens",
    )
    return Profile(
        name=name,
        version=profile_version(instructions, effective),
        description=section.description or "",
        summary=effective,
        budget=budget,
    )


def build_profiles(config: Config, tokenizer: ChatTokenizer) -> Profiles:
    """Every profile of ``config`` with the served model's ``tokenizer`` (from
    :func:`daemon.engine.vllm_engine.load_tokenizer`). Raises :class:`~daemon.errors.ConfigError` naming the
    profile and the key to change if the budget of one cannot work; call it before the engine starts."""
    context_tokens = config.engine.max_model_len
    profiles = [
        build_profile(
            name,
            section,
            config.summary,
            context_tokens,
            tokenizer,
            sets_length=name in config.profiles and config.profiles[name].max_summary_tokens is not None,
        )
        for name, section in config.effective_profiles().items()
    ]
    return Profiles(profiles, config.summary.profile)


def default_profiles(summary: SummaryConfig, context_tokens: int, tokenizer: ChatTokenizer) -> Profiles:
    """The ``default`` profile of ``summary`` alone (no [profiles]): for tests and benchmarks that
    build a summarizer from a summary section."""
    return Profiles(
        [build_profile("default", ProfileConfig(), summary, context_tokens, tokenizer)], "default"
    )
