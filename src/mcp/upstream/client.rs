//! [`Upstreams`]: one rmcp client per configured upstream, behind [`ToolHost`].
//!
//! Upstreams start lazily and independently: nothing starts in [`Upstreams::new`], so the server
//! starts as fast as without them; [`Upstreams::start_in_background`] starts them all on tasks of
//! their own, and a call or the catalogue starts one that is not running. An upstream that fails to
//! start, or crashes, fails only the calls that need it, with the reason (the command not found,
//! the process exiting, its last lines of stderr), and a later call restarts it, at most once per
//! [`RESTART_INTERVAL`].

use std::collections::{HashMap, VecDeque};
use std::io::Write as _;
use std::process::Stdio;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use hyper::http::{HeaderName, HeaderValue};
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, CancelledNotification,
    CancelledNotificationParam, ClientCapabilities, ClientInfo, ClientNotification, ClientRequest,
    Implementation, RequestId, ServerResult,
};
use rmcp::service::{
    ClientInitializeError, NotificationContext, Peer, PeerRequestOptions, RunningService,
    ServiceError,
};
use rmcp::transport::streamable_http_client::{
    StreamableHttpClientTransportConfig, StreamableHttpError,
};
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::{Map, Value};
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, BufReader};
use tokio::process::ChildStderr;
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::config::{UpstreamSpec, UpstreamTransport};
use crate::toolcalls::{BoxFuture, ServerTools, ToolHost, ToolHostError, ToolInfo, ToolOutput};

/// How long an upstream may take to start and answer `initialize` (a first `npx`/`uvx` run
/// downloads its package, hence the margin) before it counts as failed.
pub const START_TIMEOUT: Duration = Duration::from_secs(30);

/// The least time between two starts of one upstream: a server that cannot start, or crashes as
/// soon as it is up, is not restarted by every call.
pub const RESTART_INTERVAL: Duration = Duration::from_secs(3);

/// The lines of an upstream's stderr kept to explain its failure, and the length kept of each.
const STDERR_TAIL_LINES: usize = 5;
const STDERR_LINE_CHARS: usize = 300;
/// Longer stderr lines are forwarded in pieces of this size, so a child cannot grow our memory.
const STDERR_CHUNK_BYTES: u64 = 16 * 1024;

/// The configured upstreams, each started on demand; see the module's documentation.
pub struct Upstreams {
    upstreams: Vec<Arc<Upstream>>,
}

impl Upstreams {
    /// The upstreams of `specs`, none started yet.
    pub fn new(specs: Vec<UpstreamSpec>) -> Upstreams {
        let upstreams = specs
            .into_iter()
            .map(|spec| {
                Arc::new(Upstream {
                    spec,
                    phase: watch::Sender::new(Phase::Idle),
                })
            })
            .collect();
        Upstreams { upstreams }
    }

    /// Starts every upstream not yet started on tasks of its own, and returns at once. Outside a
    /// tokio runtime it does nothing: the upstreams then start on first use.
    pub fn start_in_background(&self) {
        if tokio::runtime::Handle::try_current().is_err() {
            return;
        }
        for upstream in &self.upstreams {
            let begin = upstream.phase.send_if_modified(|phase| {
                if matches!(phase, Phase::Idle) {
                    *phase = Phase::Starting;
                    true
                } else {
                    false
                }
            });
            if begin {
                upstream.spawn_start();
            }
        }
    }

    fn find(&self, server: &str) -> Option<&Arc<Upstream>> {
        self.upstreams.iter().find(|u| u.spec.name == server)
    }
}

impl ToolHost for Upstreams {
    fn servers(&self) -> Vec<String> {
        self.upstreams.iter().map(|u| u.spec.name.clone()).collect()
    }

