//! The session registry: sessions private to whoever started them, and within bounds.
//!
//! One server process serves every conversation of a client, so sessions are not a namespace that
//! callers share. `"new"` starts a session, and the server names it with a handle drawn from the
//! operating system's random source ([`SessionId`], 128 bits): a caller reaches a session only by
//! holding its handle, and nothing the server says reveals one to anyone else.
//!
//! Bounds: at most [`SessionLimits::max`] live at once, none idle for longer than
//! [`SessionLimits::idle`], all gone when the process ends. A session that a call holds or waits
//! for is *busy*, and is never dropped: a new session beyond the limit evicts the least recently
//! used idle one, and is refused when every session is busy. So the memory held stays within
//! `max` × the per-session bound that [`crate::session`] documents.
//!
//! The life cycle of a call lives here, for the MCP tool and the REPL alike: [`Sessions::checkout`]
//! finds or starts the session and takes its lock (calls to one session run one at a time, in the
//! order they came; different sessions run side by side), and [`Lease::run`] runs the code,
//! undoes it if the call is cancelled, marks the session used, and records its new state off the
//! async workers. A handle whose session was dropped is remembered (a bounded number of them), so
//! that its next call can say why it is gone rather than that it never existed.

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use lru::LruCache;
use tokio::sync::Notify;

use super::Session;
pub use super::handle::{NEW, SESSION_PATTERN, SessionError, SessionId, SessionRequest, minutes};
use crate::sandbox::Sandbox;
use usage::{Finishing, Usage};

mod lease;
mod limits;
mod replies;
mod report;
mod usage;
pub use lease::{Lease, LeaseRun};
pub use limits::SessionLimits;
pub use replies::{REPLY_WAIT, RepliesOut, ReplyWatch};
pub use report::{SessionReport, Start};
#[cfg(feature = "store")]
mod remote;
#[cfg(feature = "store")]
pub use remote::Remote;

/// Why a session was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    Evicted,
    Expired,
}

/// Handles of dropped sessions remembered, to say why they are gone.
const GONE_REMEMBERED: NonZeroUsize = NonZeroUsize::new(4096).unwrap();
/// The longest a new session waits for the session it would evict to finish recording its last call
/// or undoing a cancelled one ([`Sessions::admit_when_room`]): that takes milliseconds; this bounds
/// the wait should one hang.
const FINISHING_WAIT: Duration = Duration::from_secs(2);

/// A live session, shared by the calls that use it.
type Shared = Arc<tokio::sync::Mutex<Session>>;

pub struct Sessions {
    limits: SessionLimits,
    registry: Mutex<Registry>,
    /// Told each time a session has finished what its last call left behind (see
    /// [`Entry::finishing`]).
    finished: Notify,
    /// When replies go out, if the front end can tell: a session records its state after that.
    replies: Option<ReplyWatch>,
    /// The store that keeps the sessions, if not this process: those here are then a warm cache.
    #[cfg(feature = "store")]
    remote: Option<Remote>,
}

struct Registry {
    /// Ordered by use: a session moves to the front when it is started and when a call in it
    /// ends ([`Sessions::touch`]), so the back is the least recently used, and `last_used` never
    /// decreases from back to front.
    live: LruCache<SessionId, Entry>,
    /// The most recently dropped sessions, the oldest forgotten first.
    gone: LruCache<SessionId, Ended>,
}

struct Entry {
    session: Shared,
    last_used: Instant,
    /// Set while the session's call has replied (or was cancelled) but the session still records
    /// its new state or undoes the call (see [`Lease::run`]): busy for a moment only, so a new
    /// session that would evict it waits for it, rather than evict a more recently used one or be
    /// refused.
    finishing: Arc<Finishing>,
}

impl Entry {
    fn usage(&self) -> Usage {
        Usage::of(&self.session, &self.finishing)
    }
}

/// What [`Registry::evict_one`] did.
enum Eviction {
    Dropped(Entry),
    /// The session to drop is only finishing its last call: try again once it has.
    Soon,
    AllBusy,
}

/// Why a new session was not admitted at once.
enum NoRoom {
    /// The session to evict is only finishing its last call: try again once it has.
    Soon,
    Refused(SessionError),
}

impl Sessions {
    /// An empty set of sessions, with a thread that drops idle ones (it stops when the set does).
    pub fn new(limits: SessionLimits) -> Arc<Sessions> {
        Self::start(Self::empty(limits))
    }

    /// [`Sessions::new`], each recording its new state once the reply to its call is out.
    pub fn after_replies(limits: SessionLimits, replies: ReplyWatch) -> Arc<Sessions> {
        Self::start(Sessions {
            replies: Some(replies),
            ..Self::empty(limits)
        })
    }

