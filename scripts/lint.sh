#!/usr/bin/env bash
# Static checks: ruff (lint and format), mypy --strict and import-linter (no import cycle), as
# configured in pyproject.toml.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup-venv.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
.venv/bin/lint-imports --no-cache
