"""A summary checked as the service makes it: the grounding check and the evidence of each result.

:func:`check_result` runs :func:`~daemon.summary.grounding.check_summary` and
:func:`~daemon.summary.evidence.link_evidence` on a finished summary and returns the result's ``checks``
and ``evidence``. What is checked:

* a prose or bullet summary: its text, sentence by sentence;
* a structured summary (a profile's JSON schema): its **string values**, each a text of its own (a
  sentence never runs from one value into the next), in document order, at most
  :data:`MAX_STRING_VALUES` of them. Keys, numbers, booleans and nulls are not: a JSON number has no
  unit or context to look up (``"notice_days": 30`` may be a count the document never writes), and a
  schema bounds them. Each sentence and item then names its value (``field``, a JSON Pointer) and its
  ``chars`` are offsets in that string.

The source an item is looked up in is the text the document's requests read: the whole document, or,
for a truncating strategy (``head``, ``head_tail``), the spans the model was given: a number that only
the unread part holds cannot have come from the document.

The parts evidence points to: for a staged summary, the parts of the document the map step read,
through the combine steps (:class:`~daemon.summary.evidence.Step`); for a document read in one request
(or its spans, truncated), its passages (:func:`~daemon.summary.evidence.parts_of_text`), each
numbered by the ``sources`` entry it lies in.

Bounds (a summary or a source may be hostile): the source's index is linear in its length and built
once per document, off the event loop, while the engine works; a summary's first
:data:`~daemon.summary.grounding.MAX_CHECKED_ITEMS` items are looked up; evidence is linked for its
first :data:`MAX_EVIDENCE_SENTENCES` sentences (the rest are listed without parts).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final

from daemon.document.types import Layout
from daemon.summary.evidence import Part, SentenceEvidence, Step, link_evidence, part_at, parts_of_text
from daemon.summary.grounding import Checks, Item, SourceIndex, check_summary
from daemon.summary.sentences import split_sentences

MAX_STRING_VALUES: Final = 1000
"""A structured summary's first this many string values are checked."""
MAX_EVIDENCE_SENTENCES: Final = 400
"""Evidence is linked for a summary's first this many sentences; later ones are listed without parts."""
_VALUE_GAP: Final = "\n\n"
"""Between two string values in the checked text: a block break, so no sentence spans two values."""


@dataclass(frozen=True, slots=True)
class CheckedText:
    """What is checked of a summary: its text, or its string values joined; for the latter, where each
    value starts in the joined text and its JSON Pointer."""

    text: str
    offsets: tuple[int, ...] = ()
    pointers: tuple[str, ...] = ()

    @classmethod
    def of(cls, text: str, structured: Any = None) -> CheckedText:
        """The checked text of a summary ``text`` (``structured``: its object, for schema profiles)."""
        if structured is None:
            return cls(text)
        offsets: list[int] = []
        pointers: list[str] = []
        pieces: list[str] = []
        position = 0
        for pointer, value in _string_values(structured):
            if len(pieces) >= MAX_STRING_VALUES:
                break
            offsets.append(position)
            pointers.append(pointer)
            pieces.append(value)
            position += len(value) + len(_VALUE_GAP)
        return cls(_VALUE_GAP.join(pieces), tuple(offsets), tuple(pointers))

    def locate(self, start: int, end: int) -> dict[str, Any]:
        """``chars`` (and ``field`` for a structured summary) of the range ``[start, end)`` of the text."""
        if not self.pointers:
            return {"chars": [start, end]}
        at = max(0, bisect.bisect_right(self.offsets, start) - 1)
        offset = self.offsets[at]
        return {"chars": [start - offset, end - offset], "field": self.pointers[at]}


def _string_values(node: Any, pointer: str = "") -> Iterator[tuple[str, str]]:
    """Every string value of a JSON value, depth first in document order, with its JSON Pointer."""
    stack: list[tuple[str, Any]] = [(pointer, node)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, str):
            if value.strip():
                yield path, value
        elif isinstance(value, dict):
            stack.extend((f"{path}/{_escape(str(key))}", item) for key, item in reversed(value.items()))
        elif isinstance(value, list):
            stack.extend((f"{path}/{index}", item) for index, item in reversed(list(enumerate(value))))


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


@dataclass(frozen=True, slots=True)
class CheckResult:
    """A summary's check and evidence, as records."""

    checks: Checks
    checks_record: dict[str, Any]
    evidence: tuple[dict[str, Any], ...]

    @property
    def unsupported(self) -> int:
        """How many items the source lacks."""
        return len(self.checks.unsupported)


def check_result(
    text: str,
    structured: Any,
    index: SourceIndex,
    parts: Sequence[Part],
    tree: Step | None = None,
) -> CheckResult:
    """The ``checks`` and ``evidence`` of a summary (``text``, and ``structured`` for schema profiles)
    against ``index`` (the text its requests read), pointing to ``parts`` (through ``tree`` for a staged
    summary). CPU-bound: the service runs it in a worker thread."""
    checked = CheckedText.of(text, structured)
    checks = check_summary(checked.text, index)
    record = checks.as_record()
    record["unsupported"] = [_item_record(item, checked) for item in checks.unsupported]
    sentences = split_sentences(checked.text)
    linked = link_evidence(sentences[:MAX_EVIDENCE_SENTENCES], parts, _tree_text(tree, checked))
    unlinked = [SentenceEvidence(sentence, ()) for sentence in sentences[MAX_EVIDENCE_SENTENCES:]]
    evidence = tuple(_evidence_record(entry, checked) for entry in [*linked, *unlinked])
    return CheckResult(checks=checks, checks_record=record, evidence=evidence)


def _tree_text(tree: Step | None, checked: CheckedText) -> Step | None:
    """The final step with the checked text as its output (a structured summary's values, not its
    JSON), so that its inputs are scored against what the sentences are."""
    if tree is None:
        return None
    return Step(text=checked.text, inputs=tree.inputs)


def _item_record(item: Item, checked: CheckedText) -> dict[str, Any]:
    record = item.as_record()
    record.update(checked.locate(item.start, item.end))
    return record


def _evidence_record(entry: SentenceEvidence, checked: CheckedText) -> dict[str, Any]:
    record = entry.as_record()
    record.update(checked.locate(entry.sentence.start, entry.sentence.end))
    return record


# -- what the source is -------------------------------------------------------------------------------


def read_text(text: str, spans: Sequence[tuple[int, int]]) -> str:
    """The text of ``spans`` of ``text`` (what a truncated summary's request read), joined by a blank
    line; ``text`` itself when the spans cover it."""
    if len(spans) == 1 and spans[0] == (0, len(text)):
        return text
    return "\n\n".join(text[start:end] for start, end in spans)


def passages(text: str, layout: Layout, spans: Sequence[tuple[int, int]]) -> list[Part]:
    """The passages of ``spans`` of ``text`` (:func:`~daemon.summary.evidence.parts_of_text`), numbered
    from 1, each with its character range in ``text`` and the number of its span (``source``)."""
    found: list[Part] = []
    for number, (start, end) in enumerate(spans, 1):
        for piece in parts_of_text(text[start:end]):
            a, b = piece.chars[0] + start, piece.chars[1] + start
            found.append(part_at(text, layout, len(found) + 1, (a, b), source=number))
    return found


def chunk_parts(text: str, layout: Layout, spans: Sequence[tuple[int, int]]) -> list[Part]:
    """The parts of a staged summary, one per span (``sources[]`` entry), numbered from 1."""
    return [part_at(text, layout, number, span) for number, span in enumerate(spans, 1)]
