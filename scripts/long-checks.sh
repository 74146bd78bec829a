#!/usr/bin/env bash
# The checks too slow for day-to-day `cargo test`: every install route (a release `cargo install`,
# the Dockerfile's build, the MCP bundle, which needs node and npm) and the soak runs. `.ci/run`
# runs this after the test suite. One test at a time: the soak checks read process memory.
#
#   scripts/long-checks.sh [FILTER]   e.g. `scripts/long-checks.sh soak`
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --locked --test long -- --test-threads=1 "$@"
