//! Checks too slow for day-to-day work, kept out of `cargo test` (`test = false` in Cargo.toml) and
//! run by `scripts/long-checks.sh`, which `.ci/run` calls: every install route (a release
//! `cargo install`, the Docker build description, the MCP bundle with node, the release artifacts
//! of `scripts/dist.sh` through uv, npm, qemu and wine), and soak runs that
//! read a process's memory, threads and file descriptors (run one test at a time, so that no other
//! test's allocations land in the figures).

#[path = "../it/common/mod.rs"]
mod common;

mod code_mode;
mod dist;
mod emulated;
mod install;
mod scale;
mod soak;
