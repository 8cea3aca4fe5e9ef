#!/usr/bin/env bash
# Device call 2 (and later calls) of the scale runs on nvidia-h200-x2, straight after scale_stage1.sh:
#   call 2, carrying .gpu/b .gpu/s:   CALL_LIMIT=585 bash bench/gpu/scale_device.sh n1 n2 tp2 2>&1
#   a later call, carrying .gpu/s:    CALL_LIMIT=585 bash bench/gpu/scale_device.sh PASS... 2>&1
# Passes (each its own bench/scale.py process and broker, results in $OUT/scale_gpu_PASS.json):
#   n1   1 daemon on GPU 0 (CUDA_VISIBLE_DEVICES=0)
#   n2   2 daemons, one per GPU (CUDA_VISIBLE_DEVICES=0 and 1), 8 partitions, keyed by document id
#   tp2  1 daemon with engine.tensor_parallel_size = 2 (CUDA_VISIBLE_DEVICES=0,1)
#   hot2 as n2, every long document keyed to one partition (the imbalance worst case)
# All on the mixed 400-document workload (bench/compare.py's), bench/configs/h200-qwen7b-dummy.toml, the
# recipe's weightless Qwen2.5-7B model. A pass that would not fit the call's time left is skipped (like
# the recipe's device_runs.sh); run it in the next call. The passes' reports are then merged into
# $OUT/scale_gpu_h200x2.json (speedups against the first pass given).
set -u
T0=$(date +%s)
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
LIMIT=${CALL_LIMIT:-585}      # the device tool ends a command at 600 s
NEED=${RUN_NEED:-240}         # seconds a pass needs at least; raised to 0.9 x the longest pass so far
COUNT=${COUNT:-400}
if [[ ! -f /tmp/site/vllm/__init__.py ]]; then
  # The recipe's stage 2 unpacks vLLM into /tmp/site and the model into /tmp/model; "none" runs no benchmark.
  bash .gpu/s/device_stage2.sh none 2>&1 | grep -v "^unknown run" | tail -15
fi
source .gpu/s/device_env.sh
export PYTHONPATH=/tmp/site:/tmp/scale/site:$PWD
export PATH=/tmp/scale/site/bin:$PATH
export DOCSUMD_ENGINE__MODEL=/tmp/model
# The machine keeps NVLink multicast off (KINDS.md); say so again for every process started here.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
passes=("$@"); (( ${#passes[@]} )) || passes=(n1 n2 tp2)
done_any=0
for pass in "${passes[@]}"; do
  case $pass in
    n1)   spec="n1:daemons=1,partitions=8";;
    n2)   spec="n2:daemons=2,partitions=8";;
    tp2)  spec="tp2:daemons=1,tp=2,partitions=8";;
    hot2) spec="hot2:daemons=2,keying=hot,partitions=8";;
    *) echo "unknown pass $pass"; continue;;
  esac
  left=$(( LIMIT - ( $(date +%s) - T0 ) ))
  if (( left < NEED )); then echo "SKIP $pass: ${left}s left, need ${NEED}s"; continue; fi
  ts=$(date +%s); pgids=/tmp/scale/pgids_$pass; : > "$pgids"
  echo "=== PASS $pass ($spec), limit $(( left - 10 ))s, at +$(( ts - T0 ))s"
  # SIGTERM at the limit: the bench stops its daemons and broker itself (60 s), then SIGKILL.
  setsid timeout -k 60 $(( left - 70 )) python3 -m bench.scale --workload mixed --count "$COUNT" \
    --docs /tmp/scale/docs --config bench/configs/h200-qwen7b-dummy.toml --pin gpu --gpus 0,1 \
    --run "$spec" --ready-timeout 400 --timeout $(( left - 120 )) --pgid-file "$pgids" \
    --json "$OUT/scale_gpu_$pass.json" > "$OUT/scale_$pass.log" 2>&1 &
  pid=$!; wait $pid; rc=$?
  # Backstop: the daemons run in process groups of their own; none may keep a GPU for the next pass.
  kill -KILL -- -$pid 2>/dev/null
  while read -r pgid; do kill -KILL -- "-$pgid" 2>/dev/null; done < "$pgids"
  d=$(( $(date +%s) - ts )); n=$(( d * 9 / 10 )); (( n > NEED )) && NEED=$n
  echo "rc=$rc after ${d}s"
  grep -E "^pass |Traceback|Error" "$OUT/scale_$pass.log" | cut -c1-400 | tail -8
  nvidia-smi --query-gpu=index,memory.used --format=csv,noheader
  [[ -f "$OUT/scale_gpu_$pass.json" ]] && done_any=1
done
if (( done_any )); then
  # shellcheck disable=SC2046
  python3 -m bench.scale --merge $(ls "$OUT"/scale_gpu_{n1,n2,tp2,hot2}.json 2>/dev/null) \
    --json "$OUT/scale_gpu_h200x2.json" | grep -E '"(label|docs_per_s|token_share|extra_results|unexplained)"|speedup' -A0
fi
echo "scale_device done at +$(( $(date +%s) - T0 ))s"
