//! The server's sessions, by name and within bounds: at most [`SessionLimits::max`] live at once
//! (the least recently used makes room for a new one), none idle for longer than
//! [`SessionLimits::idle`], all gone when the process ends.
//!
//! Each live session sits behind its own async mutex: calls to one session run one at a time, in
//! the order they came, while calls to different sessions run side by side. A name whose session
//! was dropped is remembered, so that its next call can say why it starts empty.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use schemars::JsonSchema;
use serde::Serialize;

use crate::sandbox::{Sandbox, SandboxError};
use crate::session::Session;

/// A live session, shared by the calls that use it.
pub type SessionHandle = Arc<tokio::sync::Mutex<Session>>;

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
    /// The name had not been used.
    New,
    /// The caller asked for it.
    Reset,
    /// The session was dropped to make room: more sessions were open than allowed, and it was
    /// the least recently used.
    Evicted,
    /// The session was dropped after going unused for the idle timeout.
    Expired,
}

/// A live session as `list` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct SessionInfo {
    /// The session's name.
    pub id: String,
    /// Seconds since its last call ended (0 while a call runs).
    pub idle_seconds: f64,
    /// A call is running or waiting in it; the figures below are then unknown.
    pub busy: bool,
    /// Calls made in it, stopped ones included.
    pub calls: Option<u64>,
    /// Size of its interpreter's memory, in bytes.
    pub memory_bytes: Option<u64>,
    /// Bytes kept to undo a call that gets stopped.
    pub snapshot_bytes: Option<u64>,
}

/// Names of dropped sessions remembered, to say why they start empty.
const GONE_REMEMBERED: usize = 4096;

pub struct Sessions {
    limits: SessionLimits,
    registry: Mutex<Registry>,
}

#[derive(Default)]
struct Registry {
    live: HashMap<String, Entry>,
    gone: HashMap<String, Start>,
    gone_order: VecDeque<String>,
}

struct Entry {
    session: SessionHandle,
    last_used: Instant,
}

impl Entry {
    /// Some call holds the session, or is waiting for it.
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
            // Idle sessions are still expired whenever a session is looked up.
            tracing::warn!("cannot start the session reaper: {e}");
        }
        sessions
    }

    pub fn limits(&self) -> SessionLimits {
        self.limits
    }

    /// The session called `id` (made empty when there is none, or when `reset`), and why it is
    /// empty if it is.
    pub async fn checkout(
        &self,
        id: &str,
        reset: bool,
        sandbox: &Sandbox,
    ) -> Result<(SessionHandle, Option<Start>), SandboxError> {
        self.expire_idle();
        if !reset && let Some(entry) = self.lock().live.get_mut(id) {
            entry.last_used = Instant::now();
            return Ok((entry.session.clone(), None));
        }
        let fresh = Session::new(sandbox).await?;
        let mut registry = self.lock();
        if !reset && let Some(entry) = registry.live.get(id) {
            // Another call made it meanwhile.
            return Ok((entry.session.clone(), None));
        }
        let start = if reset {
            registry.forget(id);
            Start::Reset
        } else {
            registry.forget(id).unwrap_or(Start::New)
        };
        if registry.live.remove(id).is_none() && registry.live.len() >= self.limits.max {
            registry.evict_one();
        }
        let session = Arc::new(tokio::sync::Mutex::new(fresh));
        registry.live.insert(
            id.to_owned(),
            Entry {
                session: session.clone(),
                last_used: Instant::now(),
            },
        );
        Ok((session, Some(start)))
    }

    /// Marks the end of a call in `id`: its idle time counts from now.
    pub fn touch(&self, id: &str) {
        if let Some(entry) = self.lock().live.get_mut(id) {
            entry.last_used = Instant::now();
        }
    }

    /// Drops the sessions idle for longer than the limit.
    pub fn expire_idle(&self) {
        let mut registry = self.lock();
        let idle = self.limits.idle;
        let expired: Vec<String> = registry
            .live
            .iter()
            .filter(|(_, e)| !e.busy() && e.last_used.elapsed() > idle)
            .map(|(id, _)| id.clone())
            .collect();
        for id in expired {
            registry.drop_session(&id, Start::Expired);
        }
    }

    /// The live sessions, most recently used first.
    pub fn list(&self) -> Vec<SessionInfo> {
        let registry = self.lock();
        let mut entries: Vec<(&String, &Entry)> = registry.live.iter().collect();
        entries.sort_by_key(|(_, e)| std::cmp::Reverse(e.last_used));
        entries
            .into_iter()
            .map(|(id, entry)| {
                let session = if entry.busy() {
                    None
                } else {
                    entry.session.try_lock().ok()
                };
                SessionInfo {
                    id: id.clone(),
                    idle_seconds: if session.is_some() {
                        entry.last_used.elapsed().as_secs_f64()
                    } else {
                        0.0
                    },
                    busy: session.is_none(),
                    calls: session.as_ref().map(|s| s.calls()),
                    memory_bytes: session.as_ref().map(|s| s.memory_bytes() as u64),
                    snapshot_bytes: session.as_ref().map(|s| s.snapshot_bytes() as u64),
                }
            })
            .collect()
    }

    fn lock(&self) -> MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Registry {
    /// Drops the least recently used session, preferring one no call is using.
    fn evict_one(&mut self) {
        let victim = self
            .live
            .iter()
            .min_by_key(|(_, e)| (e.busy(), e.last_used))
            .map(|(id, _)| id.clone());
        if let Some(id) = victim {
            self.drop_session(&id, Start::Evicted);
        }
    }

    fn drop_session(&mut self, id: &str, why: Start) {
        if self.live.remove(id).is_none() {
            return;
        }
        tracing::info!(session = id, reason = ?why, "session closed");
        self.gone.insert(id.to_owned(), why);
        self.gone_order.push_back(id.to_owned());
        while self.gone_order.len() > GONE_REMEMBERED {
            if let Some(old) = self.gone_order.pop_front() {
                self.gone.remove(&old);
            }
        }
    }

    /// Forgets that `id` was dropped, returning why it was.
    fn forget(&mut self, id: &str) -> Option<Start> {
        let why = self.gone.remove(id)?;
        self.gone_order.retain(|g| g != id);
        Some(why)
    }
}
