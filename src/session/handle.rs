//! What a call asks of the sessions (a `session` value: "new" or a handle), and why it may be
//! refused: the handles themselves, and the errors that tell a caller how to start over.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Serialize, Serializer};

use super::store::StoreError;
use super::store::format::FormatError;
use crate::sandbox::SandboxError;

/// The `session` value that starts a new session.
pub const NEW: &str = "new";

/// What a `session` value may be: [`NEW`], or a handle ([`SessionId`]'s form).
pub const SESSION_PATTERN: &str = "^(new|s_[0-9a-f]{32})$";

/// A session's handle: 128 bits from the operating system's random source, shown as `s_` and 32
/// lowercase hexadecimal digits. Unguessable, and never a name a caller chose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SessionId(u128);

impl SessionId {
    const PREFIX: &str = "s_";

    pub(super) fn random() -> Result<SessionId, getrandom::Error> {
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes)?;
        Ok(SessionId(u128::from_le_bytes(bytes)))
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{:032x}", Self::PREFIX, self.0)
    }
}

/// As its [`Display`](fmt::Display) form: the handle a reply gives the caller.
impl Serialize for SessionId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl FromStr for SessionId {
    type Err = ();

    /// Exactly the form [`Display`](fmt::Display) writes: no sign, case or length variants.
    fn from_str(s: &str) -> Result<SessionId, ()> {
        let hex = s.strip_prefix(Self::PREFIX).ok_or(())?;
        if hex.len() != 32 || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return Err(());
        }
        u128::from_str_radix(hex, 16).map(SessionId).map_err(|_| ())
    }
}

/// What a call asks of the sessions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionRequest {
    /// Start a session.
    New,
    /// Continue the session with this handle.
    Continue(SessionId),
}

impl SessionRequest {
    /// Reads a client's `session` value: [`NEW`] or a handle; anything else is refused.
    pub fn parse(value: &str) -> Result<SessionRequest, SessionError> {
        if value == NEW {
            return Ok(SessionRequest::New);
        }
        value
            .parse()
            .map(SessionRequest::Continue)
            .map_err(|()| SessionError::NotAHandle {
                shown: shown(value),
            })
    }
}

/// `value` as an error message may quote it: escaped, and cut if long.
fn shown(value: &str) -> String {
    const MAX_CHARS: usize = 40;
    format!("{:?}", super::store::cut(value, MAX_CHARS))
}

/// How to start over, for every message that refuses a session.
const START_ONE: &str = "Start a session with session: \"new\"; its reply gives the handle \
     (structuredContent.session.id) to pass as `session` in later calls.";

/// Why a call cannot run in the session it asked for.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("{shown} is not a session handle. {}", START_ONE)]
    NotAHandle { shown: String },
    #[error("No session has the handle {id}. {}", START_ONE)]
    Unknown { id: SessionId },
    #[error(
        "Session {id} has expired: it was closed after {} without a call, and what was defined \
         in it is gone. {}",
        minutes(.idle.as_secs_f64()),
        START_ONE
    )]
    Expired { id: SessionId, idle: Duration },
    #[error(
        "Session {id} was closed to make room for a newer session (at most {max} are open, and \
         it was the least recently used idle one); what was defined in it is gone. {}",
        START_ONE
    )]
    Evicted { id: SessionId, max: usize },
    #[error(
        "No session can start now: all {max} open sessions are running calls. Try again when \
         one has finished, or run the code without a session."
    )]
    Full { max: usize },
    #[error(
        "Session {id} is running another call, which has not finished after {}. Calls to one \
         session run one at a time: try again when it has finished.",
        minutes(.waited.as_secs_f64())
    )]
    Busy { id: SessionId, waited: Duration },
    #[error(
        "No session has the handle {id} in the session store: it never existed, or it expired \
         after {} without a call, or the store lost it. {}",
        minutes(.idle.as_secs_f64()),
        START_ONE
    )]
    NotStored { id: SessionId, idle: Duration },
    #[error(
        "Session {id} cannot be restored: its stored state {reason}. {}",
        START_ONE
    )]
    Unusable { id: SessionId, reason: FormatError },
    #[error("{0}. Calls without a session still work.")]
    Store(#[from] StoreError),
    #[error("cannot draw a session handle from the operating system's random source: {0}")]
    Random(getrandom::Error),
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
}

impl SessionError {
    /// The caller's to fix (and to be told in a tool reply), rather than a fault of the host.
    pub fn is_refusal(&self) -> bool {
        !matches!(self, SessionError::Random(_) | SessionError::Sandbox(_))
    }
}

/// A duration for people: "30 min", "1.5 min", "45 s".
pub fn minutes(secs: f64) -> String {
    if secs >= 60.0 {
        format!("{} min", (secs / 60.0 * 10.0).round() / 10.0)
    } else {
        format!("{secs} s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_are_random_and_read_back_only_in_their_own_form() {
        let a = SessionId::random().unwrap();
        let b = SessionId::random().unwrap();
        assert_ne!(a, b);
        let shown = a.to_string();
        assert_eq!(shown.len(), 34);
        assert_eq!(shown.parse(), Ok(a));
        assert_eq!(
            SessionRequest::parse(&shown).unwrap(),
            SessionRequest::Continue(a)
        );
        assert_eq!(SessionRequest::parse(NEW).unwrap(), SessionRequest::New);
        let upper = format!("s_{}", shown[2..].to_uppercase());
        let short = &shown[..33];
        for bad in [
            "main",
            "0",
            "",
            "New",
            "new ",
            "s_",
            &upper,
            short,
            &format!("{shown}0"),
            &format!("S{}", &shown[1..]),
            "s_+0000000000000000000000000000000",
        ] {
            assert!(SessionRequest::parse(bad).is_err(), "{bad:?} was accepted");
            assert!(
                SessionRequest::parse(bad)
                    .unwrap_err()
                    .to_string()
                    .contains("\"new\""),
                "{bad:?}"
            );
        }
        let long = "x".repeat(10_000);
        let message = SessionRequest::parse(&long).unwrap_err().to_string();
        assert!(message.len() < 400, "{message}");
    }
}