    fn catalogue(&self, by: Option<Instant>) -> BoxFuture<'_, Vec<ServerTools>> {
        Box::pin(async move {
            // Concurrently: each upstream's start is bounded by START_TIMEOUT on its own.
            let mut lists = JoinSet::new();
            for (index, upstream) in self.upstreams.iter().enumerate() {
                let upstream = upstream.clone();
                lists.spawn(async move { (index, listed_by(upstream, by).await) });
            }
            let mut found: Vec<Option<Result<Vec<ToolInfo>, String>>> =
                vec![None; self.upstreams.len()];
            while let Some(joined) = lists.join_next().await {
                if let Ok((index, tools)) = joined {
                    found[index] = Some(tools);
                }
            }
            self.upstreams
                .iter()
                .zip(found)
                .map(|(upstream, tools)| ServerTools {
                    server: upstream.spec.name.clone(),
                    tools: tools
                        .unwrap_or_else(|| Err("listing its tools stopped unexpectedly".into())),
                })
                .collect()
        })
    }

    fn tools(
        &self,
        server: &str,
        by: Option<Instant>,
    ) -> BoxFuture<'_, Result<Vec<ToolInfo>, String>> {
        let upstream = self.find(server).cloned();
        let server = server.to_owned();
        Box::pin(async move {
            match upstream {
                Some(upstream) => listed_by(upstream, by).await,
                None => Err(format!("there is no upstream server named '{server}'")),
            }
        })
    }

    fn call(
        &self,
        server: &str,
        tool: &str,
        arguments: Map<String, Value>,
    ) -> BoxFuture<'static, Result<ToolOutput, ToolHostError>> {
        let Some(upstream) = self.find(server).cloned() else {
            let server = server.to_owned();
            return Box::pin(async move { Err(ToolHostError::NoServer(server)) });
        };
        let tool = tool.to_owned();
        Box::pin(async move { upstream.call(tool, arguments).await })
    }
}

/// One upstream and where it is in its life.
struct Upstream {
    spec: UpstreamSpec,
    /// Its phase; callers wait on it while it starts.
    phase: watch::Sender<Phase>,
}

enum Phase {
    /// Not started yet.
    Idle,
    /// A task is starting it; the phase changes when it is done.
    Starting,
    /// Up, or crashed and not yet noticed ([`Connection::is_closed`]).
    Ready(Arc<Connection>),
    /// Its last start failed, or it crashed: why, and when that start began.
    Failed { reason: String, started: Instant },
}

impl Upstream {
    fn unavailable(&self, reason: String) -> ToolHostError {
        ToolHostError::Unavailable {
            server: self.spec.name.clone(),
            reason,
        }
    }

    fn failed(&self, reason: String) -> ToolHostError {
        ToolHostError::Failed {
            server: self.spec.name.clone(),
            reason,
        }
    }

    /// The live connection, starting the upstream (or waiting for its start) when needed.
    async fn connection(self: &Arc<Self>) -> Result<Arc<Connection>, String> {
        let mut changes = self.phase.subscribe();
        loop {
            let mut outcome = None;
            let mut begin = false;
            self.phase.send_if_modified(|phase| match phase {
                Phase::Ready(connection) if !connection.is_closed() => {
                    outcome = Some(Ok(connection.clone()));
                    false
                }
                Phase::Ready(connection) => {
                    let reason = connection.closed_reason();
                    let started = connection.started;
                    if started.elapsed() >= RESTART_INTERVAL {
                        *phase = Phase::Starting;
                        begin = true;
                    } else {
                        outcome = Some(Err(reason.clone()));
                        *phase = Phase::Failed { reason, started };
                    }
                    true
                }
                Phase::Starting => false,
                Phase::Idle => {
                    *phase = Phase::Starting;
                    begin = true;
                    true
                }
                Phase::Failed { reason, started } => {
                    if started.elapsed() >= RESTART_INTERVAL {
                        *phase = Phase::Starting;
                        begin = true;
                        true
                    } else {
                        outcome = Some(Err(reason.clone()));
                        false
                    }
                }
            });
            if let Some(outcome) = outcome {
                return outcome;
            }
            if begin {
                self.spawn_start();
            }
            // The sender lives as long as `self`: this cannot fail while we hold it.
            let _ = changes
                .wait_for(|phase| !matches!(phase, Phase::Starting))
                .await;
        }
    }

