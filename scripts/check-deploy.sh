#!/usr/bin/env bash
# Check the observability deployment files in deploy/:
#   - the Prometheus config and alert rules (promtool check config / check rules),
#   - the alert rules' unit tests (promtool test rules deploy/prometheus/alerts_test.yml),
#   - the Grafana dashboard: valid JSON, every panel titled, described and queried, unique panel ids,
#     no overlapping panels, every PromQL expression parseable (promtool), the provisioning files
#     consistent with it.
#   - the Helm chart (scripts/check-helm.sh).
# Installs promtool (Debian package "prometheus", scripts/install-prometheus.sh) when it is missing, and the
# chart's tools (helm, kubernetes-validate: scripts/install-deploy-tools.sh) into a cache folder.
# Needs no running service.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-prometheus.sh

echo "== promtool check config"
promtool check config deploy/prometheus/prometheus.yml
echo "== promtool check rules"
promtool check rules deploy/prometheus/alerts.yml
echo "== promtool test rules"
promtool test rules deploy/prometheus/alerts_test.yml

echo "== dashboard"
python=python3
if [ -x .venv/bin/python ]; then
    python=.venv/bin/python
fi
exprs=$(mktemp --suffix=.yml)
trap 'rm -f "$exprs"' EXIT
"$python" scripts/check_deploy_files.py dashboard "$exprs"
echo "== dashboard PromQL (promtool)"
promtool check rules "$exprs"

echo "== compose file (no container runtime here: structure and mounted files only)"
"$python" scripts/check_deploy_files.py compose
promtool check config --syntax-only deploy/compose/prometheus.yml  # its rule file is mounted at run time

echo "== Helm chart (helm lint and template, kubernetes-validate, the CRDs, values table)"
bash scripts/check-helm.sh

echo "== deploy checks passed"
