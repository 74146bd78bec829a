//! A memory image that new instances map copy-on-write instead of copying: the CPython engine's
//! template, which is tens of megabytes once the data stack is imported. Copying it into each
//! fresh instance costs a page fault and a copy per page (about 1 ms per MB); mapping it costs a
//! system call, and each instance then pays only for the pages it writes.
//!
//! On Linux the image lives in a memfd, and is mapped private and fixed over the instance's linear
//! memory, which wasmtime reserved and made accessible up to the image's length. wasmtime keeps
//! no copy of the pages' contents, so it sees the same memory, and unmaps the range with the rest
//! of its reservation when the instance is dropped. Elsewhere there is no image, and the
//! template's pages are copied as before.

/// The unit pages of the image are compared and mapped in.
const CHUNK: usize = 64 << 10;

pub(crate) use imp::Image;

#[cfg(target_os = "linux")]
mod imp {
    use std::fs::File;
    use std::os::unix::fs::FileExt;

    use rustix::fs::{MemfdFlags, SealFlags};
    use rustix::mm::{MapFlags, ProtFlags};

    use super::CHUNK;

    /// A memory's bytes in a sealed memfd (all-zero chunks left as holes, which cost nothing).
    pub(crate) struct Image {
        file: File,
        len: usize,
    }

    impl Image {
        /// `memory` as an image; `None` when the kernel cannot make one.
        pub(crate) fn new(memory: &[u8]) -> Option<Image> {
            let fd = rustix::fs::memfd_create(
                c"safe-python-template",
                MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING,
            )
            .ok()?;
            let file = File::from(fd);
            file.set_len(memory.len() as u64).ok()?;
            for (i, chunk) in memory.chunks(CHUNK).enumerate() {
                if chunk.iter().any(|&b| b != 0) {
                    file.write_all_at(chunk, (i * CHUNK) as u64).ok()?;
                }
            }
            // Nothing can change it from now on: every instance maps the same bytes.
            let seals = SealFlags::SEAL | SealFlags::SHRINK | SealFlags::GROW | SealFlags::WRITE;
            rustix::fs::fcntl_add_seals(&file, seals).ok()?;
            Some(Image {
                file,
                len: memory.len(),
            })
        }

        pub(crate) fn len(&self) -> usize {
            self.len
        }

        /// Bytes of memory the image takes (its holes excluded).
        pub(crate) fn held_bytes(&self) -> usize {
            rustix::fs::fstat(&self.file).map_or(self.len, |s| s.st_blocks as usize * 512)
        }

        /// Maps the image over `memory`, copy-on-write; `false` (and `memory` untouched) when the
        /// kernel refuses.
        ///
        /// `memory` must be an instance's whole linear memory, exactly as long as the image.
        pub(crate) fn map_over(&self, memory: &mut [u8]) -> bool {
            let page = rustix::param::page_size();
            if memory.len() != self.len
                || !(memory.as_ptr() as usize).is_multiple_of(page)
                || !memory.len().is_multiple_of(page)
            {
                return false;
            }
            // SAFETY: `memory` is borrowed mutably, so nothing else reads or writes it while the
            // mapping is replaced, and the new mapping covers exactly its bytes, readable and
            // writable as before: Rust and wasmtime see a slice of the same length at the same
            // address, holding the image's bytes. wasmtime keeps no record of the old pages, and
            // unmaps the range with the rest of its reservation.
            let mapped = unsafe {
                rustix::mm::mmap(
                    memory.as_mut_ptr().cast(),
                    memory.len(),
                    ProtFlags::READ | ProtFlags::WRITE,
                    MapFlags::PRIVATE | MapFlags::FIXED,
                    &self.file,
                    0,
                )
            };
            matches!(mapped, Ok(at) if at == memory.as_mut_ptr().cast())
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    /// No image: the template's pages are copied.
    pub(crate) enum Image {}

    impl Image {
        pub(crate) fn new(_memory: &[u8]) -> Option<Image> {
            None
        }

        pub(crate) fn len(&self) -> usize {
            match *self {}
        }

        pub(crate) fn held_bytes(&self) -> usize {
            match *self {}
        }

        pub(crate) fn map_over(&self, _memory: &mut [u8]) -> bool {
            match *self {}
        }
    }
}
