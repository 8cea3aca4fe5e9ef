#!/usr/bin/env bash
# Set up a fresh machine and run the test suite (unit tests, then end-to-end tests with the real vLLM
# engine and a tiny model the tests build, and a Prometheus server for the alerts test). Extra arguments
# go to pytest, e.g. `-m "not engine"`.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup-venv.sh
# The alerts end-to-end test runs a real Prometheus server (Debian package "prometheus").
bash scripts/install-prometheus.sh
exec .venv/bin/python -m pytest -p no:cacheprovider -rA --durations=15 "$@"
