#!/usr/bin/env bash
# Builds the committed guest artifact, or checks that it matches the guest's sources.
#
#   scripts/guest.sh build   rebuild the guest, optimise it, pack it into wasm/ and write wasm/MANIFEST
#                            (25-40 min on 2 cores the first time, then about 10; needs npm)
#   scripts/guest.sh check   fail if guest/ or protocol/ changed since the artifact was built (instant)
#
# Whoever changes guest/, protocol/ or the wizening tool runs `build` and commits wasm/. CI only runs
# `check`: it never rebuilds the guest. What is committed (and published) is the pack
# (build/guest_pack.rs) compressed with `xz --format=lzma -9e`: 9.0 MB instead of 38.3 MB, under
# crates.io's 10 MiB. build.rs unpacks it and refuses it unless it is the wasm_sha256 below.
set -euo pipefail
cd "$(dirname "$0")/.."

TARGET=wasm32-wasip1
# The pre-initialised guest: built here, never committed; build.rs unpacks the pack into OUT_DIR.
ARTIFACT=guest/target/safe-python-guest.wasm
PACK=wasm/safe-python-guest.pack.lzma
MANIFEST=wasm/MANIFEST
# binaryen's optimiser, from npm (its wasm-opt runs on Node): -O2 made the bench programs about 10%
# faster (1.5% fewer wasm instructions) and the guest 2 MB smaller; it takes about 5 minutes.
# `-g` keeps the names and `--no-inline` the function in which the host finds wasi-libc's preopen
# scan flag (src/sandbox/scan_flag.rs), without which no call could be given files.
WASM_OPT=binaryen@132.0.0
WASM_OPT_FLAGS="-O2 -g --no-inline=__wasilibc_populate_preopens --enable-bulk-memory --enable-nontrapping-float-to-int --enable-sign-ext --enable-mutable-globals"
# LLVM's inlining threshold (default 225) for the guest crate's final, fat-LTO optimisation, which
# covers all of RustPython: 1000 inlines more of the interpreter's small calls, each of which also
# costs a fuel check. Measured (benches/compare.rs, builds alternated): 7% faster compute, and a
# 48 MB guest instead of 38.5 MB (9.7 MB packed instead of 9.0).
LLVM_ARGS="-C llvm-args=-inline-threshold=1000"
BUILD_FLAGS="--release --target $TARGET --locked --ignore-rust-version --lib -- $LLVM_ARGS; remap cargo home and checkout; $WASM_OPT wasm-opt $WASM_OPT_FLAGS; wizen-guest init=sandbox_init"
# Build paths end up in the artifact (panic locations): map them to fixed names so that the same
# sources give the same artifact on any machine.
GUEST_RUSTFLAGS="--remap-path-prefix=${CARGO_HOME:-$HOME/.cargo}=/cargo --remap-path-prefix=$PWD=/src"
# Everything the artifact is made from.
SOURCES=(guest/Cargo.toml guest/Cargo.lock guest/src protocol/Cargo.toml protocol/src src/bin/wizen-guest.rs src/sandbox/asyncio_loop.py)

sources_sha256() {
  {
    printf '%s\n' "$BUILD_FLAGS"
    find "${SOURCES[@]}" -type f | LC_ALL=C sort | while read -r f; do
      printf '%s %s\n' "$(sha256sum < "$f" | cut -d' ' -f1)" "$f"
    done
  } | sha256sum | cut -d' ' -f1
}

manifest_value() { sed -n "s/^$1=//p" "$MANIFEST"; }

case "${1:-}" in
  build)
    command -v rustup >/dev/null && rustup target add "$TARGET" >/dev/null
    # shellcheck disable=SC2086 # the flags are words
    (cd guest && RUSTFLAGS="$GUEST_RUSTFLAGS" cargo rustc --release --target "$TARGET" --locked --ignore-rust-version --lib -- $LLVM_ARGS)
    command -v npm >/dev/null || { echo "guest.sh: npm is needed to run $WASM_OPT's wasm-opt" >&2; exit 1; }
    # shellcheck disable=SC2086 # the flags are words
    NODE_OPTIONS=--max-old-space-size=8192 npm exec --yes --package="$WASM_OPT" -- wasm-opt $WASM_OPT_FLAGS \
      "guest/target/$TARGET/release/safe_python_guest.wasm" -o "$ARTIFACT.opt"
    cargo run --features wizer --bin wizen-guest -- "$ARTIFACT.opt" "$ARTIFACT.new"
    rm "$ARTIFACT.opt"
    # build.rs finds the preopen scan flag by this function's name (src/sandbox/scan_flag.rs): a guest
    # without it could never be given files.
    grep -q __wasilibc_populate_preopens "$ARTIFACT.new" ||
      { echo "guest.sh: the guest lost __wasilibc_populate_preopens (or its name): calls could not be given files" >&2; exit 1; }
    mv "$ARTIFACT.new" "$ARTIFACT"
    cargo run --features pack-guest --bin pack-guest -- "$ARTIFACT" "$ARTIFACT.pack"
    # One thread: the multi-threaded encoder splits the stream and compresses less.
    xz --format=lzma -9e -T1 -c "$ARTIFACT.pack" > "$PACK.new"
    mv "$PACK.new" "$PACK"
    rm "$ARTIFACT.pack"
    {
      echo "# Written by scripts/guest.sh build; checked by scripts/guest.sh check."
      echo "sources_sha256=$(sources_sha256)"
      echo "wasm_sha256=$(sha256sum < "$ARTIFACT" | cut -d' ' -f1)"
      echo "wasm_bytes=$(wc -c < "$ARTIFACT" | tr -d ' ')"
      echo "rustc=$(rustc --version)"
      echo "build_flags=$BUILD_FLAGS"
      echo "pack_sha256=$(sha256sum < "$PACK" | cut -d' ' -f1)"
      echo "pack_bytes=$(wc -c < "$PACK" | tr -d ' ')"
    } > "$MANIFEST"
    echo "guest.sh: built $ARTIFACT ($(wc -c < "$ARTIFACT") bytes), packed into $PACK ($(wc -c < "$PACK") bytes)"
    ;;
  check)
    [ -f "$MANIFEST" ] && [ -f "$PACK" ] || { echo "guest.sh: $PACK or $MANIFEST is missing: run scripts/guest.sh build" >&2; exit 1; }
    if [ "$(sources_sha256)" != "$(manifest_value sources_sha256)" ]; then
      echo "guest.sh: the guest's sources changed since $PACK was built: run scripts/guest.sh build and commit wasm/" >&2
      exit 1
    fi
    # That the pack unpacks to the wasm_sha256 recorded here, build.rs checks at every build.
    if [ "$(sha256sum < "$PACK" | cut -d' ' -f1)" != "$(manifest_value pack_sha256)" ]; then
      echo "guest.sh: $PACK is not the pack $MANIFEST describes: run scripts/guest.sh build" >&2
      exit 1
    fi
    echo "guest.sh: $PACK matches its sources"
    ;;
  *)
    sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
