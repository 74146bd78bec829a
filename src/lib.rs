//! safe-python-executor: run untrusted Python in RustPython compiled to WebAssembly, inside
//! wasmtime, with hard limits on time, instructions, memory and output.
//!
//! The data path: [`limits`] (what a run may use) → [`engine`] + [`cache`] (wasmtime and the
//! compiled guest) → [`sandbox`] (one run: store, host functions, classification) → [`outcome`]
//! (how it ended). [`cli`] is the `sandbox-run` front end.

pub mod cache;
pub mod cli;
pub mod engine;
pub mod flags;
mod guest;
pub mod limits;
pub mod mcp;
pub mod outcome;
pub mod output;
mod pagemap;
pub mod sandbox;
pub mod session;
pub mod sessions;

pub use cache::Prepared;
pub use limits::{ImportPolicy, Limits};
pub use outcome::{Limit, Outcome, PythonError, RunResult, Stats};
pub use output::{OutputObserver, Stream};
pub use sandbox::{RunOptions, Sandbox, SandboxError, SandboxOptions};
pub use session::{Session, SessionRun};