    /// Sessions kept in `remote`; `limits.max` bounds those this process keeps warm.
    #[cfg(feature = "store")]
    pub fn stored(limits: SessionLimits, remote: Remote) -> Arc<Sessions> {
        Self::start(Sessions {
            remote: Some(remote),
            ..Self::empty(limits)
        })
    }

    fn empty(limits: SessionLimits) -> Sessions {
        Sessions {
            limits,
            registry: Mutex::new(Registry {
                live: LruCache::unbounded(),
                gone: LruCache::new(GONE_REMEMBERED),
            }),
            finished: Notify::new(),
            replies: None,
            #[cfg(feature = "store")]
            remote: None,
        }
    }

    fn start(sessions: Sessions) -> Arc<Sessions> {
        let limits = sessions.limits;
        let sessions = Arc::new(sessions);
        let weak: Weak<Sessions> = Arc::downgrade(&sessions);
        let every = (limits.idle / 4).clamp(Duration::from_millis(10), Duration::from_secs(30));
        let spawned = std::thread::Builder::new()
            .name("session-reaper".into())
            .spawn(move || {
                while let Some(sessions) = weak.upgrade() {
                    sessions.expire_idle();
                    drop(sessions);
                    std::thread::sleep(every);
                }
            });
        if let Err(e) = spawned {
            // Idle sessions are still expired whenever a session is checked out.
            tracing::warn!("cannot start the session reaper: {e}");
        }
        sessions
    }

    /// The session `request` asks for, locked for one call: waits for the calls before it in that
    /// session. With `reset`, the session is emptied once its turn comes. Dropping the future
    /// while it waits gives up the turn.
    pub async fn checkout(
        self: &Arc<Self>,
        request: SessionRequest,
        reset: bool,
        sandbox: &Sandbox,
    ) -> Result<Lease, SessionError> {
        #[cfg(feature = "store")]
        if let Some(remote) = &self.remote {
            return remote.checkout(self, request, reset, sandbox).await;
        }
        self.checkout_here(request, reset, sandbox).await
    }

    /// [`Sessions::checkout`] of a session this process keeps.
    async fn checkout_here(
        self: &Arc<Self>,
        request: SessionRequest,
        reset: bool,
        sandbox: &Sandbox,
    ) -> Result<Lease, SessionError> {
        self.expire_idle();
        let (id, (shared, finishing), mut started) = match request {
            SessionRequest::New => {
                let fresh = Arc::new(tokio::sync::Mutex::new(Session::new(sandbox).await?));
                let finishing = Arc::default();
                let id = self.admit_when_room(None, &fresh, &finishing).await?;
                (id, (fresh, finishing), Some(Start::New))
            }
            SessionRequest::Continue(id) => (id, self.find(id)?, None),
        };
        let mut session = shared.lock_owned().await;
        if reset && started.is_none() {
            let emptied = std::mem::replace(&mut *session, Session::new(sandbox).await?);
            drop_off_async_workers(emptied);
            started = Some(Start::Reset);
        }
        Ok(Lease {
            sessions: self.clone(),
            id,
            started,
            session,
            finishing,
            #[cfg(feature = "store")]
            claim: None,
        })
    }

    /// [`Sessions::admit`], waiting while the session it would evict is only finishing its last
    /// call (at most [`FINISHING_WAIT`]); when all are running calls, it is refused at once.
    async fn admit_when_room(
        &self,
        id: Option<SessionId>,
        session: &Shared,
        finishing: &Arc<Finishing>,
    ) -> Result<SessionId, SessionError> {
        let deadline = tokio::time::Instant::now() + FINISHING_WAIT;
        loop {
            // Listening before trying, so that a session that finishes in between is not missed.
            let finished = self.finished.notified();
            tokio::pin!(finished);
            finished.as_mut().enable();
            let patient = tokio::time::Instant::now() < deadline;
            match self.admit(id, session.clone(), finishing.clone(), patient) {
                Ok(id) => return Ok(id),
                Err(NoRoom::Refused(e)) => return Err(e),
                Err(NoRoom::Soon) => {
                    let _ = tokio::time::timeout_at(deadline, finished).await;
                }
            }
        }
    }

