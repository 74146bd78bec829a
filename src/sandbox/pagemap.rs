//! Which pages of a linear memory may have been written, from Linux's `/proc/self/pagemap`.
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
        let mut entries = vec![0u8; memory.len() / PAGE * 8];
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

    fn pagemap() -> Option<&'static File> {
        static PAGEMAP: OnceLock<Option<File>> = OnceLock::new();
        PAGEMAP
            .get_or_init(|| {
                (rustix::param::page_size() == PAGE)
                    .then(|| File::open("/proc/self/pagemap").ok())
                    .flatten()
            })
            .as_ref()
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    pub fn written(_memory: &[u8]) -> Option<Vec<bool>> {
        None
    }
}
