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
//! trapped, timed out or was cancelled is dropped as before, and so is one whose memory grew or
//! that wrote more than [`MAX_KEPT_WRITTEN`].

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

use super::Sandbox;
use super::cow::Image;
use super::host::HostState;
use super::instance::Instance;
use super::pagemap::{self, PAGE};

/// Bytes a finished instance may have written and still be kept: the memory an idle kept
/// instance holds of its own (its page tables and wasmtime's bookkeeping aside), and what its
/// reset copies. A fresh trivial call writes about 1 MiB on the CPython engine, one that imports
/// asyncio over 4 MiB; a call that wrote more than this is dropped, as every instance was before.
/// The same bound as the pages a server populates ahead of fresh calls (`super::prefault`).
pub const MAX_KEPT_WRITTEN: usize = 8 << 20;

/// The kept instances, at most `keep` of them.
pub(super) struct Spares {
    keep: AtomicUsize,
    instances: Mutex<Vec<Instance>>,
    /// Instances being taken back on a blocking thread ([`Sandbox::take_back`]).
    pending: AtomicUsize,
    /// Told each time one of those is done.
    taken_back: tokio::sync::Notify,
}

/// Counts one instance being taken back until dropped, however that ends.
struct Pending<'a>(&'a Spares);

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        self.0.pending.fetch_sub(1, Ordering::SeqCst);
        self.0.taken_back.notify_waiters();
    }
}

impl Spares {
    /// Keeps at most as many instances as calls can run at once (the cores, by default).
    pub(super) fn new() -> Spares {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        Spares {
            keep: AtomicUsize::new(cores),
            instances: Mutex::new(Vec::new()),
            pending: AtomicUsize::new(0),
            taken_back: tokio::sync::Notify::new(),
        }
    }

    /// A kept instance, if there is one or one is being reset: waiting for a reset (a fraction of
    /// a millisecond) costs less than making a new instance, which a server under load would
    /// otherwise do for most calls.
    pub(super) async fn take(&self) -> Option<Instance> {
        loop {
            // Made before looking, it hears of any reset that ends after the look.
            let taken_back = self.taken_back.notified();
            if let Some(kept) = self.instances().pop() {
                return Some(kept);
            }
            if self.pending.load(Ordering::SeqCst) == 0 {
                return None;
            }
            taken_back.await;
        }
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
    /// Takes back the instance a fresh call ran on, after the call: kept if the engine keeps
    /// instances and the call returned normally ([`Self::recycle`]), dropped otherwise. Where
    /// instances map the template, its reset or teardown (copying pages back, or unmapping tens
    /// of megabytes) is work the reply need not wait for: in a tokio runtime it runs on a blocking
    /// thread, after the call has returned. A pooled RustPython instance is dropped at once: its
    /// slot's reset costs less than handing it to another thread (0.06 ms of CPU per call, by
    /// `wrk` against `--http`).
    pub(super) fn take_back(&self, instance: Instance, broken: bool) {
        let runtime = tokio::runtime::Handle::try_current();
        let Some(runtime) = runtime.ok().filter(|_| self.template_image().is_some()) else {
            return self.give_back(instance, broken);
        };
        self.spares.pending.fetch_add(1, Ordering::SeqCst);
        let sandbox = self.clone();
        runtime.spawn_blocking(move || {
            let _pending = Pending(&sandbox.spares);
            sandbox.give_back(instance, broken);
        });
    }

    /// [`Self::take_back`]'s work, done at once.
    pub(super) fn give_back(&self, instance: Instance, broken: bool) {
        if !broken {
            self.recycle(instance);
        }
    }

    /// Keeps at most `n` instances reset for the next fresh calls (by default, as many as the
    /// machine has cores): a server passes the number of calls it runs at once. Each holds at
    /// most [`MAX_KEPT_WRITTEN`] of its own memory while idle. Only an engine whose template is
    /// mapped (the CPython engine, on Linux) keeps any.
    pub fn keep_spare_instances(&self, n: usize) {
        self.spares.set_keep(n);
    }

    /// How many instances are kept reset for the next fresh calls (see
    /// [`Self::keep_spare_instances`]), once the instances being taken back are (it waits for
    /// them: each takes well under a millisecond).
    pub fn spare_instances(&self) -> usize {
        while self.spares.pending.load(Ordering::SeqCst) > 0 {
            std::thread::sleep(std::time::Duration::from_micros(50));
        }
        self.spares.len()
    }
}
