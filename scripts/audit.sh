#!/usr/bin/env bash
# Checks the dependencies in Cargo.lock (and fuzz/Cargo.lock) against the RustSec advisory database.
#
#   scripts/audit.sh    install cargo-audit from crates.io if it is missing, then run it
#
# cargo-audit fetches the advisory database from GitHub (github.com/rustsec/advisory-db) at every
# run, so this needs access to GitHub and is not part of CI (.ci/run). Run it before a release and
# after changing dependencies; extra arguments go to `cargo audit` (for example `--no-fetch` with a
# database already in ~/.cargo/advisory-db).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! cargo audit --version >/dev/null 2>&1; then
  echo "audit.sh: installing cargo-audit from crates.io (a few minutes, once)" >&2
  cargo install cargo-audit --locked
fi

status=0
for lock in Cargo.lock fuzz/Cargo.lock; do
  echo "audit.sh: $lock" >&2
  cargo audit --file "$lock" "$@" || status=$?
done
exit "$status"
