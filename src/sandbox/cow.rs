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
#[cfg(target_os = "linux")]
const CHUNK: usize = 64 << 10;

pub(crate) use imp::Image;

#[cfg(target_os = "linux")]
mod imp {
    use std::fs::File;
    use std::os::unix::fs::FileExt;

    use rustix::fs::{MemfdFlags, SealFlags};
    use rustix::mm::{MapFlags, ProtFlags};

    use super::CHUNK;
    use crate::sandbox::pagemap::PAGE;

    /// A memory's bytes in a sealed memfd (all-zero chunks left as holes, which cost nothing).
    pub(crate) struct Image {
        file: File,
        len: usize,
        /// The memfd mapped shared and read-only, where [`Image::restore`] copies from.
        view: memmap2::Mmap,
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
            // SAFETY: the memfd is sealed against writes and resizing, so the mapped bytes can
            // never change or go away while the map lives.
            let view = unsafe { memmap2::Mmap::map(&file) }.ok()?;
            Some(Image {
                file,
                len: memory.len(),
                view,
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

        /// Copies the image back over the pages of `memory` that `written` marks (one flag per
        /// [`PAGE`]), so that `memory` holds the image again. The pages stay mapped and private:
        /// unlike mapping the image over again, this changes no page table, so it neither frees
        /// pages nor flushes other cores' TLBs, and the next call writes them without a fault.
        /// `false`, and `memory` untouched, when the lengths do not match.
        pub(crate) fn restore(&self, memory: &mut [u8], written: &[bool]) -> bool {
            if memory.len() != self.len || written.len() * PAGE != memory.len() {
                return false;
            }
            let pages = memory.chunks_mut(PAGE).zip(self.view.chunks(PAGE));
            for ((page, image), _) in pages.zip(written).filter(|(_, w)| **w) {
                page.copy_from_slice(image);
            }
            true
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

        pub(crate) fn restore(&self, _memory: &mut [u8], _written: &[bool]) -> bool {
            match *self {}
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
pub(crate) mod tests {
    use rustix::mm::{MapFlags, ProtFlags};

    use super::Image;
    use crate::sandbox::pagemap::{self, PAGE};

    /// Pages of the memories these tests map.
    pub(crate) const PAGES: usize = 16;

    /// A page-aligned private anonymous mapping, unmapped when dropped: memory as an instance's.
    pub(crate) struct Mapping(pub(crate) &'static mut [u8]);

    impl Mapping {
        pub(crate) fn new(pages: usize) -> Mapping {
            // SAFETY: a fresh anonymous mapping, owned by the returned value alone.
            unsafe {
                let at = rustix::mm::mmap_anonymous(
                    std::ptr::null_mut(),
                    pages * PAGE,
                    ProtFlags::READ | ProtFlags::WRITE,
                    MapFlags::PRIVATE,
                )
                .expect("an anonymous mapping");
                Mapping(std::slice::from_raw_parts_mut(at.cast(), pages * PAGE))
            }
        }
    }

    impl Drop for Mapping {
        fn drop(&mut self) {
            // SAFETY: the mapping made in `new`, no longer borrowed.
            let _ = unsafe { rustix::mm::munmap(self.0.as_mut_ptr().cast(), self.0.len()) };
        }
    }

    #[test]
    fn restoring_copies_the_image_back_over_written_pages_which_stay_private() {
        let bytes: Vec<u8> = (0..PAGES * PAGE)
            .map(|i| (i / PAGE * 7 + 1) as u8)
            .collect();
        let image = Image::new(&bytes).expect("a memfd image");
        let memory = Mapping::new(PAGES);
        assert!(image.map_over(memory.0));
        for page in [0, 3, 4, PAGES - 1] {
            memory.0[page * PAGE + 100] = 0;
        }
        let written = pagemap::written(memory.0).expect("the kernel tells written pages");
        let marked: Vec<usize> = (0..PAGES).filter(|&p| written[p]).collect();
        assert_eq!(marked, [0, 3, 4, PAGES - 1]);
        assert!(image.restore(memory.0, &written));
        assert_eq!(memory.0, &bytes[..], "the image's bytes are back");
        let after = pagemap::written(memory.0).expect("the kernel tells written pages");
        assert_eq!(
            after, written,
            "restored pages stay private, the others the image's"
        );
        // A memory of another length is left alone.
        assert!(!image.restore(&mut memory.0[PAGE..], &written[1..]));
    }
}
