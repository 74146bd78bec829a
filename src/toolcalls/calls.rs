//! One run's tool calls, as the guest asks for them in service frames
//! (`safe_python_protocol::service`): each frame checked against the run's [`ToolAccess`], each
//! call made on its own task so that several can be in flight, each result cut to the run's
//! bound, and each call recorded for the report. Dropping a [`RunCalls`] (the run ended, hit a
//! limit or was cancelled) drops the calls still in flight, which cancels them upstream.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, watch};
use tokio::task::AbortHandle;

use super::signature::{identifier, python_signature};
use super::{ToolAccess, ToolCallRecord, ToolHostError, ToolOutput};

/// Called as each tool call finishes, from the task running the guest: keep it quick.
pub type ToolCallObserver = std::sync::Arc<dyn Fn(&ToolCallRecord) + Send + Sync>;

/// Longest server or tool name the host accepts in a frame.
const MAX_NAME_BYTES: usize = 256;

type Finished = (u64, Result<ToolOutput, ToolHostError>);

pub(crate) struct RunCalls {
    access: Option<ToolAccess>,
    /// The most bytes one call's answer to the guest may take.
    max_result_bytes: usize,
    observer: Option<ToolCallObserver>,
    /// Every call started, by id (its index), with its start time until it finishes.
    records: Vec<(ToolCallRecord, Option<Instant>)>,
    running: HashMap<u64, AbortHandle>,
    /// Answers of finished calls the guest has not collected yet.
    done: HashMap<u64, Value>,
    tx: mpsc::UnboundedSender<Finished>,
    rx: mpsc::UnboundedReceiver<Finished>,
    /// Closed when the run's future is dropped: the calls' tasks stop with it, even while this
    /// state stays in a session's store until its next call.
    run_life: watch::Receiver<()>,
}

impl Default for RunCalls {
    fn default() -> RunCalls {
        RunCalls::new(None, 0, None, watch::channel(()).1)
    }
}

impl Drop for RunCalls {
    fn drop(&mut self) {
        for task in self.running.values() {
            task.abort();
        }
    }
}