    /// Starts the upstream on a task of its own (the phase must be `Starting`): a caller that
    /// stops waiting does not stop the start, which others may be waiting for.
    fn spawn_start(self: &Arc<Self>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.phase.send_replace(Phase::Failed {
                reason: "there is no tokio runtime to start it on".into(),
                started: Instant::now(),
            });
            return;
        };
        let upstream = self.clone();
        runtime.spawn(async move {
            let started = Instant::now();
            let tail = Arc::new(StderrTail::default());
            let phase = match tokio::time::timeout(
                START_TIMEOUT,
                connect(&upstream.spec, started, tail.clone()),
            )
            .await
            {
                Ok(Ok(connection)) => Phase::Ready(Arc::new(connection)),
                Ok(Err(reason)) => Phase::Failed { reason, started },
                Err(_) => Phase::Failed {
                    reason: tail.explain(format!(
                        "it did not start and answer MCP's initialize within {} s",
                        START_TIMEOUT.as_secs()
                    )),
                    started,
                },
            };
            match &phase {
                Phase::Failed { reason, .. } => {
                    tracing::warn!(upstream = %upstream.spec.name, "upstream not available: {reason}")
                }
                _ => tracing::info!(upstream = %upstream.spec.name, "upstream started"),
            }
            upstream.phase.send_replace(phase);
        });
    }

    /// Marks `connection` as crashed, if it is still the current one, so that the next call
    /// restarts the upstream.
    fn crashed(&self, connection: &Arc<Connection>, reason: String) {
        self.phase.send_if_modified(|phase| match phase {
            Phase::Ready(current) if Arc::ptr_eq(current, connection) => {
                tracing::warn!(upstream = %self.spec.name, "upstream lost: {reason}");
                *phase = Phase::Failed {
                    reason,
                    started: connection.started,
                };
                true
            }
            _ => false,
        });
    }

    async fn tools(self: Arc<Self>) -> Result<Vec<ToolInfo>, String> {
        let connection = self.connection().await?;
        if let Some(tools) = lock(&connection.tools).clone() {
            return Ok(tools);
        }
        match connection.service.peer().list_all_tools().await {
            Ok(tools) => {
                let tools: Vec<ToolInfo> = tools
                    .into_iter()
                    .map(|tool| ToolInfo {
                        server: self.spec.name.clone(),
                        name: tool.name.into_owned(),
                        description: tool.description.map(|d| d.into_owned()).unwrap_or_default(),
                        input_schema: Value::Object((*tool.input_schema).clone()),
                    })
                    .collect();
                *lock(&connection.tools) = Some(tools.clone());
                Ok(tools)
            }
            Err(error) => {
                let reason = format!("its tools/list failed: {error}");
                if connection.is_closed() {
                    let reason = connection.tail_explains(reason);
                    self.crashed(&connection, reason.clone());
                    return Err(reason);
                }
                Err(reason)
            }
        }
    }

    async fn call(
        self: Arc<Self>,
        tool: String,
        arguments: Map<String, Value>,
    ) -> Result<ToolOutput, ToolHostError> {
        let connection = self
            .connection()
            .await
            .map_err(|reason| self.unavailable(reason))?;
        let peer = connection.service.peer().clone();
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(
            CallToolRequestParams::new(tool).with_arguments(arguments),
        ));
        let sent = peer
            .send_cancellable_request(request, PeerRequestOptions::no_options())
            .await;
        let handle = match sent {
            Ok(handle) => handle,
            Err(error) => return Err(self.lost(&connection, error)),
        };
        // From here until the answer, dropping this future cancels the call upstream.
        let guard = CancelOnDrop {
            peer: Some(peer),
            id: handle.id.clone(),
        };
        let answer = handle.await_response().await;
        guard.disarm();
        match answer {
            Ok(ServerResult::CallToolResult(result)) => Ok(output(result)),
            // A contentless answer (`{}`) from a tool with nothing to say.
            Ok(ServerResult::EmptyResult(_)) => Ok(ToolOutput::default()),
            Ok(other) => Err(self.failed(format!(
                "it answered with {}, which code mode does not support",
                result_kind(&other)
            ))),
            Err(ServiceError::McpError(error)) => Err(self.failed(error.message.into_owned())),
            Err(error) => Err(self.lost(&connection, error)),
        }
    }

    /// The error for a call whose request or answer did not get through: a closed connection is a
    /// crash, remembered so that the next call restarts the upstream.
    fn lost(&self, connection: &Arc<Connection>, error: ServiceError) -> ToolHostError {
        if matches!(error, ServiceError::TransportClosed) || connection.is_closed() {
            let reason = connection.closed_reason();
            self.crashed(connection, reason.clone());
            self.failed(reason)
        } else {
            self.failed(error.to_string())
        }
    }
}

/// Sends `notifications/cancelled` for a call whose future is dropped before its answer (the
/// run's time limit, or the client cancelling the run), so the upstream can stop working on it.
struct CancelOnDrop {
    peer: Option<Peer<RoleClient>>,
    id: RequestId,
}

