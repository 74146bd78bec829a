//! Instances of a mapped template ([`super::cow`]) that ran a fresh call, reset and kept for the
//! next one. A new instance costs a fault for each template page it reads, a populate or a
//! copy-on-write fault for each page it writes, and tearing down all of that when it is dropped:
//! on the CPython engine, over half of a fresh trivial call's server time. A kept instance has
//! those pages mapped already; its reset copies the template back over the pages its call wrote,
//! which changes no page table.
//!
//! Only a call that returned normally leaves an instance to keep: its wasm stack pointer is back
//! where it started and its memory has not grown, so the template's memory is all that
//! differs, and the host's state (open files, `/out`, output) is made anew. An instance that
//! trapped, timed out or was cancelled is dropped as before.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

use super::Sandbox;
use super::cow::Image;
use super::host::HostState;
use super::instance::Instance;
use super::pagemap::{self, PAGE};

/// Bytes a finished instance may have written and still be kept: the memory an idle kept
/// instance holds of its own (its page tables and wasmtime's bookkeeping aside), what its reset
/// copies, and what a session started on it compares each time it records its state (see
/// `crate::session`). A fresh trivial call writes about 1 MiB on the CPython engine; a call that
/// wrote more than this is dropped, as every instance was before. The same bound as the
/// RustPython pool's ([`crate::engine::POOL_KEEP_RESIDENT`]).
pub(crate) const MAX_KEPT_WRITTEN: usize = 4 << 20;

/// The kept instances, at most `keep` of them.
pub(super) struct Spares {
    keep: AtomicUsize,
    instances: Mutex<Vec<Instance>>,
}

impl Spares {
    /// Keeps at most as many instances as calls can run at once (the cores, by default).
    pub(super) fn new() -> Spares {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        Spares {
            keep: AtomicUsize::new(cores),
            instances: Mutex::new(Vec::new()),
        }
    }

    /// A kept instance, if there is one.
    pub(super) fn take(&self) -> Option<Instance> {
        self.instances().pop()
    }

    /// Resets `instance`, whose call on `image`'s template returned normally, and keeps it if
    /// there is room; drops it otherwise.
    pub(super) fn put(&self, mut instance: Instance, image: &Image, sandbox: &Sandbox) {
        if self.len() >= self.keep.load(Ordering::Relaxed) || !instance.reset(image, sandbox) {
            return;
        }
        let mut instances = self.instances();
        if instances.len() < self.keep.load(Ordering::Relaxed) {
            instances.push(instance);
        }
    }

    pub(super) fn len(&self) -> usize {
        self.instances().len()
    }

    /// Keeps at most `keep` from now on, dropping any beyond it.
    pub(super) fn set_keep(&self, keep: usize) {
        self.keep.store(keep, Ordering::Relaxed);
        self.instances().truncate(keep);
    }

    fn instances(&self) -> std::sync::MutexGuard<'_, Vec<Instance>> {
        self.instances
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl Instance {
    /// Puts this instance back as [`Image::map_over`] left it, a new host state included:
    /// `false` when it cannot be (its memory grew, it wrote more than [`MAX_KEPT_WRITTEN`], or the
    /// kernel cannot say which pages it wrote), and it must be dropped.
    fn reset(&mut self, image: &Image, sandbox: &Sandbox) -> bool {
        let Some((_, memory)) = self.exports() else {
            return false;
        };
        let data = memory.data_mut(&mut self.store);
        if data.len() != image.len() {
            return false;
        }
        let Some(written) = pagemap::written(data) else {
            return false;
        };
        if written.iter().filter(|&&w| w).count() * PAGE > MAX_KEPT_WRITTEN
            || !image.restore(data, &written)
        {
            return false;
        }
        // Nothing of the call's host side stays: its file descriptors, `/out`, output, budget.
        *self.store.data_mut() = HostState::new(sandbox.guest.preopens());
        true
    }
}

impl Sandbox {
    /// Keeps at most `n` instances reset for the next fresh calls (by default, as many as the
    /// machine has cores): a server passes the number of calls it runs at once. Each holds at
    /// most [`MAX_KEPT_WRITTEN`] of its own memory while idle. Only an engine whose template is
    /// mapped (the CPython engine, on Linux) keeps any.
    pub fn keep_spare_instances(&self, n: usize) {
        self.spares.set_keep(n);
    }

    /// How many instances are kept reset for the next fresh calls (see
    /// [`Self::keep_spare_instances`]).
    pub fn spare_instances(&self) -> usize {
        self.spares.len()
    }
}
