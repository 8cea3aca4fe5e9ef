"""Structured summaries: a profile's JSON Schema, checked before the engine starts, and the final
step's output parsed and validated against it.

A profile with ``json_schema_file`` gets a :class:`SchemaOutput`, every other profile
:class:`PROSE`: the output format is chosen once, when profiles are resolved, and the summarizer asks
the document's profile for it (what the final request asks for, its sampling, and whether its output
is accepted) instead of testing a flag. Only the final step of a document is constrained: the single
request of a short document, or the last combine of a staged one; parts and intermediate combines are
prose.

**Checks at start** (:func:`load_schema`, each a :class:`SchemaProblem` that the profile resolution
turns into exit 2 naming ``profiles.NAME.json_schema_file``):

1. the file is a regular UTF-8 file of at most :data:`MAX_SCHEMA_FILE_BYTES`, holding one JSON object
   (strict JSON: no NaN or Infinity);
2. it is a valid JSON Schema of Draft 2020-12 (the default) or Draft 7 (``$schema`` says which), by
   ``jsonschema``'s ``check_schema``;
3. its root is an object, and its longest valid output is bounded (:func:`longest_output_chars`):
   every string has ``maxLength`` (or ``enum``/``const``), every array ``maxItems`` and ``items``,
   every object ``additionalProperties: false``; ``pattern``, ``format``, ``patternProperties``,
   ``allOf``, the keywords the grammar ignores (``not``, ``if``... in ``_REFUSED``) and recursive
   ``$ref`` are refused, since neither the bound nor the grammar can follow them (xgrammar ignores
   ``maxLength`` beside ``pattern``). Each ``$ref`` target is measured once, however often it is used,
   so the check takes time in proportion to the file. Validating the longest output may apply at most
   :data:`MAX_SCHEMA_CHECKS` subschemas, and the prompt's list of fields (:func:`output_hint`) is at
   most :data:`MAX_HINT_CHARS` characters: a few KB of definitions that refer to each other level
   after level expand exponentially, and are refused here instead of stalling every output;
4. with the xgrammar backend, xgrammar compiles it into a grammar (:func:`check_backend`; other
   backends compile it on the first request);
5. its longest output fits the profile's summary length at :data:`CHARS_PER_TOKEN` characters a token
   (:meth:`SchemaOutput.check_length`).

**After generation** (:meth:`SchemaOutput.accept`): ``json.loads`` with Python's strict defaults
(control characters inside strings refused, as the JSON specification does) and NaN/Infinity
refused, then validation with ``jsonschema``. An output cut off by the length budget, or invalid for
any other reason, raises :class:`InvalidOutput`; the summarizer retries once, then fails the document
with ``invalid_output``.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, NamedTuple, Protocol

import jsonschema
from jsonschema.exceptions import SchemaError, best_match

from daemon.config import read_config_file
from daemon.errors import DocumentError

if TYPE_CHECKING:
    from daemon.contracts import Generation, Sampling
    from daemon.typing import PromptStyle, Style

MAX_SCHEMA_FILE_BYTES: Final = 256 << 10
"""The largest ``json_schema_file`` read (256 KiB); a larger one is a configuration error."""
CHARS_PER_TOKEN: Final = 3
"""How many characters of the longest valid output one token of the summary length is counted for.
A sizing rule for the schema, not a bound: a token can be a single byte, and the demo model's valid
records, full of digits and underscores, ran below this (``bench/structured.py`` records it) while
stopping far below their length; an output that does run out of tokens is cut off, retried, and ends
as ``invalid_output``, never lost."""
NUMBER_CHARS: Final = 24
"""What a ``number`` (or an ``integer`` without both ``minimum`` and ``maximum``) counts for in the
longest output: the grammar does not bound its digits, so this is a convention, not a bound."""
RETRY_MIN_TEMPERATURE: Final = 0.5
"""The retry samples at least this warm, so that a greedy profile's retry is a new draw."""
OUTPUT_HINT: Final = (
    "Answer with one JSON object and nothing else, with the values taken from the text (lists with as "
    "many items as the text needs, an empty string where it says nothing). Its fields:\n"
)
_DRAFTS: Final[dict[str, type[Any]]] = {
    "https://json-schema.org/draft/2020-12/schema": jsonschema.Draft202012Validator,
    "http://json-schema.org/draft-07/schema": jsonschema.Draft7Validator,
}
MAX_SCHEMA_CHECKS: Final = 100_000
"""The most subschemas that validating a schema's longest output may apply
(:attr:`SchemaMeasure.checks`). Every structured output is validated (in Python, off the event loop
but holding the interpreter lock), and the prompt's field list follows the same expansion: a small
file whose ``$defs`` refer to each other level after level expands exponentially, and is refused at
start instead."""
MAX_HINT_CHARS: Final = 256 << 10
"""The longest list of fields (:func:`field_lines`) a schema may give the final prompt, in characters;
descriptions repeated by shared ``$defs`` could otherwise make it larger than any context."""
_MAX_DEPTH: Final = 32
_NOT_FOLLOWED: Final = "is not supported: the grammar does not follow it (write the schema out)"
_REFUSED: Final = {
    "pattern": "pattern is not supported (xgrammar ignores maxLength beside it, so the output cannot be "
    "bounded); use maxLength or enum",
    "format": "format is not supported (the output cannot be bounded); use maxLength or enum",
    "patternProperties": "patternProperties is not supported (the output cannot be bounded)",
    "allOf": "allOf is not supported; write the schema out",
    # Subschemas that validation applies beside the ones the bound follows, and that the grammar
    # ignores: the output would not be held to them, and their cost is not counted.
    **{
        keyword: f"{keyword} {_NOT_FOLLOWED}"
        for keyword in (
            "not",
            "if",
            "then",
            "else",
            "dependentSchemas",
            "dependencies",
            "contains",
            "propertyNames",
            "unevaluatedProperties",
            "unevaluatedItems",
            "additionalItems",
            "$dynamicRef",
            "$recursiveRef",
        )
    },
}


