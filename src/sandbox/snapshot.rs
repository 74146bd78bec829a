//! A memory at rest as the pages that differ from a fresh instance's: what a session keeps to
//! undo a call, and the CPython engine's template that fresh calls start from.

use super::pagemap::PAGE;

static ZERO_PAGE: [u8; PAGE] = [0; PAGE];

/// Pages a snapshot keeps in one allocation, at most. Growing by blocks, rather than doubling one
/// buffer, keeps a snapshot's memory close to what it holds; and no block is larger than the
/// memory left from where it starts, so the saved pages never take more than the memory's size.
const BLOCK_PAGES: usize = 256;

/// A memory at rest, as the pages that differ from a fresh instance's memory (beyond the end of
/// that, from zero). Most of the interpreter's 29 MiB image never changes, so this stays small.
#[derive(Debug, Default)]
pub(crate) struct Snapshot {
    /// Size of the memory, in bytes; 0 stands for a fresh instance.
    pub(crate) len: usize,
    /// Offsets of the saved pages, in the order of `blocks`.
    pub(crate) offsets: Vec<usize>,
    /// The saved pages, [`PAGE`] bytes each, [`BLOCK_PAGES`] to a block.
    blocks: Vec<Vec<u8>>,
}

impl Snapshot {
    /// Records `live` against `pristine`. Pages `written` says were not written are skipped:
    /// they still hold what a fresh instance holds.
    pub(crate) fn capture(&mut self, live: &[u8], pristine: &[u8], written: Option<&[bool]>) {
        // Wasm memory grows in 64 KiB pages, so it always divides into whole host pages.
        debug_assert_eq!(live.len() % PAGE, 0);
        self.len = live.len();
        self.offsets.clear();
        // Blocks are reused from one capture to the next; those left over are freed below.
        let mut blocks = std::mem::take(&mut self.blocks).into_iter();
        for (i, page) in live.chunks(PAGE).enumerate() {
            if written.is_some_and(|w| !w[i]) {
                continue;
            }
            let offset = i * PAGE;
            let base = pristine
                .get(offset..offset + page.len())
                .unwrap_or(&ZERO_PAGE[..page.len()]);
            if page == base {
                continue;
            }
            self.push(offset, page, &mut blocks);
        }
        self.offsets.shrink_to(self.offsets.len() * 2);
    }

    #[cfg_attr(not(feature = "store"), allow(dead_code))]
    /// A snapshot of a memory of `len` bytes from its saved pages (a session read back from a
    /// store), in increasing order of offset, each [`PAGE`] bytes and inside the memory: `None`
    /// otherwise.
    pub(crate) fn from_pages<'a>(
        len: usize,
        pages: impl IntoIterator<Item = (usize, &'a [u8])>,
    ) -> Option<Snapshot> {
        if !len.is_multiple_of(PAGE) {
            return None;
        }
        let mut snapshot = Snapshot {
            len,
            ..Snapshot::default()
        };
        for (offset, page) in pages {
            let after_last = snapshot.offsets.last().is_none_or(|&last| offset > last);
            if !after_last || !offset.is_multiple_of(PAGE) || offset >= len || page.len() != PAGE {
                return None;
            }
            snapshot.push(offset, page, &mut std::iter::empty());
        }
        Some(snapshot)
    }

    /// Appends the page at `offset`, in a new block (one of `spare` if any) when the last is full.
    fn push(&mut self, offset: usize, page: &[u8], spare: &mut impl Iterator<Item = Vec<u8>>) {
        if self.blocks.last().is_none_or(|b| b.len() == b.capacity()) {
            let size = BLOCK_PAGES.min((self.len - offset) / PAGE) * PAGE;
            let mut block = spare.next().unwrap_or_default();
            block.clear();
            block.shrink_to(size);
            block.reserve_exact(size);
            self.blocks.push(block);
        }
        self.offsets.push(offset);
        self.blocks
            .last_mut()
            .expect("a block was pushed")
            .extend_from_slice(page);
    }

    pub(crate) fn pages(&self) -> impl Iterator<Item = (usize, &[u8])> {
        self.offsets
            .iter()
            .copied()
            .zip(self.blocks.iter().flat_map(|b| b.chunks(PAGE)))
    }

    /// Bytes held, saved pages and bookkeeping.
    pub(crate) fn held_bytes(&self) -> usize {
        self.blocks.iter().map(Vec::capacity).sum::<usize>()
            + self.offsets.capacity() * size_of::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_keeps_the_pages_that_differ_and_growth_that_is_not_zero() {
        let pristine = vec![7u8; 4 * PAGE];
        let mut live = pristine.clone();
        live[PAGE + 10] = 1;
        live.extend_from_slice(&[0u8; 2 * PAGE]);
        live[5 * PAGE] = 9;
        let mut snapshot = Snapshot::default();
        snapshot.capture(&live, &pristine, None);
        assert_eq!(snapshot.len, 6 * PAGE);
        assert_eq!(snapshot.offsets, [PAGE, 5 * PAGE]);

        // Writing the pages over the pristine memory, grown with zeros, gives the live memory.
        let mut rebuilt = pristine.clone();
        rebuilt.resize(snapshot.len, 0);
        for (offset, bytes) in snapshot.pages() {
            rebuilt[offset..offset + bytes.len()].copy_from_slice(bytes);
        }
        assert_eq!(rebuilt, live);

        // Pages said not to be written are not even read.
        let written = [false, false, false, false, false, true];
        snapshot.capture(&live, &pristine, Some(&written));
        assert_eq!(snapshot.offsets, [5 * PAGE]);

        snapshot.capture(&pristine, &pristine, None);
        assert!(snapshot.offsets.is_empty() && snapshot.blocks.is_empty());

        // More pages than a block holds go to further blocks, and come back in order.
        let many = vec![1u8; (BLOCK_PAGES + 3) * PAGE];
        snapshot.capture(&many, &pristine, None);
        assert_eq!(snapshot.blocks.len(), 2);
        let offsets: Vec<usize> = snapshot.pages().map(|(o, _)| o).collect();
        assert_eq!(
            offsets,
            (0..BLOCK_PAGES + 3).map(|i| i * PAGE).collect::<Vec<_>>()
        );
        assert!(snapshot.pages().all(|(_, bytes)| bytes == &many[..PAGE]));
    }

    #[test]
    fn a_snapshot_never_holds_more_than_the_memory_it_saves() {
        let pristine = vec![0u8; PAGE];
        // Sizes around a block's, and one that leaves a short last block.
        for pages in [
            1,
            BLOCK_PAGES - 1,
            BLOCK_PAGES,
            BLOCK_PAGES + 1,
            2 * BLOCK_PAGES + 44,
        ] {
            let mut snapshot = Snapshot::default();
            // Every page differs, from a larger memory first, then shrinking: reused blocks too.
            for len in [pages + 300, pages] {
                let live = vec![1u8; len * PAGE];
                snapshot.capture(&live, &pristine, None);
                let pages_held: usize = snapshot.blocks.iter().map(Vec::capacity).sum();
                assert!(pages_held <= live.len(), "{pages_held} > {}", live.len());
                assert!(
                    snapshot.held_bytes() <= live.len() + live.len() / PAGE * 16,
                    "{} for {} bytes",
                    snapshot.held_bytes(),
                    live.len()
                );
                assert_eq!(snapshot.pages().count(), len);
            }
        }
    }
}
