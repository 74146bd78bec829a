#!/usr/bin/env bash
# The checks too slow for day-to-day `cargo test`: every install route (a release `cargo install`,
# the Dockerfile's build, the MCP bundle, which needs node and npm; the release artifacts of
# scripts/dist.sh, installed with uv and npm and run under qemu-user and wine) and the soak runs.
# `.ci/run` runs this after the test suite. One test at a time: the soak checks read process
# memory.
#
#   scripts/long-checks.sh [FILTER]   e.g. `scripts/long-checks.sh soak`
set -euo pipefail
cd "$(dirname "$0")/.."

# What the release checks run the builds with (Debian packages): unzip for the wheels and the
# Windows archive, qemu and the aarch64 C library for the Linux aarch64 build, mingw-w64 and wine
# for the Windows one.
need=()
command -v unzip > /dev/null || need+=(unzip)
command -v qemu-aarch64-static > /dev/null || need+=(qemu-user-static)
[[ -e /usr/aarch64-linux-gnu/lib/ld-linux-aarch64.so.1 ]] || need+=(libc6-arm64-cross)
command -v x86_64-w64-mingw32-gcc > /dev/null || need+=(gcc-mingw-w64-x86-64-win32)
command -v wine > /dev/null || need+=(wine wine64)
if [[ ${#need[@]} -gt 0 ]]; then
  apt-get update && apt-get install -y --no-install-recommends "${need[@]}"
fi

# --nocapture: the checks print their figures (sizes, first-result times), which CI's log keeps.
cargo test --locked --test long -- --test-threads=1 --nocapture "$@"
