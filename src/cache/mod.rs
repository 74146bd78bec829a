//! The compiled-module cache: Cranelift takes tens of seconds to compile the guest, so the result is
//! kept on disk and memory-mapped by every later process.
//!
//! Loading an entry runs its native code, so whoever can write the cache can run code as the user.
//! The cache is therefore used only when it can be trusted:
//! - The directory is opened once, as a capability (`cap-std`), without following a symbolic link,
//!   and refused unless this user owns it and neither group nor others can write to it. A missing
//!   one is created 0700, with its missing parents. Everything else is reached through that handle.
//! - No file in it (entry, lock, key, temporary) is reached through a symbolic link, and each must be
//!   a regular file of this user's that nobody else can write.
//! - Each entry ends with a MAC (keyed BLAKE3) over its bytes, bound to the guest's SHA-256, this
//!   crate's version and the engine's compatibility hash, under a random key kept 0600 in the
//!   directory. It is checked on the mapped bytes of the one open file that wasmtime then maps (or,
//!   where it cannot, copies those checked bytes: [`load`]): the file is never reopened between
//!   the check and the load.
//! - Temporary files get random names and exclusive creation, and are renamed into place.
//!
//! A refused entry is a warning, then a fresh compile that replaces it; never a load. A refused or
//! unusable directory is a warning that says why and what to do, then a compile in memory. A lock
//! file keeps concurrent first runs (a test suite starting many processes at once) from compiling
//! the same module side by side.

mod load;
pub mod shipped;
pub(crate) mod trust;

use std::hash::{DefaultHasher, Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};

use cap_std::fs::Dir;
use wasmtime::{Engine, Module};

use trust::{Private, create_temporary, key, lock, open_checked, open_dir, remove_stale};

pub use trust::Distrust;

/// Environment variable that overrides where compiled modules are kept.
pub const CACHE_DIR_ENV: &str = "SAFE_PYTHON_CACHE_DIR";

/// The random key behind every entry's MAC, 0600 in the cache directory.
const KEY_FILE: &str = "key";
const KEY_LEN: usize = 32;
/// Ends every entry, after its MAC: an entry without it was not written by this cache's format.
const TRAILER_TAG: &[u8; 8] = b"spx-mac1";
const TRAILER_LEN: usize = blake3::OUT_LEN + TRAILER_TAG.len();
/// Domain separation for the MAC key of one binding (BLAKE3 wants a fixed, unique context string).
const MAC_CONTEXT: &str = "safe-python-executor 2026-12 compiled-module cache entry MAC";
/// Between an entry's name and the random part of its temporaries' names.
pub(crate) const TEMPORARY_INFIX: &str = ".tmp-";

#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("cannot compile the Python guest: {0:#}")]
    Compile(wasmtime::Error),
}

/// What happened while getting the module, for a front end to tell its user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prepared {
    /// Loaded from the cache.
    Loaded(PathBuf),
    /// Compiled and stored in the cache.
    Compiled(PathBuf),
    /// Compiled, but there is no usable cache directory.
    CompiledUncached,
    /// Loaded from the compiled guest shipped beside the executable ([`shipped`]).
    Shipped(PathBuf),
}

/// The default cache directory: `$SAFE_PYTHON_CACHE_DIR`, else the user's cache directory.
pub fn default_dir() -> Option<PathBuf> {
    match std::env::var_os(CACHE_DIR_ENV) {
        Some(dir) if !dir.is_empty() => Some(PathBuf::from(dir)),
        _ => dirs::cache_dir().map(|d| d.join("safe-python-executor")),
    }
}

/// The engine's compatibility hash (wasmtime's version, its configuration and the target) as a
/// number. `DefaultHasher::new()` uses fixed keys, so every process of a build derives the same one.
fn engine_hash(engine: &Engine) -> u64 {
    let mut hasher = DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut hasher);
    hasher.finish()
}

