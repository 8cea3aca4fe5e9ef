#!/usr/bin/env bash
# Verify systemd/docsumd.service with systemd-analyze (installs systemd's tools if missing) and
# print its security exposure score. The unit's ExecStart points at /opt/docsumd; verify needs the
# binary to exist, so a copy pointing at this checkout's .venv is checked.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v systemd-analyze >/dev/null; then
    sudo_cmd=""; [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
    $sudo_cmd apt-get update -qq && $sudo_cmd apt-get install -y -qq systemd >/dev/null
fi
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
sed "s#/opt/docsumd/.venv/bin/docsumd#$PWD/.venv/bin/docsumd#" systemd/docsumd.service > "$work/docsumd.service"
systemd-analyze verify "$work/docsumd.service"
echo "systemd-analyze verify: ok"
systemd-analyze security --offline=true "$work/docsumd.service" | tail -1
