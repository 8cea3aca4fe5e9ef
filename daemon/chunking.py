"""Token-level fitting of documents into the model's context, with the served model's own tokenizer.

The prompt is tokenized in three parts: the fixed prefix (system instruction and chat-template
head, tokenized once), the document, and the fixed suffix. Tokenizing the prefix once keeps its
token ids byte-for-byte identical across requests, which is what vLLM's prefix cache matches on,
and it makes the budget exact: ``len(prefix) + len(document) + len(suffix)`` is the prompt size
vLLM sees, so no request is ever larger than the engine accepts.

The document is tokenized with special-token parsing off: a document that contains the text
``<|im_end|>`` gets ordinary tokens for it and cannot break out of its place in the template.

For now a document longer than the budget keeps its head and reports what was dropped; staged
(map-reduce) summaries replace this in a later release.
"""

from __future__ import annotations

from dataclasses import dataclass

from daemon.prompts import ChatTokenizer, PromptTemplate


@dataclass(frozen=True, slots=True)
class FittedPrompt:
    """A prompt as token ids, ready for the engine, with what fitting did to the document."""

    token_ids: list[int]
    document_tokens: int
    kept_tokens: int

    @property
    def truncated(self) -> bool:
        """Whether part of the document was left out."""
        return self.kept_tokens < self.document_tokens

    @property
    def dropped_tokens(self) -> int:
        """How many document tokens were left out."""
        return self.document_tokens - self.kept_tokens


class PromptFitter:
    """Fits documents into ``max_prompt_tokens`` around a fixed template."""

    def __init__(self, tokenizer: ChatTokenizer, template: PromptTemplate, max_prompt_tokens: int) -> None:
        self._tokenizer = tokenizer
        self._prefix_ids = tokenizer.encode(template.prefix, add_special_tokens=False)
        self._suffix_ids = tokenizer.encode(template.suffix, add_special_tokens=False)
        self.max_prompt_tokens = max_prompt_tokens
        self.document_budget = max_prompt_tokens - len(self._prefix_ids) - len(self._suffix_ids)
        if self.document_budget < 16:
            raise ValueError(
                f"the prompt template takes {len(self._prefix_ids) + len(self._suffix_ids)} of "
                f"{max_prompt_tokens} prompt tokens, leaving no room for documents; raise "
                "engine.max_model_len or lower summary.max_summary_tokens"
            )

    @property
    def template_tokens(self) -> int:
        """Tokens the template itself takes in every prompt."""
        return len(self._prefix_ids) + len(self._suffix_ids)

    def count_tokens(self, text: str) -> int:
        """Tokens ``text`` takes as a document."""
        return len(self.encode_document(text))

    def encode_document(self, text: str) -> list[int]:
        """Token ids of ``text`` as document content (special-token strings are plain text here)."""
        return self._tokenizer.encode(text, add_special_tokens=False, split_special_tokens=True)  # type: ignore[call-arg]

    def fit(self, text: str) -> FittedPrompt:
        """The prompt for ``text``, keeping the head of the document if it is over the budget."""
        document_ids = self.encode_document(text)
        kept_ids = document_ids[: self.document_budget]
        return FittedPrompt(
            token_ids=[*self._prefix_ids, *kept_ids, *self._suffix_ids],
            document_tokens=len(document_ids),
            kept_tokens=len(kept_ids),
        )
