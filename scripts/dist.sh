#!/usr/bin/env bash
# Builds the release artifacts into target/dist/: for each platform of packaging/targets.tsv, a
# wheel (maturin, `bindings = "bin"`), an npm platform package, an archive and an MCP bundle; then
# the npm main package and SHA256SUMS. On Linux x86_64 it builds every target marked `build` (the
# Linux ones through zig for glibc 2.28, Windows through mingw-w64); the release workflow runs the
# same commands on each platform's own runner.
#
#   scripts/dist.sh                    every `build` target, then `finish`
#   scripts/dist.sh build PLATFORM...  those platforms' artifacts (e.g. linux-arm64)
#   scripts/dist.sh finish             the npm main package and SHA256SUMS over target/dist/
#   scripts/dist.sh check [PLATFORM...] `cargo check` of targets that cannot link here (macOS)
#   scripts/dist.sh smoke PLATFORM     runs that platform's built binaries on this machine
#   scripts/dist.sh targets            the targets as a JSON array (the workflow's build matrix)
#
# Beside each platform's binaries goes the guest compiled ahead of time for that target
# (safe-python-guest.cwasm, by examples/precompile_guest.rs), so that a fresh install answers at
# once instead of compiling the guest. Not in the bundle: Smithery takes bundles of 25 MB at most,
# and the compiled guest alone is 39 MB zipped; the bundled server compiles it on first start.
# Needs python3 (maturin and zig come from PyPI into target/dist-tools), node and npm.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

dist=$root/target/dist
stage=$root/target/dist-stage
tools=$root/target/dist-tools
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
# glibc of the Linux binaries: what wasmtime's own release builds support (manylinux_2_28, the
# glibc of RHEL 8 and Debian 10), so one wheel serves every distribution of the last six years.
glibc=2.28

die() { echo "dist: $*" >&2; exit 2; }

# The rows of packaging/targets.tsv: platform, rust_target, runner, here.
rows() { grep -v '^#' packaging/targets.tsv | grep -v '^[[:space:]]*$'; }

row() {
  local line
  line=$(rows | awk -F'\t' -v p="$1" '$1 == p') || true
  [[ -n $line ]] || die "unknown platform '$1' (known: $(rows | cut -f1 | tr '\n' ' '))"
  printf '%s\n' "$line"
}

rust_target() { row "$1" | cut -f2; }
exe() { [[ $1 == win32-* ]] && echo .exe || true; }

# Python 3: `python3`, or `python` where that is its name (Windows).
python() {
  local py
  for py in python3 python; do
    command -v "$py" > /dev/null && "$py" -c 'import sys; sys.exit(sys.version_info < (3, 8))' &&
      { "$py" "$@"; return; }
  done
  die "python 3.8 or newer is needed (maturin and zig come from PyPI, archives are zipped with it)"
}

# maturin and zig, pinned, in a venv of their own.
tools() {
  local want="maturin==1.16.0 ziglang==0.17.1" bin=$tools/bin
  [[ -d $tools/Scripts ]] && bin=$tools/Scripts # a venv made on Windows
  if [[ $(cat "$tools/pinned" 2>/dev/null) != "$want" ]]; then
    rm -rf "$tools"
    python -m venv "$tools"
    [[ -d $tools/Scripts ]] && bin=$tools/Scripts
    # shellcheck disable=SC2086 # the pins are separate words
    "$bin/python" -m pip install --quiet $want
    echo "$want" > "$tools/pinned"
  fi
  export PATH=$bin:$PATH
}

# The compiled guest for $1's target, made again only when the compiler (the example, which embeds
# the guest and the engine's settings) is newer.
precompile() {
  local target out example=$root/target/debug/examples/precompile_guest
  target=$(rust_target "$1")
  out=$stage/guest/$target/safe-python-guest.cwasm
  mkdir -p "$(dirname "$out")"
  cargo build --locked --example precompile_guest >&2
  [[ -f $example.exe ]] && example=$example.exe
  [[ $out -nt $example ]] || "$example" "$target" "$out" >&2
  echo "$out"
}

build() {
  local platform=$1 target guest bin x name dir
  target=$(rust_target "$platform")
  x=$(exe "$platform")
  tools
  command -v rustup > /dev/null && rustup target add "$target" > /dev/null
  guest=$(precompile "$platform")

  # The wheel: maturin builds both binaries and adds the compiled guest beside them (pyproject's
  # `data`: its `scripts/` go where the binaries go).
  rm -rf "$stage/wheel-data"
  mkdir -p "$stage/wheel-data/scripts" "$dist"
  cp "$guest" "$stage/wheel-data/scripts/"
  local zig=()
  [[ $platform == linux-* ]] && zig=(--zig --compatibility "manylinux_${glibc/./_}")
  maturin build --release --locked --target "$target" "${zig[@]}" --out "$dist"
  bin=$root/target/$target/release

  # The npm package of this platform.
  dir=$stage/npm-$platform
  rm -rf "$dir"
  mkdir -p "$dir/bin"
  node packaging/npm/platform.js "$platform" "$version" "$dir"
  cp "$bin/safe-python-mcp$x" "$bin/sandbox-run$x" "$guest" "$dir/bin/"
  (cd "$dir" && npm pack --silent --pack-destination "$dist" > /dev/null)

  # The archive, named as `cargo binstall` looks for it (Cargo.toml's binstall metadata).
  name=safe-python-mcp-$version-$target
  dir=$stage/$name
  rm -rf "$dir"
  mkdir -p "$dir"
  cp "$bin/safe-python-mcp$x" "$bin/sandbox-run$x" "$guest" README.md "$dir/"
  if [[ -n $x ]]; then
    rm -f "$dist/$name.zip"
    (cd "$stage" && python -m zipfile -c "$dist/$name.zip" "$name")
  else
    tar -C "$stage" -czf "$dist/$name.tar.gz" "$name"
  fi

  # The MCP bundle: the server alone.
  MCPB_PLATFORM=$platform scripts/pack-mcpb.sh "$bin/safe-python-mcp$x" \
    "$dist/safe-python-executor-$version-$platform.mcpb"
}

