//! What a call did to its session, as its reply tells the client.

use schemars::JsonSchema;
use serde::Serialize;

use super::SessionId;

/// Why a call found its session empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Start {
    /// The call started the session.
    New,
    /// The caller asked for it to be emptied.
    Reset,
}

/// What a call did to its session: what [`super::Lease::run`] returns with the result, and what a reply
/// carries (its fields' docs are the clients' schema).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct SessionReport {
    /// The session's handle: pass it as `session` to continue the session. Only this reply (and
    /// later ones in the session) carry it.
    #[schemars(with = "String")]
    pub id: SessionId,
    /// Which call of the session this was, counting from 1.
    pub call: u64,
    /// Set when this call found the session empty, and why: `new` (the call started it) or
    /// `reset` (asked for).
    pub started: Option<Start>,
    /// The call hit a limit and was undone: the session is as it was before the call.
    pub rolled_back: bool,
    /// Bytes of the session's state as the session store now holds it (with `--session-store`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stored_bytes: Option<u64>,
    /// Why the session store could not keep what this call did: the call was then undone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_stored: Option<String>,
}