class SchemaProblem(ValueError):
    """Why a schema file cannot be used (the message names the place in the schema)."""


class InvalidOutput(Exception):
    """The final step's output is not a valid instance of the profile's schema."""


@dataclass(frozen=True, slots=True)
class Accepted:
    """A final output the profile accepts: the summary text, and the object for structured profiles."""

    text: str
    structured: dict[str, Any] | None = None


class OutputFormat(Protocol):
    """What a profile's final step asks for and accepts (:data:`PROSE` or a :class:`SchemaOutput`)."""

    @property
    def attempts(self) -> int:
        """How many tries the final step gets (a retry only where an output can be refused)."""
        ...

    @property
    def hint(self) -> str | None:
        """What the final request asks for after the text instead of a style (None: the style's)."""
        ...

    @property
    def schema(self) -> dict[str, Any] | None:
        """The JSON Schema of the final output, or None."""
        ...

    def style(self, requested: Style) -> PromptStyle:
        """The style the final request is written in, for the ``requested`` one."""
        ...

    def sampling(self, base: Sampling, attempt: int) -> Sampling:
        """The final request's sampling on try ``attempt`` (0 first), from the profile's ``base``."""
        ...

    def check_length(self, max_tokens: int) -> None:
        """DocumentError ``invalid_options`` if a summary of ``max_tokens`` cannot hold the output."""
        ...

    def accept(self, generation: Generation, tidy: Any) -> Accepted:
        """The summary of ``generation`` (``tidy`` takes a prose text's chat frame off); InvalidOutput
        if it cannot be accepted."""
        ...


@dataclass(frozen=True, slots=True)
class ProseOutput:
    """A summary in prose or bullets: asked for in the requested style, accepted as written."""

    attempts: int = 1
    hint: str | None = None
    schema: dict[str, Any] | None = None

    def style(self, requested: Style) -> PromptStyle:
        return requested

    def sampling(self, base: Sampling, attempt: int) -> Sampling:
        return base

    def check_length(self, max_tokens: int) -> None:
        return None

    def accept(self, generation: Generation, tidy: Any) -> Accepted:
        return Accepted(text=str(tidy(generation.text)))


PROSE: Final = ProseOutput()


