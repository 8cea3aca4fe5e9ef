#!/bin/bash
# Device call 2 and later: unpack vLLM into /tmp/site (once per machine), then run bench/compare.py
# with the GPU config; its JSON and log go to $OUT.
#   T0=$(date +%s) bash .gpu/src/bench/gpu/compare.sh NAME [compare.py arguments...]
# A --config among the arguments replaces the default bf16 one (argparse keeps the last), e.g.
#   ... compare.sh corpus-fp8 --config bench/configs/h200-qwen7b-dummy-fp8.toml \
#         --baseline-config bench/configs/h200-qwen7b-dummy.toml ...   (paths relative to .gpu/src)
# T0 is when the device call began (several compare.sh in one call share it); the run gets a
# --deadline that ends CALL_LIMIT (default 585) seconds after T0, so it returns before the device
# tool's 600 s limit with everything it measured (compare.py rewrites its JSON after each pass).
set -u
T0=${T0:-$(date +%s)}
LIMIT=${CALL_LIMIT:-585}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
NAME=$1; shift
if [ ! -f /tmp/site/vllm/__init__.py ]; then
  [ -f /tmp/payload/vllm.tar.xz.part00 ] || { echo "FATAL: part 1 missing: run stage1.sh on this machine first"; exit 3; }
  cp .gpu/b/vllm.tar.xz.part01 /tmp/payload/
  cat /tmp/payload/vllm.tar.xz.part00 /tmp/payload/vllm.tar.xz.part01 > /tmp/payload/vllm.tar.xz
  (cd /tmp/payload && sha256sum -c "$OLDPWD/.gpu/b/vllm.tar.xz.sha256") || { echo "FATAL: checksum"; exit 4; }
  python3 -c "import tarfile, sys; tarfile.open(sys.argv[1], 'r:xz').extractall(sys.argv[2])" /tmp/payload/vllm.tar.xz /tmp/site || exit 5
  rm -rf /tmp/model && cp -r .gpu/b/qwen7b-dummy /tmp/model
  echo "vLLM unpacked at +$(( $(date +%s) - T0 ))s"
fi
export PYTHONPATH=/tmp/site:$SRC
export VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
export VLLM_USE_FLASHINFER_SAMPLER=0   # flashinfer is not carried (the recipe's pitfall 1)
export DOCSUMD_ENGINE__MODEL=${GPU_MODEL:-/tmp/model}   # spec.sh: the real small model in /tmp/smollm2
left=$(( LIMIT - ( $(date +%s) - T0 ) ))
echo "=== $NAME: compare.py $* (deadline ${left}s) at +$(( $(date +%s) - T0 ))s"
cd "$SRC"
setsid timeout -k 5 "$left" python3 -m bench.compare --config bench/configs/h200-qwen7b-dummy.toml \
  --json "$OUT/$NAME.json" --deadline $(( left - 10 )) "$@" > "$OUT/$NAME.log" 2>&1 &
pid=$!; wait $pid; rc=$?
kill -KILL -- -$pid 2>/dev/null   # EngineCore children of this run, if any are left
echo "rc=$rc at +$(( $(date +%s) - T0 ))s"
grep -E "^daemon \(|^workload|skipping|Traceback|Error" "$OUT/$NAME.log" | tail -20
grep -oE "Model Runner V2[^;]*;[^.]*" "$OUT/$NAME.log" | sort | uniq -c   # which runner each engine used
python3 - "$OUT/$NAME.json" <<'PY'
import json, sys
try:
    result = json.load(open(sys.argv[1]))
except (OSError, ValueError) as exc:
    sys.exit(f"no JSON: {exc}")
print("raw docs/s", result.get("raw_docs_per_s"), "ratio", result.get("ratio"))
if "baseline" in result:
    print("baseline docs/s", result["baseline"]["docs_per_s"], "vs_baseline", result["vs_baseline"],
          "KV cache tokens: baseline", result["baseline"].get("kv_cache_tokens"),
          "main", result["daemon"].get("kv_cache_tokens"), "raw", (result.get("raw") or {}).get("kv_cache_tokens"))
for point in result.get("curve", []):
    print(json.dumps(point))
for name, section in (("main", result.get("daemon")), ("baseline", result.get("baseline")), ("raw", result.get("raw"))):
    if section:
        print(name, "generated tokens", section.get("generated_tokens"), "spec_decoding", json.dumps(section.get("spec_decoding")))
if "same_summaries_as_baseline" in result:
    print("same summaries as baseline", result["same_summaries_as_baseline"])
PY
gzip -f "$OUT/$NAME.log"
