#!/usr/bin/env bash
# Install Debian's "redis-server" package when its binary is missing: the shared summary cache's tests
# (tests/unit/cache/test_redis_store.py and others marked `redis`) start their own servers on loopback
# ports with it (tests/redis_server.py). The package's own service is not started (no init system runs
# it here; the tests start theirs). Idempotent: a no-op when redis-server exists.
set -euo pipefail

if command -v redis-server >/dev/null 2>&1; then
    exit 0
fi
echo "== installing redis-server (apt package redis-server)" >&2
sudo=()
if [ "$(id -u)" -ne 0 ]; then
    sudo=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
if ! "${sudo[@]}" apt-get install -y --no-install-recommends redis-server; then
    "${sudo[@]}" apt-get update
    "${sudo[@]}" apt-get install -y --no-install-recommends redis-server
fi
