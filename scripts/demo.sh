#!/usr/bin/env bash
# Set up a fresh machine and start docsumd on the built-in default: the watched folder var/inbox,
# seeded with a few sample documents, and a tiny local model built offline. Results appear in
# var/outbox (failures in var/failed). Ctrl-C (or SIGTERM) drains and stops.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup-venv.sh
.venv/bin/docsumd make-tiny-model models/tiny
mkdir -p var/inbox
if [[ ! -e var/.samples-seeded ]]; then
    # Write-then-rename, the inbox's convention for writers.
    for sample in daemon/samples/*.txt; do
        name=$(basename "$sample")
        cp "$sample" "var/inbox/.$name" && mv "var/inbox/.$name" "var/inbox/$name"
    done
    touch var/.samples-seeded
fi
cat >&2 <<'MSG'
docsumd: watching var/inbox (drop .txt files there). Results: var/outbox/NAME.summary.json;
         inputs move to var/done, bad inputs to var/failed with NAME.error.json.
         Metrics: http://127.0.0.1:9400/metrics   Stop: Ctrl-C.
MSG
exec .venv/bin/docsumd run --config docsumd.toml
