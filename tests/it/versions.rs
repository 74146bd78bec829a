//! `safe-python-mcp` for clients of two protocol revisions, over real stdio: a 2026-07-28 client
//! (no handshake: `server/discover`, then each request carries its own `_meta`) and a 2025-11-25
//! client (the `initialize` handshake). Each runs code, and asks for log messages its own way: a
//! level in the request's `_meta`, or `logging/setLevel`.

// MCP logging is deprecated by SEP-2577; the server still supports it, and this tests it.
#![allow(deprecated)]

use std::sync::{Arc, Mutex};

use rmcp::model::{
    CallToolRequestParams, ClientConfig, LoggingLevel, LoggingMessageNotificationParam,
    ProtocolVersion, RequestMetaObject, SetLevelRequestParams,
};
use rmcp::service::NotificationContext;
use rmcp::{ClientHandler, ClientLifecycleMode, ClientServiceExt, RoleClient};

use crate::common;
use common::client::{Client, run_python, structured, transport};
use common::spawn::mcp_server;

/// A client that speaks `config.protocol_version` and keeps the log messages it is sent.
#[derive(Clone)]
struct Logs {
    config: ClientConfig,
    received: Arc<Mutex<Vec<LoggingMessageNotificationParam>>>,
}

impl Logs {
    fn new(version: ProtocolVersion) -> Logs {
        let mut config = ClientConfig::default();
        config.protocol_version = version;
        Logs {
            config,
            received: Arc::default(),
        }
    }

    /// The text logged with logger `stdout` since the last call, and forgets it.
    fn take_stdout(&self) -> String {
        self.received
            .lock()
            .unwrap()
            .drain(..)
            .filter(|l| l.logger.as_deref() == Some("stdout"))
            .filter_map(|l| l.data.as_str().map(str::to_owned))
            .collect()
    }
}

impl ClientHandler for Logs {
    fn get_info(&self) -> ClientConfig {
        self.config.clone()
    }

    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.received.lock().unwrap().push(params);
    }
}

/// `print(text)` as a fresh call, asking for log messages at `level` in its `_meta`.
fn print_logged_at(text: &str, level: Option<LoggingLevel>) -> CallToolRequestParams {
    let mut call = run_python(&format!("print({text:?})"), None);
    if let Some(level) = level {
        let mut meta = RequestMetaObject::new();
        meta.set_log_level(level);
        call.meta = Some(meta);
    }
    call
}

/// Runs `call`, which must print `text`.
async fn prints(client: &Client<Logs>, call: CallToolRequestParams, text: &str) {
    let reply = client.call_tool(call).await.unwrap();
    assert_eq!(
        structured(&reply)["stdout"],
        format!("{text}\n"),
        "{reply:?}"
    );
}

#[tokio::test]
async fn a_2026_07_28_client_runs_code_and_asks_for_logs_per_request() {
    let logs = Logs::new(ProtocolVersion::V_2026_07_28);
    let client = logs
        .clone()
        .serve_with_lifecycle(
            transport(mcp_server(&[])),
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .expect("the server answers server/discover");
    assert_eq!(
        client.peer_info().unwrap().protocol_version,
        ProtocolVersion::V_2026_07_28
    );
    prints(&client, print_logged_at("quiet", None), "quiet").await;
    assert_eq!(logs.take_stdout(), "", "log messages nobody asked for");
    let warnings = print_logged_at("too low", Some(LoggingLevel::Warning));
    prints(&client, warnings, "too low").await;
    assert_eq!(logs.take_stdout(), "", "info messages at level warning");
    let info = print_logged_at("logged", Some(LoggingLevel::Info));
    prints(&client, info, "logged").await;
    assert_eq!(logs.take_stdout(), "logged\n");
    // The level was this request's only.
    prints(&client, print_logged_at("quiet again", None), "quiet again").await;
    assert_eq!(logs.take_stdout(), "");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_2025_11_25_client_runs_code_and_sets_a_log_level() {
    let logs = Logs::new(ProtocolVersion::V_2025_11_25);
    let client = common::client::connect(logs.clone(), mcp_server(&[])).await;
    assert_eq!(
        client.peer_info().unwrap().protocol_version,
        ProtocolVersion::V_2025_11_25
    );
    prints(&client, print_logged_at("quiet", None), "quiet").await;
    assert_eq!(logs.take_stdout(), "", "log messages nobody asked for");
    client
        .set_level(SetLevelRequestParams::new(LoggingLevel::Debug))
        .await
        .unwrap();
    prints(&client, print_logged_at("logged", None), "logged").await;
    assert_eq!(logs.take_stdout(), "logged\n");
    // A level in a request's `_meta` is that request's, over the one set.
    let errors_only = print_logged_at("not logged", Some(LoggingLevel::Error));
    prints(&client, errors_only, "not logged").await;
    assert_eq!(logs.take_stdout(), "");
    client.cancel().await.unwrap();
}
