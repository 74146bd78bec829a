//! Turning a checked cache entry, or a shipped module, into a [`Module`]: mapped from its open
//! file, where wasmtime can map it, else copied from the very bytes that were checked.
//!
//! wasmtime maps an entry copy-on-write and executable. On Windows that needs a file handle opened
//! for execution as well as reading, which [`open_options`] asks for (as wasmtime's own
//! `deserialize_file` does); with a read-only handle, wasmtime's `VirtualProtect` is refused
//! ("failed change pages to `PAGE_READONLY`: Access denied") and every start used to compile
//! afresh. Should mapping still fail (an emulator, a policy that forbids executable file
//! mappings), the entry is loaded from memory: 80 ms slower than a map, not 30 s of compiling.

use cap_std::fs::OpenOptions;
use wasmtime::{Engine, Module};

use super::trust::{Distrust, read_only};

/// How an entry is opened: read-only, and on Windows with the rights wasmtime's mapping needs.
pub(super) fn open_options() -> OpenOptions {
    #[allow(unused_mut)] // changed on Windows only
    let mut options = read_only();
    #[cfg(windows)]
    {
        /// `FILE_GENERIC_READ | FILE_GENERIC_EXECUTE` (winnt.h): what wasmtime documents for the
        /// file of `Module::deserialize_open_file`.
        const READ_AND_EXECUTE: u32 = 0x0012_0089 | 0x0012_00a0;
        cap_std::fs::OpenOptionsExt::access_mode(&mut options, READ_AND_EXECUTE);
    }
    options
}

/// The module in `file`, whose bytes `checked` (a map of the same open file) were checked: a cache
/// entry's MAC, or a shipped module's binding.
///
/// # Safety
///
/// `checked` must be all of `file`'s bytes, and the file trusted to be what wasmtime compiled and
/// to stay unchanged: a cache entry that passed [`super::Cache`]'s MAC check in a directory only
/// this user can write (see `Cache::load`), or a module shipped in the installed package (see
/// [`super::shipped`]).
pub(super) unsafe fn deserialize(
    engine: &Engine,
    file: std::fs::File,
    checked: &[u8],
) -> Result<Module, Distrust> {
    // SAFETY: `deserialize_open_file` trusts the file to be a module this wasmtime compiled and to
    // stay unchanged while the module lives: the caller's contract. wasmtime ignores the trailer.
    let mapping = match unsafe { map(engine, file) } {
        Ok(module) => return Ok(module),
        Err(e) => e,
    };
    tracing::debug!("cannot map the compiled module ({mapping:#}): loading a copy from memory");
    // SAFETY: as above; these are the checked bytes themselves, copied by wasmtime before use.
    unsafe { Module::deserialize(engine, checked) }.map_err(Distrust::Deserialize)
}

/// wasmtime's own mapping of `file`, unless a test made mapping fail (`tests::refuse_mapping`).
unsafe fn map(engine: &Engine, file: std::fs::File) -> wasmtime::Result<Module> {
    #[cfg(test)]
    if tests::MAPPING_REFUSED.get() {
        return Err(wasmtime::Error::msg("mapping refused by a test"));
    }
    // SAFETY: the caller's (see `deserialize`).
    unsafe { Module::deserialize_open_file(engine, file) }
}

#[cfg(test)]
pub(super) mod tests {
    use std::cell::Cell;

    thread_local! {
        /// Makes [`super::map`] fail on this thread, as it does on a platform that refuses the map.
        pub(in crate::cache) static MAPPING_REFUSED: Cell<bool> = const { Cell::new(false) };
    }

    /// Runs `f` with mapping refused on this thread.
    pub(in crate::cache) fn refuse_mapping<T>(f: impl FnOnce() -> T) -> T {
        MAPPING_REFUSED.set(true);
        let result = f();
        MAPPING_REFUSED.set(false);
        result
    }
}
