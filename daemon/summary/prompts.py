"""Prompts: a fixed instruction first (so vLLM's prefix cache can share it), the text after.

Every request starts with its profile's system message (:class:`Instructions`), rendered with the
model's chat template when it has one, so the first tokens of every prompt of a profile are
identical and their KV cache blocks are computed once. Three kinds of request share that start:

* ``document``: summarize a whole document that fits in one request;
* ``part``: summarize one part of a longer document (the map step of a staged summary);
* ``combine``: merge the summaries of consecutive parts into one (the reduce steps).

Per-request wording (the length and style asked for) comes *after* the text, so the prefix of a
kind stays the same whatever a document's options are.

vLLM's prefix cache reuses whole KV blocks only (16 tokens on GPUs up to vLLM 0.32, 64 from 0.34,
128 on the CPU build): the part of the shared prefix after its last whole block is computed again by
every request. Where the engine's block size is known, the prefix is padded with newline tokens (the
document then starts after blank lines) up to its next block boundary, but only when that costs fewer
tokens of the request's room than it saves from being computed again (:func:`prefix_padding`).

``PROMPT_VERSION`` goes into every result: change it whenever the layout or the built-in wording
(style and length hints, :data:`DEFAULT_INSTRUCTIONS`) changes, so summaries made under different
prompts can be told apart. A profile's own wording is versioned by its hash
(:func:`daemon.summary.profiles.profile_version`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Protocol

if TYPE_CHECKING:  # only a type here
    from daemon.typing import PromptStyle

PROMPT_VERSION: Final = "summary-v5"

SYSTEM_INSTRUCTION: Final = (
    "You are a careful analyst who summarizes long documents: contracts, legal texts, scientific papers "
    "and technical standards. Write a faithful, self-contained summary of the text the user gives you. "
    "Cover its purpose, its main points, obligations or findings, and any conditions, limits or exceptions "
    "that matter. Do not invent facts, do not give opinions, and do not address the reader."
)


class PromptKind(enum.StrEnum):
    """What a request asks the model to do."""

    DOCUMENT = "document"
    PART = "part"
    COMBINE = "combine"


DOCUMENT_INSTRUCTION: Final = "Summarize the following document."
PART_INSTRUCTION: Final = (
    "The following text is one part of a longer document. Summarize this part; keep names, "
    "numbers, defined terms, obligations and conditions, since the summaries of all parts will "
    "be combined later."
)
COMBINE_INSTRUCTION: Final = (
    "The following are notes on consecutive parts of one long document, in order. Write one summary "
    "of the whole document from them, without repeating points."
)


@dataclass(frozen=True, slots=True)
class Instructions:
    """The wording of a profile's prompts: the system message, and the user turn's instruction of
    each kind of request. The defaults are docsumd's own (the ``default`` profile's)."""

    system: str = SYSTEM_INSTRUCTION
    document: str = DOCUMENT_INSTRUCTION
    part: str = PART_INSTRUCTION
    combine: str = COMBINE_INSTRUCTION

    def for_kind(self, kind: PromptKind) -> str:
        """The user turn's instruction of a request of ``kind``."""
        if kind is PromptKind.PART:
            return self.part
        if kind is PromptKind.COMBINE:
            return self.combine
        return self.document


DEFAULT_INSTRUCTIONS: Final = Instructions()
_STYLE_HINTS: Final[dict[str, str]] = {
    "prose": "Write plain sentences, without headings or lists.",
    "bullets": "Write a list of bullet points, one point per line, each starting with '- '.",
}
# Used only for models without a chat template (base models).
_PLAIN_TEMPLATE: Final = "{system}\n\n{user}\n\nSummary:\n"
_MARKER: Final = "\ue000DOCSUMD-TEXT\ue000"


class ChatTokenizer(Protocol):
    """The part of a Hugging Face tokenizer that prompts and chunking use."""

    chat_template: Any

    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...

    def decode(self, token_ids: list[int], skip_special_tokens: bool = ...) -> str: ...

    def apply_chat_template(self, conversation: Any, **kwargs: Any) -> Any: ...


@dataclass(frozen=True, slots=True)
class PromptTemplate:
    """The rendered text around the document, split at the document's place.

    ``prefix + text + suffix`` is the whole prompt; ``prefix`` is identical for every request of a kind.
    """

    prefix: str
    suffix: str

    def render(self, text: str) -> str:
        """The full prompt for ``text``."""
        return f"{self.prefix}{text}{self.suffix}"


def length_hint(max_tokens: int) -> str:
    """The length asked for, in words, so that the model ends on its own within ``max_tokens``.

    English runs about 0.75 words per token, but models overrun what they are asked for (SmolLM2-135M
    ran out of tokens in 17 of 23 summaries when asked for 0.7 words per token), so half of that."""
    words = max(20, round(max_tokens * 0.5 / 10) * 10)
    return f"Use at most about {words} words. Write only the summary."


