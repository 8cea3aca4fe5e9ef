"""Summary profiles: the config's ``[profiles.NAME]`` sections resolved once, before the engine
starts, into a :class:`Profile` (wording, context budget, sampling, version), and chosen per document.

**Resolution** (the one place that assembles profiles; the daemon, ``check-config`` and
``summarize`` all ask it): ``default`` and each ``[profiles.NAME]``, a section named like a profile
docsumd ships (daemon/profiles.toml, :func:`shipped_profiles`) taken over the shipped one
(:func:`effective_profiles`); lengths, style and sampling a profile leaves out come from
``[summary]``; its ``instruction_file`` is read (:func:`read_instruction_file`). Without a tokenizer
that gives a :class:`ProfileSpec` each (:func:`resolve_profiles`, which also checks what needs no
tokenizer: instruction files, the length rules of :mod:`daemon.summary.budget`, the profile names
sources give); with the served model's tokenizer, a :class:`Profile` with its context budget
(:func:`build_profiles`). Each check raises :class:`~daemon.errors.ConfigError` naming the key.

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
four instruction texts (system, document, part, combine) and its sampling (the values of
:data:`~daemon.config.SAMPLING_KEYS`) as canonical JSON. Every result records it beside the
profile's name: a change of wording or sampling gives a new version, while a change of lengths,
style, strategy or the layout does not (results record those themselves, and the layout is
``prompt_version``).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.resources
import json
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from daemon.config import SAMPLING_KEYS, Config, ProfileConfig, SummaryConfig, read_config_file
from daemon.contracts import Sampling
from daemon.errors import ConfigError, DocumentError
from daemon.summary.budget import ContextBudget, check_summary_lengths
from daemon.summary.prompts import DEFAULT_INSTRUCTIONS, ChatTokenizer, Instructions, PromptBuilder
from daemon.summary.structured import CHARS_PER_TOKEN, PROSE, OutputFormat, SchemaProblem, load_schema
from daemon.typing import DEFAULT_PROFILE, OnUnsupported

VERSION_DIGITS: Final = 12
MAX_INSTRUCTION_FILE_BYTES: Final = 256 << 10
"""The largest ``instruction_file`` read (256 KiB); a larger one is a configuration error."""


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
    output: OutputFormat = PROSE
    """What its final step asks for and accepts: prose, or one JSON object of its schema
    (:mod:`daemon.summary.structured`)."""
    reuse_cached: bool = True
    """Whether its documents reuse summaries in the summary cache (``profiles.NAME.reuse_cached``)."""
    on_unsupported: OnUnsupported = "flag"
    """What a summary with unsupported items gets (``on_unsupported``; :mod:`daemon.summary.checking`)."""

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
    return Sampling(max_tokens=max_tokens or summary.max_summary_tokens, **_sampling_values(summary))


def _sampling_values(summary: SummaryConfig) -> dict[str, Any]:
    """The summary's sampling keys (:data:`~daemon.config.SAMPLING_KEYS`) -> their values."""
    return {key: getattr(summary, key) for key in SAMPLING_KEYS}


# -- resolution ------------------------------------------------------------------------------------


@functools.cache
def shipped_profiles() -> Mapping[str, ProfileConfig]:
    """The profiles docsumd ships (daemon/profiles.toml), by name. Only ``default`` is on by itself;
    the others are used by naming them in the config (an empty ``[profiles.NAME]`` is enough)."""
    package = importlib.resources.files("daemon")
    text = package.joinpath("profiles.toml").read_text(encoding="utf-8")
    profiles = {}
    for name, table in tomllib.loads(text).items():
        if "json_schema_file" in table:  # relative to the package, as a config's are to the config file
            table["json_schema_file"] = str(package.joinpath(table["json_schema_file"]))
        profiles[name] = ProfileConfig.model_validate(table)
    return profiles


def effective_profiles(config: Config) -> dict[str, ProfileConfig]:
    """Every profile section of ``config`` by name, as it runs: ``default``, then each
    ``[profiles.NAME]`` (over the shipped profile of that name, if there is one)."""
    shipped = shipped_profiles()
    profiles = {DEFAULT_PROFILE: shipped[DEFAULT_PROFILE]}
    for name, section in config.profiles.items():
        profiles[name] = _over(section, shipped[name]) if name in shipped else section
    return profiles


def _over(section: ProfileConfig, base: ProfileConfig) -> ProfileConfig:
    """``base`` (a shipped profile) with the keys ``section`` sets replaced."""
    update = section.model_dump(exclude_unset=True)
    if {"instruction", "instruction_file"} & update.keys():
        # Setting one of the two replaces the base's instruction, whichever way the base gave it.
        update = {"instruction": None, "instruction_file": None, **update}
    return base.model_copy(update=update)


