//! The life cycle of a call when sessions are kept in a store ([`crate::session::store`]): the
//! sessions of this process are then a warm cache, used only while the store holds the same
//! version of them.

use std::sync::Arc;
use std::time::Duration;

use super::{Lease, SessionError, SessionId, SessionRequest, Sessions, Start};
use crate::sandbox::{Sandbox, SandboxError};
use crate::session::Session;
use crate::session::store::format::{self, Bounds};
use crate::session::store::{Claim, SessionStore};

/// The store, and what a call in it may take.
pub struct Remote {
    pub store: Arc<SessionStore>,
    /// How long a call holds its session's lease at most: past it, another call may take the
    /// session, and this one's state is not written (a replica that died frees it this way).
    pub lease: Duration,
    /// How long a call waits for its session while another call runs in it.
    pub wait: Duration,
    /// What a stored session may hold: this server's limits.
    pub bounds: Bounds,
    /// This server's version and engine, which stored states name: a state another writes is
    /// refused with both names.
    pub writer: String,
}

impl Remote {
    /// [`Sessions::checkout`] of a stored session: takes its lease, then uses the warm session
    /// here if it is the stored version, or reads it.
    pub(super) async fn checkout(
        &self,
        sessions: &Arc<Sessions>,
        request: SessionRequest,
        reset: bool,
        sandbox: &Sandbox,
    ) -> Result<Lease, SessionError> {
        let id = match request {
            SessionRequest::New => {
                let mut lease = sessions.checkout_here(request, false, sandbox).await?;
                let claim = self.claim(lease.id).await?;
                // A handle is 128 random bits: a stored session under it means a broken source.
                if claim.version != 0 {
                    return Err(SessionError::Random(getrandom::Error::UNEXPECTED));
                }
                lease.claim = Some(claim);
                return Ok(lease);
            }
            SessionRequest::Continue(id) => id,
        };
        let claim = self.claim(id).await?;
        if claim.version == 0 {
            return Err(self.not_stored(id));
        }
        // A session made here is read (or emptied) once, before it is shared.
        let (shared, finishing, made) = match sessions.find(id) {
            Ok((shared, finishing)) => (shared, finishing, false),
            Err(_) => {
                let session = match reset {
                    true => Session::new(sandbox).await?,
                    false => self.read(id, &claim, sandbox).await?,
                };
                let shared = Arc::new(tokio::sync::Mutex::new(session));
                let finishing = Arc::default();
                sessions
                    .admit_when_room(Some(id), &shared, &finishing)
                    .await?;
                (shared, finishing, true)
            }
        };
        let mut session = shared.lock_owned().await;
        let started = reset.then_some(Start::Reset);
        let replaced = if made {
            None
        } else if reset {
            Some(std::mem::replace(
                &mut *session,
                Session::new(sandbox).await?,
            ))
        } else if session.version != claim.version {
            let stored = self.read(id, &claim, sandbox).await?;
            Some(std::mem::replace(&mut *session, stored))
        } else {
            None
        };
        super::drop_off_async_workers(replaced);
        session.version = claim.version;
        session.calls = claim.calls;
        Ok(Lease {
            sessions: sessions.clone(),
            id,
            started,
            session,
            finishing,
            claim: Some(claim),
        })
    }

    /// Takes session `id`'s lease, waiting while another call holds it.
    async fn claim(&self, id: SessionId) -> Result<Claim, SessionError> {
        self.store
            .claim(&id.to_string(), self.lease, self.wait)
            .await?
            .ok_or(SessionError::Busy {
                id,
                waited: self.wait,
            })
    }

    /// Session `id` is not in the store (its key expired after the store's idle time).
    fn not_stored(&self, id: SessionId) -> SessionError {
        SessionError::NotStored {
            id,
            idle: self.store.idle(),
        }
    }

    /// Session `id` as the store holds it.
    async fn read(
        &self,
        id: SessionId,
        claim: &Claim,
        sandbox: &Sandbox,
    ) -> Result<Session, SessionError> {
        let blob = claim.load().await?.ok_or_else(|| self.not_stored(id))?;
        let fingerprint = sandbox.session_fingerprint().await?;
        let (bounds, writer) = (self.bounds, self.writer.clone());
        let decode = move || format::decode(&blob, &writer, &fingerprint, bounds);
        let state = tokio::task::spawn_blocking(decode)
            .await
            .map_err(|e| SandboxError::Setup(wasmtime::Error::msg(e.to_string())))?
            .map_err(|reason| SessionError::Unusable { id, reason })?;
        Ok(Session::from_state(sandbox, state).await?)
    }
}
