//! The compiled-module cache: Cranelift takes tens of seconds to compile the guest, so the result is
//! kept on disk and memory-mapped by every later process in a couple of milliseconds.
//!
//! Entries are keyed by the guest's SHA-256 and the engine's compatibility hash (wasmtime's version,
//! its configuration and the target), so a changed guest or engine never loads a stale artifact. Writes
//! go to a temporary file renamed into place; a lock file keeps concurrent first runs (a test suite
//! starting many processes at once) from compiling the same module side by side.

use std::fs::{self, File};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::io;
use std::path::{Path, PathBuf};

use wasmtime::{Engine, Module};

/// Environment variable that overrides where compiled modules are kept.
pub const CACHE_DIR_ENV: &str = "SAFE_PYTHON_CACHE_DIR";

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
}

/// The default cache directory: `$SAFE_PYTHON_CACHE_DIR`, else the user's cache directory.
pub fn default_dir() -> Option<PathBuf> {
    match std::env::var_os(CACHE_DIR_ENV) {
        Some(dir) if !dir.is_empty() => Some(PathBuf::from(dir)),
        _ => dirs::cache_dir().map(|d| d.join("safe-python-executor")),
    }
}

/// The file name of the cache entry for `wasm_sha256` under this engine.
pub fn entry_name(engine: &Engine, wasm_sha256: &str) -> String {
    // The compatibility hash covers wasmtime's version, its configuration and the target.
    // DefaultHasher::new() uses fixed keys, so every process of a build derives the same name.
    let mut hasher = DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut hasher);
    format!(
        "guest-{}-{:016x}.cwasm",
        &wasm_sha256[..16.min(wasm_sha256.len())],
        hasher.finish()
    )
}

/// Loads the compiled guest from `dir`, or compiles it (calling `on_compile` first, since that takes
/// a while) and stores it there. An unusable cache directory is not fatal: the module is then
/// compiled in memory, with a warning.
pub fn load_or_compile(
    engine: &Engine,
    wasm: &[u8],
    wasm_sha256: &str,
    dir: Option<&Path>,
    on_compile: &mut dyn FnMut(Option<&Path>),
) -> Result<(Module, Prepared), CacheError> {
    let compile_uncached = |on_compile: &mut dyn FnMut(Option<&Path>)| {
        on_compile(None);
        let module = Module::new(engine, wasm).map_err(CacheError::Compile)?;
        Ok((module, Prepared::CompiledUncached))
    };
    let Some(dir) = dir else {
        return compile_uncached(on_compile);
    };
    let path = dir.join(entry_name(engine, wasm_sha256));
    if let Some(module) = try_load(engine, &path) {
        return Ok((module, Prepared::Loaded(path)));
    }
    let _lock = match lock(dir, &path) {
        Ok(lock) => lock,
        Err(e) => {
            tracing::warn!(
                "cannot use the cache directory {}: {e}; compiling without a cache",
                dir.display()
            );
            return compile_uncached(on_compile);
        }
    };
    // Another process may have compiled it while we waited for the lock.
    if let Some(module) = try_load(engine, &path) {
        return Ok((module, Prepared::Loaded(path)));
    }
    remove_stale_temporaries(&path);
    on_compile(Some(&path));
    let module = Module::new(engine, wasm).map_err(CacheError::Compile)?;
    match store(&module, &path) {
        Ok(()) => Ok((module, Prepared::Compiled(path))),
        Err(e) => {
            tracing::warn!("cannot write {}: {e:#}", path.display());
            Ok((module, Prepared::CompiledUncached))
        }
    }
}

/// Takes the entry's lock file, waiting while another process holds it (it is compiling).
fn lock(dir: &Path, entry: &Path) -> io::Result<File> {
    fs::create_dir_all(dir)?;
    let lock = File::create(entry.with_extension("lock"))?;
    lock.lock()?;
    Ok(lock)
}

/// Removes what a process killed while writing `entry` left behind. Temporaries are only written
/// under the entry's lock, which the caller holds, so none of them belongs to a live writer.
fn remove_stale_temporaries(entry: &Path) {
    let (Some(dir), Some(name)) = (entry.parent(), entry.file_stem()) else {
        return;
    };
    let prefix = format!("{}.tmp", name.to_string_lossy());
    let Ok(files) = fs::read_dir(dir) else { return };
    for file in files.flatten() {
        if file.file_name().to_string_lossy().starts_with(&prefix) {
            let _ = fs::remove_file(file.path());
        }
    }
}

/// Writes the compiled module under a temporary name, then renames it into place.
fn store(module: &Module, path: &Path) -> wasmtime::Result<()> {
    let bytes = module.serialize()?;
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    fs::write(&tmp, &bytes)
        .and_then(|()| fs::rename(&tmp, path))
        .inspect_err(|_| {
            let _ = fs::remove_file(&tmp);
        })?;
    Ok(())
}

fn try_load(engine: &Engine, path: &Path) -> Option<Module> {
    if !path.is_file() {
        return None;
    }
    // SAFETY: `deserialize_file` trusts its input to be a module this wasmtime compiled. Entries are
    // only ever written by `load_or_compile` (atomically, under a name that pins the wasmtime version
    // and engine configuration), and wasmtime still rejects an artifact from another version or
    // configuration. A user who can write to their own cache directory can already run code as
    // themselves, so the file is as trusted as the binary.
    match unsafe { Module::deserialize_file(engine, path) } {
        Ok(module) => Some(module),
        Err(e) => {
            tracing::warn!("ignoring unusable cached module {}: {e:#}", path.display());
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The smallest valid module: compiling it is instant.
    const EMPTY_MODULE: &[u8] = b"\0asm\x01\0\0\0";

    #[test]
    fn compiles_once_then_loads_and_survives_an_unusable_directory() {
        let engine = crate::engine::new().unwrap();
        let dir = std::env::temp_dir().join(format!("spx-cache-test-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let mut compiles = 0;
        // What a process killed mid-write would have left.
        fs::create_dir_all(&dir).unwrap();
        let stale = dir
            .join(entry_name(&engine, "00"))
            .with_extension("tmp99999");
        fs::write(&stale, b"half a module").unwrap();
        let (_, first) = load_or_compile(&engine, EMPTY_MODULE, "00", Some(&dir), &mut |_| {
            compiles += 1
        })
        .unwrap();
        let (_, second) = load_or_compile(&engine, EMPTY_MODULE, "00", Some(&dir), &mut |_| {
            compiles += 1
        })
        .unwrap();
        assert!(matches!(first, Prepared::Compiled(_)), "{first:?}");
        assert!(matches!(second, Prepared::Loaded(_)), "{second:?}");
        assert_eq!(compiles, 1);
        assert!(!stale.exists(), "the stale temporary file is still there");
        let _ = fs::remove_dir_all(&dir);

        let unusable = Path::new("/proc/self/no-such-dir");
        let (_, prepared) =
            load_or_compile(&engine, EMPTY_MODULE, "00", Some(unusable), &mut |_| ()).unwrap();
        assert_eq!(prepared, Prepared::CompiledUncached);
    }
}
