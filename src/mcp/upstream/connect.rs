//! Connecting to one upstream: its transport (a child process over stdio, or streamable HTTP, with
//! TLS through rustls and ring), MCP's handshake, and the child's stderr, forwarded to ours and
//! kept in part to explain a failure.

use std::collections::{HashMap, VecDeque};
use std::io::Write as _;
use std::process::Stdio;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use hyper::http::{HeaderName, HeaderValue};
use rmcp::model::{ClientCapabilities, ClientInfo, Implementation};
use rmcp::service::{ClientInitializeError, NotificationContext, RunningService};
use rmcp::transport::streamable_http_client::{
    StreamableHttpClientTransportConfig, StreamableHttpError,
};
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, BufReader};
use tokio::process::ChildStderr;

use super::config::{UpstreamSpec, UpstreamTransport};
use crate::tls::install_crypto_provider;
use crate::toolcalls::ToolInfo;

/// The lines of an upstream's stderr kept to explain its failure, and the length kept of each.
const STDERR_TAIL_LINES: usize = 5;
const STDERR_LINE_CHARS: usize = 300;
/// Longer stderr lines are forwarded in pieces of this size, so a child cannot grow our memory.
const STDERR_CHUNK_BYTES: u64 = 16 * 1024;

/// A running client session with one upstream.
pub(super) struct Connection {
    /// Dropping it ends the session and, for a child process, kills the child.
    pub(super) service: RunningService<RoleClient, Handler>,
    pub(super) started: Instant,
    /// Its `tools/list`, once listed; dropped when it says its tools changed.
    pub(super) tools: Arc<Mutex<Option<Vec<ToolInfo>>>>,
    pub(super) tail: Arc<StderrTail>,
}

impl Connection {
    pub(super) fn is_closed(&self) -> bool {
        self.service.is_closed() || self.service.peer().is_transport_closed()
    }

    pub(super) fn closed_reason(&self) -> String {
        self.tail_explains("its connection closed (the server exited or hung up)".into())
    }

    pub(super) fn tail_explains(&self, reason: String) -> String {
        self.tail.explain(reason)
    }
}

/// Starts `spec` and completes MCP's handshake.
pub(super) async fn connect(
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
pub(super) struct Handler {
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
pub(super) struct StderrTail {
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
    pub(super) fn explain(&self, reason: String) -> String {
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
pub(super) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