def profile_summary(section: ProfileConfig, summary: SummaryConfig) -> SummaryConfig:
    """``summary`` with the profile's lengths, style and sampling where it sets them."""
    return SummaryConfig.model_validate({**summary.model_dump(), **section.summary_overrides()})


def read_instruction_file(path: Path) -> str:
    """An instruction file's text; ValueError (with the reason) if it is not usable: missing, not a
    regular file (a FIFO, a device, a folder), larger than :data:`MAX_INSTRUCTION_FILE_BYTES`, not
    UTF-8, or empty."""
    try:
        text = read_config_file(path, MAX_INSTRUCTION_FILE_BYTES).decode("utf-8").strip()
    except FileNotFoundError:
        raise ValueError(f"instruction file {str(path)!r} does not exist") from None
    except (OSError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
        raise ValueError(f"cannot read instruction file {str(path)!r}: {exc}") from None
    if not text:
        raise ValueError(f"instruction file {str(path)!r} is empty")
    return text


def instructions_of(profile: ProfileConfig) -> Instructions:
    """A profile's wording: its own texts where it sets them (``instruction_file`` read), docsumd's
    own elsewhere. ValueError if its instruction file cannot be read."""
    system = profile.instruction
    if profile.instruction_file is not None:
        system = read_instruction_file(profile.instruction_file)
    own = {
        "system": system,
        "document": profile.document_instruction,
        "part": profile.part_instruction,
        "combine": profile.combine_instruction,
    }
    return dataclasses.replace(DEFAULT_INSTRUCTIONS, **{key: text for key, text in own.items() if text})


def profile_version(
    instructions: Instructions, summary: SummaryConfig, schema: dict[str, Any] | None = None
) -> str:
    """The version of a profile's wording, sampling and JSON schema (see the module's doc)."""
    # Every sampling key is hashed, at its default too: a key added to SamplingKeys changes every
    # version unless it is left out at its default, as opening_tokens is.
    payload: dict[str, Any] = {
        "instructions": dataclasses.asdict(instructions),
        "sampling": _sampling_values(summary),
    }
    if summary.opening_tokens:  # what the final combine step reads; absent when 0 (older versions hold)
        payload["opening_tokens"] = summary.opening_tokens
    if schema is not None:  # absent without one: the versions of prose profiles hold
        payload["json_schema"] = schema
    canonical = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:VERSION_DIGITS]


@dataclass(frozen=True, slots=True)
class ProfileSpec:
    """One profile resolved without a tokenizer: what ``check-config`` shows, and what
    :func:`build_profile` completes with a context budget."""

    name: str
    section: ProfileConfig
    """Its section as it runs (over the shipped profile of its name)."""
    summary: SummaryConfig
    """``[summary]`` with the profile's lengths, style and sampling where it sets them."""
    instructions: Instructions
    version: str
    """:func:`profile_version` of its wording and sampling."""
    summary_key: str
    """Where its ``max_summary_tokens`` is set (errors name it)."""
    output: OutputFormat = PROSE
    """Its final step's format: prose, or its ``json_schema_file``'s schema, checked."""


def resolve_profiles(config: Config) -> list[ProfileSpec]:
    """Every profile of ``config``, ``default`` first, after the checks that need no tokenizer (run
    as soon as the config is loaded, and again before the engine starts): each instruction file
    readable, the summary lengths within rules 1 and 2 of :mod:`daemon.summary.budget` (``[summary]``,
    then each profile that sets its own), every profile a source names known. Raises
    :class:`~daemon.errors.ConfigError` naming the key to change."""
    backend = config.engine.structured_outputs_backend
    specs = [_resolve(name, section, config, backend) for name, section in effective_profiles(config).items()]
    context_tokens = config.engine.max_model_len
    check_summary_lengths(config.summary, context_tokens)
    for spec in specs:
        if _sets_length(config, spec.name):
            check_summary_lengths(spec.summary, context_tokens, summary_key=spec.summary_key)
    _check_known(config, [spec.name for spec in specs])
    return specs


def _resolve(name: str, section: ProfileConfig, config: Config, backend: str) -> ProfileSpec:
    own = _sets_length(config, name)
    key = f"profiles.{name}.max_summary_tokens" if own else "summary.max_summary_tokens"
    return _spec(name, section, config.summary, summary_key=key, backend=backend)


def _sets_length(config: Config, name: str) -> bool:
    """Whether the config's own section of profile ``name`` sets max_summary_tokens."""
    section = config.profiles.get(name)
    return section is not None and section.max_summary_tokens is not None


