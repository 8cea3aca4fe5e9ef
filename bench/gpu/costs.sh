#!/bin/bash
# Device call: what the grounding check, the evidence and the summary cache cost (bench/checks_cache_cost.py)
# on one in-process engine. After stage1.sh on the same machine (and the part01 join, or compare.sh
# or fleet.sh before it); JSON and log go to $OUT.
#   T0=$(date +%s) bash .gpu/src/bench/gpu/costs.sh NAME [bench.checks_cache_cost arguments...]
# The run gets a --deadline that ends CALL_LIMIT (default 585) seconds after T0, less a margin.
set -u
T0=${T0:-$(date +%s)}
LIMIT=${CALL_LIMIT:-585}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
NAME=$1; shift
source "$(dirname "$0")/unpack.sh"
left=$(( LIMIT - ( $(date +%s) - T0 ) ))
echo "=== $NAME: bench.checks_cache_cost $* (deadline $(( left - 20 ))s) at +$(( $(date +%s) - T0 ))s"
cd "$SRC"
setsid timeout -k 5 "$left" python3 -m bench.checks_cache_cost --config bench/configs/h200-qwen7b-dummy.toml \
  --json "$OUT/$NAME.json" --deadline $(( left - 20 )) "$@" > "$OUT/$NAME.log" 2>&1 &
pid=$!; wait $pid; rc=$?
kill -KILL -- -$pid 2>/dev/null   # EngineCore children, if any are left
echo "rc=$rc at +$(( $(date +%s) - T0 ))s"
grep -E "^(base|nochecks|base-stop|cache-cold|contract|warmup)|Traceback|Error" "$OUT/$NAME.log" | cut -c1-400 | tail -30
python3 - "$OUT/$NAME.json" <<'PY'
import json, sys
try:
    result = json.load(open(sys.argv[1]))
except (OSError, ValueError) as exc:
    sys.exit(f"no JSON: {exc}")
print(json.dumps({k: v for k, v in result.items() if k != "passes"}))
PY
gzip -f "$OUT/$NAME.log"
