//! A session locked for one call ([`Lease`]), and what the call leaves behind once it has replied:
//! recording the session's new state, or undoing a cancelled call ([`Aftermath`]).

use std::sync::Arc;

use tokio::sync::OwnedMutexGuard;

use super::{Finishing, ReplyWatch, SessionId, SessionReport, Sessions, Start, Usage};
use crate::outcome::RunResult;
use crate::sandbox::{RunOptions, SandboxError};
use crate::session::Session;
#[cfg(feature = "store")]
use crate::session::store::{Claim, format};

/// A session locked for one call.
pub struct Lease {
    pub(super) sessions: Arc<Sessions>,
    pub(super) id: SessionId,
    pub(super) started: Option<Start>,
    pub(super) session: OwnedMutexGuard<Session>,
    /// The session's [`super::Entry::finishing`].
    pub(super) finishing: Arc<Finishing>,
    /// The session's lease in the store, when sessions are kept in one.
    #[cfg(feature = "store")]
    pub(super) claim: Option<Claim>,
}

/// How a call in a session went (see [`Lease::run`]).
#[derive(Debug)]
pub struct LeaseRun {
    pub result: RunResult,
    pub session: SessionReport,
}

impl Lease {
    /// The session's handle.
    pub fn id(&self) -> SessionId {
        self.id
    }

    /// Runs `code` in the session, unless `cancelled` resolves first: then the half-run call is
    /// undone in the background (the session's next call waits for that) and the result is
    /// `None`. After a run, the session's idle time counts from now, and its new state is recorded
    /// on a blocking thread once the reply is out (see [`super::replies`]), or at once.
    pub async fn run(
        mut self,
        code: &str,
        options: &RunOptions,
        cancelled: impl Future<Output = ()>,
    ) -> Result<Option<LeaseRun>, SandboxError> {
        let ran = tokio::select! {
            ran = self.session.run(code, options) => ran,
            () = cancelled => {
                let mut after = Aftermath::new(self.sessions, self.session, self.finishing);
                #[cfg(feature = "store")]
                let claim = self.claim;
                tokio::spawn(async move {
                    if let Err(e) = after.session().recover().await {
                        // The session stays marked unfinished: its next call tries again.
                        tracing::warn!("cannot undo a cancelled session call yet: {e:#}");
                    }
                    // The store keeps the state from before the call; dropping the lease frees it.
                    #[cfg(feature = "store")]
                    drop(claim);
                });
                return Ok(None);
            }
        };
        self.sessions.touch(self.id);
        let ran = ran?;
        #[cfg_attr(not(feature = "store"), allow(unused_mut))]
        let mut session = SessionReport {
            id: self.id,
            call: ran.call,
            started: self.started,
            rolled_back: ran.rolled_back,
            stored_bytes: None,
            not_stored: None,
        };
        #[cfg(feature = "store")]
        if let Some(claim) = self.claim {
            // Stored before the reply: once a caller has seen a call's result, any replica runs the
            // next call on the state that call left.
            let writer = self.sessions.remote.as_ref().map(|r| r.writer.clone());
            store(
                self.session,
                claim,
                writer.unwrap_or_default(),
                &mut session,
            )
            .await?;
            return Ok(Some(LeaseRun {
                result: ran.result,
                session,
            }));
        }
        let reply_out = self.sessions.replies.as_ref().map(ReplyWatch::next_reply);
        let mut after = Aftermath::new(self.sessions, self.session, self.finishing);
        let save = move || after.session().save();
        match reply_out {
            Some(reply_out) => {
                tokio::spawn(async move {
                    reply_out.await;
                    tokio::task::spawn_blocking(save);
                });
            }
            None => {
                tokio::task::spawn_blocking(save);
            }
        }
        Ok(Some(LeaseRun {
            result: ran.result,
            session,
        }))
    }
}

/// A session that a call has left, while it does what the call left behind (records its new state,
/// or undoes a cancelled call): marked finishing until dropped, however that work ends, a panic
/// included.
struct Aftermath {
    sessions: Arc<Sessions>,
    /// Always `Some` until dropped: released before the mark, so that whoever the mark's end wakes
    /// finds the session idle.
    session: Option<OwnedMutexGuard<Session>>,
    finishing: Arc<Finishing>,
}

impl Aftermath {
    fn new(
        sessions: Arc<Sessions>,
        session: OwnedMutexGuard<Session>,
        finishing: Arc<Finishing>,
    ) -> Aftermath {
        finishing.begin();
        Aftermath {
            sessions,
            session: Some(session),
            finishing,
        }
    }

    fn session(&mut self) -> &mut Session {
        self.session.as_mut().expect("held until dropped")
    }
}

impl Drop for Aftermath {
    fn drop(&mut self) {
        // No longer busy (unless another call waits for it).
        Usage::end_finishing(self.session.take(), &self.finishing);
        self.sessions.finished.notify_waiters();
    }
}

/// A [`Session::version`] that no stored version equals: the session here must be read again.
#[cfg(feature = "store")]
const STALE: u64 = u64::MAX;

/// Records what a call did in the store, before its reply: the new state if the call changed the
/// session (or started or emptied it), otherwise just the end of the lease. A state the store
/// cannot take is undone here too, and `report` says why.
#[cfg(feature = "store")]
async fn store(
    session: OwnedMutexGuard<Session>,
    claim: Claim,
    writer: String,
    report: &mut SessionReport,
) -> Result<(), SandboxError> {
    if report.rolled_back && report.started.is_none() {
        if let Err(e) = claim.release(Some(session.calls)).await {
            tracing::warn!("{e}");
        }
        return Ok(());
    }
    let fingerprint = session.sandbox.session_fingerprint().await?;
    let started = std::time::Instant::now();
    // Comparing the pages and compressing them takes milliseconds: not on an async worker.
    let (mut session, blob, saved) = tokio::task::spawn_blocking(move || {
        let mut session = session;
        session.save();
        let saved = started.elapsed();
        let (snapshot, files) = session.saved();
        let blob = format::encode(&writer, &fingerprint, snapshot, files);
        (session, blob, saved)
    })
    .await
    .map_err(|e| SandboxError::Setup(wasmtime::Error::msg(e.to_string())))?;
    let encoded = started.elapsed();
    let committed = claim.commit(&blob, session.calls).await;
    tracing::debug!(
        bytes = blob.len(),
        save_us = saved.as_micros() as u64,
        encode_us = (encoded - saved).as_micros() as u64,
        commit_us = (started.elapsed() - encoded).as_micros() as u64,
        "session stored"
    );
    match committed {
        Ok(version) => {
            session.version = version;
            report.stored_bytes = Some(blob.len() as u64);
        }
        Err(e) => {
            tracing::warn!(reason = %e, "a session's state was not stored");
            // The store has the state from before the call: the next call reads it.
            session.version = STALE;
            report.rolled_back = true;
            report.not_stored = Some(e.to_string());
        }
    }
    Ok(())
}
