#!/usr/bin/env bash
# Set up a fresh machine and start docsumd on the built-in default: the watched folder var/inbox,
# seeded with a few sample documents, and a tiny local model built offline. Results appear in
# var/outbox (failures in var/failed). Ctrl-C (or SIGTERM) drains and stops.
#
# The tiny model has random weights: it proves the pipeline (intake, staged summaries, results,
# acknowledgement, metrics), not the wording. Its summaries are random text. For real summaries, run
# a real model on a GPU: README.md, "Running on a GPU with a real model".
set -euo pipefail
cd "$(dirname "$0")/.."

cat >&2 <<'MSG'
docsumd demo: the tiny model built here has random weights. It proves the pipeline, not the wording:
              the summaries it writes are random text. For real summaries see README.md,
              "Running on a GPU with a real model".
MSG
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
         Reminder: tiny random-weight model, so the summaries are random text (the pipeline is real).
MSG
exec .venv/bin/docsumd run --config docsumd.toml