@dataclass(frozen=True, slots=True)
class SchemaOutput:
    """A summary that is one JSON object valid against ``schema`` (see the module's doc)."""

    schema: dict[str, Any]
    longest_chars: int
    """The longest valid output, compact, in characters (:func:`longest_output_chars`)."""
    validator: Any = dataclasses.field(repr=False, compare=False)
    hint: str = dataclasses.field(repr=False)
    """What the final request asks for after the text (:func:`output_hint`)."""
    attempts: int = 2

    @property
    def text(self) -> str:
        """The schema as compact JSON: what the engine is asked to follow."""
        return json.dumps(self.schema, ensure_ascii=False, separators=(",", ":"), sort_keys=False)

    @property
    def min_tokens(self) -> int:
        """The summary length the longest output needs (rule 5 of the module's doc)."""
        return -(-self.longest_chars // CHARS_PER_TOKEN)

    def style(self, requested: Style) -> PromptStyle:
        return "json"

    def sampling(self, base: Sampling, attempt: int) -> Sampling:
        if attempt == 0:
            return dataclasses.replace(base, json_schema=self.text)
        # A new draw: another seed where the profile sets one (a per-request seed is refused on the CPU
        # backend, so unseeded profiles stay unseeded), and never greedy.
        return dataclasses.replace(
            base,
            json_schema=self.text,
            seed=None if base.seed is None else base.seed + attempt,
            temperature=max(base.temperature, RETRY_MIN_TEMPERATURE),
        )

    def check_length(self, max_tokens: int) -> None:
        if max_tokens < self.min_tokens:
            raise DocumentError(
                "invalid_options",
                f"max_summary_tokens {max_tokens} cannot hold this profile's structured summary "
                f"(its longest valid output is {self.longest_chars} characters: at least "
                f"{self.min_tokens} tokens)",
            )

    def accept(self, generation: Generation, tidy: Any) -> Accepted:
        if generation.finish_reason == "length":
            raise InvalidOutput(f"cut off after {generation.output_tokens} tokens (the length budget)")
        return Accepted(text=generation.text, structured=parse_instance(generation.text, self.validator))


def parse_instance(text: str, validator: Any) -> dict[str, Any]:
    """``text`` parsed strictly as one JSON object valid for ``validator``; InvalidOutput if not."""
    try:
        value = json.loads(text, parse_constant=_refuse_constant)
    except RecursionError:
        raise InvalidOutput("not JSON: nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, NaN/Infinity, an integer too long to convert
        raise InvalidOutput(f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise InvalidOutput(f"not a JSON object but {type(value).__name__}")
    error = best_match(validator.iter_errors(value))
    if error is not None:
        where = "/".join(str(part) for part in error.absolute_path) or "(root)"
        raise InvalidOutput(f"not valid against the schema at {where}: {error.message}")
    return value


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def load_schema(path: Path, *, backend: str) -> SchemaOutput:
    """The output format of the schema in ``path``, after checks 1-4 of the module's doc (check 5
    needs the profile's length: :meth:`SchemaOutput.check_length`'s rule, applied by the caller).
    Raises :class:`SchemaProblem`."""
    schema = read_schema_file(path)
    validator = checked_validator(schema)
    longest = longest_output_chars(schema)
    hint = output_hint(schema)
    check_backend(schema, backend)
    return SchemaOutput(schema=schema, longest_chars=longest, validator=validator, hint=hint)


def read_schema_file(path: Path) -> dict[str, Any]:
    """The JSON object in ``path`` (check 1); SchemaProblem if it is not readable or not one."""
    try:
        data = read_config_file(path, MAX_SCHEMA_FILE_BYTES).decode("utf-8")
    except FileNotFoundError:
        raise SchemaProblem(f"schema file {str(path)!r} does not exist") from None
    except (OSError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
        raise SchemaProblem(f"cannot read schema file {str(path)!r}: {exc}") from None
    try:
        schema = json.loads(data, parse_constant=_refuse_constant)
    except RecursionError:
        raise SchemaProblem(f"schema file {str(path)!r} is nested too deeply") from None
    except ValueError as exc:
        raise SchemaProblem(f"schema file {str(path)!r} is not JSON: {exc}") from None
    if not isinstance(schema, dict):
        raise SchemaProblem(f"schema file {str(path)!r} must hold a JSON object (a schema)")
    return schema


def checked_validator(schema: dict[str, Any]) -> Any:
    """A validator of ``schema``'s draft (check 2); SchemaProblem if the draft is not supported or the
    schema is not valid for it."""
    declared = schema.get("$schema", "https://json-schema.org/draft/2020-12/schema")
    cls = _DRAFTS.get(str(declared).rstrip("#"))
    if cls is None:
        raise SchemaProblem(
            f"$schema {declared!r} is not supported: use Draft 2020-12 ({next(iter(_DRAFTS))}) or Draft 7"
        )
    try:
        cls.check_schema(schema)
    except SchemaError as exc:
        where = "/".join(str(part) for part in exc.absolute_path) or "(root)"
        raise SchemaProblem(f"not a valid JSON Schema at {where}: {exc.message}") from None
    except RecursionError:
        raise SchemaProblem("the schema is nested too deeply") from None
    return cls(schema)


def longest_output_chars(schema: dict[str, Any]) -> int:
    """The length in characters of the longest compact JSON instance of ``schema`` the grammar allows
    (check 3: see the module's doc); SchemaProblem naming the place if it is unbounded, uses what the
    bound cannot follow, or takes more than :data:`MAX_SCHEMA_CHECKS` to validate. Strings count
    ``maxLength`` characters and their quotes (xgrammar's grammar of a string with ``maxLength`` writes
    no escapes); numbers :data:`NUMBER_CHARS`."""
    return measure_schema(schema).chars


def measure_schema(schema: dict[str, Any]) -> SchemaMeasure:
    """``schema``'s longest output, the subschemas validating it applies, and its depth (check 3);
    SchemaProblem as :func:`longest_output_chars` says. Each ``$ref`` target is measured once."""
    if schema.get("type") != "object":
        raise SchemaProblem('the root must be an object ("type": "object")')
    return _Bound(schema).measure(schema, "", 0)


class SchemaMeasure(NamedTuple):
    """What check 3 finds of a (sub)schema."""

    chars: int
    """Its longest valid output, compact, in characters."""
    checks: int
    """How many subschemas validating that output applies, at most: every ``anyOf``/``oneOf`` branch
    is tried, every array item checked; each ``$ref`` counts its target's again."""
    height: int
    """How many levels of subschemas lie below it."""


def _leaf(chars: int) -> SchemaMeasure:
    return SchemaMeasure(chars=chars, checks=1, height=0)


class _Bound:
    def __init__(self, root: dict[str, Any]) -> None:
        self._root = root
        self._resolving: list[str] = []
        self._measured: dict[str, SchemaMeasure] = {}  # $ref -> its target's measure

    def measure(self, node: Any, where: str, depth: int) -> SchemaMeasure:
        found = self._measure(node, where, depth)
        if found.checks > MAX_SCHEMA_CHECKS:
            raise SchemaProblem(
                f"{where or '(root)'}: validating one output would apply {found.checks:,} subschemas "
                f"(more than {MAX_SCHEMA_CHECKS:,}): $refs used at level after level, anyOf/oneOf "
                "branches and maxItems multiply; flatten or shrink the schema"
            )
        return found

    def _measure(self, node: Any, where: str, depth: int) -> SchemaMeasure:
        at = where or "(root)"
        if depth > _MAX_DEPTH:
            raise SchemaProblem(f"{at}: nested more than {_MAX_DEPTH} levels")
        if not isinstance(node, dict):
            raise SchemaProblem(f"{at}: a boolean schema is unbounded; write the schema out")
        for keyword, why in _REFUSED.items():
            if keyword in node:
                raise SchemaProblem(f"{at}: {why}")
        if "$ref" in node:
            return self._ref(node["$ref"], where, depth)
        if "const" in node:
            return _leaf(_compact_len(node["const"]))
        if "enum" in node:
            return _leaf(max((_compact_len(value) for value in node["enum"]), default=0))
        for keyword in ("anyOf", "oneOf"):
            if keyword in node:
                branches = [
                    self.measure(branch, f"{where}/{keyword}/{i}", depth + 1)
                    for i, branch in enumerate(node[keyword])
                ]
                return SchemaMeasure(
                    chars=max(branch.chars for branch in branches),
                    checks=1 + sum(branch.checks for branch in branches),
                    height=1 + max(branch.height for branch in branches),
                )
        kinds = node.get("type")
        if kinds is None:
            raise SchemaProblem(f"{at}: give a type (or enum, const, anyOf, oneOf, $ref)")
        typed = [self._typed(kind, node, where, depth) for kind in _as_list(kinds)]
        return SchemaMeasure(
            chars=max(found.chars for found in typed),
            checks=max(found.checks for found in typed),
            height=max(found.height for found in typed),
        )

    def _typed(self, kind: str, node: dict[str, Any], where: str, depth: int) -> SchemaMeasure:
        at = where or "(root)"
        if kind == "string":
            if "maxLength" not in node:
                raise SchemaProblem(f"{at}: a string needs maxLength (or enum) to bound the output")
            return _leaf(int(node["maxLength"]) + 2)
        if kind == "integer" and "minimum" in node and "maximum" in node:
            return _leaf(max(len(str(int(node["minimum"]))), len(str(int(node["maximum"])))))
        if kind in ("number", "integer"):
            return _leaf(NUMBER_CHARS)
        if kind == "boolean":
            return _leaf(len("false"))
        if kind == "null":
            return _leaf(len("null"))
        if kind == "array":
            return self._array(node, where, depth)
        return self._object(node, where, depth)

    def _array(self, node: dict[str, Any], where: str, depth: int) -> SchemaMeasure:
        at = where or "(root)"
        if "maxItems" not in node or "items" not in node or "prefixItems" in node:
            raise SchemaProblem(f"{at}: an array needs items and maxItems (prefixItems is not supported)")
        count = int(node["maxItems"])
        if not count:
            return _leaf(2)
        item = self.measure(node["items"], f"{where}/items", depth + 1)
        return SchemaMeasure(
            chars=2 + count * item.chars + count - 1,
            checks=1 + count * item.checks,
            height=1 + item.height,
        )

    def _object(self, node: dict[str, Any], where: str, depth: int) -> SchemaMeasure:
        at = where or "(root)"
        if node.get("additionalProperties") is not False:
            raise SchemaProblem(f'{at}: an object needs "additionalProperties": false to bound the output')
        properties = node.get("properties", {})
        members = [
            (name, self.measure(value, f"{where}/properties/{name}", depth + 1))
            for name, value in properties.items()
        ]
        return SchemaMeasure(
            chars=2
            + sum(_compact_len(name) + 1 + found.chars for name, found in members)
            + max(0, len(members) - 1),
            checks=1 + sum(found.checks for _, found in members),
            height=1 + max((found.height for _, found in members), default=-1),
        )

    def _ref(self, ref: Any, where: str, depth: int) -> SchemaMeasure:
        at = where or "(root)"
        prefix = next((p for p in ("#/$defs/", "#/definitions/") if str(ref).startswith(p)), None)
        if prefix is None:
            raise SchemaProblem(f"{at}: $ref {ref!r}: only #/$defs/NAME and #/definitions/NAME are supported")
        if ref in self._resolving:
            raise SchemaProblem(f"{at}: $ref {ref!r} is recursive: the output cannot be bounded")
        target = self._measured.get(ref)
        if target is None:
            found = self._root.get(prefix[2:-1], {}).get(ref[len(prefix) :])
            if found is None:
                raise SchemaProblem(f"{at}: $ref {ref!r} names nothing in the schema")
            self._resolving.append(ref)
            try:
                target = self.measure(found, str(ref)[1:], depth + 1)
            finally:
                self._resolving.pop()
            self._measured[ref] = target
        elif depth + 1 + target.height > _MAX_DEPTH:
            # Measured before at a shallower place: its deepest level is too deep here.
            raise SchemaProblem(f"{at}: nested more than {_MAX_DEPTH} levels (through $ref {ref!r})")
        return SchemaMeasure(chars=target.chars, checks=target.checks, height=1 + target.height)


def output_hint(schema: dict[str, Any]) -> str:
    """What the final request asks for after the text: :data:`OUTPUT_HINT` and the schema's fields
    (:func:`field_lines` of its :func:`skeleton`); SchemaProblem if that would be longer than
    :data:`MAX_HINT_CHARS` characters."""
    lines: list[str] = []
    size = len(OUTPUT_HINT)
    for line in _lines(skeleton(schema), ""):
        size += len(line) + 1
        if size > MAX_HINT_CHARS:
            raise _hint_too_long()
        lines.append(line)
    return OUTPUT_HINT + "\n".join(lines)


def _hint_too_long() -> SchemaProblem:
    return SchemaProblem(
        f"its list of fields for the prompt would be longer than {MAX_HINT_CHARS:,} characters "
        "(names and descriptions, repeated wherever a $ref is used); shorten or flatten the schema"
    )


def skeleton(schema: dict[str, Any]) -> Any:
    """The shape of ``schema``'s instances, for the prompt: each object with its properties, each list
    with one item, each string its ``description`` (else its name), numbers 0, booleans false, an enum
    its values joined with ``|``. Shorter than the schema, and what a small model follows best.
    SchemaProblem if it would take more than :data:`MAX_HINT_CHARS` characters to write out."""
    return _Shape(schema).of(schema, "value", 0)


class _Shape:
    def __init__(self, root: dict[str, Any]) -> None:
        self._root = root
        self._left = MAX_HINT_CHARS  # every node, name and text spends from it

    def _spend(self, chars: int) -> None:
        self._left -= chars
        if self._left < 0:
            raise _hint_too_long()

    def of(self, node: Any, name: str, depth: int) -> Any:
        self._spend(1)
        if not isinstance(node, dict) or depth > _MAX_DEPTH:
            return name
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(("#/$defs/", "#/definitions/")):
            section, _, key = ref[2:].partition("/")
            return self.of(self._root.get(section, {}).get(key), name, depth + 1)
        if "const" in node:
            self._spend(_compact_len(node["const"]))
            return node["const"]
        if "enum" in node:
            text = "|".join(str(value) for value in node["enum"])
            self._spend(len(text))
            return text
        for keyword in ("anyOf", "oneOf"):
            if node.get(keyword):
                return self.of(node[keyword][0], name, depth + 1)
        kind = _as_list(node.get("type", "string"))[0]
        if kind == "object":
            shape = {}
            for key, value in node.get("properties", {}).items():
                self._spend(len(key))
                shape[key] = self.of(value, key, depth + 1)
            return shape
        if kind == "array":
            return [self.of(node.get("items"), name, depth + 1)]
        if kind in ("number", "integer"):
            return 0
        if kind == "boolean":
            return False
        if kind == "null":
            return None
        text = str(node.get("description") or name)
        self._spend(len(text))
        return text


def field_lines(shape: Any, path: str = "") -> list[str]:
    """``- path: description`` for each leaf of a :func:`skeleton` (``parties[].name``). Said as a list,
    not as an example object: SmolLM2-135M copied an example's placeholder texts into its answers."""
    return list(_lines(shape, path))


def _lines(shape: Any, path: str) -> Iterator[str]:
    # One line at a time: a caller stops once the lines are too long (a skeleton shares its
    # subtrees' names along many paths).
    if isinstance(shape, dict):
        for key, value in shape.items():
            yield from _lines(value, f"{path}.{key}".strip("."))
    elif isinstance(shape, list) and shape:
        if isinstance(shape[0], dict | list):
            yield from _lines(shape[0], f"{path}[]")
        else:
            yield f"- {path}: a list, each item {shape[0]}"
    else:
        yield f"- {path}: {shape}"


def _as_list(value: Any) -> list[str]:
    return [str(kind) for kind in value] if isinstance(value, list) else [str(value)]


def _compact_len(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def check_backend(schema: dict[str, Any], backend: str) -> None:
    """Check 4: with the xgrammar backend, xgrammar compiles ``schema`` (no tokenizer or engine needed:
    the grammar, not its token masks). Other backends are not checked here."""
    if backend != "xgrammar":
        return
    try:
        import xgrammar
    except ImportError:  # pragma: no cover - installed with vLLM
        return
    try:
        xgrammar.Grammar.from_json_schema(json.dumps(schema), any_whitespace=False, strict_mode=True)
    except Exception as exc:  # xgrammar raises RuntimeError or ValueError with its reason
        last = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        # "[17:48:05] /project/cpp/json_schema_converter.cc:4944: minLength 10 is greater than ...":
        # the reason, without xgrammar's time and source line.
        reason = re.sub(r"^\[[^\]]*\]\s*\S+:\d+:\s*", "", last)
        raise SchemaProblem(f"xgrammar cannot compile it: {reason}") from None