finish() {
  local dir=$stage/npm-main
  rm -rf "$dir"
  cp -r packaging/npm/main "$dir"
  mkdir -p "$dist"
  (cd "$dir" && npm pack --silent --pack-destination "$dist" > /dev/null)
  (cd "$dist" && rm -f SHA256SUMS && sha256sum -- * > SHA256SUMS.tmp && mv SHA256SUMS.tmp SHA256SUMS)
  echo "dist: $dist"
  (cd "$dist" && ls -l)
}

# Writes $2, a C compiler for Rust target $1 made of zig's: the C that build scripts compile (ring,
# blake3) needs one even under `cargo check`, and this machine has no macOS toolchain. cc-rs passes
# Apple's `-arch` and clang's `--target=`, which zig's driver refuses; zig's `-target` says both.
zig_cc() {
  cat > "$2" <<EOF
#!/usr/bin/env bash
args=() skip=
for a in "\$@"; do
  if [[ -n \$skip ]]; then skip=; continue; fi
  if [[ \$a == -arch ]]; then skip=1; continue; fi
  if [[ \$a == --target=* ]]; then continue; fi
  args+=("\$a")
done
exec python -m ziglang cc -target ${1%%-*}-macos "\${args[@]}"
EOF
  chmod +x "$2"
}

check() {
  local platform target var wrappers=$stage/zig-cc
  tools
  mkdir -p "$wrappers"
  printf '#!/usr/bin/env bash\nexec python -m ziglang ar "$@"\n' > "$wrappers/ar"
  chmod +x "$wrappers/ar"
  for platform in "$@"; do
    target=$(rust_target "$platform")
    command -v rustup > /dev/null && rustup target add "$target" > /dev/null
    var=${target//-/_}
    zig_cc "$target" "$wrappers/cc-$target"
    echo "dist: cargo check --target $target"
    env "CC_$var=$wrappers/cc-$target" "AR_$var=$wrappers/ar" \
      cargo check --locked --release --target "$target" --bins
  done
}

# Runs $1's built binaries from its archive's folder, with a cache of its own: the shipped guest
# must answer without a compile.
smoke() {
  local platform=$1 dir x cache out
  x=$(exe "$platform")
  dir=$stage/safe-python-mcp-$version-$(rust_target "$platform")
  [[ -d $dir ]] || die "$platform is not built: scripts/dist.sh build $platform"
  cache=$(mktemp -d)
  out=$(SAFE_PYTHON_CACHE_DIR=$cache "$dir/sandbox-run$x" -c "print(2**100)")
  [[ $out == 1267650600228229401496703205376 ]] || die "sandbox-run printed '$out'"
  SAFE_PYTHON_CACHE_DIR=$cache "$dir/safe-python-mcp$x" --check
  [[ -z $(ls -A "$cache") ]] || die "the shipped guest was not used: the cache holds $(ls "$cache")"
  rm -rf "$cache"
  echo "dist: $platform smoke test passed"
}

targets() {
  rows | awk -F'\t' 'BEGIN { printf "[" }
    { printf "%s{\"platform\":\"%s\",\"rust_target\":\"%s\",\"runner\":\"%s\",\"here\":\"%s\"}",
        (NR > 1 ? "," : ""), $1, $2, $3, $4 }
    END { print "]" }'
}

here() { rows | awk -F'\t' -v h="$1" '$4 == h { print $1 }'; }

case ${1:-all} in
  all)
    rm -rf "$dist"
    for platform in $(here build); do build "$platform"; done
    finish ;;
  build)
    shift
    [[ $# -gt 0 ]] || die "build which platform? ($(rows | cut -f1 | tr '\n' ' '))"
    for platform in "$@"; do build "$platform"; done ;;
  finish) finish ;;
  check)
    shift
    if [[ $# -eq 0 ]]; then mapfile -t platforms < <(here check); set -- "${platforms[@]}"; fi
    check "$@" ;;
  smoke)
    [[ $# -eq 2 ]] || die "usage: scripts/dist.sh smoke PLATFORM"
    smoke "$2" ;;
  targets) targets ;;
  -h | --help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//' ;;
  *) die "unknown command '$1' (try --help)" ;;
esac
