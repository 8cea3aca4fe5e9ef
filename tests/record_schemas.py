"""Checks a record docsumd wrote against its published JSON Schema (:func:`daemon.records.json_schemas`).

The unit tests check records built by the code's own builders; the end-to-end helpers check every
record a real daemon wrote that a test reads (:meth:`tests.e2e.harness.Layout.result`, ``.error``).
"""

from __future__ import annotations

import functools
from typing import Any, Literal

from jsonschema import Draft202012Validator

from daemon.records import json_schemas

RecordKind = Literal["result", "failure", "dead-letter"]


@functools.cache
def _validators() -> dict[str, Draft202012Validator]:
    return {
        name: Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)
        for name, schema in json_schemas().items()
    }


def schema_problems(record: Any, kind: RecordKind) -> list[str]:
    """Every way ``record`` breaks the schema of ``kind`` (empty: it is valid)."""
    errors = _validators()[kind].iter_errors(record)
    return [f"{'/'.join(map(str, error.absolute_path)) or '(record)'}: {error.message}" for error in errors]


def assert_valid(record: Any, kind: RecordKind) -> None:
    """Fail, naming the problems, unless ``record`` is valid against the schema of ``kind``."""
    problems = schema_problems(record, kind)
    assert not problems, f"a {kind} record breaks its published schema: {problems}; record: {record!r}"
