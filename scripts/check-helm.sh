#!/usr/bin/env bash
# Check the Helm chart (deploy/helm/docsumd) without a cluster:
#   - helm lint --strict, with the default values and with every feature on (ci/all-on-values.yaml);
#   - helm template for the oldest Kubernetes the chart supports (Chart.yaml's kubeVersion) and the newest
#     kubernetes-validate knows, both value sets, and every built-in kind against Kubernetes' own schemas,
#     strict (unknown fields are errors): kubernetes-validate;
#   - the ServiceMonitor, PrometheusRule and ScaledObject against the vendored CRDs
#     (deploy/helm/validation-crds), and what the chart promises (scripts/check_helm_chart.py chart):
#     the alert rules are deploy/prometheus/alerts.yml's, probes, GPU, grace period, selectors, the scaled
#     metric, the config loads with docsumd's loader; a changed config changes the pods' checksum;
#   - the values table in deploy/helm/docsumd/README.md is values.yaml's.
# The tools (helm, kubernetes-validate) are installed into a cache folder by scripts/install-deploy-tools.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

python=python3
if [ -x .venv/bin/python ]; then
    python=.venv/bin/python
fi
tools=$(bash scripts/install-deploy-tools.sh)
helm_binary=$tools/bin/helm
validate=("$python" "$tools/site/bin/kubernetes-validate")
export PYTHONPATH="$tools/site${PYTHONPATH:+:$PYTHONPATH}"
chart=deploy/helm/docsumd
all_on=$chart/ci/all-on-values.yaml
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# The chart's files/alerts.yml is a link to deploy/prometheus/alerts.yml (one home for the rules); helm says
# so at level INFO on every call: that line is left out, anything else it says is shown.
helm() { "$helm_binary" "$@" 2> >(grep -v 'found symbolic link in path' >&2); }

echo "== helm lint --strict ($("$helm_binary" version --short))"
helm lint --strict "$chart"
helm lint --strict "$chart" -f "$all_on"

for kube in 1.30.0 1.37.0; do
    helm template docsumd "$chart" --namespace documents --kube-version "$kube" >"$out/default-$kube.yaml"
    helm template docsumd "$chart" --namespace documents --kube-version "$kube" -f "$all_on" \
        >"$out/all-on-$kube.yaml"
    echo "== kubernetes-validate --strict, Kubernetes $kube (it has no schema for custom kinds: see below)"
    "${validate[@]}" --strict --quiet --kubernetes-version "$kube" "$out/default-$kube.yaml" "$out/all-on-$kube.yaml"
done
# A release whose name already says docsumd, in another namespace: the names and the query follow.
helm template my-docsumd "$chart" --namespace other -f "$all_on" >"$out/renamed.yaml"

echo "== custom resources against their CRDs"
"$python" scripts/check_helm_chart.py crs "$out"/*.yaml
echo "== what the chart promises"
"$python" scripts/check_helm_chart.py chart "$out/all-on-1.37.0.yaml"
"$python" scripts/check_helm_chart.py chart "$out/renamed.yaml"
checksum() { grep -m1 'checksum/config:' "$1" | awk '{print $2}'; }
helm template docsumd "$chart" --namespace documents --set-string 'config=[engine]
model = "/models/other"' >"$out/changed.yaml"
if [ "$(checksum "$out/changed.yaml")" = "$(checksum "$out/default-1.37.0.yaml")" ]; then
    echo "FAILED: a changed config does not change the pods' checksum/config annotation"
    exit 1
fi
echo "== the values table"
"$python" scripts/check_helm_chart.py values

echo "== helm chart checks passed"
