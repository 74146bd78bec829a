# Sourced by scripts/inspector.sh and scripts/conformance.sh: Node 22 first in PATH, the server
# to check ($server: $SAFE_PYTHON_MCP, or the debug build, built here and prepared with --check),
# and MCP Inspector 2.12's CLI with the checks both scripts make of it. Needs $root.

node=$("$root/scripts/node22.sh")
PATH="$(dirname "$node"):$PATH"
export PATH
inspector=@modelcontextprotocol/inspector@2.12.0
server=${SAFE_PYTHON_MCP:-}
if [[ -z $server ]]; then
  cargo build --locked --quiet --manifest-path "$root/Cargo.toml" --bin safe-python-mcp
  server=$root/target/debug/safe-python-mcp
fi
# A first start compiles the sandbox, which takes longer than Inspector waits for a reply.
"$server" --check > /dev/null

# inspector_cli OUT ARGS...: Inspector's CLI with ARGS, its JSON result in OUT. Fails, printing
# why, when Inspector fails or prints anything on stderr (a lint finding, a validator's warning).
inspector_cli() {
  local out=$1
  shift
  if ! npx --yes "$inspector" --cli --format json "$@" > "$out" 2> "$out.err"; then
    echo "Inspector failed: $(cat "$out.err")" >&2
    return 1
  fi
  if [[ -s $out.err ]]; then
    echo "Inspector warned: $(cat "$out.err")" >&2
    return 1
  fi
}

# inspector_expect OUT JS: JS, evaluated with `r` the result in OUT, must hold; otherwise fails,
# showing the result.
inspector_expect() {
  node -e '
    const r = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
    let held;
    try { held = eval(process.argv[2]); } catch { held = false; }
    if (!held) {
      console.error(`expected ${process.argv[2]} in ${JSON.stringify(r).slice(0, 2000)}`);
      process.exit(1);
    }' "$1" "$2"
}
