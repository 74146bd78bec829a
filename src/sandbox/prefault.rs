//! The pages a fresh call writes, learned once and made private in each fresh instance before its
//! guest runs.
//!
//! A fresh instance's memory is mapped copy-on-write (from the compiled module's image, or from
//! the engine's template, [`super::cow`]). The guest reads most pages before it writes them, so
//! each page it writes is first mapped read-only and then copied on a second fault, and replacing
//! a present page makes the kernel flush the other cores' TLBs: an interrupt to every core that
//! runs one of the server's threads at that moment. With calls on both cores of a 2-core VM, `perf`
//! put those flushes at over 40 % of the server's CPU time, 26 of them per fresh `x = 1` call.
//! Writing a page that is not mapped yet needs no flush, so the pages a trivial call writes are
//! populated for writing in one `madvise(MADV_POPULATE_WRITE)` pass over the fresh memory, before
//! the guest touches it. The bytes do not change: each page becomes a private copy of what was
//! mapped.
//!
//! A call writes far more than these pages only when it does far more work, which then dwarfs
//! the faults. What is learned is capped ([`MAX_BYTES`]), so a server that learned from a large
//! call does not copy megabytes into every instance.

use super::pagemap::{self, PAGE};
use super::{FRESH_FILENAME, RunOptions, Sandbox, SandboxError};

/// Most bytes populated in each fresh instance; a larger learned set is not used.
const MAX_BYTES: usize = 8 << 20;

/// Byte ranges of a linear memory, each a run of whole pages.
#[derive(Debug)]
pub(super) struct HotPages(Vec<(usize, usize)>);

impl HotPages {
    /// The pages of `memory` written since it was mapped, as runs; `None` when the kernel cannot
    /// tell, or when they are more than [`MAX_BYTES`].
    fn learn(memory: &[u8]) -> Option<HotPages> {
        let written = pagemap::written(memory)?;
        let mut runs: Vec<(usize, usize)> = Vec::new();
        for (page, _) in written.iter().enumerate().filter(|(_, w)| **w) {
            match runs.last_mut() {
                Some((start, len)) if *start + *len == page * PAGE => *len += PAGE,
                _ => runs.push((page * PAGE, PAGE)),
            }
        }
        Self::capped(runs)
    }

    /// `runs`, unless they are more than [`MAX_BYTES`].
    fn capped(runs: Vec<(usize, usize)>) -> Option<HotPages> {
        let bytes: usize = runs.iter().map(|(_, len)| len).sum();
        tracing::debug!(
            "a fresh call writes {} pages in {} runs",
            bytes / PAGE,
            runs.len()
        );
        (bytes <= MAX_BYTES).then_some(HotPages(runs))
    }

    /// Makes these pages of `memory` private and writable now. Skipped where the kernel cannot
    /// (before Linux 5.14, or on another system): the guest then faults them in as before.
    fn populate(&self, memory: &mut [u8]) {
        imp::populate(&self.0, memory);
    }
}

impl Sandbox {
    /// Runs one trivial call under `options` (the request the guest parses holds their allowed
    /// modules), so that each fresh instance after it starts with the pages such a call writes
    /// already private (see the module doc). A server calls it once at start; a one-shot run has
    /// nothing to gain from it.
    pub async fn warm_up(&self, options: &RunOptions) -> Result<(), SandboxError> {
        if self.hot_pages.get().is_some() {
            return Ok(());
        }
        let started = std::time::Instant::now();
        let mut instance = self.fresh().await?;
        let call = instance
            .call(self, "x = 1", FRESH_FILENAME, options)
            .await?;
        if let Some(hot) = instance.memory().and_then(HotPages::learn) {
            let _ = self.hot_pages.set(hot);
        }
        // Kept at once, where the engine keeps instances, it serves the first call.
        self.give_back(instance, call.broken);
        tracing::debug!("warmed up in {:?}", started.elapsed());
        Ok(())
    }

    /// Populates the learned pages of a fresh instance's `memory`, if any were learned.
    pub(super) fn prefault(&self, memory: &mut [u8]) {
        if let Some(hot) = self.hot_pages.get() {
            hot.populate(memory);
        }
    }
}

#[cfg(target_os = "linux")]
mod imp {
    use rustix::mm::{Advice, madvise};

    pub fn populate(runs: &[(usize, usize)], memory: &mut [u8]) {
        for &(start, len) in runs {
            let Some(run) = memory.get_mut(start..start + len) else {
                return;
            };
            // SAFETY: `run` is borrowed mutably, so nothing else reads or writes it, and
            // populating it for writing changes no byte of it: each page becomes a private copy
            // of the page mapped there.
            if unsafe { madvise(run.as_mut_ptr().cast(), len, Advice::LinuxPopulateWrite) }.is_err()
            {
                return;
            }
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    pub fn populate(_runs: &[(usize, usize)], _memory: &mut [u8]) {}
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use crate::sandbox::cow::Image;
    use crate::sandbox::cow::tests::{Mapping, PAGES};

    fn written_pages(memory: &[u8]) -> Vec<usize> {
        let written = pagemap::written(memory).expect("the kernel tells written pages");
        (0..PAGES).filter(|&page| written[page]).collect()
    }

    #[test]
    fn learns_the_pages_a_call_wrote_and_populates_them_unchanged() {
        let bytes: Vec<u8> = (0..PAGES * PAGE).map(|i| (i / PAGE + 1) as u8).collect();
        let image = Image::new(&bytes).expect("a memfd image");
        let first = Mapping::new(PAGES);
        assert!(image.map_over(first.0));
        // Every page read, as a guest does; three written, two of them next to each other.
        let sum = |memory: &[u8]| memory.iter().map(|&b| u64::from(b)).sum::<u64>();
        assert_eq!(sum(first.0), sum(&bytes));
        for page in [1, 2, 5] {
            first.0[page * PAGE + 7] ^= 0xff;
        }
        let hot = HotPages::learn(first.0).expect("a few pages are learned");
        assert_eq!(hot.0, [(PAGE, 2 * PAGE), (5 * PAGE, PAGE)]);

        let next = Mapping::new(PAGES);
        assert!(image.map_over(next.0));
        assert_eq!(written_pages(next.0), [0usize; 0]);
        hot.populate(next.0);
        assert_eq!(written_pages(next.0), [1, 2, 5], "populated for writing");
        assert_eq!(next.0, &bytes[..], "populating changes no byte");
    }

    #[test]
    fn learns_nothing_past_its_cap() {
        // A memory that large would take long to write in a test: the cap is checked on runs.
        assert!(HotPages::capped(vec![(0, MAX_BYTES / 2), (MAX_BYTES, MAX_BYTES / 2)]).is_some());
        assert!(HotPages::capped(vec![(0, MAX_BYTES), (MAX_BYTES * 2, PAGE)]).is_none());
        assert!(HotPages::capped(vec![(0, PAGE)]).is_some());
    }
}
