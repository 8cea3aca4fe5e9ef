#!/bin/bash
# Sourced by fleet.sh and costs.sh (device calls after stage1.sh): unpack vLLM into /tmp/site and the
# model into /tmp/model once per machine (as compare.sh does), then the environment of the recipe.
# Needs T0 and the checkout's root as the working directory.
if [ ! -f /tmp/site/vllm/__init__.py ]; then
  [ -f /tmp/payload/vllm.tar.xz.part00 ] || { echo "FATAL: part 1 missing: run stage1.sh on this machine first"; exit 3; }
  cp .gpu/b/vllm.tar.xz.part01 /tmp/payload/
  cat /tmp/payload/vllm.tar.xz.part00 /tmp/payload/vllm.tar.xz.part01 > /tmp/payload/vllm.tar.xz
  (cd /tmp/payload && sha256sum -c "$OLDPWD/.gpu/b/vllm.tar.xz.sha256") || { echo "FATAL: checksum"; exit 4; }
  python3 -c "import tarfile, sys; tarfile.open(sys.argv[1], 'r:xz').extractall(sys.argv[2])" /tmp/payload/vllm.tar.xz /tmp/site || exit 5
  echo "vLLM unpacked at +$(( $(date +%s) - T0 ))s"
fi
[ -d /tmp/model ] || cp -r .gpu/b/qwen7b-dummy /tmp/model
export PYTHONPATH=/tmp/site:$SRC
export VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
export VLLM_USE_FLASHINFER_SAMPLER=0   # flashinfer is not carried (the recipe's pitfall 1)
export DOCSUMD_ENGINE__MODEL=${GPU_MODEL:-/tmp/model}
