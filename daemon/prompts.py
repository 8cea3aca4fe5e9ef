"""Prompts: a fixed instruction first (so vLLM's prefix cache can share it), the document after.

Every request starts with the same system message, rendered with the model's chat template when it
has one, so the first tokens of every prompt are identical and their KV cache blocks are computed
once. ``PROMPT_VERSION`` goes into every result: change it whenever the wording or layout changes,
so summaries made under different prompts can be told apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Protocol

PROMPT_VERSION: Final = "summary-v1"

SYSTEM_INSTRUCTION: Final = (
    "You are a careful analyst who summarizes long documents: contracts, legal texts, scientific papers "
    "and technical standards. Write a faithful, self-contained summary of the document the user gives you. "
    "Cover its purpose, its main points, obligations or findings, and any conditions, limits or exceptions "
    "that matter. Do not invent facts, do not give opinions, and do not address the reader."
)

_USER_TEMPLATE: Final = "Summarize the following document.\n\n<document>\n{text}\n</document>"
# Used only for models without a chat template (base models).
_PLAIN_TEMPLATE: Final = "{system}\n\n{user}\n\nSummary:\n"


class ChatTokenizer(Protocol):
    """The part of a Hugging Face tokenizer that prompts and chunking use."""

    chat_template: Any

    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...

    def decode(self, token_ids: list[int], skip_special_tokens: bool = ...) -> str: ...

    def apply_chat_template(self, conversation: Any, **kwargs: Any) -> Any: ...


@dataclass(frozen=True, slots=True)
class PromptTemplate:
    """The rendered text around the document, split at the document's place.

    ``prefix + text + suffix`` is the whole prompt; ``prefix`` is identical for every document.
    """

    prefix: str
    suffix: str

    def render(self, text: str) -> str:
        """The full prompt for ``text``."""
        return f"{self.prefix}{text}{self.suffix}"


def build_template(tokenizer: ChatTokenizer) -> PromptTemplate:
    """Render the prompt once around a marker and split it, so each document costs one concatenation."""
    marker = "\ue000DOCSUMD-DOCUMENT\ue000"
    user = _USER_TEMPLATE.format(text=marker)
    if getattr(tokenizer, "chat_template", None):
        messages = [{"role": "system", "content": SYSTEM_INSTRUCTION}, {"role": "user", "content": user}]
        rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        if not isinstance(rendered, str):  # pragma: no cover - tokenizers always return str here
            raise TypeError("chat template did not render to text")
    else:
        rendered = _PLAIN_TEMPLATE.format(system=SYSTEM_INSTRUCTION, user=user)
    prefix, found, suffix = rendered.partition(marker)
    if not found:
        raise ValueError("the model's chat template dropped the user message; cannot build prompts")
    return PromptTemplate(prefix=prefix, suffix=suffix)