/// A frame's answer that refuses it: the guest raises it as a Python exception of its kind.
fn refusal(kind: &str, message: impl Into<String>) -> Value {
    json!({"error": {"kind": kind, "message": message.into()}})
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Start {
    server: String,
    tool: String,
    arguments: Map<String, Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Wait {
    ids: Vec<u64>,
    timeout: Option<f64>,
}

impl RunCalls {
    pub(crate) fn new(
        access: Option<ToolAccess>,
        max_result_bytes: usize,
        observer: Option<ToolCallObserver>,
        run_life: watch::Receiver<()>,
    ) -> RunCalls {
        let (tx, rx) = mpsc::unbounded_channel();
        RunCalls {
            access,
            max_result_bytes,
            observer,
            records: Vec::new(),
            running: HashMap::new(),
            done: HashMap::new(),
            tx,
            rx,
            run_life,
        }
    }

    /// Whether the code may import `tools`: there are upstreams.
    pub(crate) fn enabled(&self) -> bool {
        self.access.is_some()
    }

    /// The tools code may call, by upstream (see `service::TOOL_LIST`); those of an upstream
    /// that has not started by shortly before `deadline` are left out, with the reason.
    pub(crate) async fn list(&self, deadline: Instant) -> Value {
        let Some(access) = &self.access else {
            return refusal("unavailable", "no upstream servers are configured");
        };
        let mut servers = Vec::new();
        for server in access.host.catalogue(Some(before(deadline))).await {
            let mut entry = json!({"name": server.server, "id": identifier(&server.server)});
            match server.tools {
                Ok(tools) => {
                    let tools: Vec<Value> = tools
                        .iter()
                        .filter(|t| access.policy.allows(&t.server, &t.name))
                        .map(|t| {
                            json!({
                                "name": t.name,
                                "id": identifier(&t.name),
                                "signature": python_signature(&t.server, &t.name, &t.input_schema),
                                "description": t.description,
                                "input_schema": t.input_schema,
                            })
                        })
                        .collect();
                    entry["tools"] = Value::Array(tools);
                }
                Err(reason) => {
                    entry["tools"] = json!([]);
                    entry["error"] = Value::String(reason);
                }
            }
            servers.push(entry);
        }
        json!({ "servers": servers })
    }

    /// Starts the call a `TOOL_START` frame asks for, if the policy, the budget and the upstream's
    /// catalogue allow it (see `service::TOOL_START`).
    pub(crate) async fn start(&mut self, payload: &[u8], deadline: Instant) -> Value {
        let Some(access) = self.access.clone() else {
            return refusal("unavailable", "no upstream servers are configured");
        };
        let start: Start = match serde_json::from_slice(payload) {
            Ok(s) => s,
            Err(e) => return refusal("invalid", format!("not a tool call the host reads: {e}")),
        };
        if start.server.len() > MAX_NAME_BYTES || start.tool.len() > MAX_NAME_BYTES {
            return refusal("invalid", "a server or tool name is too long");
        }
        let (server, tool) = (start.server, start.tool);
        if !access.host.servers().contains(&server) {
            let known = access.host.servers().join(", ");
            return refusal(
                "invalid",
                format!("there is no upstream server '{server}' (servers: {known})"),
            );
        }
        if !access.policy.allows(&server, &tool) {
            return refusal(
                "refused",
                format!("the tool '{server}.{tool}' may not be called from this sandbox"),
            );
        }
        if self.records.len() >= access.policy.max_calls as usize {
            return refusal(
                "budget",
                format!(
                    "this run has made its {} tool calls, the most one run may make",
                    access.policy.max_calls
                ),
            );
        }
        match access.host.tools(&server, Some(before(deadline))).await {
            Ok(tools) if tools.iter().any(|t| t.name == tool) => {}
            Ok(_) => {
                return refusal(
                    "invalid",
                    format!("the upstream server '{server}' has no tool '{tool}'"),
                );
            }
            Err(reason) => {
                return refusal(
                    "unavailable",
                    format!("the upstream server '{server}' is not available: {reason}"),
                );
            }
        }
        let id = self.records.len() as u64;
        self.records.push((
            ToolCallRecord {
                server: server.clone(),
                tool: tool.clone(),
                ms: 0,
                ok: false,
            },
            Some(Instant::now()),
        ));
        let call = access.host.call(&server, &tool, start.arguments);
        let tx = self.tx.clone();
        let mut run_life = self.run_life.clone();
        let task = tokio::spawn(async move {
            tokio::select! {
                result = call => { let _ = tx.send((id, result)); }
                // Nothing is ever sent: this ends when the run's future is dropped.
                _ = run_life.changed() => {}
            }
        });
        self.running.insert(id, task.abort_handle());
        json!({ "id": id })
    }

    /// Starts the call a `TOOL_CALL` frame asks for and waits for it, but never past `deadline`:
    /// its `done` entry, or the refusal `start` gave (see `service::TOOL_CALL`).
    pub(crate) async fn call(&mut self, payload: &[u8], deadline: Instant) -> Value {
        let started = self.start(payload, deadline).await;
        let Some(id) = started.get("id").and_then(Value::as_u64) else {
            return started;
        };
        while !self.done.contains_key(&id) {
            match tokio::time::timeout_at(deadline.into(), self.rx.recv()).await {
                Ok(Some((done, result))) => self.finish(done, result),
                // The run's time is up: it ends now, and the call with it.
                Ok(None) | Err(_) => return refusal("failed", "the run's time limit was reached"),
            }
        }
        self.done.remove(&id).expect("checked above")
    }

    /// Waits as a `TOOL_WAIT` frame asks, but never past `deadline`, and answers with the calls
    /// among its ids that have finished (see `service::TOOL_WAIT`).
    pub(crate) async fn wait(&mut self, payload: &[u8], deadline: Instant) -> Value {
        let wait: Wait = match serde_json::from_slice(payload) {
            Ok(w) => w,
            Err(e) => return refusal("invalid", format!("not a wait the host reads: {e}")),
        };
        if let Some(id) = wait.ids.iter().find(|id| !self.known(**id)) {
            return refusal("invalid", format!("there is no pending tool call {id}"));
        }
        let timeout = wait
            .timeout
            .filter(|t| t.is_finite() && *t >= 0.0)
            .map(|t| Duration::from_secs_f64(t.min(86_400.0)));
        let until = timeout.map_or(deadline, |t| deadline.min(Instant::now() + t));
        while !wait.ids.iter().any(|id| self.done.contains_key(id)) {
            let received = tokio::time::timeout_at(until.into(), self.rx.recv()).await;
            match received {
                Ok(Some((id, result))) => self.finish(id, result),
                // Nothing can close the channel while `self` holds a sender.
                Ok(None) | Err(_) => break,
            }
        }
        // Whatever else finished meanwhile is recorded now, so the records stay current.
        while let Ok((id, result)) = self.rx.try_recv() {
            self.finish(id, result);
        }
        let done: Vec<Value> = wait
            .ids
            .iter()
            .filter_map(|id| self.done.remove(id))
            .collect();
        json!({ "done": done })
    }

    fn known(&self, id: u64) -> bool {
        self.running.contains_key(&id) || self.done.contains_key(&id)
    }

    fn finish(&mut self, id: u64, result: Result<ToolOutput, ToolHostError>) {
        self.running.remove(&id);
        let Some((record, started)) = self.records.get_mut(id as usize) else {
            return;
        };
        record.ms = started.take().map_or(0, elapsed_ms);
        record.ok = matches!(&result, Ok(out) if !out.is_error);
        if let Some(observer) = &self.observer {
            observer(record);
        }
        let mut answer = match result {
            Ok(out) => json!({
                "id": id,
                "is_error": out.is_error,
                "structured": out.structured,
                "content": out.content,
            }),
            Err(e) => {
                let kind = match e {
                    ToolHostError::Failed { .. } => "failed",
                    _ => "unavailable",
                };
                let mut answer = refusal(kind, e.to_string());
                answer["id"] = json!(id);
                answer
            }
        };
        let size = serde_json::to_vec(&answer).map_or(usize::MAX, |b| b.len());
        if size > self.max_result_bytes {
            answer = refusal(
                "too_large",
                format!(
                    "the result of {}.{} is {size} bytes, over this sandbox's limit of {} bytes",
                    record.server, record.tool, self.max_result_bytes
                ),
            );
            answer["id"] = json!(id);
        }
        self.done.insert(id, answer);
    }

    /// The run's calls in the order they started; those still running are stopped (and
    /// cancelled upstream), recorded as not ok.
    pub(crate) fn take_records(&mut self) -> Vec<ToolCallRecord> {
        while let Ok((id, result)) = self.rx.try_recv() {
            self.finish(id, result);
        }
        for task in self.running.drain().map(|(_, t)| t) {
            task.abort();
        }
        self.done.clear();
        std::mem::take(&mut self.records)
            .into_iter()
            .map(|(mut record, started)| {
                if let Some(started) = started {
                    record.ms = elapsed_ms(started);
                }
                record
            })
            .collect()
    }
}

/// When to stop waiting for upstreams to start, for a run that ends at `deadline`: early enough
/// that the code gets an error saying so, rather than the time limit.
fn before(deadline: Instant) -> Instant {
    let left = deadline.saturating_duration_since(Instant::now());
    deadline - (left / 4).min(Duration::from_secs(1))
}

fn elapsed_ms(since: Instant) -> u64 {
    since.elapsed().as_millis().try_into().unwrap_or(u64::MAX)
}