def user_message(
    kind: PromptKind,
    text: str,
    *,
    style: PromptStyle,
    max_tokens: int,
    instructions: Instructions = DEFAULT_INSTRUCTIONS,
    output_hint: str | None = None,
) -> str:
    """The user turn: the kind's instruction, the text, then the requested length and style; for the
    ``json`` style, ``output_hint`` instead (the profile's schema bounds the length)."""
    if style == "json":
        if output_hint is None:
            raise ValueError("the json style needs the profile's output hint")
        after = output_hint
    elif kind is PromptKind.PART:
        after = length_hint(max_tokens)
    else:
        after = f"{_STYLE_HINTS[style]} {length_hint(max_tokens)}"
    return f"{instructions.for_kind(kind)}\n\n<document>\n{text}\n</document>\n\n{after}"


def build_template(
    tokenizer: ChatTokenizer,
    kind: PromptKind = PromptKind.DOCUMENT,
    *,
    style: PromptStyle = "prose",
    max_tokens: int = 256,
    instructions: Instructions = DEFAULT_INSTRUCTIONS,
    output_hint: str | None = None,
) -> PromptTemplate:
    """Render the prompt once around a marker and split it, so each request costs one concatenation."""
    user = user_message(
        kind, _MARKER, style=style, max_tokens=max_tokens, instructions=instructions, output_hint=output_hint
    )
    system = instructions.system
    if getattr(tokenizer, "chat_template", None):
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        if not isinstance(rendered, str):  # pragma: no cover - tokenizers always return str here
            raise TypeError("chat template did not render to text")
    else:
        rendered = _PLAIN_TEMPLATE.format(system=system, user=user)
    prefix, found, suffix = rendered.partition(_MARKER)
    if not found:
        raise ValueError("the model's chat template dropped the user message; cannot build prompts")
    return PromptTemplate(prefix=prefix, suffix=suffix)


def prefix_padding(prefix_tokens: int, block_tokens: int | None) -> int:
    """Padding tokens that make a shared prefix of ``prefix_tokens`` end on a KV block boundary, or 0.

    Without padding the prefix's last ``prefix_tokens % block`` tokens are computed again by every
    request; padding takes ``block - that`` tokens of each request's room instead. It is worth it only
    when it costs fewer tokens than it saves: at 128-token blocks, a 97-token prefix is padded by 31
    (97 tokens reused instead of none), a 129-token one is not (127 tokens to save 1)."""
    if not block_tokens or block_tokens <= 1:
        return 0
    tail = prefix_tokens % block_tokens
    pad = block_tokens - tail
    return pad if tail > 0 and pad < tail else 0


class PromptBuilder:
    """One profile's prompts as token ids: the template's prefix and suffix tokenized once per kind,
    style and length.

    Tokenizing the prefix once keeps its ids identical across requests, which is what vLLM's prefix
    cache matches on, and it makes budgets exact: ``len(prefix) + len(body) + len(suffix)`` is the
    prompt size vLLM sees (padding included, :func:`prefix_padding`).
    """

    def __init__(
        self,
        tokenizer: ChatTokenizer,
        instructions: Instructions = DEFAULT_INSTRUCTIONS,
        output_hint: str | None = None,
        *,
        cache_block_tokens: int | None = None,
    ) -> None:
        """``output_hint``: what a request in the ``json`` style asks for after the text (a structured
        profile's schema, :mod:`daemon.summary.structured`). ``cache_block_tokens``: the engine's KV
        block size, where known: shared prefixes are padded to it where that pays."""
        self._tokenizer = tokenizer
        self.instructions = instructions
        self.output_hint = output_hint
        self.cache_block_tokens = cache_block_tokens
        self._cache: dict[tuple[PromptKind, PromptStyle, int], tuple[list[int], list[int]]] = {}

    def template_ids(
        self, kind: PromptKind, *, style: PromptStyle, max_tokens: int
    ) -> tuple[list[int], list[int]]:
        """The (prefix, suffix) token ids around the text of a request."""
        key = (kind, style, max_tokens)
        cached = self._cache.get(key)
        if cached is None:
            template = build_template(
                self._tokenizer,
                kind,
                style=style,
                max_tokens=max_tokens,
                instructions=self.instructions,
                output_hint=self.output_hint,
            )
            prefix = self._tokenizer.encode(template.prefix, add_special_tokens=False)
            cached = (
                [*prefix, *self._padding(len(prefix))],
                self._tokenizer.encode(template.suffix, add_special_tokens=False),
            )
            self._cache[key] = cached
        return cached

    def _padding(self, prefix_tokens: int) -> list[int]:
        """The newline tokens that align a prefix of ``prefix_tokens`` (none where the newline is not
        one token of this tokenizer, or where padding does not pay)."""
        count = prefix_padding(prefix_tokens, self.cache_block_tokens)
        if not count:
            return []
        newline = self._tokenizer.encode("\n", add_special_tokens=False)
        return newline * count if len(newline) == 1 else []

    def overhead(self, kind: PromptKind, *, style: PromptStyle, max_tokens: int) -> int:
        """Tokens the template itself takes in a prompt of this kind."""
        prefix, suffix = self.template_ids(kind, style=style, max_tokens=max_tokens)
        return len(prefix) + len(suffix)

    def build(
        self, kind: PromptKind, body_ids: list[int], *, style: PromptStyle, max_tokens: int
    ) -> list[int]:
        """The whole prompt: prefix, the text's ids, suffix."""
        prefix, suffix = self.template_ids(kind, style=style, max_tokens=max_tokens)
        return [*prefix, *body_ids, *suffix]
