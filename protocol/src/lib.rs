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
//!    `(name_ptr: i32, name_len: i32) -> i32` with the module name, in UTF-8, of what the import
//!    hands to user code: `import a.b` binds `a`, so the guest asks about `a`; `from a.b import x`
//!    returns `a.b`, so it asks about `a.b`. [`ALLOWED`] allows it; [`HOST_MODULE`] allows it and
//!    says the host provides the module: unless it is loaded already, the guest fetches its source
//!    with a [`service::MODULE_SOURCE`] frame and runs it as a new module, as trusted as the
//!    standard library, with the function that sends service frames as its global `_service`.
//!    Anything else refuses it (the guest then raises `ImportError`). The guest refuses names that
//!    fail [`is_module_name`] itself, without asking; the host answers "refused" for any name it
//!    cannot read.
//! 6. While the code runs, the guest may send [`service`] frames (code mode's tool calls): it
//!    calls [`imports::SERVICE_CALL`] `(ptr: i32, len: i32) -> i32` with the frame; the host
//!    answers with the answer's length, or `-1` to refuse the frame, and the guest, having
//!    allocated that many bytes, fetches the answer with [`imports::SERVICE_ANSWER`]
//!    `(ptr: i32) -> ()`. A frame is at most [`service::MAX_FRAME_BYTES`] long.
//! 7. At the end the guest calls [`imports::REPORT`] `(ptr: i32, len: i32) -> ()` once with a
//!    JSON-encoded [`Report`], then returns from [`exports::RUN`]. Each text field of the report
//!    is at most [`Request::max_field_bytes`] bytes once JSON-escaped (the guest cuts it, with a
//!    notice), so the host accepts at most [`report_limit`] bytes; a larger report ends the run as
//!    "output limit reached".
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

/// The wasm import module that holds the host functions of this protocol version (4). Bump the
/// version in its name on any incompatible change.
pub const IMPORT_MODULE: &str = "safe_python_v4";

/// Names of the functions the host provides in [`IMPORT_MODULE`].
pub mod imports {
    pub const REQUEST_LEN: &str = "request_len";
    pub const REQUEST_READ: &str = "request_read";
    pub const IMPORT_ALLOWED: &str = "import_allowed";
    pub const REPORT: &str = "report";
    pub const SERVICE_CALL: &str = "service_call";
    pub const SERVICE_ANSWER: &str = "service_answer";
}

/// [`imports::IMPORT_ALLOWED`]'s answer for a module the guest has.
pub const ALLOWED: i32 = 1;
/// [`imports::IMPORT_ALLOWED`]'s answer for a module the host provides.
pub const HOST_MODULE: i32 = 2;

/// The frames a guest sends while code runs, for services the host provides: one opcode byte,
/// then the payload. The CPython engine's driver sends the same frames through its own door.
/// The host trusts nothing in them: every field is checked, and a frame it cannot accept gets an
/// error answer that the guest raises as a Python exception.
///
/// Code mode (`tools.py`, the module the host provides as `tools`):
/// - [`TOOL_LIST`](service::TOOL_LIST), no payload: the tools code may call, as JSON
///   `{"servers": [{"name", "id", "error"?, "tools": [{"name", "id", "signature", "description",
///   "input_schema"}]}]}`, where `id` is the Python identifier of a name.
/// - [`TOOL_START`](service::TOOL_START), payload `{"server", "tool", "arguments": {...}}`:
///   starts a call and answers `{"id": N}`, or `{"error": {"kind", "message"}}` when the call is
///   refused (`kind`: `refused`, `budget`, `invalid`).
/// - [`TOOL_WAIT`](service::TOOL_WAIT), payload `{"ids": [N, ...], "timeout": SECONDS | null}`:
///   waits until at least one of those calls has finished, or the timeout, and answers `{"done":
///   [...]}`, one entry per finished call among `ids`: `{"id", "is_error", "structured",
///   "content"}` (the tool's result, MCP's JSON), or `{"id", "error": {"kind", "message"}}`
///   (`kind`: `unavailable`, `failed`, `too_large`, `invalid`).
/// - [`TOOL_CALL`](service::TOOL_CALL), payload as for `TOOL_START`: starts the call and waits for
///   it (until the run's end), answering with its `done` entry, or a refusal as `TOOL_START`'s.
///   One frame instead of two for a call the code waits for at once.
pub mod service {
    /// Payload: a module name; answer: that module's Python source, in UTF-8.
    pub const MODULE_SOURCE: u8 = b'M';
    pub const TOOL_LIST: u8 = b'L';
    pub const TOOL_START: u8 = b'T';
    pub const TOOL_WAIT: u8 = b'W';
    pub const TOOL_CALL: u8 = b'C';
    /// The longest frame the host reads: a tool's arguments are at most this, JSON-encoded.
    pub const MAX_FRAME_BYTES: u32 = 1 << 20;
}

