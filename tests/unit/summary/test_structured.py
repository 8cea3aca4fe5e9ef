"""Structured summaries (daemon/summary/structured.py and the summarizer's final step): the schema
checks at start, strict parsing and validation, the one retry and ``invalid_output``, the records and
metrics. The engine is the fake of tests/doubles (replies set per request); the real engine runs the
same profiles in tests/e2e."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from prometheus_client import REGISTRY

from daemon.cli import main
from daemon.config import Config, EngineConfig, ProfileConfig, SummaryConfig
from daemon.errors import DocumentError
from daemon.records import OUTPUT_BYTES, failure_record, result_record
from daemon.summary.options import SummaryOptions
from daemon.summary.profiles import build_profiles, resolve_profiles, shipped_profiles
from daemon.summary.prompts import PromptKind
from daemon.summary.structured import (
    CHARS_PER_TOKEN,
    InvalidOutput,
    SchemaProblem,
    checked_validator,
    field_lines,
    load_schema,
    longest_output_chars,
    measure_schema,
    parse_instance,
    skeleton,
)
from tests.config_files import config_error, config_file
from tests.doubles.engine import FakeEngine
from tests.unit.summary.test_summarize import long_text, make_admission, make_document

SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["title", "points", "kind"],
    "properties": {
        "title": {"type": "string", "maxLength": 40, "description": "a title"},
        "points": {"type": "array", "maxItems": 3, "items": {"type": "string", "maxLength": 30}},
        "kind": {"enum": ["contract", "paper"]},
        "year": {"type": "integer", "minimum": 1900, "maximum": 2100},
    },
}
VALID = {"title": "A licence", "points": ["one", "two"], "kind": "contract"}


def _write(tmp_path: Path, schema: Any, name: str = "schema.json") -> Path:
    path = tmp_path / name
    path.write_text(schema if isinstance(schema, str) else json.dumps(schema), encoding="utf-8")
    return path


def _problem(tmp_path: Path, schema: Any) -> str:
    with pytest.raises(SchemaProblem) as caught:
        load_schema(_write(tmp_path, schema), backend="xgrammar")
    return str(caught.value)


# -- the checks at start ---------------------------------------------------------------------------


def test_the_longest_output_is_the_longest_compact_instance() -> None:
    longest = {"title": "x" * 40, "points": ["y" * 30] * 3, "kind": "contract", "year": 2100}
    jsonschema.validate(longest, SCHEMA)
    assert longest_output_chars(SCHEMA) == len(json.dumps(longest, separators=(",", ":")))


def test_refs_to_defs_are_followed_and_recursion_refused() -> None:
    schema: dict[str, Any] = {
        "type": "object",
        "additionalProperties": False,
        "properties": {"a": {"$ref": "#/$defs/short"}},
        "$defs": {"short": {"type": "string", "maxLength": 5}},
    }
    assert longest_output_chars(schema) == len('{"a":"xxxxx"}')
    schema["$defs"]["short"] = {
        "type": "object",
        "additionalProperties": False,
        "properties": {"again": {"$ref": "#/$defs/short"}},
    }
    with pytest.raises(SchemaProblem, match="recursive"):
        longest_output_chars(schema)


def shared_refs(levels: int, width: int, *, leaf: dict[str, Any] | None = None) -> dict[str, Any]:
    """A schema of ``levels`` definitions, each an object of ``width`` properties that all refer to
    the next one (the last's are strings): a few KB whose instances have ``width ** levels`` leaves."""

    def level(index: int) -> dict[str, Any]:
        value = {"$ref": f"#/$defs/L{index + 1}"} if index < levels - 1 else leaf
        value = value or {"type": "string", "maxLength": 3}
        return {
            "type": "object",
            "additionalProperties": False,
            "required": [f"p{i}" for i in range(width)],
            "properties": {f"p{i}": value for i in range(width)},
        }

    return {
        "type": "object",
        "additionalProperties": False,
        "required": ["root"],
        "properties": {"root": {"$ref": "#/$defs/L0"}},
        "$defs": {f"L{index}": level(index) for index in range(levels)},
    }


def _longest_instance(levels: int, width: int) -> Any:
    value: Any = "xxx"
    for _ in range(levels):
        value = {f"p{i}": value for i in range(width)}
    return {"root": value}


def test_a_definition_shared_along_many_paths_is_measured_once() -> None:
    schema = shared_refs(4, 3)
    longest = _longest_instance(4, 3)
    jsonschema.validate(longest, schema)
    measured = measure_schema(schema)
    assert measured.chars == len(json.dumps(longest, separators=(",", ":")))
    # Validating it applies the root, 1 + 3 + 9 + 27 objects and 81 strings (a $ref adds nothing).
    assert measured.checks == 1 + (1 + 3 + 9 + 27) + 81
    assert measured.height == 2 * 4 + 1  # below the root: a $ref and its object per level, the strings


def test_the_issues_schema_of_shared_refs_is_refused_at_once_not_walked_path_by_path() -> None:
    # 15 levels of 8 properties (issue 36): 8**15 paths, which the bound used to walk one by one.
    schema = shared_refs(15, 8)
    assert len(json.dumps(schema, separators=(",", ":"))) < 6000
    with pytest.raises(SchemaProblem, match=r"validating one output would apply [\d,]+ subschemas"):
        measure_schema(schema)


def test_a_shared_definition_too_deep_where_it_is_used_again_is_refused() -> None:
    deep: dict[str, Any] = {"type": "string", "maxLength": 2}
    for _ in range(20):
        deep = {"type": "object", "additionalProperties": False, "properties": {"x": deep}}
    schema: dict[str, Any] = {
        "type": "object",
        "additionalProperties": False,
        # Measured first at level 1 (deep enough: 22 levels), then used again 12 levels further down.
        "properties": {"a": {"$ref": "#/$defs/deep"}, "b": {"$ref": "#/$defs/chain0"}},
        "$defs": {
            "deep": deep,
            **{
                f"chain{i}": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {"c": {"$ref": f"#/$defs/chain{i + 1}" if i < 5 else "#/$defs/deep"}},
                }
                for i in range(6)
            },
        },
    }
    with pytest.raises(SchemaProblem, match=r"nested more than 32 levels \(through \$ref '#/\$defs/deep'\)"):
        measure_schema(schema)


