#!/usr/bin/env bash
# Prints the path of a Node 22 executable, installing the npm package `node@22` under
# target/node22 the first time: MCP Inspector 2.12 and the conformance suite need Node 22 or newer,
# and CI machines may carry an older one. Uses the machine's node when it is already 22 or newer.
#
#   "$(scripts/node22.sh)" script.js
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
if command -v node > /dev/null && node -e 'process.exit(+process.versions.node.split(".")[0] >= 22 ? 0 : 1)'; then
  command -v node
  exit 0
fi
dir=$root/target/node22
bin=$dir/node_modules/node/bin/node
if [[ ! -x $bin ]]; then
  mkdir -p "$dir"
  echo "node22: installing node@22 from npm into $dir" >&2
  npm install --prefix "$dir" --no-audit --no-fund --loglevel=error node@22 >&2
fi
echo "$bin"