/// The file name of the cache entry for `wasm_sha256` under this engine and this crate's version:
/// two installed versions sharing a directory keep one entry each instead of replacing each other's.
pub fn entry_name(engine: &Engine, wasm_sha256: &str) -> String {
    format!(
        "guest-{}-{:016x}-{}.cwasm",
        &wasm_sha256[..16.min(wasm_sha256.len())],
        engine_hash(engine),
        env!("CARGO_PKG_VERSION")
    )
}

/// What an entry's MAC binds it to: the guest and this binary (its version and engine).
fn binding(engine: &Engine, wasm_sha256: &str) -> String {
    format!(
        "safe-python-executor {}\nguest sha256 {wasm_sha256}\nengine {:016x}\n",
        env!("CARGO_PKG_VERSION"),
        engine_hash(engine)
    )
}

/// The module to compile, read (or unpacked) only if it must be compiled.
#[derive(Clone, Copy)]
pub enum Wasm<'a> {
    /// The guest embedded in this binary ([`crate::embedded`]).
    Embedded,
    File(&'a Path),
    /// A module in memory (the cache's own tests).
    #[cfg(test)]
    Bytes(&'a [u8]),
}

/// Loads the compiled guest shipped beside the executable (for the embedded guest, when there is
/// one this engine can run), else from `dir`, or compiles it (calling `on_compile` first, since
/// that takes a while) and stores it there. An unusable or untrusted cache directory is not fatal:
/// the module is then compiled in memory, with a warning.
pub fn load_or_compile(
    engine: &Engine,
    wasm: Wasm<'_>,
    wasm_sha256: &str,
    dir: Option<&Path>,
    on_compile: &mut dyn FnMut(Option<&Path>),
) -> Result<(Module, Prepared), CacheError> {
    if let Wasm::Embedded = wasm
        && let Some((path, module)) = shipped::beside_exe(engine, wasm_sha256)
    {
        return Ok((module, Prepared::Shipped(path)));
    }
    let mut compile = |entry: Option<&Path>| {
        on_compile(entry);
        match wasm {
            Wasm::Embedded => crate::embedded::wasm()
                .map_err(wasmtime::Error::msg)
                .and_then(|wasm| Module::new(engine, wasm)),
            Wasm::File(path) => Module::from_file(engine, path),
            #[cfg(test)]
            Wasm::Bytes(bytes) => Module::new(engine, bytes),
        }
        .map_err(CacheError::Compile)
    };
    let Some(path) = dir else {
        return Ok((compile(None)?, Prepared::CompiledUncached));
    };
    let refused = |why: Distrust| {
        tracing::warn!(
            "not using the cache directory {}: {why}. Compiling in memory instead, which takes \
             tens of seconds at every start. The directory must be yours, writable by you only, \
             and not a symbolic link: fix it, or choose another with --cache-dir or {CACHE_DIR_ENV}",
            path.display()
        )
    };
    let cache = match Cache::open(path, engine, wasm_sha256) {
        Ok(cache) => cache,
        Err(why) => {
            refused(why);
            return Ok((compile(None)?, Prepared::CompiledUncached));
        }
    };
    let entry = path.join(&cache.name);
    // Without the lock first: this is every start but the first.
    if let Ok(Some(module)) = cache.load(engine) {
        return Ok((module, Prepared::Loaded(entry)));
    }
    let _lock = match cache.lock() {
        Ok(lock) => lock,
        Err(why) => {
            refused(why);
            return Ok((compile(None)?, Prepared::CompiledUncached));
        }
    };
    // Another process may have compiled it while we waited for the lock.
    match cache.load(engine) {
        Ok(Some(module)) => return Ok((module, Prepared::Loaded(entry))),
        Ok(None) => {}
        Err(why) => tracing::warn!(
            "refusing the cached module {}: {why}; compiling it afresh",
            entry.display()
        ),
    }
    cache.remove_stale_temporaries();
    let module = compile(Some(&entry))?;
    match cache.store(&module) {
        Ok(()) => Ok((module, Prepared::Compiled(entry))),
        Err(e) => {
            tracing::warn!("cannot write {}: {e:#}", entry.display());
            Ok((module, Prepared::CompiledUncached))
        }
    }
}

/// A trusted cache directory, and the name and MAC key of this binary's entry for one guest.
struct Cache {
    dir: Dir,
    name: String,
    mac_key: [u8; blake3::KEY_LEN],
}

impl Cache {
    fn open(path: &Path, engine: &Engine, wasm_sha256: &str) -> Result<Cache, Distrust> {
        let dir = open_dir(path)?;
        let key = key(&dir).map_err(|why| why.in_file(KEY_FILE))?;
        let material = [&key[..], binding(engine, wasm_sha256).as_bytes()].concat();
        Ok(Cache {
            dir,
            name: entry_name(engine, wasm_sha256),
            mac_key: blake3::derive_key(MAC_CONTEXT, &material),
        })
    }

    /// The entry, if there is one and it passes every check; `Ok(None)` when there is none.
    fn load(&self, engine: &Engine) -> Result<Option<Module>, Distrust> {
        let options = load::open_options();
        let file = match open_checked(&self.dir, &self.name, &options, Private::Writes) {
            Err(why) if why.is_not_found() => return Ok(None),
            opened => opened?.into_std(),
        };
        let started = std::time::Instant::now();
        // SAFETY: the map is only read, and dropped when this function returns. The file is this
        // user's, in a directory only this user can write, and entries are never written in place
        // (only renamed over), so nobody else can change or truncate it.
        let map = unsafe { memmap2::Mmap::map(&file)? };
        self.verify(&map)?;
        tracing::debug!(
            "checked the MAC of {} MB in {:?}",
            map.len() >> 20,
            started.elapsed()
        );
        // SAFETY: `map` is all of this very open file (not of a path opened again), and its MAC
        // was just checked; nobody but this user can write the file or its directory.
        let module = unsafe { load::deserialize(engine, file, &map)? };
        Ok(Some(module))
    }

    /// Checks the trailer's MAC against the bytes before it.
    fn verify(&self, bytes: &[u8]) -> Result<(), Distrust> {
        let (artifact, trailer) = bytes
            .split_last_chunk::<TRAILER_LEN>()
            .ok_or(Distrust::Truncated)?;
        let (mac, tag) = trailer
            .split_first_chunk::<{ blake3::OUT_LEN }>()
            .ok_or(Distrust::Truncated)?;
        if tag != TRAILER_TAG {
            return Err(Distrust::NoMac);
        }
        // `blake3::Hash` compares in constant time.
        if self.mac(artifact) != blake3::Hash::from_bytes(*mac) {
            return Err(Distrust::BadMac);
        }
        Ok(())
    }

    fn mac(&self, artifact: &[u8]) -> blake3::Hash {
        let mut hasher = blake3::Hasher::new_keyed(&self.mac_key);
        // 82 MB at every start: hashed on every core, 15-25 ms on a busy 2-core machine.
        hasher.update_rayon(artifact);
        hasher.finalize()
    }

    /// Takes the entry's lock file, waiting while another process holds it (it is compiling).
    fn lock(&self) -> Result<std::fs::File, Distrust> {
        lock(&self.dir, &format!("{}.lock", self.name))
    }

    /// Removes what a process killed while writing the entry left behind. Temporaries are only
    /// written under the entry's lock, which the caller holds, so none belongs to a live writer.
    fn remove_stale_temporaries(&self) {
        remove_stale(&self.dir, &format!("{}{TEMPORARY_INFIX}", self.name));
    }

    /// Writes the compiled module and its MAC under a temporary name, then renames it into place.
    fn store(&self, module: &Module) -> wasmtime::Result<()> {
        let artifact = module.serialize()?;
        let mac = self.mac(&artifact);
        let (temporary, mut file) = create_temporary(&self.dir, &self.name)?;
        let written = file
            .write_all(&artifact)
            .and_then(|()| file.write_all(mac.as_bytes()))
            .and_then(|()| file.write_all(TRAILER_TAG))
            .and_then(|()| self.dir.rename(&temporary, &self.dir, &self.name));
        if written.is_err() {
            let _ = self.dir.remove_file(&temporary);
        }
        Ok(written?)
    }
}

#[cfg(all(test, unix))]
mod tests;
