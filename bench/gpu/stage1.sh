#!/bin/bash
# Device call 1: stash part 1 of the vLLM tarball, install the wheels into /tmp/site, probe the machine.
# Run from the root of the checkout the device tool sends, carrying .gpu/a, .gpu/src and .gpu/docs:
#   bash .gpu/src/bench/gpu/stage1.sh
# The next call (compare.sh) must follow at once: the machine goes back 30 s after a call returns.
set -u
T0=$(date +%s)
mkdir -p /tmp/payload && cp .gpu/a/vllm.tar.xz.part00 /tmp/payload/ && echo "stashed part00"
nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version,clocks.sm --format=csv
python3 -c "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.cuda.get_device_name(0))"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .gpu/a/whl/*.whl .gpu/a/dwhl/*.whl 2>&1 | tail -3
PYTHONPATH=/tmp/site python3 -c "import pydantic, pydantic_settings, structlog, watchfiles, zmq, aiohttp, psutil, prometheus_client; print('deps ok')"
# FP8 (quantization = "fp8") needs compressed-tensors and loguru (../shared/gpu/README.md); say so now,
# not after an engine start in the next call.
PYTHONPATH=/tmp/site python3 -c "import compressed_tensors, loguru; print('fp8 deps ok')" 2>&1 | tail -1
echo "checkout sent: $(pwd) ($(git log -1 --format=%h 2>/dev/null || echo 'no git'))"
echo "stage1 done in $(( $(date +%s) - T0 ))s"
