#!/usr/bin/env bash
# Packs the shipped safe-python-mcp (the `dist` profile) into an MCP bundle (.mcpb) that Claude
# Desktop installs with a double click, using the official packer (@anthropic-ai/mcpb 2.x, which also validates the manifest).
#
#   scripts/pack-mcpb.sh [BINARY] [OUTPUT]
#
#   BINARY  the server to pack [default: target/dist/safe-python-mcp, built if missing]
#   OUTPUT  the bundle to write [default: target/mcpb/safe-python-executor-VERSION-PLATFORM-ARCH.mcpb,
#           named as MCPB names them: PLATFORM darwin, linux or win32, ARCH x64 or arm64]
#   MCPB    environment: the packer command [default: npx --yes @anthropic-ai/mcpb@2]
#   MCPB_PLATFORM  environment: the binary's platform as PLATFORM-ARCH (e.g. win32-x64), for a
#           binary built for another platform [default: this machine's]
#
# The binary embeds the guest, so the bundle is the binary and packaging/mcpb/manifest.json, stamped
# with the one platform the binary runs on. Smithery publishes this bundle (smithery.yaml).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

if [[ -n ${MCPB_PLATFORM:-} ]]; then
  platform=${MCPB_PLATFORM%-*} arch=${MCPB_PLATFORM#*-}
else
  case "$(uname -s)" in
    Linux) platform=linux ;;
    Darwin) platform=darwin ;;
    MINGW* | MSYS* | CYGWIN*) platform=win32 ;;
    *) echo "pack-mcpb: unsupported platform $(uname -s)" >&2; exit 2 ;;
  esac
  case "$(uname -m)" in
    x86_64 | amd64) arch=x64 ;;
    aarch64 | arm64) arch=arm64 ;;
    *) arch=$(uname -m) ;;
  esac
fi
case $platform in
  linux | darwin) exe= ;;
  win32) exe=.exe ;;
  *) echo "pack-mcpb: unsupported platform $platform" >&2; exit 2 ;;
esac

binary=${1:-}
if [[ -z $binary ]]; then
  binary=$root/target/dist/safe-python-mcp$exe
  [[ -x $binary ]] || cargo build --profile dist --locked --bin safe-python-mcp --manifest-path "$root/Cargo.toml"
fi
[[ -f $binary ]] || { echo "pack-mcpb: no executable at $binary" >&2; exit 2; }

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$root/Cargo.toml" | head -n 1)
output=${2:-$root/target/mcpb/safe-python-executor-$version-$platform-$arch.mcpb}
read -r -a mcpb <<< "${MCPB:-npx --yes @anthropic-ai/mcpb@2}"

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/server" "$(dirname "$output")"
cp "$binary" "$stage/server/safe-python-mcp$exe"
node -e '
  const fs = require("fs");
  const [src, dst, platform, exe] = process.argv.slice(1);
  const manifest = JSON.parse(fs.readFileSync(src, "utf8"));
  manifest.server.entry_point += exe;
  manifest.compatibility = { ...manifest.compatibility, platforms: [platform] };
  fs.writeFileSync(dst, JSON.stringify(manifest, null, 2) + "\n");
' "$root/packaging/mcpb/manifest.json" "$stage/manifest.json" "$platform" "$exe"

"${mcpb[@]}" pack "$stage" "$output"
echo "pack-mcpb: wrote $output ($(wc -c < "$output") bytes)"
