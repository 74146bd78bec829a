//! Which pages of a linear memory may have been written, from Linux's `/proc/self/pagemap`: its
//! `PAGEMAP_SCAN` query where the kernel has it (6.7 and later), else its entries.
//!
//! wasmtime maps an instance's initial memory copy-on-write from the compiled module's image. A
//! page the instance never wrote is still that image (or zero, past it), so a session snapshot
//! ([`super`]) need not read it: the cost of a snapshot then follows what a session
//! changed, not how large its memory is. Where the kernel cannot tell, every page counts as
//! written, which is slower and just as correct.

/// The page size this works in; other host page sizes fall back to "every page".
pub const PAGE: usize = 4096;

/// For each [`PAGE`] of `memory`, whether it may have been written since it was mapped: `false`
/// only when the kernel says the page is still the mapped file's (or was never touched). `None`
/// when the kernel cannot tell.
pub fn written(memory: &[u8]) -> Option<Vec<bool>> {
    imp::written(memory)
}

#[cfg(target_os = "linux")]
mod imp {
    use std::fs::File;
    use std::os::unix::fs::FileExt;
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::PAGE;

    // The bits of a pagemap entry (Documentation/admin-guide/mm/pagemap.rst).
    const PRESENT: u64 = 1 << 63;
    const SWAPPED: u64 = 1 << 62;
    const FILE_OR_SHARED: u64 = 1 << 61;

    pub fn written(memory: &[u8]) -> Option<Vec<bool>> {
        let pagemap = pagemap()?;
        let start = memory.as_ptr() as usize;
        if !start.is_multiple_of(PAGE) || !memory.len().is_multiple_of(PAGE) {
            return None;
        }
        static NO_SCAN: AtomicBool = AtomicBool::new(false);
        if !NO_SCAN.load(Ordering::Relaxed) {
            match scan::written(pagemap, start, memory.len()) {
                Some(written) => return Some(written),
                None => NO_SCAN.store(true, Ordering::Relaxed),
            }
        }
        read(pagemap, start, memory.len())
    }

    /// The pagemap entries of the `len` bytes at `start`, read one by one.
    pub(crate) fn read(pagemap: &File, start: usize, len: usize) -> Option<Vec<bool>> {
        let mut entries = vec![0u8; len / PAGE * 8];
        pagemap
            .read_exact_at(&mut entries, (start / PAGE * 8) as u64)
            .ok()?;
        Some(
            entries
                .chunks_exact(8)
                .map(|e| {
                    let e = u64::from_ne_bytes(e.try_into().expect("chunks of 8"));
                    // A private page that is present and not the file's was copied on write (or
                    // is the zero page, read but never written: comparing it is merely wasted).
                    e & SWAPPED != 0 || (e & PRESENT != 0 && e & FILE_OR_SHARED == 0)
                })
                .collect(),
        )
    }

