//! The server's sessions: private to whoever started them, and within bounds.
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

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use schemars::JsonSchema;
use serde::Serialize;
use tokio::sync::OwnedMutexGuard;

use crate::sandbox::{RunOptions, Sandbox, SandboxError};
use crate::session::{Session, SessionRun};

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

    fn random() -> Result<SessionId, getrandom::Error> {
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
    let mut cut: String = value.chars().take(MAX_CHARS).collect();
    if cut.len() < value.len() {
        cut.push('…');
    }
    format!("{cut:?}")
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

/// How many sessions may live, and for how long without a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionLimits {
    /// Sessions alive at once. Default: 16.
    pub max: usize,
    /// A session with no call for this long is dropped. Default: 30 minutes.
    pub idle: Duration,
}

impl SessionLimits {
    pub const DEFAULT_MAX: usize = 16;
    pub const DEFAULT_IDLE: Duration = Duration::from_secs(30 * 60);
}

impl Default for SessionLimits {
    fn default() -> Self {
        SessionLimits {
            max: Self::DEFAULT_MAX,
            idle: Self::DEFAULT_IDLE,
        }
    }
}

/// Why a call found its session empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Start {
    /// The call started the session.
    New,
    /// The caller asked for it to be emptied.
    Reset,
}

/// Why a session was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    Evicted,
    Expired,
}

/// Handles of dropped sessions remembered, to say why they are gone.
const GONE_REMEMBERED: usize = 4096;

/// A live session, shared by the calls that use it.
type Shared = Arc<tokio::sync::Mutex<Session>>;

pub struct Sessions {
    limits: SessionLimits,
    registry: Mutex<Registry>,
}

#[derive(Default)]
struct Registry {
    live: HashMap<SessionId, Entry>,
    gone: HashMap<SessionId, Ended>,
    gone_order: VecDeque<SessionId>,
}

struct Entry {
    session: Shared,
    last_used: Instant,
}

impl Entry {
    /// Some call holds the session, waits for it, or is still undoing or recording its own work.
    fn busy(&self) -> bool {
        Arc::strong_count(&self.session) > 1
    }
}

impl Sessions {
    /// An empty set of sessions, with a thread that drops idle ones (it stops when the set does).
    pub fn new(limits: SessionLimits) -> Arc<Sessions> {
        let sessions = Arc::new(Sessions {
            limits,
            registry: Mutex::default(),
        });
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

    pub fn limits(&self) -> SessionLimits {
        self.limits
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
        self.expire_idle();
        let (id, shared, mut started) = match request {
            SessionRequest::New => {
                let fresh = Arc::new(tokio::sync::Mutex::new(Session::new(sandbox).await?));
                let id = self.admit(fresh.clone())?;
                (id, fresh, Some(Start::New))
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
        })
    }

    /// Registers a new session under a fresh handle, making room if needed.
    fn admit(&self, session: Shared) -> Result<SessionId, SessionError> {
        let mut registry = self.lock();
        let mut evicted = None;
        if registry.live.len() >= self.limits.max {
            evicted = Some(registry.evict_one().ok_or(SessionError::Full {
                max: self.limits.max,
            })?);
        }
        let id = loop {
            let id = SessionId::random().map_err(SessionError::Random)?;
            if !registry.live.contains_key(&id) && !registry.gone.contains_key(&id) {
                break id;
            }
        };
        registry.live.insert(
            id,
            Entry {
                session,
                last_used: Instant::now(),
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
    fn find(&self, id: SessionId) -> Result<Shared, SessionError> {
        let registry = self.lock();
        if let Some(entry) = registry.live.get(&id) {
            return Ok(entry.session.clone());
        }
        Err(match registry.gone.get(&id) {
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

    /// Marks the end of a call in `id`: its idle time counts from now.
    fn touch(&self, id: SessionId) {
        if let Some(entry) = self.lock().live.get_mut(&id) {
            entry.last_used = Instant::now();
        }
    }

    /// Drops the sessions idle for longer than the limit.
    pub fn expire_idle(&self) {
        let mut registry = self.lock();
        let idle = self.limits.idle;
        let expired: Vec<SessionId> = registry
            .live
            .iter()
            .filter(|(_, e)| !e.busy() && e.last_used.elapsed() > idle)
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
    /// Drops the least recently used session no call is using; `None` when all are busy.
    fn evict_one(&mut self) -> Option<Entry> {
        let victim = self
            .live
            .iter()
            .filter(|(_, e)| !e.busy())
            .min_by_key(|(_, e)| e.last_used)
            .map(|(id, _)| *id)?;
        self.drop_session(victim, Ended::Evicted)
    }

    /// Removes `id`, remembering why; the caller drops what is returned, off the async workers.
    fn drop_session(&mut self, id: SessionId, why: Ended) -> Option<Entry> {
        let entry = self.live.remove(&id)?;
        tracing::info!(reason = ?why, "session closed");
        self.gone.insert(id, why);
        self.gone_order.push_back(id);
        while self.gone_order.len() > GONE_REMEMBERED {
            if let Some(old) = self.gone_order.pop_front() {
                self.gone.remove(&old);
            }
        }
        Some(entry)
    }
}

/// Drops `value` on a blocking thread when called on a tokio runtime: freeing a session's
/// memory (up to the memory limit, twice) is too slow for an async worker. Elsewhere (the reaper's
/// own thread), it is dropped here.
pub(crate) fn drop_off_async_workers<T: Send + 'static>(value: T) {
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => {
            runtime.spawn_blocking(move || drop(value));
        }
        Err(_) => drop(value),
    }
}

/// A session locked for one call.
pub struct Lease {
    sessions: Arc<Sessions>,
    id: SessionId,
    started: Option<Start>,
    session: OwnedMutexGuard<Session>,
}

/// How a call in a session went (see [`Lease::run`]).
#[derive(Debug)]
pub struct LeaseRun {
    pub id: SessionId,
    /// Set when this call found the session empty, and why.
    pub started: Option<Start>,
    pub run: SessionRun,
}

impl Lease {
    /// The session's handle.
    pub fn id(&self) -> SessionId {
        self.id
    }

    /// Runs `code` in the session, unless `cancelled` resolves first: then the half-run call is
    /// undone in the background (the session's next call waits for that) and the result is
    /// `None`. After a run, the session's idle time counts from now, and its new state is recorded
    /// on a blocking thread while the reply goes out.
    pub async fn run(
        mut self,
        code: &str,
        options: &RunOptions,
        cancelled: impl Future<Output = ()>,
    ) -> Result<Option<LeaseRun>, SandboxError> {
        let ran = tokio::select! {
            ran = self.session.run(code, options) => ran,
            () = cancelled => {
                let mut session = self.session;
                tokio::spawn(async move {
                    if let Err(e) = session.recover().await {
                        // The session stays marked unfinished: its next call tries again.
                        tracing::warn!("cannot undo a cancelled session call yet: {e:#}");
                    }
                });
                return Ok(None);
            }
        };
        self.sessions.touch(self.id);
        let mut session = self.session;
        tokio::task::spawn_blocking(move || session.save());
        Ok(Some(LeaseRun {
            id: self.id,
            started: self.started,
            run: ran?,
        }))
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