/// Names of the functions the guest exports.
pub mod exports {
    /// Builds the interpreter; run once by Wizer when the snapshot is taken.
    pub const INIT: &str = "sandbox_init";
    /// Runs one [`Request`](super::Request).
    pub const RUN: &str = "sandbox_run";
}

/// Ceiling on [`Request::max_field_bytes`]: however large the output cap, no report field is
/// longer than this once JSON-escaped.
pub const MAX_FIELD_BYTES: u32 = 4 << 20;

/// Room in a report for its JSON structure and the guest's cut notices.
pub const REPORT_OVERHEAD_BYTES: u32 = 64 << 10;

/// Largest report the host ever accepts: four fields (result, exception type, message,
/// traceback) at [`MAX_FIELD_BYTES`] each, plus overhead. A guest asking for more is faulty or
/// hostile.
pub const MAX_REPORT_BYTES: u32 = 4 * MAX_FIELD_BYTES + REPORT_OVERHEAD_BYTES;

/// The largest report the host accepts for a request whose fields are cut at `max_field_bytes`.
pub const fn report_limit(max_field_bytes: u32) -> u32 {
    let field = if max_field_bytes < MAX_FIELD_BYTES {
        max_field_bytes
    } else {
        MAX_FIELD_BYTES
    };
    4 * field + REPORT_OVERHEAD_BYTES
}

/// Where a run's input files are, read-only.
pub const DATA_DIR: &str = "/data";
/// Where a run may write files.
pub const OUT_DIR: &str = "/out";

/// What an error from `open` adds, on both engines, when the run has its folders: where files
/// live. The host serves `/data` and `/out` when a run is given files (see the host's
/// `sandbox::files`); no other path exists in the guest.
pub const FILES_ARE_HERE: &str =
    "files are in /data (the input files, read-only) and /out (write files there)";

/// The same for a run that was given no files, and so has neither folder.
pub const NO_FILES_HERE: &str = "this run was given no files: a run given files reads them \
     in /data (read-only) and can write files in /out";

/// The modules user code may import unless the host allows more (the Python seed server's
/// allowlist). The host's policy starts from it; the guest imports these into its snapshot, so that
/// importing them costs nothing at run time.
pub const DEFAULT_ALLOWED: &[&str] = &[
    "collections",
    "datetime",
    "itertools",
    "math",
    "queue",
    "random",
    "re",
    "stat",
    "statistics",
    "time",
    "unicodedata",
];

/// Longest module name the host reads for an import check.
pub const MAX_MODULE_NAME_BYTES: u32 = 4096;

/// A dotted name of Python identifiers, at most [`MAX_MODULE_NAME_BYTES`] long: the only module
/// names either side ever asks or answers about.
pub fn is_module_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_MODULE_NAME_BYTES as usize
        && name.split('.').all(|part| {
            let mut chars = part.chars();
            matches!(chars.next(), Some(c) if c == '_' || c.is_alphabetic())
                && chars.all(|c| c == '_' || c.is_alphanumeric())
        })
}

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
    /// The guest cuts each text field of its [`Report`] (result, exception type, message,
    /// traceback) to this many bytes, counted JSON-escaped, at most [`MAX_FIELD_BYTES`].
    pub max_field_bytes: u32,
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

/// An exception raised by user code and not caught by it. The host hands it on as it is, in its
/// results and (with the `schemars` feature) in their JSON schema.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct PythonError {
    /// The exception class name, e.g. `ZeroDivisionError`.
    #[serde(rename = "type")]
    pub kind: String,
    /// `str()` of the exception.
    pub message: String,
    /// The formatted traceback, with runs of repeated frames collapsed as CPython does.
    pub traceback: String,
}
