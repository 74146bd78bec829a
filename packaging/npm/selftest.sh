#!/usr/bin/env bash
# Checks the npm packages without the Rust build: packs this machine's platform package around
# fake binaries (shell scripts that print their arguments), packs the main package, installs both
# tarballs into an empty prefix as users get them, and checks that the launcher passes on the
# arguments, the exit code and a signal, re-raises the binary's death by a signal, and explains a
# missing platform package. Linux and macOS only (the fakes are shell scripts).
#
#   packaging/npm/selftest.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
platform=$(node -p 'process.platform + "-" + process.arch')
version=$(node -p "require('$here/main/package.json').version")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "selftest: $*" >&2; exit 1; }

node "$here/platform.js" "$platform" "$version" "$tmp/platform"
mkdir "$tmp/platform/bin"
for name in safe-python-mcp sandbox-run; do
  cat > "$tmp/platform/bin/$name" <<'EOF'
#!/bin/sh
for a; do echo "[$a]"; done
case $1 in
  wait) trap 'kill $!; echo TERM; exit 7' TERM; echo ready; sleep 30 & wait $! ;;
  die) kill -TERM $$ ;;
esac
exit 3
EOF
  chmod +x "$tmp/platform/bin/$name"
done
npm pack --silent --pack-destination "$tmp" "$tmp/platform" "$here/main" > /dev/null
# --offline: the other platforms' packages are not looked up; npm skips them as failed optionals.
install() { npm install --prefix "$1" --offline --no-audit --no-fund --loglevel=error "${@:2}" > /dev/null; }
install "$tmp/full" "$tmp/safe-python-mcp-$platform-$version.tgz" "$tmp/safe-python-mcp-$version.tgz"
install "$tmp/bare" "$tmp/safe-python-mcp-$version.tgz"

rc=0; out=$(npx --prefix "$tmp/full" safe-python-mcp a 'b c' '') || rc=$?
[[ $rc == 3 && $out == $'[a]\n[b c]\n[]' ]] || fail "args or exit code lost: rc $rc, output: $out"
rc=0; out=$(npx --prefix "$tmp/full" sandbox-run -c 'print(1)') || rc=$?
[[ $rc == 3 && $out == $'[-c]\n[print(1)]' ]] || fail "sandbox-run: rc $rc, output: $out"

bin=$tmp/full/node_modules/.bin
"$bin/safe-python-mcp" wait > "$tmp/out" & pid=$!
for _ in {1..100}; do grep -qs ready "$tmp/out" && break; sleep 0.1; done
kill -TERM $pid
rc=0; wait $pid || rc=$?
[[ $rc == 7 ]] && grep -q TERM "$tmp/out" || fail "SIGTERM not forwarded: rc $rc, output: $(cat "$tmp/out")"
# In a subshell, so that bash does not report the death ("Terminated").
rc=$("$bin/safe-python-mcp" die > /dev/null 2>&1; echo $?)
[[ $rc == 143 ]] || fail "the binary's death by SIGTERM came back as rc $rc, not 143"

rc=0; err=$("$tmp/bare/node_modules/.bin/safe-python-mcp" 2>&1) || rc=$?
[[ $rc == 1 && $err == *"@safe-python-mcp/$platform"*"uvx safe-python-mcp"* ]] ||
  fail "missing platform package: rc $rc, message: $err"
echo "selftest: the npm packages work ($platform)"
