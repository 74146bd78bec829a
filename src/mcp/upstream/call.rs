//! One `tools/call` as the sandbox sees it: cancelled upstream when the code stops waiting for
//! it, and its result cut down to what the code gets.

use rmcp::RoleClient;
use rmcp::model::{
    CallToolResult, CancelledNotification, CancelledNotificationParam, ClientNotification,
    RequestId, ServerResult,
};
use rmcp::service::Peer;

use crate::toolcalls::ToolOutput;

/// Sends `notifications/cancelled` for a call whose future is dropped before its answer (the
/// run's time limit, or the client cancelling the run), so the upstream can stop working on it.
pub(super) struct CancelOnDrop {
    pub(super) peer: Option<Peer<RoleClient>>,
    pub(super) id: RequestId,
}

impl CancelOnDrop {
    pub(super) fn disarm(mut self) {
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
pub(super) fn output(result: CallToolResult) -> ToolOutput {
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

pub(super) fn result_kind(result: &ServerResult) -> &'static str {
    match result {
        ServerResult::InputRequiredResult(_) => "a request for more input (input_required)",
        ServerResult::CreateTaskResult(_) => "a task",
        _ => "something other than a tool result",
    }
}