def _spec(
    name: str,
    section: ProfileConfig,
    summary: SummaryConfig,
    *,
    summary_key: str,
    backend: str = "xgrammar",
) -> ProfileSpec:
    try:
        instructions = instructions_of(section)
    except ValueError as exc:
        raise ConfigError(f"profiles.{name}.instruction_file: {exc}") from None
    effective = profile_summary(section, summary)
    output = _output_format(name, section, effective, summary_key, backend)
    return ProfileSpec(
        name=name,
        section=section,
        summary=effective,
        instructions=instructions,
        version=profile_version(instructions, effective, output.schema),
        summary_key=summary_key,
        output=output,
    )


def _output_format(
    name: str, section: ProfileConfig, summary: SummaryConfig, summary_key: str, backend: str
) -> OutputFormat:
    """The profile's final format: its schema, checked (:func:`~daemon.summary.structured.load_schema`,
    and its longest output within the profile's summary length), or prose."""
    if section.json_schema_file is None:
        return PROSE
    key = f"profiles.{name}.json_schema_file"
    try:
        output = load_schema(section.json_schema_file, backend=backend)
    except SchemaProblem as exc:
        raise ConfigError(f"{key}: {exc}") from None
    if summary.max_summary_tokens < output.min_tokens:
        raise ConfigError(
            f"{key}: the longest output the schema allows is {output.longest_chars} characters, which "
            f"needs {output.min_tokens} tokens (at {CHARS_PER_TOKEN} characters a token) but "
            f"{summary_key} is {summary.max_summary_tokens}: raise it or bound the schema more tightly "
            "(maxLength, maxItems)"
        )
    return output


def _check_known(config: Config, known: list[str]) -> None:
    # A source naming a profile this config does not have would fail every document it reads.
    unknown = [
        f"{key}: unknown profile {name!r}" for key, name in profile_users(config).items() if name not in known
    ]
    if unknown:
        raise ConfigError("; ".join(unknown) + f" (profiles: {', '.join(sorted(known))})")


def profile_users(config: Config) -> dict[str, str]:
    """Config key -> the profile it names: the default, and each source's (or topic's) own."""
    users = {"summary.profile": config.summary.profile}
    for section in config.sources.present():
        users.update(section.profile_keys())
    return users


def source_profiles(config: Config) -> dict[str, str]:
    """Each configured source (each Kafka input topic) -> the profile of its documents, unless a
    document's options ask for another."""
    uses: dict[str, str] = {}
    for section in config.sources.present():
        uses.update(section.profile_uses(config.summary.profile))
    return uses


# -- with the tokenizer ----------------------------------------------------------------------------


def build_profile(
    spec: ProfileSpec, context_tokens: int, tokenizer: ChatTokenizer, *, cache_block_tokens: int | None = None
) -> Profile:
    """Complete one profile with its context budget (its prompt prefixes padded to the engine's KV
    blocks of ``cache_block_tokens`` where that pays). Raises :class:`~daemon.errors.ConfigError`
    naming ``profiles.NAME`` if its budget cannot work."""
    budget = ContextBudget.create(
        spec.summary,
        context_tokens,
        tokenizer,
        instructions=spec.instructions,
        profile_key=f"profiles.{spec.name}",
        summary_key=spec.summary_key,
        output_hint=spec.output.hint,
        cache_block_tokens=cache_block_tokens,
    )
    return Profile(
        name=spec.name,
        version=spec.version,
        description=spec.section.description or "",
        summary=spec.summary,
        budget=budget,
        output=spec.output,
        reuse_cached=spec.section.reuses_cached,
        on_unsupported=spec.section.on_unsupported or "flag",
    )


def build_profiles(
    config: Config, tokenizer: ChatTokenizer, *, cache_block_tokens: int | None = None
) -> Profiles:
    """Every profile of ``config`` (:func:`resolve_profiles`, with its checks) with the served model's
    ``tokenizer`` (from :func:`daemon.models.files.load_tokenizer`). Raises
    :class:`~daemon.errors.ConfigError` naming the profile and the key to change if the budget of one
    cannot work; call it before the engine starts, and again with the engine's KV block size
    (``cache_block_tokens``) once it runs, so that prompt prefixes fill whole blocks."""
    context_tokens = config.engine.max_model_len
    profiles = [
        build_profile(spec, context_tokens, tokenizer, cache_block_tokens=cache_block_tokens)
        for spec in resolve_profiles(config)
    ]
    return Profiles(profiles, config.summary.profile)


def default_profiles(summary: SummaryConfig, context_tokens: int, tokenizer: ChatTokenizer) -> Profiles:
    """The ``default`` profile of ``summary`` alone (no [profiles]): for tests and benchmarks that
    build a summarizer from a summary section."""
    spec = _spec(DEFAULT_PROFILE, ProfileConfig(), summary, summary_key="summary.max_summary_tokens")
    return Profiles([build_profile(spec, context_tokens, tokenizer)], DEFAULT_PROFILE)
