#!/usr/bin/env bash
# Device call 1 of the scale runs (nvidia-h200-x2), carrying .gpu/a .gpu/s .gpu/scale:
#   bash bench/gpu/scale_stage1.sh 2>&1
# The recipe's stage 1 (stash part00, install vLLM's dependency wheels into /tmp/site, probe), then the
# daemon's own wheels into /tmp/scale/site and the corpus into /tmp/scale/docs (both outlive this call
# on the warm machine, like /tmp/site), and a check that both GPUs are there.
set -u
bash .gpu/s/device_stage1.sh
mkdir -p /tmp/scale
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/scale/site .gpu/scale/whl/*.whl 2>&1 | tail -3
rm -rf /tmp/scale/docs && cp -r .gpu/scale/docs /tmp/scale/docs
PYTHONPATH=/tmp/site:/tmp/scale/site python3 -c "
import structlog, aiokafka, pydantic_settings, torch
print('daemon deps ok: aiokafka', aiokafka.__version__, '| GPUs', torch.cuda.device_count())
"
PATH=/tmp/scale/site/bin:$PATH PYTHONPATH=/tmp/scale/site noida-db --help >/dev/null 2>&1 && echo "noida-db ok"
nvidia-smi -L