def test_branches_and_items_count_towards_the_validation_work() -> None:
    branch = {"type": "object", "additionalProperties": False, "properties": {"v": {"$ref": "#/$defs/next"}}}
    schema: dict[str, Any] = {
        "type": "object",
        "additionalProperties": False,
        "properties": {"a": {"type": "array", "maxItems": 10, "items": {"oneOf": [branch] * 4}}},
        "$defs": {"next": {"type": "integer", "minimum": 0, "maximum": 9}},
    }
    # The array, 10 items of (oneOf + 4 objects of (object + $ref'd integer)).
    assert measure_schema(schema).checks == 1 + 1 + 10 * (1 + 4 * 2)
    schema["properties"]["a"]["maxItems"] = 20_000
    with pytest.raises(SchemaProblem, match=r"^/properties/a: validating one output would apply 180,001"):
        measure_schema(schema)


def test_a_field_list_too_long_for_a_prompt_is_refused(tmp_path: Path) -> None:
    described = {"type": "string", "maxLength": 3, "description": "d" * 2000}
    # 3**4 = 81 leaves of 2,000 characters each, from a file of a few KB.
    schema = shared_refs(4, 3, leaf=described)
    assert len(json.dumps(schema)) < 8000
    assert "list of fields for the prompt would be longer than 262,144 characters" in _problem(
        tmp_path, shared_refs(6, 4, leaf=described)
    )
    assert load_schema(_write(tmp_path, schema), backend="xgrammar").hint.count("d" * 2000) == 81


@pytest.mark.parametrize("keyword", ["not", "if", "dependentSchemas", "contains", "propertyNames"])
def test_keywords_the_grammar_ignores_are_refused(tmp_path: Path, keyword: str) -> None:
    schema = {**SCHEMA, keyword: {"title": {"type": "string", "maxLength": 3}}}
    if keyword in ("not", "if", "contains", "propertyNames"):
        schema[keyword] = {"maxLength": 3}
    assert f"(root): {keyword} is not supported: the grammar does not follow it" in _problem(tmp_path, schema)


