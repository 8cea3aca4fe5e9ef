"""Tokenizers' doubles, for what the tiny model's real tokenizer (the ``tokenizer`` fixture) cannot
show: chat templates that are missing or broken."""

from __future__ import annotations

from typing import Any


class PlainTokenizer:
    """A tokenizer without a chat template (a base model)."""

    chat_template = None

    def apply_chat_template(self, conversation: Any, **kwargs: Any) -> Any:
        """Never to be called: there is no template."""
        raise AssertionError("must not be called without a chat template")


class SystemOnlyTokenizer:
    """A chat template that drops the user message."""

    chat_template = "{{ messages[0]['content'] }}"

    def apply_chat_template(self, conversation: Any, **kwargs: Any) -> Any:
        """The system message alone."""
        return conversation[0]["content"]