impl CancelOnDrop {
    fn disarm(mut self) {
        self.peer = None;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some(peer) = self.peer.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let params = CancelledNotificationParam::new(
            Some(self.id.clone()),
            Some("the sandboxed code stopped waiting for the call".into()),
        );
        runtime.spawn(async move {
            let notification =
                ClientNotification::CancelledNotification(CancelledNotification::new(params));
            let _ = peer.send_notification(notification).await;
        });
    }
}

/// The fields of a tool's result the code sees.
/// `upstream`'s tools, if it lists them by `by` (its start goes on in the background if not).
async fn listed_by(upstream: Arc<Upstream>, by: Option<Instant>) -> Result<Vec<ToolInfo>, String> {
    match by {
        None => upstream.tools().await,
        Some(by) => tokio::time::timeout_at(by.into(), upstream.tools())
            .await
            .unwrap_or_else(|_| Err("it is still starting: try again shortly".into())),
    }
}

fn output(result: CallToolResult) -> ToolOutput {
    ToolOutput {
        is_error: result.is_error.unwrap_or(false),
        structured: result.structured_content,
        content: result
            .content
            .iter()
            .map(|block| {
                serde_json::to_value(block).unwrap_or_else(|e| {
                    serde_json::json!({"type": "text", "text": format!("(a content block that could not be encoded: {e})")})
                })
            })
            .collect(),
    }
}

fn result_kind(result: &ServerResult) -> &'static str {
    match result {
        ServerResult::InputRequiredResult(_) => "a request for more input (input_required)",
        ServerResult::CreateTaskResult(_) => "a task",
        _ => "something other than a tool result",
    }
}

/// A running client session with one upstream.
struct Connection {
    /// Dropping it ends the session and, for a child process, kills the child.
    service: RunningService<RoleClient, Handler>,
    started: Instant,
    /// Its `tools/list`, once listed; dropped when it says its tools changed.
    tools: Arc<Mutex<Option<Vec<ToolInfo>>>>,
    tail: Arc<StderrTail>,
}

impl Connection {
    fn is_closed(&self) -> bool {
        self.service.is_closed() || self.service.peer().is_transport_closed()
    }

    fn closed_reason(&self) -> String {
        self.tail_explains("its connection closed (the server exited or hung up)".into())
    }

    fn tail_explains(&self, reason: String) -> String {
        self.tail.explain(reason)
    }
}

/// Starts `spec` and completes MCP's handshake.
async fn connect(
    spec: &UpstreamSpec,
    started: Instant,
    tail: Arc<StderrTail>,
) -> Result<Connection, String> {
    let tools = Arc::new(Mutex::new(None));
    let handler = Handler {
        tools: tools.clone(),
    };
    let service = match &spec.transport {
        UpstreamTransport::Stdio {
            command,
            args,
            env,
            cwd,
        } => {
            let mut child = tokio::process::Command::new(command);
            child.args(args).envs(env).kill_on_drop(true);
            if let Some(cwd) = cwd {
                if !cwd.is_dir() {
                    return Err(format!(
                        "its working directory {} does not exist",
                        cwd.display()
                    ));
                }
                child.current_dir(cwd);
            }
            // stdout is the protocol; stderr is the child's log, which goes to ours (never our
            // stdout, which is the protocol on our side) and explains a failure.
            let (transport, stderr) = TokioChildProcess::builder(child)
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|error| match error.kind() {
                    std::io::ErrorKind::NotFound => {
                        format!("the command '{command}' was not found")
                    }
                    std::io::ErrorKind::PermissionDenied => {
                        format!("the command '{command}' cannot be run: {error}")
                    }
                    _ => format!("the command '{command}' did not start: {error}"),
                })?;
            let reader = stderr.map(|stderr| {
                tokio::spawn(forward_stderr(spec.name.clone(), stderr, tail.clone()))
            });
            match handler.serve(transport).await {
                Ok(service) => service,
                Err(error) => {
                    // The process has likely exited: let its last words reach the tail.
                    if let Some(reader) = reader {
                        let _ = tokio::time::timeout(Duration::from_millis(500), reader).await;
                    }
                    return Err(
                        tail.explain(format!("it did not complete MCP's initialize: {error}"))
                    );
                }
            }
        }
        UpstreamTransport::Http { url, headers } => {
            // reqwest has rustls without a crypto provider of its own, and panics building a
            // client (http:// too) when the process has none.
            install_crypto_provider();
            let mut custom = HashMap::new();
            for (name, value) in headers {
                // Checked when configured; checked again rather than trusted.
                let name = HeaderName::from_bytes(name.as_bytes())
                    .map_err(|e| format!("the header {name:?} is not valid: {e}"))?;
                let mut value = HeaderValue::from_str(value)
                    .map_err(|e| format!("the value of the header {name} is not valid: {e}"))?;
                value.set_sensitive(true);
                custom.insert(name, value);
            }
            let config =
                StreamableHttpClientTransportConfig::with_uri(url.as_str()).custom_headers(custom);
            let transport = StreamableHttpClientTransport::from_config(config);
            handler.serve(transport).await.map_err(|error| {
                format!(
                    "it did not complete MCP's initialize at {url}: {}",
                    initialize_error(&spec.name, &error)
                )
            })?
        }
    };
    Ok(Connection {
        service,
        started,
        tools,
        tail,
    })
}

