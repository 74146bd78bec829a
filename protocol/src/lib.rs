//! The host/guest ABI of safe-python-executor, written down once and used by both sides.
//!
//! The guest is a WASI preview 1 *reactor* module (RustPython compiled to `wasm32-wasip1`). The host
//! links it against `wasi_snapshot_preview1` (no preopened directories, no sockets, empty
//! environment, stdin at EOF) and against the functions below, all in the import module
//! [`IMPORT_MODULE`], whose name carries the protocol version: a guest built for another version
//! fails to link instead of misreading its inputs.
//!
//! # One run
//!
//! 1. The host instantiates the pre-initialised module (the Wizer snapshot taken after
//!    [`exports::INIT`] ran: interpreter built, default modules imported).
//! 2. The host calls [`exports::RUN`] `() -> ()`.
//! 3. The guest calls [`imports::REQUEST_LEN`] `() -> i32`, allocates that many bytes, and calls
//!    [`imports::REQUEST_READ`] `(ptr: i32) -> ()`; the host copies the JSON-encoded [`Request`] there.
//! 4. While the code runs, its `sys.stdout` and `sys.stderr` write *unbuffered* to WASI file
//!    descriptors 1 and 2, so the host sees output as it is produced.
//! 5. For every import made by user code the guest calls [`imports::IMPORT_ALLOWED`]
//!    `(name_ptr: i32, name_len: i32) -> i32` with the full dotted module name in UTF-8; `1` allows
//!    it, anything else refuses it (the guest then raises `ImportError`).
//! 6. At the end the guest calls [`imports::REPORT`] `(ptr: i32, len: i32) -> ()` once with a
//!    JSON-encoded [`Report`], then returns from [`exports::RUN`].
//!
//! A run that traps (a limit, an abort) never reports: the host classifies the trap itself.
//!
//! # More runs on one instance (sessions)
//!
//! The host may call [`exports::RUN`] again on an instance whose previous run returned normally:
//! steps 3 to 6 repeat with a new [`Request`], and the code runs in the *same* `__main__` module,
//! so variables, functions, classes and imports persist, as in a notebook. `random` is seeded from
//! the host's entropy once, at the first run of an instance. The host never calls into an instance
//! whose run trapped: it rebuilds the state from a fresh instance instead. That is sound because
//! the guest's only mutable wasm global is the shadow-stack pointer, which is back at its initial
//! value whenever no run is in progress: linear memory is the whole state between runs.
//!
//! # Trust
//!
//! Everything the guest hands back (pointers, lengths, report bytes, output) is untrusted: the host
//! bounds every length ([`MAX_REPORT_BYTES`], [`MAX_MODULE_NAME_BYTES`]) and treats a malformed
//! report as a guest fault, never as a reason to panic.

use serde::{Deserialize, Serialize};

/// Version of this ABI. Bump it, and [`IMPORT_MODULE`] with it, on any incompatible change.
pub const VERSION: u32 = 2;

/// The wasm import module that holds the host functions of this protocol version.
pub const IMPORT_MODULE: &str = "safe_python_v2";

/// Names of the functions the host provides in [`IMPORT_MODULE`].
pub mod imports {
    pub const REQUEST_LEN: &str = "request_len";
    pub const REQUEST_READ: &str = "request_read";
    pub const IMPORT_ALLOWED: &str = "import_allowed";
    pub const REPORT: &str = "report";
}

/// Names of the functions the guest exports.
pub mod exports {
    /// Builds the interpreter; run once by Wizer when the snapshot is taken.
    pub const INIT: &str = "sandbox_init";
    /// Runs one [`Request`](super::Request).
    pub const RUN: &str = "sandbox_run";
}

/// Largest report the host accepts: a guest asking the host to copy more is faulty or hostile.
pub const MAX_REPORT_BYTES: u32 = 64 << 20;

/// Longest module name the host reads for an import check.
pub const MAX_MODULE_NAME_BYTES: u32 = 4096;

/// What the host asks the guest to run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    /// Python source, run as the `__main__` module.
    pub code: String,
    /// The file name tracebacks and syntax errors give this code, e.g. `<code>`. Each run of a
    /// session gets its own, so a function defined by an earlier run shows its own source lines.
    pub filename: String,
    /// The allowed top-level modules, only to word the `ImportError` message: the host, asked
    /// through [`imports::IMPORT_ALLOWED`], remains the one that decides.
    pub allowed: Vec<String>,
    /// The guest cuts the result's `repr` to this many characters.
    pub max_result_chars: u32,
}

/// What the guest reports at the end of a run that did not trap.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Report {
    /// `repr` of the last statement's value (an expression, or the value a final assignment stored);
    /// `None` when there is none or it is `None`.
    pub result: Option<String>,
    /// The uncaught exception, including `SystemExit` and `KeyboardInterrupt`.
    pub error: Option<PythonError>,
}

/// An exception raised by user code and not caught by it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PythonError {
    /// The exception class name, e.g. `ZeroDivisionError`.
    #[serde(rename = "type")]
    pub kind: String,
    /// `str()` of the exception.
    pub message: String,
    /// The formatted traceback, with runs of repeated frames collapsed as CPython does.
    pub traceback: String,
}