@pytest.mark.parametrize("command", ["check-config", "run"])
def test_a_schema_of_exponential_size_exits_2_at_once_with_one_line(tmp_path: Path, command: str) -> None:
    """The issue's 15 x 8 schema through the real command line, in a child killed after 60 s: it used
    to hang both commands with no output."""
    path = _structured_config(tmp_path, shared_refs(15, 8))
    with path.open("a", encoding="utf-8") as config:
        config.write('[sources.folder]\ninbox = "in"\noutbox = "out"\ndone = "done"\nfailed = "failed"\n')
    args = ["check-config", str(path)] if command == "check-config" else ["run", "--config", str(path)]
    result = subprocess.run(
        [sys.executable, "-m", "daemon", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])},
    )
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"docsumd: {path}: invalid configuration: profiles.record.json_schema_file: ")
    assert "validating one output would apply" in line


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"title": {"type": "string"}}, "/properties/title: a string needs maxLength"),
        (
            {"points": {"type": "array", "items": {"type": "string", "maxLength": 3}}},
            "needs items and maxItems",
        ),
        ({"title": {"type": "string", "maxLength": 9, "pattern": "^a"}}, "pattern is not supported"),
        ({"title": {"type": "object", "properties": {}}}, '"additionalProperties": false'),
        (
            {"title": {"type": "string", "maxLength": 5, "minLength": 10}},
            "xgrammar cannot compile it: minLength",
        ),
        ({"title": {"type": 12}}, "not a valid JSON Schema at properties/title/type"),
    ],
)
def test_an_unbounded_invalid_or_uncompilable_schema_is_refused(
    tmp_path: Path, change: dict[str, Any], expected: str
) -> None:
    schema = {**SCHEMA, "properties": {**SCHEMA["properties"], **change}}
    assert expected in _problem(tmp_path, schema)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("{", "is not JSON"),
        ('{"type": "object", "maxLength": NaN}', "is not JSON: NaN is not JSON"),
        ("[1, 2]", "must hold a JSON object"),
        (
            json.dumps({"type": "array", "items": {"type": "null"}, "maxItems": 1}),
            "the root must be an object",
        ),
        (json.dumps({**SCHEMA, "$schema": "http://json-schema.org/draft-04/schema#"}), "is not supported"),
    ],
)
def test_a_file_that_is_not_a_usable_schema_is_refused(tmp_path: Path, text: str, expected: str) -> None:
    assert expected in _problem(tmp_path, text)


def test_a_missing_or_oversized_schema_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SchemaProblem, match="does not exist"):
        load_schema(tmp_path / "absent.json", backend="xgrammar")
    big = _write(tmp_path, " " * (256 << 10) + "{}")
    with pytest.raises(SchemaProblem, match="larger than the limit"):
        load_schema(big, backend="xgrammar")


def test_draft_7_is_accepted_and_the_skeleton_shows_the_shape() -> None:
    checked_validator({**SCHEMA, "$schema": "http://json-schema.org/draft-07/schema#"})
    assert skeleton(SCHEMA) == {"title": "a title", "points": ["points"], "kind": "contract|paper", "year": 0}
    assert field_lines(skeleton(SCHEMA)) == [
        "- title: a title",
        "- points: a list, each item points",
        "- kind: contract|paper",
        "- year: 0",
    ]


def test_the_shipped_structured_profiles_have_bounded_schemas_that_fit_their_length() -> None:
    shipped = shipped_profiles()
    for name in ("contract", "paper"):
        section = shipped[name]
        assert section.json_schema_file is not None
        assert section.max_summary_tokens is not None
        output = load_schema(section.json_schema_file, backend="xgrammar")
        assert output.longest_chars <= section.max_summary_tokens * CHARS_PER_TOKEN
        assert section.instruction
        assert section.part_instruction
        assert section.description


def _structured_config(tmp_path: Path, schema: Any, *, tokens: int = 256, context: int = 2048) -> Path:
    _write(tmp_path, schema, "record.json")
    return config_file(
        tmp_path,
        f'[engine]\nmodel = "unused"\nmax_model_len = {context}\n'
        f'[profiles.record]\njson_schema_file = "record.json"\nmax_summary_tokens = {tokens}\n',
    )


