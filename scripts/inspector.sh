#!/usr/bin/env bash
# MCP Inspector 2.12's CLI against the real server over stdio, for clients of both protocol eras
# (legacy: the `initialize` handshake; modern: 2026-07-28, no handshake): `tools/list --strict`,
# its lint of tool schemas for portability, then a `tools/call` whose reply Inspector validates
# against the tool's output schema (one that succeeds: Inspector fails on a tool error). Fails on
# anything Inspector prints on stderr (a lint finding, a validator's warning, the server's own
# errors) and on a reply that is not the expected one.
#
#   scripts/inspector.sh                        # builds and checks target/debug/safe-python-mcp
#   SAFE_PYTHON_MCP=path/to/safe-python-mcp scripts/inspector.sh
#
# Needs npm, and the npm registry on first use: Node 22 comes from scripts/node22.sh when the
# machine's is older, Inspector from npx.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/inspector-lib.sh"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# inspect ERA ARGS...: Inspector's CLI with ARGS against the server; the result goes to $work/out.
inspect() {
  local era=$1
  shift
  inspector_cli "$work/out" -e SAFE_PYTHON_LOG=error --protocol-era "$era" "$@" "$server" ||
    { echo "inspector.sh: $era $*: failed" >&2; return 1; }
}

# expect JS: JS, evaluated with `r` the last result, must hold.
expect() {
  inspector_expect "$work/out" "$1" || { echo "inspector.sh: the result" >&2; return 1; }
}

for era in legacy modern; do
  inspect "$era" --method tools/list --strict
  expect 'r.result.tools.length === 1 && r.result.tools[0].name === "run_python" && r.result.tools[0].annotations.openWorldHint === false'
  inspect "$era" --method tools/call --tool-name run_python --tool-args-json '{"code": "print(6 * 7)\n6 * 7"}'
  expect 'r.result.isError === false && r.result.structuredContent.stdout === "42\n" && r.result.structuredContent.result === "42" && r.result.content[0].text === "42\nResult: 42\n"'
  echo "inspector.sh: ok: $era client: tools/list --strict clean, tools/call replies as expected"
done
