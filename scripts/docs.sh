#!/usr/bin/env bash
# Build the documentation site (docs/, mkdocs.yml) into site/ with MkDocs and the Material theme.
#
#   bash scripts/docs.sh             # check the generated pages are current, then mkdocs build --strict
#   bash scripts/docs.sh --browser   # and open every page in headless Chromium (CI does this)
#   bash scripts/docs.sh --serve     # a live preview on http://127.0.0.1:8000 instead of a build
#
# Installs what it needs into .venv, idempotently: docsumd's environment (scripts/setup-venv.sh), then
# the pinned site tools (requirements/docs.txt, --no-deps: the file is their whole closure, with the
# same pins as the vLLM lock where they meet). The browser check needs Debian's chromium
# (apt-get install chromium; .ci/run installs it) and never downloads a browser.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:-build}
bash scripts/setup-venv.sh
stamp_file=.venv/.docsumd-docs-stamp
stamp=$(cat requirements/docs.txt scripts/docs.sh | sha256sum | cut -d' ' -f1)
if [[ ! -f $stamp_file || $(cat "$stamp_file") != "$stamp" ]]; then
    echo "docsumd: installing the documentation tools (requirements/docs.txt)" >&2
    .venv/bin/python -m pip --disable-pip-version-check -q install --no-deps -r requirements/docs.txt
    echo "$stamp" > "$stamp_file"
fi

# The reference pages are generated from the code; a stale one fails here, not silently in the site.
.venv/bin/python scripts/gen_docs.py --check
# Material 9.8 prints a banner about its successor at every build; it is not a warning.
export NO_MKDOCS_2_WARNING=1
if [[ $mode == --serve ]]; then
    exec .venv/bin/python -m mkdocs serve --strict
fi
# Never -q or -v here: mkdocs 1.6 then lets --strict pass broken links and anchors (mkdocs#4126, #3991).
.venv/bin/python -m mkdocs build --strict --clean
echo "docsumd: the site is in site/ (open site/index.html, or serve it: python3 -m http.server -d site)" >&2
if [[ $mode == --browser ]]; then
    .venv/bin/python scripts/check_docs_browser.py site --shots site-shots \
        --shot /reference/configuration/ --search admission
fi