def test_json_schema_file_is_relative_to_the_config_file_and_checked_with_the_profiles(
    tmp_path: Path,
) -> None:
    specs = resolve_profiles(_load(_structured_config(tmp_path, SCHEMA)))
    record = next(spec for spec in specs if spec.name == "record")
    assert record.output.schema == SCHEMA
    broken = {**SCHEMA, "properties": {"title": {"type": "string"}}}
    message = config_error(_structured_config(tmp_path, broken))
    assert "invalid configuration: profiles.record.json_schema_file: " in message
    assert "a string needs maxLength" in message


def test_a_schema_too_long_for_the_profiles_length_is_a_config_error(tmp_path: Path) -> None:
    needed = -(-longest_output_chars(SCHEMA) // CHARS_PER_TOKEN)
    message = config_error(_structured_config(tmp_path, SCHEMA, tokens=needed - 1))
    assert "profiles.record.json_schema_file" in message
    assert f"needs {needed} tokens" in message
    assert "profiles.record.max_summary_tokens" in message


def test_check_config_exits_2_naming_the_key_for_a_broken_schema(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _structured_config(tmp_path, "{not json")
    assert main(["check-config", str(path)]) == 2
    assert "profiles.record.json_schema_file" in capsys.readouterr().err


def _load(path: Path) -> Config:
    from daemon.cli import load_checked_config

    return load_checked_config(path)


# -- parsing and validation -----------------------------------------------------------------------


def test_a_valid_object_is_accepted() -> None:
    assert parse_instance(json.dumps(VALID), checked_validator(SCHEMA)) == VALID


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"title": "a\tb", "points": [], "kind": "paper"}', "Invalid control character"),
        ('{"title": NaN, "points": [], "kind": "paper"}', "NaN is not JSON"),
        (json.dumps(VALID) + " and more", "Extra data"),
        (json.dumps([VALID]), "not a JSON object"),
        (json.dumps({**VALID, "kind": "poem"}), "at kind: 'poem' is not one of"),
        (json.dumps({**VALID, "extra": 1}), "Additional properties"),
        (json.dumps({**VALID, "title": "x" * 41}), "at title: "),
        ("[" * 100_000, "nested too deeply"),
    ],
)
def test_invalid_output_is_refused_with_the_reason(text: str, expected: str) -> None:
    with pytest.raises(InvalidOutput, match=expected.replace("[", r"\[")):
        parse_instance(text, checked_validator(SCHEMA))


# -- the final step: constrained, validated, retried once -------------------------------------------


def _summarizer(tmp_path: Path, tokenizer: Any, engine: FakeEngine, *, context: int = 2048) -> Any:
    from daemon.summary.summarizer import Summarizer

    schema_path = _write(tmp_path, SCHEMA)
    config = Config(
        engine=EngineConfig(model="unused", max_model_len=context),
        summary=SummaryConfig(max_summary_tokens=64, chunk_overlap_tokens=32, opening_tokens=0),
        profiles={
            "record": ProfileConfig(json_schema_file=schema_path, max_summary_tokens=128, temperature=0.0)
        },
    )
    profiles = build_profiles(config, tokenizer)
    return Summarizer(engine, tokenizer, config.summary, profiles=profiles, admission=make_admission())


def _count(outcome: str, profile: str = "record") -> float:
    value = REGISTRY.get_sample_value(
        "docsumd_structured_outputs_total", {"profile": profile, "outcome": outcome}
    )
    return value or 0.0


async def test_a_valid_first_output_is_the_summary_and_its_object(tmp_path: Path, tokenizer: Any) -> None:
    engine = FakeEngine(text=json.dumps(VALID))
    summarizer = _summarizer(tmp_path, tokenizer, engine)
    before = _count("valid")
    summary = await summarizer.summarize(
        make_document("A short licence."), summarizer.plan(profile=summarizer.profiles.get("record"))
    )
    assert summary.structured == VALID
    assert summary.text == json.dumps(VALID)
    assert summary.style == "json"
    [call] = engine.calls
    assert call.sampling is not None
    assert call.sampling.json_schema is not None
    assert json.loads(call.sampling.json_schema) == SCHEMA
    assert _count("valid") == before + 1
    # The prose profile's requests are not constrained.
    await summarizer.summarize(make_document("Another one."))
    assert engine.calls[-1].sampling is not None
    assert engine.calls[-1].sampling.json_schema is None


