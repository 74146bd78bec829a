//! Sessions that outlive a process: kept in Redis or Valkey (`--session-store`), so that any
//! replica of the server serves any session.
//!
//! Between calls, a session's whole state is its [`Snapshot`](crate::sandbox::snapshot::Snapshot)
//! and its files ([`crate::session`]); [`format`](mod@format) makes them one blob. A session is a hash under a
//! key derived from its handle (`v`: its version, `s`: the blob, `c`: its call count), which
//! expires after `--session-idle` without a call, and a lease key beside it.
//!
//! A call in a session takes the lease first ([`SessionStore::claim`], one round trip that also
//! reads the version): one call at a time per session, across replicas; a second call waits for
//! the first, and is told the session is busy if that lasts. A replica that served the session
//! last and holds the same version uses its warm instance; otherwise it reads the blob. After the
//! call, and before its reply, the new state is written only if the lease is still the call's and
//! the version the one it started from ([`Claim::commit`]): no call runs on stale state, and no
//! update is lost. A call stopped by a limit writes nothing (the store keeps the state from
//! before it); a replica killed mid-call leaves a lease that expires.

pub(crate) mod format;

#[cfg(feature = "store")]
mod client;
#[cfg(feature = "store")]
pub use client::{Claim, CommitError, SessionStore};

/// Why the session store could not be used.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("invalid session store URL: {0}")]
    BadUrl(String),
    #[error("the session store ({store}) cannot be used now: {cause}")]
    Unavailable { store: String, cause: String },
}

/// The longest cause quoted from the store (its errors are its own text): replies stay bounded.
const MAX_CAUSE_CHARS: usize = 300;

/// `cause` cut to [`MAX_CAUSE_CHARS`].
pub fn bounded(cause: &str) -> String {
    cut(cause, MAX_CAUSE_CHARS)
}

/// `text` cut to `max_chars`, with `…` if it was longer: text from elsewhere in a message.
pub(crate) fn cut(text: &str, max_chars: usize) -> String {
    let mut cut: String = text.chars().take(max_chars).collect();
    if cut.len() < text.len() {
        cut.push('…');
    }
    cut
}
