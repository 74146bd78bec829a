//! The integration tests: one binary (each test binary links wasmtime and Cranelift, so one link
//! instead of a dozen), a module per surface. Every test runs the real guest in real wasmtime; the
//! front-end tests spawn the real binaries and speak to them as their users do.
//!
//! Checks too slow for day-to-day work (install routes, soak) are in `tests/long`, run by
//! `scripts/long-checks.sh`.

mod common;

mod adversarial;
mod asyncio;
mod cancel;
mod cli;
mod code_mode;
mod corpus;
mod cpython;
mod defaults;
mod faults;
mod files;
mod first_run;
mod fuzz_smoke;
mod guest_pack;
mod http;
mod layout;
mod limits;
mod mcp;
mod mcp_files;
mod plots;
mod pool;
mod readme;
mod recycle;
mod release_versions;
mod scale;
mod schema;
mod semantics;
mod session;
#[cfg(unix)]
mod session_store;
mod template;
mod upstream;
mod versions;
