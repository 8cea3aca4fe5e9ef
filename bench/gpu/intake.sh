#!/bin/bash
# Device, after stage1.sh (the daemon's wheels in /tmp/site): the daemon's intake on this host
# (bench/intake.py, no engine), then the same under py-spy when its wheel is carried in .gpu/a/tools
# (a profile of the threads holding the GIL, and one of all threads), all into $OUT.
#   bash .gpu/src/bench/gpu/intake.sh
# The tokenizer: /tmp/model once compare.sh unpacked it, else .gpu/a/tok (prepare.sh copies it there).
set -u
SRC=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
DOCS=$(pwd)/.gpu/docs
MODEL=/tmp/model; [ -f "$MODEL/tokenizer.json" ] || MODEL=$(pwd)/.gpu/a/tok
export PYTHONPATH=/tmp/site:$SRC TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
cd "$SRC"
ARGS=(--config bench/configs/h200-qwen7b-dummy-fp8-seqs384.toml --model "$MODEL" --docs "$DOCS" --count 400)
echo "cpus $(nproc); $(python3 -c 'import transformers, tokenizers; print("transformers", transformers.__version__, "tokenizers", tokenizers.__version__)')"
python3 -m bench.intake "${ARGS[@]}" --repeat 3 --json "$OUT/intake.json" 2>"$OUT/intake.log" | tail -1
grep "^pass" "$OUT/intake.log"
wheel=$(ls "$OLDPWD"/.gpu/a/tools/py_spy-*.whl 2>/dev/null | head -1)
if [ -n "$wheel" ]; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/pyspy "$wheel" 2>&1 | tail -1
  for mode in gil all; do
    flag=(); [ "$mode" = gil ] && flag=(--gil)
    /tmp/pyspy/bin/py-spy record "${flag[@]}" --threads -r 250 -f raw -o "$OUT/intake_$mode.txt" -- \
      python3 -m bench.intake "${ARGS[@]}" --repeat 1 > /dev/null 2>>"$OUT/intake.log" || echo "py-spy $mode failed"
  done
  grep "^pass" "$OUT/intake.log" | tail -2
fi
