//! The service frames a guest sends while code runs (`safe_python_protocol::service`), answered
//! the same way for both engines: the RustPython guest sends them through its `service_call`
//! import, the CPython driver through its door. Today they serve code mode: the `tools` module's
//! source, and the tool calls [`crate::toolcalls`] makes.

use safe_python_protocol::service;
use wasmtime::Caller;

use crate::sandbox::host::{HostState, read_guest};
use crate::toolcalls::MODULE as TOOLS_MODULE;

/// The Python source of the `tools` module (both engines run it).
const TOOLS_SOURCE: &str = include_str!("tools.py");

/// The answer to the frame with opcode `op` and the `len`-byte payload at `ptr`, or `None` to
/// refuse it (an unknown opcode, a module the host does not provide). A payload over
/// [`service::MAX_FRAME_BYTES`] is not read: its answer says so, and the guest raises it.
pub(super) async fn answer(
    caller: &mut Caller<'_, HostState>,
    op: u8,
    ptr: i32,
    len: u32,
) -> wasmtime::Result<Option<Vec<u8>>> {
    if len > service::MAX_FRAME_BYTES {
        let refusal = serde_json::json!({"error": {"kind": "invalid", "message": format!(
            "a tool call's arguments may take at most {} bytes as JSON; these take {len}",
            service::MAX_FRAME_BYTES
        )}});
        return Ok(matches!(
            op,
            service::TOOL_START | service::TOOL_WAIT | service::TOOL_CALL
        )
        .then(|| refusal.to_string().into_bytes()));
    }
    let payload = read_guest(caller, ptr, len as i32, service::MAX_FRAME_BYTES)?;
    let state = caller.data_mut();
    let answer = match op {
        service::MODULE_SOURCE if payload == TOOLS_MODULE.as_bytes() && state.calls.enabled() => {
            return Ok(Some(TOOLS_SOURCE.as_bytes().to_vec()));
        }
        service::TOOL_LIST if state.calls.enabled() => state.calls.list(state.deadline).await,
        service::TOOL_START if state.calls.enabled() => {
            let deadline = state.deadline;
            state.calls.start(&payload, deadline).await
        }
        service::TOOL_CALL if state.calls.enabled() => {
            let deadline = state.deadline;
            state.calls.call(&payload, deadline).await
        }
        service::TOOL_WAIT if state.calls.enabled() => {
            let deadline = state.deadline;
            state.calls.wait(&payload, deadline).await
        }
        _ => return Ok(None),
    };
    Ok(Some(answer.to_string().into_bytes()))
}
