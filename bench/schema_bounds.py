"""What the checks of a structured profile's schema cost, and what validating an output costs at
their work bound (issue 36).

Three series, each the median of ``--repeat`` runs in this process:

* ``shared_refs``: schemas of L levels of W properties whose ``$defs`` all refer to the next level
  (the issue's shape: 15 x 8 is 4.9 KB and has 8**15 paths): the time of ``load_schema``'s checks
  without xgrammar (read, check_schema, the bound, the field list), its outcome, and the time of
  xgrammar's compile of the same schema, alone;
* ``validation``: the time to parse and validate the longest output of an object holding an array of
  N objects of 9 strings, by how many subschemas that applies (``SchemaMeasure.checks``), up to
  the limit ``MAX_SCHEMA_CHECKS``;
* ``branches``: the same for nests of ``oneOf`` (8 branches a level, every branch tried), the case
  where validation work grows fastest with the file.

    .venv/bin/python -m bench.schema_bounds [--repeat 3] [--json FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.lib.results import write_result
from daemon.summary.structured import (
    MAX_SCHEMA_CHECKS,
    InvalidOutput,
    SchemaProblem,
    check_backend,
    checked_validator,
    measure_schema,
    output_hint,
    parse_instance,
    read_schema_file,
)


def shared_refs(levels: int, width: int) -> dict[str, Any]:
    """L definitions of W properties, each referring to the next (the last's are strings)."""

    def level(index: int) -> dict[str, Any]:
        value = (
            {"$ref": f"#/$defs/L{index + 1}"} if index < levels - 1 else {"type": "string", "maxLength": 8}
        )
        return {
            "type": "object",
            "additionalProperties": False,
            "properties": {f"p{i}": value for i in range(width)},
        }

    return {
        "type": "object",
        "additionalProperties": False,
        "properties": {"root": {"$ref": "#/$defs/L0"}},
        "$defs": {f"L{index}": level(index) for index in range(levels)},
    }


def array_of_objects(items: int) -> tuple[dict[str, Any], str]:
    """A schema of an array of ``items`` objects of 9 strings, and its longest output."""
    item = {
        "type": "object",
        "additionalProperties": False,
        "properties": {f"f{i}": {"type": "string", "maxLength": 3} for i in range(9)},
    }
    schema = {
        "type": "object",
        "additionalProperties": False,
        "properties": {"a": {"type": "array", "maxItems": items, "items": item}},
    }
    longest = {"a": [{f"f{i}": "abc" for i in range(9)} for _ in range(items)]}
    return schema, json.dumps(longest, separators=(",", ":"))


def one_of_nest(levels: int, branches: int) -> tuple[dict[str, Any], str]:
    """``levels`` of ``oneOf`` with ``branches`` identical object branches, and a deepest output
    (valid under every branch, so each level tries them all)."""
    defs: dict[str, Any] = {}
    for level in range(levels):
        inner = (
            {"$ref": f"#/$defs/L{level + 1}"} if level < levels - 1 else {"type": "string", "maxLength": 2}
        )
        branch = {"type": "object", "additionalProperties": False, "properties": {"x": inner}}
        defs[f"L{level}"] = {"oneOf": [branch] * branches}
    schema = {
        "type": "object",
        "additionalProperties": False,
        "properties": {"r": {"$ref": "#/$defs/L0"}},
        "$defs": defs,
    }
    text = '{"r":' + '{"x":' * (levels - 1) + '{"x":"ab"}' + "}" * (levels - 1) + "}"
    return schema, text


def _median_s(run: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return round(statistics.median(times), 4)


def _checks_without_backend(path: Path) -> str:
    """load_schema's checks 1-3 (no xgrammar); "ok" or the problem."""
    schema = read_schema_file(path)
    try:
        checked_validator(schema)
        measure_schema(schema)
        output_hint(schema)
    except SchemaProblem as exc:
        return f"refused: {exc}"
    return "ok"


def _shared_refs(repeat: int, folder: Path) -> list[dict[str, Any]]:
    rows = []
    for levels, width in ((3, 8), (4, 8), (5, 8), (6, 8), (8, 8), (15, 8), (32, 8)):
        schema = shared_refs(levels, width)
        path = folder / f"shared_{levels}x{width}.json"
        path.write_text(json.dumps(schema), encoding="utf-8")
        outcome = _checks_without_backend(path)
        rows.append(
            {
                "levels": levels,
                "width": width,
                "file_bytes": path.stat().st_size,
                "paths": width**levels,
                "checks_s": _median_s(functools.partial(_checks_without_backend, path), repeat),
                "xgrammar_compile_s": _median_s(functools.partial(check_backend, schema, "xgrammar"), repeat),
                "outcome": outcome,
            }
        )
        print(json.dumps(rows[-1]), file=sys.stderr)
    return rows


def _validation(
    repeat: int, cases: list[tuple[dict[str, Any], str]], **shape: list[int]
) -> list[dict[str, Any]]:
    rows = []
    ((key, values),) = shape.items()
    for value, (schema, text) in zip(values, cases, strict=True):
        try:
            checks = measure_schema(schema).checks
            accepted = True
        except SchemaProblem:
            checks, accepted = None, False
        validator = checked_validator(schema)
        rows.append(
            {
                key: value,
                "checks": checks,
                "accepted_at_start": accepted,
                "output_chars": len(text),
                "validate_s": _median_s(functools.partial(_validate, text, validator), repeat),
            }
        )
        print(json.dumps(rows[-1]), file=sys.stderr)
    return rows


def _validate(text: str, validator: Any) -> None:
    with contextlib.suppress(InvalidOutput):  # an invalid output costs its validation all the same
        parse_instance(text, validator)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="docsumd-schema-") as scratch:
        shared = _shared_refs(args.repeat, Path(scratch))
    items = [1000, 5000, 9000, 11000]
    validation = _validation(args.repeat, [array_of_objects(n) for n in items], items=items)
    levels = [3, 4, 5, 6]
    branches = _validation(args.repeat, [one_of_nest(n, 8) for n in levels], levels=levels)
    result = {
        "benchmark": "bench/schema_bounds.py",
        "max_schema_checks": MAX_SCHEMA_CHECKS,
        "shared_refs": shared,
        "validation_array_of_objects": validation,
        "validation_one_of_8": branches,
        "environment": {
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "python": platform.python_version(),
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
            "repeat": args.repeat,
        },
    }
    text = json.dumps(result, indent=2)
    if args.json is not None:
        write_result(args.json, result)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
