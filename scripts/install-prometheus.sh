#!/usr/bin/env bash
# Install Debian's "prometheus" package when its binaries are missing: promtool (scripts/check-deploy.sh
# checks the config, rules and dashboard with it) and the prometheus server (the alerts end-to-end test,
# tests/e2e/test_alerts_prometheus.py, runs one on loopback). The package's own service is not started
# (no init system runs it here; the tests start their own server). Idempotent: a no-op when both exist.
set -euo pipefail

if command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1; then
    exit 0
fi
echo "== installing promtool and prometheus (apt package prometheus)" >&2
sudo=()
if [ "$(id -u)" -ne 0 ]; then
    sudo=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
if ! "${sudo[@]}" apt-get install -y --no-install-recommends prometheus; then
    "${sudo[@]}" apt-get update
    "${sudo[@]}" apt-get install -y --no-install-recommends prometheus
fi
