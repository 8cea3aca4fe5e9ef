#!/bin/bash
# Issue 24 item 4: speculative decoding with the real small model on the GPU, in two device calls on a
# machine where stage1.sh and compare.sh already ran (vLLM unpacked in /tmp/site). Run from the root
# of the checkout the device tool sends (bench/gpu/prepare_spec.sh laid out .gpu/g1 and .gpu/g2):
#   call A, carrying .gpu/g1 .gpu/src .gpu/docs:   bash .gpu/src/bench/gpu/spec.sh stash
#   call B, at once, carrying .gpu/g2 .gpu/src .gpu/docs:
#                                                   T0=$(date +%s) bash .gpu/src/bench/gpu/spec.sh run
# stash: keeps part 1 of SmolLM2-135M-Instruct's GGUF (and the accelerate wheel) in /tmp/smollm2-payload.
# build: only the model (no vLLM needed; with STASH, SPEC_MODEL, SITE and PY set, it runs on the dev
#        machine too: that is how it was tested)
# run:   joins the GGUF, checks its SHA-256, builds /tmp/smollm2 with docsumd's own make-demo-model
#        (bf16 safetensors; the same bytes as the CPU tests' model if its hash is the pinned one), then
#        compare.sh twice, speculation off (--baseline-config) against ngram on (--config), greedy:
#        spec-high, the corpus at the daemon's load (max_num_seqs 256), and, if 200 s are left,
#        spec-low, one copy of the corpus at batch size 8 (DOCSUMD_ENGINE__MAX_NUM_SEQS=8).
# vLLM 0.26.0 runs a dense model on its V2 model runner, which lacks ngram speculation: the engine with
# speculation falls back to the V1 runner (its log says "Model Runner V2 does not yet support
# ngram"), so off against on is also V2 against V1, as a deployment would get them. To isolate
# speculation: VLLM_USE_V2_MODEL_RUNNER=0 SPEC_TAG=-v1 ... spec.sh run (both engines on V1).
# The JSON files and gzipped logs go to $OUT; the key figures are printed too (files may not come back).
set -u
T0=${T0:-$(date +%s)}
LIMIT=${CALL_LIMIT:-585}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
STASH=${STASH:-/tmp/smollm2-payload}
GGUF=SmolLM2-135M-Instruct.Q4_1.gguf
MODEL=${SPEC_MODEL:-/tmp/smollm2}
SITE=${SITE:-/tmp/site}           # where stage1.sh installed the wheels and compare.sh unpacked vLLM
PY=${PY:-python3}
HIGH_COPIES=${HIGH_COPIES:-24}
LOW_COPIES=${LOW_COPIES:-1}
LOW_NEEDS_S=${LOW_NEEDS_S:-200}
TAG=${SPEC_TAG:-}                 # appended to the result names (spec-high$TAG, spec-low$TAG)
read -r -a MORE <<< "${SPEC_ARGS:-}"   # more compare.py arguments for both runs (the last of a kind wins)
here() { echo "+$(( $(date +%s) - T0 ))s"; }

case "${1:-}" in
  stash)
    mkdir -p "$STASH" && cp .gpu/g1/* "$STASH/" && ls -l "$STASH"
    [ -f /tmp/site/vllm/__init__.py ] && echo "vLLM already unpacked in /tmp/site" \
      || echo "WARNING: /tmp/site/vllm missing: stage1.sh and compare.sh have not run on this machine"
    # what call B needs besides the stash: numba (vLLM's ngram proposer), gguf and transformers (the
    # conversion); said now, not after the model is built
    PYTHONPATH=/tmp/site python3 -c "import numba, gguf, transformers, vllm.v1.spec_decode.ngram_proposer; \
print('spec deps ok: numba', numba.__version__, 'transformers', transformers.__version__)" 2>&1 | tail -1
    echo "stash done $(here)"
    exit 0;;
  build) ;;
  run) [ -f /tmp/site/vllm/__init__.py ] || { echo "FATAL: vLLM not unpacked in /tmp/site (stage1.sh, compare.sh first)"; exit 3; };;
  *) echo "usage: spec.sh stash|build|run"; exit 2;;
esac

[ -f "$STASH/$GGUF.part00" ] || { echo "FATAL: part 1 missing: run 'spec.sh stash' on this machine first"; exit 3; }
G2=$(pwd)/.gpu/g2
# 1. the GGUF, joined and checked
if [ ! -f "$MODEL/docsumd-demo-model.json" ]; then
  cat "$STASH/$GGUF.part00" "$G2/$GGUF.part01" > "$STASH/$GGUF"
  (cd "$STASH" && sha256sum -c "$G2/$GGUF.sha256") || { echo "FATAL: checksum"; exit 4; }
  # 2. the conversion's one module the payload lacks (transformers is the image's, gguf the payload's)
  $PY -c "import accelerate" 2>/dev/null || PYTHONPATH=$SITE $PY -c "import accelerate" 2>/dev/null \
    || $PY -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "$STASH"/accelerate-*.whl 2>&1 | tail -2
  # 3. docsumd's own conversion, as `docsumd make-demo-model` runs it on CPU
  (cd "$SRC" && PYTHONPATH=$SITE:$SRC HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
    $PY -m daemon make-demo-model "$MODEL" --gguf "$STASH/$GGUF") 2>&1 | tail -5
  [ -f "$MODEL/docsumd-demo-model.json" ] || { echo "FATAL: make-demo-model built nothing"; exit 5; }
  echo "model built $(here)"
fi
# 4. the same files as the CPU's model? (its marker travelled in .gpu/g2); any small file that differs
#    is replaced by the CPU's, so the tokenizer and chat template are the CPU tests' exactly
$PY - "$MODEL" "$G2/files" <<'PY'
import json, shutil, sys
from pathlib import Path
model, cpu = Path(sys.argv[1]), Path(sys.argv[2])
here = json.loads((model / "docsumd-demo-model.json").read_text())["files"]
there = json.loads((cpu / "docsumd-demo-model.json").read_text())["files"]
for name, entry in sorted(there.items()):
    same = here.get(name, {}).get("sha256") == entry["sha256"]
    print(f"{name}: {'same as CPU' if same else 'DIFFERS from CPU'}")
    if not same and (cpu / name).is_file():
        shutil.copyfile(cpu / name, model / name)
        print(f"  {name}: replaced by the CPU's")
PY
ls -l "$MODEL"
[ "$1" = run ] || exit 0

# 5. the measurements (compare.sh: its deadline, $OUT/NAME.json and NAME.log.gz)
export GPU_MODEL=$MODEL
export T0
CONFIGS=(--config bench/configs/h200-smollm2-ngram.toml --baseline-config bench/configs/h200-smollm2.toml)
bash "$SRC/bench/gpu/compare.sh" "spec-high$TAG" --workload corpus --copies "$HIGH_COPIES" --docs "$(pwd)/.gpu/docs" \
  --warmup 20 --no-raw "${CONFIGS[@]}" "${MORE[@]}"
left=$(( LIMIT - ( $(date +%s) - T0 ) ))
if [ "$left" -ge "$LOW_NEEDS_S" ]; then
  DOCSUMD_ENGINE__MAX_NUM_SEQS=8 bash "$SRC/bench/gpu/compare.sh" "spec-low$TAG" --workload corpus \
    --copies "$LOW_COPIES" --docs "$(pwd)/.gpu/docs" --warmup 4 --no-raw "${CONFIGS[@]}" "${MORE[@]}"
else
  echo "spec-low skipped: ${left}s left, it needs ${LOW_NEEDS_S}s"
fi
echo "spec done $(here)"