    /// Registers a new session under `id` (a session read from the store) or a fresh handle,
    /// making room if needed (`patient`: by waiting for the least recently used session if it is
    /// only finishing its last call).
    fn admit(
        &self,
        id: Option<SessionId>,
        session: Shared,
        finishing: Arc<Finishing>,
        patient: bool,
    ) -> Result<SessionId, NoRoom> {
        let mut registry = self.lock();
        let mut evicted = None;
        if registry.live.len() >= self.limits.max {
            evicted = match registry.evict_one(patient) {
                Eviction::Dropped(entry) => Some(entry),
                Eviction::Soon => return Err(NoRoom::Soon),
                Eviction::AllBusy => {
                    let max = self.limits.max;
                    return Err(NoRoom::Refused(SessionError::Full { max }));
                }
            };
        }
        let id = match id {
            Some(id) => id,
            None => registry.new_handle().map_err(NoRoom::Refused)?,
        };
        registry.live.push(
            id,
            Entry {
                session,
                last_used: Instant::now(),
                finishing,
            },
        );
        tracing::info!(live = registry.live.len(), "session started");
        drop(registry);
        drop_off_async_workers(evicted);
        Ok(id)
    }

    /// The live session `id`, or why there is none. The clone returned makes it busy; its use
    /// counts from the end of the call ([`Sessions::touch`]), so that a long call leaves it the
    /// least recently used, which only its being busy keeps from eviction.
    fn find(&self, id: SessionId) -> Result<(Shared, Arc<Finishing>), SessionError> {
        let registry = self.lock();
        if let Some(entry) = registry.live.peek(&id) {
            return Ok((entry.session.clone(), entry.finishing.clone()));
        }
        Err(match registry.gone.peek(&id) {
            Some(Ended::Expired) => SessionError::Expired {
                id,
                idle: self.limits.idle,
            },
            Some(Ended::Evicted) => SessionError::Evicted {
                id,
                max: self.limits.max,
            },
            None => SessionError::Unknown { id },
        })
    }

    /// Marks the end of a call in `id`: its idle time counts from now, and it is the most recently
    /// used.
    fn touch(&self, id: SessionId) {
        if let Some(entry) = self.lock().live.get_mut(&id) {
            entry.last_used = Instant::now();
        }
    }

    /// Drops the sessions idle for longer than the limit: from the least recently used, up to the
    /// first one used within the limit (all after it were used later still).
    fn expire_idle(&self) {
        let mut registry = self.lock();
        let idle = self.limits.idle;
        let expired: Vec<SessionId> = registry
            .live
            .iter()
            .rev()
            .take_while(|(_, e)| e.last_used.elapsed() > idle)
            .filter(|(_, e)| e.usage() == Usage::Idle)
            .map(|(id, _)| *id)
            .collect();
        let dropped: Vec<Entry> = expired
            .into_iter()
            .filter_map(|id| registry.drop_session(id, Ended::Expired))
            .collect();
        drop(registry);
        drop_off_async_workers(dropped);
    }

    fn lock(&self) -> MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Registry {
    /// A handle no session here has or had.
    fn new_handle(&self) -> Result<SessionId, SessionError> {
        loop {
            let id = SessionId::random().map_err(SessionError::Random)?;
            if !self.live.contains(&id) && !self.gone.contains(&id) {
                return Ok(id);
            }
        }
    }

    /// Drops the least recently used session no call is using, unless (`patient`) the least
    /// recently used of those not running a call is only finishing its last one.
    fn evict_one(&mut self, patient: bool) -> Eviction {
        let victim = self.live.iter().rev().find_map(|(id, e)| match e.usage() {
            Usage::Idle => Some((*id, Usage::Idle)),
            Usage::Finishing if patient => Some((*id, Usage::Finishing)),
            _ => None,
        });
        match victim {
            None => Eviction::AllBusy,
            Some((_, Usage::Finishing)) => Eviction::Soon,
            Some((id, _)) => match self.drop_session(id, Ended::Evicted) {
                Some(entry) => Eviction::Dropped(entry),
                None => Eviction::AllBusy,
            },
        }
    }

    /// Removes `id`, remembering why; the caller drops what is returned, off the async workers.
    fn drop_session(&mut self, id: SessionId, why: Ended) -> Option<Entry> {
        let entry = self.live.pop(&id)?;
        tracing::info!(reason = ?why, "session closed");
        self.gone.put(id, why);
        Some(entry)
    }
}

/// Drops `value` on a blocking thread when called on a tokio runtime: freeing a session's
/// memory (up to the memory limit, twice) is too slow for an async worker. Elsewhere (the reaper's
/// own thread), it is dropped here.
fn drop_off_async_workers<T: Send + 'static>(value: T) {
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => {
            runtime.spawn_blocking(move || drop(value));
        }
        Err(_) => drop(value),
    }
}