    pub(crate) fn pagemap() -> Option<&'static File> {
        static PAGEMAP: OnceLock<Option<File>> = OnceLock::new();
        PAGEMAP
            .get_or_init(|| {
                (rustix::param::page_size() == PAGE)
                    .then(|| File::open("/proc/self/pagemap").ok())
                    .flatten()
            })
            .as_ref()
    }

    /// The same question put to the kernel's `PAGEMAP_SCAN` (Linux 6.7 and later), which walks
    /// the page tables and answers with ranges: a session's 40 MiB memory cost 62-75 µs to read
    /// as pagemap entries (80 KB of them) on every snapshot.
    pub(crate) mod scan {
        use std::fs::File;

        use rustix::ioctl::{Ioctl, IoctlOutput, Opcode, opcode};

        use super::PAGE;

        // Page categories (include/uapi/linux/fs.h).
        const PAGE_IS_FILE: u64 = 1 << 2;
        const PAGE_IS_PRESENT: u64 = 1 << 3;
        const PAGE_IS_SWAPPED: u64 = 1 << 4;

        /// `struct page_region`.
        #[repr(C)]
        #[derive(Clone, Copy, Default)]
        struct Region {
            start: u64,
            end: u64,
            categories: u64,
        }

        /// `struct pm_scan_arg`.
        #[repr(C)]
        struct Arg {
            size: u64,
            flags: u64,
            start: u64,
            end: u64,
            walk_end: u64,
            vec: u64,
            vec_len: u64,
            max_pages: u64,
            category_inverted: u64,
            category_mask: u64,
            category_anyof_mask: u64,
            return_mask: u64,
        }

        /// The ioctl, answering with the number of regions it filled in.
        struct Scan<'a>(&'a mut Arg);

        // SAFETY: the opcode is `PAGEMAP_SCAN`'s, whose argument is a `pm_scan_arg`; the kernel
        // writes `walk_end` in it and at most `vec_len` regions at `vec`, which the caller
        // points at a buffer of that many that outlives the call.
        unsafe impl Ioctl for Scan<'_> {
            type Output = usize;
            const IS_MUTATING: bool = true;

            fn opcode(&self) -> Opcode {
                opcode::read_write::<Arg>(b'f', 16)
            }

            fn as_ptr(&mut self) -> *mut std::ffi::c_void {
                std::ptr::from_mut(self.0).cast()
            }

            unsafe fn output_from_ptr(
                out: IoctlOutput,
                _: *mut std::ffi::c_void,
            ) -> rustix::io::Result<usize> {
                Ok(out as usize)
            }
        }

        /// Which pages of the `len` bytes at `start` are private and present, or swapped: the
        /// pages the process wrote. `None` if the kernel has no `PAGEMAP_SCAN`.
        pub(crate) fn written(pagemap: &File, start: usize, len: usize) -> Option<Vec<bool>> {
            let mut written = vec![false; len / PAGE];
            let mut regions = [Region::default(); 64];
            let end = (start + len) as u64;
            let mut from = start as u64;
            while from < end {
                let mut arg = Arg {
                    size: size_of::<Arg>() as u64,
                    flags: 0,
                    start: from,
                    end,
                    walk_end: 0,
                    vec: regions.as_mut_ptr() as u64,
                    vec_len: regions.len() as u64,
                    max_pages: 0,
                    // Not the file's, and present or swapped out.
                    category_inverted: PAGE_IS_FILE,
                    category_mask: PAGE_IS_FILE,
                    category_anyof_mask: PAGE_IS_PRESENT | PAGE_IS_SWAPPED,
                    return_mask: PAGE_IS_PRESENT | PAGE_IS_SWAPPED,
                };
                // SAFETY: see `Scan`; `regions` outlives the call.
                let filled = unsafe { rustix::ioctl::ioctl(pagemap, Scan(&mut arg)) }.ok()?;
                for region in regions.get(..filled)? {
                    let first = usize::try_from(region.start).ok()?.checked_sub(start)? / PAGE;
                    let last = usize::try_from(region.end).ok()?.checked_sub(start)? / PAGE;
                    written.get_mut(first..last)?.fill(true);
                }
                if arg.walk_end <= from {
                    return None;
                }
                from = arg.walk_end;
            }
            Some(written)
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    pub fn written(_memory: &[u8]) -> Option<Vec<bool>> {
        None
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::PAGE;

    /// Both ways of asking agree, on a mapping with pages written, read, and never touched.
    #[test]
    fn the_scan_and_the_entries_agree() {
        let mut map = memmap2::MmapMut::map_anon(64 * PAGE).expect("an anonymous map");
        for page in [1, 5, 6, 40, 63] {
            map[page * PAGE + 7] = 1;
        }
        let read: u8 = map[20 * PAGE..24 * PAGE].iter().copied().sum();
        assert_eq!(read, 0);
        let pagemap = super::imp::pagemap().expect("/proc/self/pagemap");
        let start = map.as_ptr() as usize;
        let entries = super::imp::read(pagemap, start, map.len()).expect("the entries");
        let written: Vec<usize> = (0..64).filter(|&i| entries[i]).collect();
        // Pages only read map the shared zero page, which the entries count as written.
        assert!(
            written.starts_with(&[1, 5, 6]) && written.ends_with(&[40, 63]),
            "{written:?}"
        );
        match super::imp::scan::written(pagemap, start, map.len()) {
            Some(scanned) => assert_eq!(scanned, entries),
            None => eprintln!("this kernel has no PAGEMAP_SCAN: only the entries were checked"),
        }
    }
}
