#!/bin/bash
# Device call: two vLLM servers on the one GPU, docsumd's remote engine against the plain round-robin
# client, then in-process docsumd alone (bench/fleet.py). After stage1.sh (and compare.sh, or the
# part01 join below) on the same machine; JSON and logs go to $OUT.
#   T0=$(date +%s) bash .gpu/src/bench/gpu/fleet.sh NAME [bench.fleet arguments...]
# The run gets a --deadline that ends CALL_LIMIT (default 585) seconds after T0, less a margin for
# stopping the servers; whatever it leaves running is killed by process group at the end.
set -u
T0=${T0:-$(date +%s)}
LIMIT=${CALL_LIMIT:-585}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
NAME=$1; shift
source "$(dirname "$0")/unpack.sh"
export FLEET_PIDS_FILE=/tmp/fleet-$NAME.pids
LOGS=/tmp/fleet-logs-$NAME; rm -rf "$LOGS"; mkdir -p "$LOGS"
left=$(( LIMIT - ( $(date +%s) - T0 ) ))
echo "=== $NAME: bench.fleet $* (deadline $(( left - 40 ))s) at +$(( $(date +%s) - T0 ))s"
nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader 2>/dev/null
cd "$SRC"
setsid timeout -k 5 "$left" python3 -m bench.fleet --config bench/configs/h200-qwen7b-dummy.toml \
  --server-memory "${SERVER_MEMORY:-0.42}" --json "$OUT/$NAME.json" --logs "$LOGS" \
  --deadline $(( left - 40 )) "$@" > "$OUT/$NAME.log" 2>&1 &
pid=$!; wait $pid; rc=$?
kill -KILL -- -$pid 2>/dev/null   # EngineCore children of the in-process engine, if any are left
for group in $(cat "$FLEET_PIDS_FILE" 2>/dev/null); do kill -KILL -- -"$group" 2>/dev/null; done
echo "rc=$rc at +$(( $(date +%s) - T0 ))s"
grep -E "healthy after|^(docsumd|plain|inprocess|warmup)|skipping|Traceback|Error|failed" "$OUT/$NAME.log" | cut -c1-400 | tail -30
python3 - "$OUT/$NAME.json" <<'PY'
import json, sys
try:
    result = json.load(open(sys.argv[1]))
except (OSError, ValueError) as exc:
    sys.exit(f"no JSON: {exc}")
print(json.dumps({k: v for k, v in result.items() if k not in ("passes", "server_flags")}))
PY
gzip -f "$OUT/$NAME.log"
tar -czf "$OUT/$NAME-servers.tar.gz" -C "$LOGS" . 2>/dev/null
