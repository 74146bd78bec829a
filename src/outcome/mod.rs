//! How a run ended, as a type: every ending is its own variant, classified from wasmtime's `Trap`
//! codes and the host's own records, never from message text.

use schemars::JsonSchema;
use serde::{Serialize, Serializer};

pub use bound::{cut_to, json_len, json_len_char, prefix_within};
pub use classify::decode_report;
pub use files::{OutputFile, OutputFileInfo, media_type};
pub(crate) use image::ImageCollector;
pub use image::{
    Image, ImageInfo, MAX_IMAGE_BYTES, MAX_IMAGE_SIDE, MAX_IMAGES, MAX_IMAGES_BYTES, left_out_note,
};
pub use safe_python_protocol::PythonError;

use crate::toolcalls::ToolCallRecord;

mod bound;
pub mod classify;
mod files;
mod image;

/// The limit that stopped a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Limit {
    Timeout,
    Fuel,
    Memory,
    Output,
    Stack,
}

impl Limit {
    pub fn as_str(self) -> &'static str {
        match self {
            Limit::Timeout => "timeout",
            Limit::Fuel => "fuel",
            Limit::Memory => "memory",
            Limit::Output => "output",
            Limit::Stack => "stack",
        }
    }

    /// A sentence for people (and models) reading the result.
    pub fn explain(self) -> &'static str {
        match self {
            Limit::Timeout => "The code ran past the wall-clock time limit and was stopped.",
            Limit::Fuel => "The code used up its instruction budget (fuel) and was stopped.",
            Limit::Memory => "The code ran out of memory: it reached the sandbox's memory limit.",
            Limit::Output => {
                "The code printed more than the output limit; the output was cut and the run stopped."
            }
            Limit::Stack => {
                "The code overflowed the sandbox's stack (recursion too deep) and was stopped."
            }
        }
    }
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The code ran to the end. `result` is the `repr` of the last expression or final assignment.
    Completed { result: Option<String> },
    /// The code raised an exception it did not catch (including `SystemExit`).
    Raised(PythonError),
    /// A limit stopped the code. `error` is set when Python got to raise (a `MemoryError`).
    LimitReached {
        limit: Limit,
        error: Option<PythonError>,
    },
    /// The guest trapped for a reason that is none of the limits: a bug in the interpreter, not
    /// something the code is expected to cause. The host survives it like any other outcome.
    Trapped { message: String },
}

/// Resources a run used.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, JsonSchema)]
pub struct Stats {
    /// Fuel units burnt (0 when the server does not meter instructions: `--fuel off`).
    pub fuel: u64,
    /// Wall-clock time of the run, in milliseconds.
    pub wall_ms: u64,
    /// Largest linear memory the guest had, in bytes.
    pub memory_peak_bytes: u64,
}

/// Everything a run produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunResult {
    pub outcome: Outcome,
    /// Everything written to stdout (up to the output limit), lossily decoded as UTF-8.
    pub stdout: String,
    pub stderr: String,
    pub stats: Stats,
    /// The figures the call left open, as PNG images (CPython engine only), within the bounds of
    /// [`MAX_IMAGES`], [`MAX_IMAGE_BYTES`], [`MAX_IMAGES_BYTES`] and [`MAX_IMAGE_SIDE`]: these are
    /// their own cap, apart from the output limit, which bounds the text.
    pub images: Vec<Image>,
    /// How many figures were left out for being over those bounds or not a PNG.
    pub images_left_out: usize,
    /// The files the code wrote under `/out`, in path order (calls given files only).
    pub files: Vec<OutputFile>,
    /// The upstream tools the code called (code mode), in the order it called them.
    pub tool_calls: Vec<ToolCallRecord>,
}

impl RunResult {
    pub fn result(&self) -> Option<&str> {
        match &self.outcome {
            Outcome::Completed { result } => result.as_deref(),
            _ => None,
        }
    }

    pub fn error(&self) -> Option<&PythonError> {
        match &self.outcome {
            Outcome::Raised(e) | Outcome::LimitReached { error: Some(e), .. } => Some(e),
            _ => None,
        }
    }

    pub fn limit(&self) -> Option<Limit> {
        match self.outcome {
            Outcome::LimitReached { limit, .. } => Some(limit),
            _ => None,
        }
    }

    /// Whether the code did not run to completion.
    pub fn is_failure(&self) -> bool {
        !matches!(self.outcome, Outcome::Completed { .. })
    }
}

/// The JSON form of a [`RunResult`]: what `sandbox-run --json` prints and what the MCP tool returns
/// as structured content. A guest trap shows as an `error` of type `SandboxTrap`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct RunReport {
    /// Everything the code printed to stdout (cut at the output limit, with a notice).
    pub stdout: String,
    /// Everything the code printed to stderr.
    pub stderr: String,
    /// `repr()` of the last expression, or of the value a final `x = ...` assigned; null when
    /// there is none or it is None.
    pub result: Option<String>,
    /// The uncaught exception, if any.
    pub error: Option<PythonError>,
    /// The limit that stopped the code, if any.
    pub limit: Option<Limit>,
    /// Resources used.
    pub stats: Stats,
    /// The images the call returned (figures), without their bytes; left out when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<ImageInfo>,
    /// How many figures were left out for being over the bounds on images; left out when none.
    #[serde(skip_serializing_if = "is_zero")]
    pub images_left_out: usize,
    /// The files the code wrote under `/out`, without their bytes; left out when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<OutputFileInfo>,
    /// The upstream tools the code called (code mode); left out when none. A call that was
    /// rolled back with its session's state still happened upstream: this says which ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<ToolCalls>,
}

/// How many tool calls a run made, and the first [`MAX_LISTED_TOOL_CALLS`] of them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct ToolCalls {
    pub count: usize,
    /// The calls in the order they were made, at most [`MAX_LISTED_TOOL_CALLS`].
    pub calls: Vec<ToolCallRecord>,
}

/// The most tool calls a report lists, so that a run making many stays a small reply.
pub const MAX_LISTED_TOOL_CALLS: usize = 50;

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl RunResult {
    pub fn report(&self) -> RunReport {
        let error = match &self.outcome {
            Outcome::Trapped { message } => Some(PythonError {
                kind: "SandboxTrap".into(),
                message: message.clone(),
                traceback: String::new(),
            }),
            _ => self.error().cloned(),
        };
        RunReport {
            stdout: self.stdout.clone(),
            stderr: self.stderr.clone(),
            result: self.result().map(str::to_owned),
            error,
            limit: self.limit(),
            stats: self.stats,
            images: self.images.iter().map(Image::info).collect(),
            images_left_out: self.images_left_out,
            files: self.files.iter().map(OutputFile::info).collect(),
            tool_calls: (!self.tool_calls.is_empty()).then(|| ToolCalls {
                count: self.tool_calls.len(),
                calls: self
                    .tool_calls
                    .iter()
                    .take(MAX_LISTED_TOOL_CALLS)
                    .cloned()
                    .collect(),
            }),
        }
    }
}

impl Serialize for RunResult {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.report().serialize(serializer)
    }
}