/// Installs ring as the process's default rustls crypto provider, unless one is installed already.
///
/// The HTTP upstreams' client (reqwest, built with rustls but no provider, so that aws-lc-rs, a C
/// build, stays out) takes the process's default and panics building a client when there is none,
/// for http:// as for https://. Whoever else builds a reqwest client in a process that links this
/// crate (the tests' rmcp clients) calls this first. Idempotent and cheap after the first call.
pub fn install_crypto_provider() {
    static INSTALL: std::sync::Once = std::sync::Once::new();
    INSTALL.call_once(|| {
        // An error means another provider was installed first, which serves as well.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// Why `name`'s initialize failed, with the cause rmcp's message leaves out (its message stops at
/// reqwest's "error sending request", which does not say why: an untrusted certificate, a refused
/// connection) and without its transport's Rust type name.
fn initialize_error(name: &str, error: &ClientInitializeError) -> String {
    let ClientInitializeError::TransportError { error, .. } = error else {
        return error.to_string();
    };
    let Some(http) = error
        .error
        .downcast_ref::<StreamableHttpError<reqwest::Error>>()
    else {
        return error.to_string();
    };
    match http {
        StreamableHttpError::Client(client) => causes(client),
        StreamableHttpError::AuthRequired(_) | StreamableHttpError::InsufficientScope(_) => {
            format!(
                "it asks for credentials ({}): give it the headers it needs, such as \
                 Authorization, in {} or the \"headers\" of its entry in the config file",
                causes(http),
                super::config::headers_var(name)
            )
        }
        _ => causes(http),
    }
}

/// `error`'s message followed by those of its sources, each left out when the one before says it.
fn causes(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text = format!("{text}: {cause_text}");
        }
        source = cause.source();
    }
    text
}

/// Our side of each upstream session: who we are, and dropping the cached tool list when the
/// upstream says it changed.
struct Handler {
    tools: Arc<Mutex<Option<Vec<ToolInfo>>>>,
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientInfo {
        ClientInfo::new(
            ClientCapabilities::default(),
            Implementation::new("safe-python-mcp", env!("CARGO_PKG_VERSION")),
        )
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        *lock(&self.tools) = None;
    }
}

/// The last lines an upstream wrote to stderr, to explain why it failed.
#[derive(Default)]
struct StderrTail {
    lines: Mutex<VecDeque<String>>,
}

impl StderrTail {
    fn push(&self, line: &str) {
        let mut lines = lock(&self.lines);
        if lines.len() == STDERR_TAIL_LINES {
            lines.pop_front();
        }
        lines.push_back(line.chars().take(STDERR_LINE_CHARS).collect());
    }

    /// `reason`, followed by the last lines of stderr when there are any.
    fn explain(&self, reason: String) -> String {
        let lines = lock(&self.lines);
        if lines.is_empty() {
            return reason;
        }
        let joined: Vec<&str> = lines.iter().map(String::as_str).collect();
        format!("{reason}; its stderr ended with: {}", joined.join(" | "))
    }
}

/// Copies an upstream's stderr to ours, each line marked with its name, keeping the last lines.
async fn forward_stderr(name: String, stderr: ChildStderr, tail: Arc<StderrTail>) {
    let mut reader = BufReader::new(stderr);
    let mut line = Vec::new();
    loop {
        line.clear();
        match (&mut reader)
            .take(STDERR_CHUNK_BYTES)
            .read_until(b'\n', &mut line)
            .await
        {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end();
        if text.is_empty() {
            continue;
        }
        let _ = writeln!(std::io::stderr().lock(), "[upstream {name}] {text}");
        tail.push(text);
    }
}

/// Locks a mutex whose data stays consistent even if a holder panicked (each holder does one
/// assignment or read).
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
