//! [`Upstreams`]: one rmcp client per configured upstream, behind [`ToolHost`].
//!
//! Upstreams start lazily and independently: nothing starts in [`Upstreams::new`], so the server
//! starts as fast as without them; [`Upstreams::start_in_background`] starts them all on tasks of
//! their own, and a call or the catalogue starts one that is not running. An upstream that fails to
//! start, or crashes, fails only the calls that need it, with the reason (the command not found,
//! the process exiting, its last lines of stderr), and a later call restarts it, at most once per
//! [`RESTART_INTERVAL`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::model::{CallToolRequest, CallToolRequestParams, ClientRequest, ServerResult};
use rmcp::service::{PeerRequestOptions, ServiceError};
use serde_json::{Map, Value};
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::call::{CancelOnDrop, output, result_kind};
use super::config::UpstreamSpec;
use super::connect::{Connection, StderrTail, connect, lock};
use crate::toolcalls::{BoxFuture, ServerTools, ToolHost, ToolHostError, ToolInfo, ToolOutput};

/// How long an upstream may take to start and answer `initialize` (a first `npx`/`uvx` run
/// downloads its package, hence the margin) before it counts as failed.
pub const START_TIMEOUT: Duration = Duration::from_secs(30);

/// The least time between two starts of one upstream: a server that cannot start, or crashes as
/// soon as it is up, is not restarted by every call.
pub const RESTART_INTERVAL: Duration = Duration::from_secs(3);

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

/// `upstream`'s tools, if it lists them by `by` (its start goes on in the background if not).
async fn listed_by(upstream: Arc<Upstream>, by: Option<Instant>) -> Result<Vec<ToolInfo>, String> {
    match by {
        None => upstream.tools().await,
        Some(by) => tokio::time::timeout_at(by.into(), upstream.tools())
            .await
            .unwrap_or_else(|_| Err("it is still starting: try again shortly".into())),
    }
}
