"""The context budget: how the tokens of one request are shared between template, text and output.

Every length the summarizer works with is decided here, from the configuration and the served
model's tokenizer, before the engine starts: one budget per profile, since a profile's lengths and
the length of its wording change the room (:func:`daemon.summary.profiles.build_profiles`):

* ``context_tokens``: ``engine.max_model_len``, what one request holds (prompt and output together);
* ``summary_tokens``: ``summary.max_summary_tokens``, the final summary's length unless a document
  asks for another;
* ``part_summary_tokens``: the length of each part's summary and of intermediate combined
  summaries (``summary.part_summary_tokens``; default ``max_summary_tokens``, at most a sixth of the
  context);
* ``part_input_tokens``: how much of a document one part carries (what a part request has room for,
  at most ``summary.max_part_tokens``);
* ``overlap_tokens``: tokens consecutive parts share (``summary.chunk_overlap_tokens``, at most a
  quarter of a part);
* :meth:`ContextBudget.room`: the text a request of a kind, style and output length can carry;
* :meth:`ContextBudget.combining`: the lengths of the combine steps of a document's summary.

The rules, each implemented once, here:

1. A summary is at most half of the context: the prompt needs room too. Checked for the configured
   length (also without a tokenizer, as soon as the config is loaded: :func:`check_summary_lengths`)
   and for a document's own ``max_summary_tokens``.
2. A part summary is at most a sixth of the context, so that a combine step holds several of them
   (checked as soon as the config is loaded too). Its length defaults to the summary's, at most a
   sixth of the context (:func:`part_summary_tokens`).
3. A combine request of part summaries holds at least two of them with their labels; otherwise
   staged summaries would never shrink.
4. The final combine request holds at least two intermediate summaries of ``_MIN_STEP_TOKENS``
   (:meth:`ContextBudget.step_tokens`), so staging always converges. Checked for the configured
   summary and for each document's.

A configuration that breaks a rule raises :class:`~daemon.errors.ConfigError` naming the key to
change, and the profile (exit 2, before the engine starts); a document option that breaks rule 1 or
4 fails that document with ``invalid_options``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from daemon.errors import ConfigError, DocumentError
from daemon.summary.prompts import (
    DEFAULT_INSTRUCTIONS,
    ChatTokenizer,
    Instructions,
    PromptBuilder,
    PromptKind,
)

if TYPE_CHECKING:
    from daemon.config import SummaryConfig
    from daemon.typing import PromptStyle

LABEL_TOKENS: Final = 16
"""Room for a combine entry's "[Part N]" label and separator."""
_MIN_STEP_TOKENS: Final = 16
_PART_STYLE: Final = "prose"
"""Part summaries and intermediate combined summaries are prose whatever the final style."""


def max_summary_tokens(context_tokens: int) -> int:
    """The longest summary a context of ``context_tokens`` allows (rule 1: half of it)."""
    return context_tokens // 2


