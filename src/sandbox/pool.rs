//! An engine's instance pool ([`crate::engine::pooled`]; the RustPython engine has one): which
//! engine a new instance is made on, and where a used one is dropped.
//!
//! The pool itself is wasmtime's: a slot is reset when the store holding its instance is dropped,
//! and the next instance in it starts from the guest's snapshot again, nothing of the last one
//! left. This module only counts the slots taken and makes instances past them on an engine
//! without a pool.
//!
//! A used instance is dropped (and its slot reset) where it ran, before the reply. Dropping it on
//! a thread of its own instead, off the reply's path, measured worse on the 2-core machine
//! (`benches/speed/`, alternating runs, load average 4.5): 1,112-1,267 fresh calls/s with 8 in
//! flight against 1,291-1,329, and p50 no better: the extra thread competes with the workers and
//! resets the slot from a cold cache. Instances prepared ahead on a background thread would
//! move work the same way, and were not tried for that reason.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use wasmtime::{Engine, InstancePre};

use super::SandboxError;
use super::host::HostState;

/// Links the guest on an engine without a pool, for the instances past the pool's slots.
pub(super) type Overflow =
    Box<dyn Fn() -> Result<InstancePre<HostState>, SandboxError> + Send + Sync>;

/// The bookkeeping of an engine's instance pool: how many instances hold a slot, and the engine
/// without a pool that makes instances once all its slots do, so that a full pool refuses
/// nothing. That engine is loaded (from the same cached module) the first time it is needed,
/// which a server within its own bounds never does.
pub(super) struct Pool {
    slots: u32,
    live: AtomicU32,
    overflow: Mutex<Option<InstancePre<HostState>>>,
    load_overflow: Overflow,
}

/// A slot of the pool, held by an instance.
struct Slot(Arc<Pool>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.live.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What a new instance is made with, and the slot it takes if it is pooled. An
/// [`Instance`](super::instance::Instance) holds it after its store, so the slot is counted free
/// only once the store is dropped.
pub(crate) struct Allocation {
    pub(super) pre: InstancePre<HostState>,
    _slot: Option<Slot>,
}

impl Pool {
    /// A pool of `slots`, whose instances past them are made with what `load_overflow` links.
    pub(super) fn new(slots: u32, load_overflow: Overflow) -> Pool {
        Pool {
            slots,
            live: AtomicU32::new(0),
            overflow: Mutex::new(None),
            load_overflow,
        }
    }

    /// A slot, or `None` when all are taken.
    fn slot(self: &Arc<Pool>) -> Option<Slot> {
        let taken = self.live.fetch_add(1, Ordering::Relaxed);
        let slot = Slot(self.clone());
        (taken < self.slots).then_some(slot)
    }

    /// The engine without a pool, loaded on first use.
    fn overflow(&self) -> Result<InstancePre<HostState>, SandboxError> {
        let mut overflow = self.overflow.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(pre) = &*overflow {
            return Ok(pre.clone());
        }
        tracing::warn!(
            "all {} pooled instances are in use: more are allocated on demand",
            self.slots
        );
        Ok(overflow.insert((self.load_overflow)()?).clone())
    }
}

/// A slot of `pool` when there is one and it has room, with `pre`; else `pre` alone, or the
/// pool's overflow engine.
pub(super) fn allocate(
    pool: Option<&Arc<Pool>>,
    pre: &InstancePre<HostState>,
) -> Result<Allocation, SandboxError> {
    let (pre, slot) = match pool {
        None => (pre.clone(), None),
        Some(pool) => match pool.slot() {
            Some(slot) => (pre.clone(), Some(slot)),
            None => (pool.overflow()?, None),
        },
    };
    Ok(Allocation { pre, _slot: slot })
}

impl Allocation {
    pub(super) fn engine(&self) -> &Engine {
        self.pre.module().engine()
    }
}