@pytest.mark.parametrize("first", [("not json", "stop"), ('{"title": "cut', "length")])
async def test_an_invalid_or_cut_off_output_is_retried_once_with_a_new_draw(
    tmp_path: Path, tokenizer: Any, first: tuple[str, str]
) -> None:
    engine = FakeEngine(text=json.dumps(VALID))
    engine.replies = [first]
    summarizer = _summarizer(tmp_path, tokenizer, engine)
    before = _count("retried")
    summary = await summarizer.summarize(
        make_document("A licence."), summarizer.plan(profile=summarizer.profiles.get("record"))
    )
    assert summary.structured == VALID
    first_call, retry = engine.calls
    assert first_call.prompt == retry.prompt
    assert first_call.sampling is not None
    assert retry.sampling is not None
    assert first_call.sampling.temperature == 0.0
    assert retry.sampling.temperature >= 0.5
    assert retry.sampling.json_schema == first_call.sampling.json_schema
    assert _count("retried") == before + 1


async def test_two_invalid_outputs_fail_the_document_as_invalid_output_keeping_the_text(
    tmp_path: Path, tokenizer: Any
) -> None:
    engine = FakeEngine(text="x" * (OUTPUT_BYTES + 100))
    engine.replies = [('{"kind": "poem"}', "stop")]
    summarizer = _summarizer(tmp_path, tokenizer, engine)
    before = _count("invalid")
    with pytest.raises(DocumentError) as caught:
        await summarizer.summarize(
            make_document("A licence."), summarizer.plan(profile=summarizer.profiles.get("record"))
        )
    error = caught.value
    assert error.reason == "invalid_output"
    assert "try 1: not valid against the schema" in error.message
    assert "try 2: not JSON" in error.message
    assert len(engine.calls) == 2
    assert _count("invalid") == before + 1
    record = failure_record(
        doc_id="d", source="folder", error=error, metadata={}, sha256=None, input_bytes=None
    )
    assert record["reason"] == "invalid_output"
    assert record["output"].startswith("xxx")
    assert len(record["output"].encode()) <= OUTPUT_BYTES


async def test_only_the_final_combine_of_a_staged_document_is_constrained(
    tmp_path: Path, tokenizer: Any
) -> None:
    engine = FakeEngine(text=json.dumps(VALID))
    summarizer = _summarizer(tmp_path, tokenizer, engine, context=1024)
    summary = await summarizer.summarize(
        make_document(long_text(120)), summarizer.plan(profile=summarizer.profiles.get("record"))
    )
    assert summary.strategy == "map_reduce"
    assert summary.structured == VALID
    constrained = [call for call in engine.calls if call.sampling and call.sampling.json_schema]
    assert constrained == [engine.calls[-1]]
    assert engine.calls[-1].kind == PromptKind.COMBINE.value
    assert len(engine.calls) == summary.requests > 2


async def test_a_length_option_too_short_for_the_schema_is_invalid_options(
    tmp_path: Path, tokenizer: Any
) -> None:
    summarizer = _summarizer(tmp_path, tokenizer, FakeEngine())
    with pytest.raises(DocumentError) as caught:
        await summarizer.summarize(
            make_document("A licence."),
            summarizer.plan(SummaryOptions(max_summary_tokens=16), summarizer.profiles.get("record")),
        )
    assert caught.value.reason == "invalid_options"


async def test_the_result_record_carries_structured_beside_summary(tmp_path: Path, tokenizer: Any) -> None:
    summarizer = _summarizer(tmp_path, tokenizer, FakeEngine(text=json.dumps(VALID)))
    document = make_document("A licence.")
    summary = await summarizer.summarize(document, summarizer.plan(profile=summarizer.profiles.get("record")))
    record = result_record(document, summary, model="m", queued_s=0.0, total_s=1.0)
    assert record["structured"] == VALID
    assert record["summary"] == json.dumps(VALID)
    assert record["style"] == "json"
    prose = await summarizer.summarize(document)
    assert result_record(document, prose, model="m", queued_s=0.0, total_s=1.0)["structured"] is None
