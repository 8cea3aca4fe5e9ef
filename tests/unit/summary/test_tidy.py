"""The chat frame a model puts around a summary comes off; the summary itself is left as written."""

from __future__ import annotations

import pytest

from daemon.summary.tidy import tidy


@pytest.mark.parametrize(
    ("generated", "expected"),
    [
        # Openers seen from SmolLM2-135M-Instruct, one or several lines of them.
        (
            "Here is a concise summary of the document:\n\nThe licence permits copying.",
            "The licence permits copying.",
        ),
        (
            "Here's a rewritten summary of the original text condensed into plain prose paragraphs:\n\n"
            "Original text:\n\n**Summary:**\n\nThe GPL requires source code.",
            "The GPL requires source code.",
        ),
        ("<<Summary of Document>>\nThe paper tags words with an HMM.", "The paper tags words with an HMM."),
        ("Sure! The paper tags words.\nIt uses an HMM.", "It uses an HMM."),
        # Sign-offs and everything after them, including a chat cut off by the length budget.
        (
            "The paper tags words.\n\nI hope these details help you.\n\nFeel free to ask!\n\n"
            "Just remember, please don",
            "The paper tags words.",
        ),
        ("Grants a patent licence.\nThanks!", "Grants a patent licence."),
        # Quotation marks around the whole summary, closed or cut off by the budget.
        ('"The licence permits copying."', "The licence permits copying."),
        ("\u201cThe licence permits copying, and", "The licence permits copying, and"),
    ],
)
def test_the_chat_frame_comes_off(generated: str, expected: str) -> None:
    assert tidy(generated) == expected


@pytest.mark.parametrize(
    "summary",
    [
        "- Parties: the Licensor and You\n- Term: perpetual",
        "If you distribute it, you must include the licence.\nThanks to its patent grant, users are safe.",
        "Here is what the licence requires: attribution and a copy of the text, in every distribution of the"
        " work, whether modified or not, and for every recipient of it.",
        "The licence grants:\n- copying\n- modification",
        '"Work" means the software; "You" the licensee.',
    ],
)
def test_a_summary_without_a_frame_is_unchanged(summary: str) -> None:
    assert tidy(summary) == summary


def test_a_text_that_is_all_frame_is_kept_as_generated() -> None:
    # Nothing else would be left: an empty summary would be worse than an odd one.
    assert tidy("  Here is the summary:\n") == "Here is the summary:"
