//! Code mode: sandboxed code calling the tools of other MCP servers (the *upstreams*), which the
//! host makes on its behalf.
//!
//! The library knows upstreams only through [`ToolHost`]: a catalogue of tools and a way to call
//! one. The MCP front end implements it with MCP clients (`crate::mcp::upstream`); a test or an
//! embedder may implement it with anything. What the code may call, how often and with what is
//! decided here, on the host, whatever the guest sends: [`ToolPolicy`] (which tools, how many
//! calls) and [`calls`] (one run's calls: frames checked and bounded, results cut, every call
//! recorded for the run's report).
//!
//! The guest side is `tools.py`, a Python module the host hands to the guest when user code
//! imports `tools` (both engines run the same source); the frames between them are described in
//! `safe_python_protocol::service`.

pub(crate) mod calls;
mod policy;
mod signature;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::{Map, Value};

pub use calls::ToolCallObserver;
pub use policy::{PolicyError, ToolPolicy};
pub use signature::python_signature;

/// The module code imports to call the tools: the host provides it when a run has upstreams.
pub const MODULE: &str = "tools";

/// A boxed future that may cross threads: what [`ToolHost`]'s methods return.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One tool an upstream offers, as its `tools/list` described it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolInfo {
    /// The upstream's name, as the operator configured it.
    pub server: String,
    /// The tool's name, as the upstream spells it.
    pub name: String,
    pub description: String,
    /// The tool's input schema (a JSON Schema object).
    pub input_schema: Value,
}

/// What the tools of one upstream are, or why they cannot be had.
#[derive(Debug, Clone)]
pub struct ServerTools {
    pub server: String,
    /// The tools, or why the upstream is not available (it failed to start, crashed, or is still
    /// starting past the wait).
    pub tools: Result<Vec<ToolInfo>, String>,
}

/// What a tool call gave back: the fields of MCP's `CallToolResult` the code sees.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolOutput {
    /// Set when the tool reported an error (`isError`): the code gets a `tools.ToolError`.
    pub is_error: bool,
    /// The tool's structured content, when it gave one.
    pub structured: Option<Value>,
    /// The content blocks, as MCP's JSON (`{"type": "text", "text": ...}`, images, resources).
    pub content: Vec<Value>,
}

/// Why a call could not be made or did not come back: never the tool's own error, which is a
/// [`ToolOutput`] with `is_error` set.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolHostError {
    #[error("there is no upstream server named '{0}'")]
    NoServer(String),
    #[error("the upstream server '{server}' is not available: {reason}")]
    Unavailable { server: String, reason: String },
    #[error("the upstream server '{server}' failed the call: {reason}")]
    Failed { server: String, reason: String },
}

/// The upstream servers, as the sandbox sees them. Dropping a future of [`ToolHost::call`] before
/// it completes must cancel the call upstream (MCP's `notifications/cancelled`): that is how a
/// run's time limit and a client's cancellation reach a tool that is still working.
pub trait ToolHost: Send + Sync {
    /// The configured upstreams' names, known without starting any.
    fn servers(&self) -> Vec<String>;

    /// Every upstream's tools, starting those not yet started and waiting for them, each within
    /// its own bounded start time and, when `by` is given, until then: an upstream not listed by
    /// then is reported as not available (still starting).
    fn catalogue(&self, by: Option<Instant>) -> BoxFuture<'_, Vec<ServerTools>>;

    /// One upstream's tools, as [`ToolHost::catalogue`] gets them: so that a call to one
    /// upstream never waits for another that is slow to start.
    fn tools(
        &self,
        server: &str,
        by: Option<Instant>,
    ) -> BoxFuture<'_, Result<Vec<ToolInfo>, String>>;

    /// Calls `tool` of `server` with `arguments`.
    fn call(
        &self,
        server: &str,
        tool: &str,
        arguments: Map<String, Value>,
    ) -> BoxFuture<'static, Result<ToolOutput, ToolHostError>>;
}

/// The upstreams and the policy a run's tool calls go through: part of
/// [`RunOptions`](crate::RunOptions). Without it, `import tools` is an `ImportError`.
#[derive(Clone)]
pub struct ToolAccess {
    pub host: Arc<dyn ToolHost>,
    pub policy: Arc<ToolPolicy>,
}

/// One tool call a run made, for its report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct ToolCallRecord {
    /// The upstream's name.
    pub server: String,
    pub tool: String,
    /// From the call's start to its result, in milliseconds; for a call cut short by the end of
    /// the run, until then.
    pub ms: u64,
    /// Whether the tool returned a result that is not an error.
    pub ok: bool,
}
