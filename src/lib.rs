//! safe-python-executor: run untrusted Python in RustPython compiled to WebAssembly, inside
//! wasmtime, with hard limits on time, instructions, memory and output.
//!
//! The data path, each module using only those before it:
//! [`limits`] (what a run may use), [`policy`] (what it may import) and [`toolcalls`] (which
//! upstream MCP tools it may call, in code mode) → [`engine`] (wasmtime's
//! configuration and epoch ticker) + `embedded` (the guest artifact) + [`cache`] (the compiled
//! guest on disk) → [`sandbox`] (loading and linking; the host side of the protocol; one instance
//! and its call; each Python engine in a module of its own under [`sandbox::engines`], behind one
//! interface) → [`outcome`] (how a call ended, and bounding what it hands back) + [`output`]
//! (the captured streams) → [`session`] (an instance kept across calls, with rollback).
//! [`cpython`] installs and finds the CPython engine's artifacts (from PyPI) in the cache
//! directory.
//! `vfs` is an in-memory file system for WASI guests, which a guest that must read files
//! (CPython's standard library, a call's input files) or write them (`/out`) gets instead of any
//! host directory.
//!
//! The front ends sit behind default cargo features: `sandbox-run` (`cli`) and `safe-python-mcp`
//! (`mcp`), sharing `flags`. Without them the crate is the library alone.

// Module docs name the private items they are about, for whoever works on them: CI checks those
// links with `cargo doc --document-private-items`, where they resolve.
#![allow(rustdoc::private_intra_doc_links)]

pub mod cache;
#[cfg(feature = "cli")]
pub mod cli;
pub mod cpython;
pub mod embedded;
pub mod engine;
#[cfg(any(feature = "cli", feature = "mcp"))]
pub mod flags;
pub mod limits;
#[cfg(feature = "mcp")]
pub mod mcp;
pub mod outcome;
pub mod output;
pub mod policy;
pub mod sandbox;
pub mod session;
#[cfg(feature = "store")]
pub mod tls;
pub mod toolcalls;
pub(crate) mod vfs;

pub use cache::Prepared;
pub use limits::Limits;
pub use outcome::{Image, Limit, Outcome, OutputFile, PythonError, RunResult, Stats};
pub use output::{OutputObserver, Stream};
pub use policy::ImportPolicy;
pub use sandbox::files::{DATA_DIR, FileLimits, FilesError, InputFiles, OUT_DIR};
pub use sandbox::{
    About, EngineKind, MAX_KEPT_WRITTEN, PreloadFailure, RunOptions, Sandbox, SandboxError,
    SandboxOptions, Setup, TemplateInfo, template_preloads,
};
pub use session::{Session, SessionRun};
pub use toolcalls::ToolCallRecord;
