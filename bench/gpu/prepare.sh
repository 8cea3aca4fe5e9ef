#!/bin/bash
# Lay out what the GPU runs need, on the dev machine (no device time; about 5 minutes of CPU the first
# time, mostly xz). Run from anywhere inside the repo:
#   bash bench/gpu/prepare.sh [CHECKOUT...]
# CHECKOUT: the repository root(s) whose working tree the device tool sends (the checkout the session
# was started in, which for a helper working in a git worktree is not the worktree); default: this
# worktree and the main checkout. In each it creates the git-ignored folder .gpu/ (listed in
# .git/info/exclude, shared by all worktrees):
#   .gpu/a     vLLM's dependency wheels (whl/), docsumd's own (dwhl/), part 1 of the vLLM tarball
#   .gpu/b     part 2 of the tarball, its sha256, the weightless Qwen2.5-7B model folder
#   .gpu/src   a copy of this repo's daemon/, bench/ and configs: the code that runs, whichever
#              checkout travels
#   .gpu/docs  the documents: each corpus text with its paragraphs shuffled (seed $DOCS_SEED)
# The payload itself comes from ../shared/gpu/build_payload.sh (vLLM 0.26.0, pruned; see its README).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
SHARED=${SHARED:-$(cd "$REPO/.." && pwd)/shared}
WORK=${WORK:-${TMPDIR:-/tmp}/gpu-payload}
STAGE=${STAGE:-$WORK/stage}
PY=${PY:-$REPO/.venv/bin/python}
DOCS_SEED=${DOCS_SEED:-2027}
MAIN=$(cd "$(git -C "$REPO" rev-parse --git-common-dir)/.." && pwd)
CHECKOUTS=("$@")
[ ${#CHECKOUTS[@]} -gt 0 ] || CHECKOUTS=("$REPO" "$MAIN")

# 1. the recipe's payload, built into a scratch repo (its script writes .git/info/exclude there);
#    rebuilt when a stage built before the recipe carried FP8's wheels (compressed-tensors, loguru)
if [ ! -f "$STAGE/.gpu/b/vllm.tar.xz.sha256" ] || ! ls "$STAGE"/.gpu/a/whl/compressed_tensors-*.whl \
    "$STAGE"/.gpu/a/whl/loguru-*.whl >/dev/null 2>&1; then
  mkdir -p "$STAGE" && git init -q "$STAGE"
  (cd "$STAGE" && REPO="$STAGE" WORK="$WORK" PIP="$PY -m pip" PY_TOK="$PY" bash "$SHARED/gpu/build_payload.sh")
fi
# 2. docsumd's runtime dependencies that neither the device image nor the recipe carries
mkdir -p "$WORK/dwhl"
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$WORK/dwhl" structlog==26.1.0 pydantic-settings==2.16.3 python-dotenv==1.2.4 aiokafka==0.14.0 \
  async-timeout==5.0.1 cramjam==2.14.0 redis==8.1.0 2>&1 | grep -v "^WARNING: Location" || true
mkdir -p "$WORK/tools"
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d "$WORK/tools" py-spy==0.4.3 2>&1 | grep -v "^WARNING: Location" || true
# 3. lay out .gpu/ in each checkout (hard links where possible: the payload is about 95 MiB)
for checkout in "${CHECKOUTS[@]}"; do
  exclude="$(git -C "$checkout" rev-parse --git-common-dir)/info/exclude"
  case "$exclude" in /*) ;; *) exclude="$checkout/$exclude";; esac
  grep -qx '/.gpu/' "$exclude" 2>/dev/null || echo '/.gpu/' >> "$exclude"
  rm -rf "$checkout/.gpu/a" "$checkout/.gpu/b" "$checkout/.gpu/src" "$checkout/.gpu/docs"
  mkdir -p "$checkout/.gpu"
  cp -al "$STAGE/.gpu/a" "$STAGE/.gpu/b" "$checkout/.gpu/" 2>/dev/null || cp -r "$STAGE/.gpu/a" "$STAGE/.gpu/b" "$checkout/.gpu/"
  mkdir -p "$checkout/.gpu/a/dwhl" && cp "$WORK"/dwhl/*.whl "$checkout/.gpu/a/dwhl/"
  # intake.sh in call 1: the model's tokenizer (3 MiB) and py-spy (3 MiB) for its profiles
  mkdir -p "$checkout/.gpu/a/tok" "$checkout/.gpu/a/tools"
  cp "$STAGE"/.gpu/b/qwen7b-dummy/{config.json,tokenizer.json,tokenizer_config.json} "$checkout/.gpu/a/tok/"
  cp "$WORK"/tools/py_spy-*.whl "$checkout/.gpu/a/tools/" 2>/dev/null || true
  mkdir -p "$checkout/.gpu/src"
  (cd "$REPO" && cp -r daemon bench pyproject.toml docsumd.toml "$checkout/.gpu/src/")
  find "$checkout/.gpu/src" -name __pycache__ -prune -exec rm -rf {} +
  rm -rf "$checkout/.gpu/src/bench/results"   # the runs write theirs to $OUT; saves 2 MiB of the 64
  "$PY" "$HERE/make_docs.py" "$SHARED/corpus/docs" "$checkout/.gpu/docs" --seed "$DOCS_SEED"
  du -sh "$checkout"/.gpu/*
done
