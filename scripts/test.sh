#!/usr/bin/env bash
# Set up a fresh machine and run the test suite (unit tests, then end-to-end tests with the real vLLM
# engine and a tiny model the tests build, and a Prometheus server for the alerts test). Extra arguments
# go to pytest, e.g. `-m "not engine"`.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup-venv.sh
# The alerts end-to-end test runs a real Prometheus server (Debian package "prometheus").
bash scripts/install-prometheus.sh
# The shared summary cache's tests run real Redis servers (Debian package "redis-server").
bash scripts/install-redis.sh
# Two test processes (pytest-xdist; DOCSUMD_TEST_WORKERS=1 for one): the end-to-end tests wait on
# engine start-ups and subprocesses, and two of them share 2 cores well (19 min instead of 24 here).
# worksteal: an idle worker takes tests from the busy one, so the long ones do not end up queued.
exec .venv/bin/python -m pytest -p no:cacheprovider -rA --durations=15 \
    -n "${DOCSUMD_TEST_WORKERS:-2}" --dist worksteal "$@"
