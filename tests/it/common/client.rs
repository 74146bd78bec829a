//! The one place that speaks to `safe-python-mcp` as a client does (rmcp's, over the real
//! process's stdio): connecting, building `run_python` calls, and reading their replies.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientRequest, ProgressNotificationParam, ProgressToken,
    Request,
};
use rmcp::service::{NotificationContext, PeerRequestOptions, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::{Value, json};
use tokio::sync::watch;

/// A connected client whose notifications go to `H`.
pub type Client<H = ()> = RunningService<RoleClient, H>;

/// The server `command` starts (see [`super::spawn::mcp_server`]), as a transport: its process id
/// is there to read before connecting.
pub fn transport(command: std::process::Command) -> TokioChildProcess {
    TokioChildProcess::new(tokio::process::Command::from(command)).expect("the server starts")
}

/// Starts the server `command` describes and completes the handshake, `handler` taking the
/// server's notifications.
pub async fn connect<H: ClientHandler>(handler: H, command: std::process::Command) -> Client<H> {
    handler
        .serve(transport(command))
        .await
        .expect("the server answers initialize")
}

/// A `run_python` call with these arguments (any JSON object, for calls a client should not make).
pub fn run_python_with(arguments: Value) -> CallToolRequestParams {
    let Value::Object(arguments) = arguments else {
        panic!("arguments are an object: {arguments}")
    };
    CallToolRequestParams::new("run_python").with_arguments(arguments)
}

/// `code` as a `run_python` call, fresh or in `session` (`"new"` starts one).
pub fn run_python(code: &str, session: Option<&str>) -> CallToolRequestParams {
    let mut arguments = json!({ "code": code });
    if let Some(session) = session {
        arguments["session"] = json!(session);
    }
    run_python_with(arguments)
}

/// A client handler that knows which calls have begun running: code that prints a line
/// `began <name>` (flushed) marks itself, and [`Began::wait`] waits for the mark. Tests that need a
/// call to be running, not just sent, wait for it instead of sleeping, which a loaded machine
/// outlasts.
#[derive(Clone)]
pub struct Began {
    marks: Arc<watch::Sender<HashSet<String>>>,
    /// Each call's output since its last newline: a line may arrive in pieces.
    partial: Arc<Mutex<HashMap<ProgressToken, String>>>,
}

impl Default for Began {
    fn default() -> Self {
        Began {
            marks: Arc::new(watch::Sender::new(HashSet::new())),
            partial: Arc::default(),
        }
    }
}

impl Began {
    /// The line that code prints first to mark itself as `name`.
    pub fn mark(name: &str) -> String {
        format!("print('began {name}', flush=True)\n")
    }

    /// Returns once the code marked `name` has printed its mark.
    pub async fn wait(&self, name: &str) {
        let mut seen = self.marks.subscribe();
        seen.wait_for(|names| names.contains(name))
            .await
            .expect("the handler lives as long as the client");
    }
}

impl ClientHandler for Began {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let Some(message) = params.message else {
            return;
        };
        let lines = {
            let mut partial = self.partial.lock().unwrap();
            let pending = partial.entry(params.progress_token).or_default();
            pending.push_str(&message);
            let Some(end) = pending.rfind('\n') else {
                return;
            };
            pending.drain(..=end).collect::<String>()
        };
        for name in lines.lines().filter_map(|l| l.strip_prefix("began ")) {
            self.marks
                .send_if_modified(|names| names.insert(name.to_owned()));
        }
    }
}

/// Sends `call`, and cancels it (`notifications/cancelled`) once it has run for `after`.
pub async fn cancel_after<H: ClientHandler>(
    client: &Client<H>,
    call: CallToolRequestParams,
    after: Duration,
) {
    let handle = client
        .send_cancellable_request(
            ClientRequest::CallToolRequest(Request::new(call)),
            PeerRequestOptions::no_options(),
        )
        .await
        .unwrap();
    tokio::time::sleep(after).await;
    handle.cancel(Some("test".into())).await.unwrap();
}

/// The structured content of a run's reply.
#[track_caller]
pub fn structured(reply: &CallToolResult) -> &Value {
    reply
        .structured_content
        .as_ref()
        .unwrap_or_else(|| panic!("no structured content in {reply:?}"))
}

/// The text blocks of a reply, joined.
pub fn text(reply: &CallToolResult) -> String {
    reply
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect()
}

/// The handle in a reply that started or continued a session.
pub fn handle_in(reply: &CallToolResult) -> Option<String> {
    let v = reply.structured_content.as_ref()?;
    v["session"]["id"].as_str().map(str::to_owned)
}

/// Runs `code` in `session` and returns the structured reply.
pub async fn session_call<H: ClientHandler>(
    client: &Client<H>,
    session: &str,
    code: &str,
) -> Value {
    let reply = client
        .call_tool(run_python(code, Some(session)))
        .await
        .unwrap();
    structured(&reply).clone()
}

/// Starts a session with `code`, which must complete, and returns its handle.
pub async fn new_session<H: ClientHandler>(client: &Client<H>, code: &str) -> String {
    let reply = client
        .call_tool(run_python(code, Some("new")))
        .await
        .unwrap();
    assert_eq!(reply.is_error, Some(false), "{code:?} failed: {reply:?}");
    assert_eq!(structured(&reply)["session"]["started"], "new", "{reply:?}");
    handle_in(&reply).unwrap_or_else(|| panic!("no handle in {reply:?}"))
}

/// Calls code that would overwrite `kept` in `session`, which must be refused with a tool error
/// that reaches no session and says how to start one; returns its text.
pub async fn refused<H: ClientHandler>(client: &Client<H>, session: &str) -> String {
    let reply = client
        .call_tool(run_python("kept = 'overwritten'", Some(session)))
        .await
        .unwrap();
    let text = text(&reply);
    assert_eq!(
        reply.is_error,
        Some(true),
        "{session:?} was accepted: {text}"
    );
    assert!(reply.structured_content.is_none(), "{reply:?}");
    assert!(text.contains("session: \"new\""), "{text}");
    text
}