def part_summary_tokens(summary: SummaryConfig, context_tokens: int) -> int:
    """The effective length of part and intermediate summaries in a context of ``context_tokens``
    (rule 2's default): ``summary.part_summary_tokens``, else the summary's length, at most a sixth
    of the context."""
    return summary.part_summary_tokens or min(summary.max_summary_tokens, context_tokens // 6)


def check_summary_lengths(
    summary: SummaryConfig, context_tokens: int, *, summary_key: str = "summary.max_summary_tokens"
) -> None:
    """Rules 1 and 2 for ``summary`` (:func:`check_lengths`): the checks that need no tokenizer, run
    as soon as the config is loaded (:func:`daemon.summary.profiles.resolve_profiles`)."""
    check_lengths(
        context_tokens,
        summary.max_summary_tokens,
        part_summary_tokens(summary, context_tokens),
        summary_key=summary_key,
    )


def check_lengths(
    context_tokens: int,
    summary_tokens: int,
    part_summary_tokens: int,
    *,
    summary_key: str = "summary.max_summary_tokens",
) -> None:
    """Rules 1 and 2, which need no tokenizer.

    ``part_summary_tokens`` is the effective length (:func:`part_summary_tokens`); ``summary_key`` is
    where ``summary_tokens`` was set. Raises :class:`~daemon.errors.ConfigError` naming the key to
    change.
    """
    half = max_summary_tokens(context_tokens)
    if summary_tokens > half:
        raise ConfigError(
            f"{summary_key} ({summary_tokens}) must be at most half of "
            f"engine.max_model_len ({context_tokens})"
        )
    if part_summary_tokens * 3 > half:
        raise ConfigError(
            f"summary.part_summary_tokens ({part_summary_tokens}) must be at most a sixth of "
            f"engine.max_model_len ({context_tokens}), so that a combine step holds several parts"
        )


@dataclass(frozen=True, slots=True)
class Combining:
    """The combine steps of one document's summary (map_reduce)."""

    final_room: int
    """Tokens of part (or intermediate) summaries the final combine request can carry."""
    step_tokens: int
    """Length of an intermediate combined summary."""
    step_room: int
    """Tokens of summaries an intermediate combine request can carry."""


@dataclass(frozen=True, slots=True)
class ContextBudget:
    """The lengths of one profile of a valid configuration, for one tokenizer (:meth:`create`)."""

    context_tokens: int
    """engine.max_model_len: prompt and output of one request together."""
    summary_tokens: int
    """summary.max_summary_tokens: the final summary's length unless a document asks for another."""
    part_summary_tokens: int
    """Length of each part's summary and of intermediate combined summaries."""
    part_input_tokens: int
    """Tokens of the document one part carries (the room of a part request)."""
    overlap_tokens: int
    """Tokens consecutive parts share."""
    prompts: PromptBuilder = field(repr=False, compare=False)
    """The prompts whose template overheads the rooms leave out (one profile's wording)."""

    @classmethod
    def create(
        cls,
        summary: SummaryConfig,
        context_tokens: int,
        tokenizer: ChatTokenizer,
        *,
        instructions: Instructions = DEFAULT_INSTRUCTIONS,
        profile_key: str | None = None,
        summary_key: str = "summary.max_summary_tokens",
        output_hint: str | None = None,
        cache_block_tokens: int | None = None,
    ) -> ContextBudget:
        """The budget of ``summary`` in a context of ``context_tokens`` with ``tokenizer``'s prompts
        worded by ``instructions``.

        Raises :class:`~daemon.errors.ConfigError` naming the key to change if any rule is broken:
        ``summary_key`` is where ``summary.max_summary_tokens`` was set, and ``profile_key``
        (``profiles.NAME``), when given, starts the message.

        ``output_hint``: a structured profile's schema hint; its final steps are then checked in
        the ``json`` style (the hint, after the text, takes room too). ``cache_block_tokens``: the
        engine's KV block size, to which prompt prefixes are padded where that pays (the padding
        takes room too).
        """
        try:
            prompts = PromptBuilder(
                tokenizer, instructions, output_hint, cache_block_tokens=cache_block_tokens
            )
            final_style: PromptStyle = summary.style if output_hint is None else "json"
            return cls._create(summary, context_tokens, prompts, summary_key, final_style)
        except ConfigError as exc:
            if profile_key is None:
                raise
            raise ConfigError(f"{profile_key}: {exc}") from None

    @classmethod
    def _create(
        cls,
        summary: SummaryConfig,
        context_tokens: int,
        prompts: PromptBuilder,
        summary_key: str,
        final_style: PromptStyle,
    ) -> ContextBudget:
        check_summary_lengths(summary, context_tokens, summary_key=summary_key)
        part_tokens = part_summary_tokens(summary, context_tokens)
        part_input_tokens = _room(prompts, context_tokens, PromptKind.PART, _PART_STYLE, part_tokens)
        if summary.max_part_tokens is not None:
            part_input_tokens = min(part_input_tokens, summary.max_part_tokens)
        budget = cls(
            context_tokens=context_tokens,
            summary_tokens=summary.max_summary_tokens,
            part_summary_tokens=part_tokens,
            part_input_tokens=part_input_tokens,
            overlap_tokens=min(summary.chunk_overlap_tokens, part_input_tokens // 4),
            prompts=prompts,
        )
        budget._check_staging(final_style, summary_key)
        return budget

    def _check_staging(self, style: PromptStyle, summary_key: str) -> None:
        """Rules 3 and 4 for the configured summary."""
        part = self.part_summary_tokens
        needed = 2 * (part + LABEL_TOKENS)
        combine_room = self.room(PromptKind.COMBINE, _PART_STYLE, part)
        if combine_room < needed:
            raise ConfigError(
                f"engine.max_model_len ({self.context_tokens}) is too small for staged summaries with "
                f"summary.part_summary_tokens {part} (combining two part summaries needs a context of at "
                f"least {self.context_tokens - combine_room + needed} tokens): lower "
                "summary.part_summary_tokens or raise engine.max_model_len"
            )
        if not self._combines(style, self.summary_tokens):
            raise ConfigError(
                f"engine.max_model_len ({self.context_tokens}) leaves too little room for combining part "
                f"summaries into a summary of {self.summary_tokens} tokens: lower "
                f"{summary_key} or raise engine.max_model_len"
            )

    def room(self, kind: PromptKind, style: PromptStyle, max_tokens: int) -> int:
        """Tokens of text a request of ``kind`` asking for ``max_tokens`` in ``style`` can carry."""
        return _room(self.prompts, self.context_tokens, kind, style, max_tokens)

    def fits(self, prompt_tokens: int, max_tokens: int) -> bool:
        """Whether a prompt of ``prompt_tokens`` with ``max_tokens`` of output fits the context."""
        return prompt_tokens + max_tokens <= self.context_tokens

    def step_tokens(self, style: PromptStyle, max_tokens: int) -> int:
        """Length of intermediate combined summaries: at most a part summary, and small enough that
        two of them (with labels) fit in the final combine request, so staging always converges."""
        final_room = self.room(PromptKind.COMBINE, style, max_tokens)
        return min(self.part_summary_tokens, final_room // 2 - LABEL_TOKENS)

    def combining(self, style: PromptStyle, max_tokens: int) -> Combining:
        """The combine steps of a summary of ``max_tokens`` in ``style``."""
        step_tokens = self.step_tokens(style, max_tokens)
        return Combining(
            final_room=self.room(PromptKind.COMBINE, style, max_tokens),
            step_tokens=step_tokens,
            step_room=self.room(PromptKind.COMBINE, _PART_STYLE, step_tokens),
        )

    def check_summary(self, max_tokens: int, style: PromptStyle) -> None:
        """Rules 1 and 4 for one document's summary; ``DocumentError("invalid_options")`` if broken."""
        if max_tokens > max_summary_tokens(self.context_tokens):
            raise DocumentError(
                "invalid_options",
                f"max_summary_tokens {max_tokens} is over half the context ({self.context_tokens} tokens)",
            )
        if not self._combines(style, max_tokens):
            raise DocumentError(
                "invalid_options",
                f"max_summary_tokens {max_tokens} leaves too little of the context "
                f"({self.context_tokens} tokens) for combining part summaries",
            )

    def as_dict(self) -> dict[str, int]:
        """The lengths, for logs and ``check-config``."""
        return {
            "context_tokens": self.context_tokens,
            "summary_tokens": self.summary_tokens,
            "part_summary_tokens": self.part_summary_tokens,
            "part_input_tokens": self.part_input_tokens,
            "overlap_tokens": self.overlap_tokens,
        }

    def _combines(self, style: PromptStyle, max_tokens: int) -> bool:
        """Rule 4: whether intermediate summaries of a summary of ``max_tokens`` are long enough."""
        return self.step_tokens(style, max_tokens) >= _MIN_STEP_TOKENS


def _room(
    prompts: PromptBuilder, context_tokens: int, kind: PromptKind, style: PromptStyle, max_tokens: int
) -> int:
    """Tokens of text a request can carry: the context less the output and the template."""
    return context_tokens - max_tokens - prompts.overhead(kind, style=style, max_tokens=max_tokens)
