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
//!   directory. It is checked on the mapped bytes of the one open file that wasmtime then maps: the
//!   file is never reopened between the check and the load.
//! - Temporary files get random names and exclusive creation, and are renamed into place.
//!
//! A refused entry is a warning, then a fresh compile that replaces it; never a load. A refused or
//! unusable directory is a warning that says why and what to do, then a compile in memory. A lock
//! file keeps concurrent first runs (a test suite starting many processes at once) from compiling
//! the same module side by side.

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use cap_fs_ext::{DirExt, FollowSymlinks, OpenOptionsFollowExt};
use cap_std::ambient_authority;
use cap_std::fs::{Dir, File, Metadata, OpenOptions};
use std::hash::{DefaultHasher, Hash, Hasher};
use wasmtime::{Engine, Module};

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
const TEMPORARY_INFIX: &str = ".tmp-";

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

/// Why the cache directory, or a file in it, is not trusted.
#[derive(Debug, thiserror::Error)]
enum Distrust {
    #[error("it is a symbolic link")]
    Symlink,
    #[error("it is not a {0}")]
    NotA(&'static str),
    #[error("it belongs to user {owner}, not to this user ({user})")]
    Owner { owner: u32, user: u32 },
    #[error("its mode is {mode:04o}; it must be {expected}")]
    Mode { mode: u32, expected: &'static str },
    #[error("it is too short to hold a MAC (truncated?)")]
    Truncated,
    #[error("it has no MAC (written by another version, or not by this program)")]
    NoMac,
    #[error(
        "its MAC does not match (not written by this binary, for this guest, under this cache's key)"
    )]
    BadMac,
    #[error("the key file is not {KEY_LEN} bytes long")]
    KeyLength,
    #[error("{file}: {why}")]
    In { file: String, why: Box<Distrust> },
    #[error("wasmtime refused it: {0:#}")]
    Deserialize(wasmtime::Error),
    #[error("{0}")]
    Io(#[from] io::Error),
}

impl Distrust {
    fn is_not_found(&self) -> bool {
        matches!(self, Distrust::Io(e) if e.kind() == io::ErrorKind::NotFound)
    }

    fn in_file(self, file: &str) -> Distrust {
        Distrust::In {
            file: file.to_owned(),
            why: Box::new(self),
        }
    }
}

/// Who may write a file or directory of the cache, besides its owner.
#[derive(Clone, Copy)]
enum Private {
    /// Nobody else may write it (the directory, entries, the lock).
    Writes,
    /// Nobody else may read or write it (the key).
    Everything,
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

/// Loads the compiled guest from `dir`, or compiles it (calling `on_compile` first, since that takes
/// a while) and stores it there. An unusable or untrusted cache directory is not fatal: the module
/// is then compiled in memory, with a warning.
pub fn load_or_compile(
    engine: &Engine,
    wasm: &[u8],
    wasm_sha256: &str,
    dir: Option<&Path>,
    on_compile: &mut dyn FnMut(Option<&Path>),
) -> Result<(Module, Prepared), CacheError> {
    let mut compile = |entry: Option<&Path>| {
        on_compile(entry);
        Module::new(engine, wasm).map_err(CacheError::Compile)
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
        let file = match open_checked(&self.dir, &self.name, &read_only(), Private::Writes) {
            Err(why) if why.is_not_found() => return Ok(None),
            opened => opened?.into_std(),
        };
        {
            let started = std::time::Instant::now();
            // SAFETY: the map is read while this function runs and dropped before the load. The
            // file is this user's, in a directory only this user can write, and entries are never
            // written in place (only renamed over), so nobody else can change or truncate it.
            let map = unsafe { memmap2::Mmap::map(&file)? };
            self.verify(&map)?;
            tracing::debug!(
                "checked the MAC of {} MB in {:?}",
                map.len() >> 20,
                started.elapsed()
            );
        }
        // SAFETY: `deserialize_open_file` trusts the file to be a module this wasmtime compiled and
        // to stay unchanged while the module lives. The bytes of this very open file (not of a path
        // opened again) were just checked against a MAC that only a process holding this cache's
        // key computes, and only over what `Module::serialize` produced for this guest, crate
        // version and engine configuration. The file is this user's and nobody else can write it or
        // its directory; this crate never writes an entry in place. wasmtime ignores the trailer.
        let module = unsafe { Module::deserialize_open_file(engine, file) }
            .map_err(Distrust::Deserialize)?;
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
        let name = format!("{}.lock", self.name);
        let mut options = OpenOptions::new();
        options.read(true).write(true).create(true);
        set_private_mode(&mut options);
        let lock = open_checked(&self.dir, &name, &options, Private::Writes)
            .map_err(|why| why.in_file(&name))?
            .into_std();
        lock.lock()?;
        Ok(lock)
    }

    /// Removes what a process killed while writing the entry left behind. Temporaries are only
    /// written under the entry's lock, which the caller holds, so none belongs to a live writer.
    fn remove_stale_temporaries(&self) {
        let prefix = format!("{}{TEMPORARY_INFIX}", self.name);
        let Ok(entries) = self.dir.entries() else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            if name.to_string_lossy().starts_with(&prefix) {
                // Removes the name itself, never what a symbolic link points to.
                let _ = self.dir.remove_file(&name);
            }
        }
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

/// Opens (creating it 0700 if missing) the cache directory, and checks that it can be trusted.
fn open_dir(path: &Path) -> Result<Dir, Distrust> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(path)?;
    let opened = match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) => {
            let parent = if parent.as_os_str().is_empty() {
                Path::new(".")
            } else {
                parent
            };
            Dir::open_ambient_dir(parent, ambient_authority())
                .and_then(|parent| parent.open_dir_nofollow(name))
        }
        // The root, or a path ending in `..`: no last component to be a link.
        _ => Dir::open_ambient_dir(path, ambient_authority()),
    };
    let dir = opened.map_err(|e| match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_symlink() => Distrust::Symlink,
        _ => Distrust::Io(e),
    })?;
    check_owner(&dir.dir_metadata()?, Private::Writes)?;
    Ok(dir)
}

/// Opens `name` in `dir` without following a symbolic link, and checks it is a regular file of this
/// user's that others cannot write (nor read, for `Private::Everything`).
fn open_checked(
    dir: &Dir,
    name: &str,
    options: &OpenOptions,
    private: Private,
) -> Result<File, Distrust> {
    let mut options = options.clone();
    options.follow(FollowSymlinks::No);
    let file = dir
        .open_with(name, &options)
        .map_err(|e| match dir.symlink_metadata(name) {
            Ok(meta) if meta.is_symlink() => Distrust::Symlink,
            _ => Distrust::Io(e),
        })?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(Distrust::NotA("regular file"));
    }
    check_owner(&meta, private)?;
    Ok(file)
}

fn read_only() -> OpenOptions {
    let mut options = OpenOptions::new();
    options.read(true);
    options
}

fn set_private_mode(options: &mut OpenOptions) {
    #[cfg(unix)]
    cap_std::fs::OpenOptionsExt::mode(options, 0o600);
    #[cfg(not(unix))]
    let _ = options;
}

/// Refuses what this user does not own, and what others may write (or read, if `Everything`).
#[cfg(unix)]
fn check_owner(meta: &Metadata, private: Private) -> Result<(), Distrust> {
    use cap_std::fs::MetadataExt;
    let user = rustix::process::geteuid().as_raw();
    if meta.uid() != user {
        return Err(Distrust::Owner {
            owner: meta.uid(),
            user,
        });
    }
    let (forbidden, expected) = match private {
        Private::Writes => (0o022, "writable by its owner only"),
        Private::Everything => (0o077, "readable and writable by its owner only (0600)"),
    };
    let mode = meta.mode() & 0o7777;
    if mode & forbidden != 0 {
        return Err(Distrust::Mode { mode, expected });
    }
    Ok(())
}

/// Elsewhere the user's cache directory is private to the user through its ACL, which is not
/// checked here; the symbolic-link refusals and the MAC still apply.
#[cfg(not(unix))]
fn check_owner(_: &Metadata, _: Private) -> Result<(), Distrust> {
    Ok(())
}

/// The cache's MAC key, created on first use.
fn key(dir: &Dir) -> Result<[u8; KEY_LEN], Distrust> {
    match read_key(dir) {
        Err(why) if why.is_not_found() => {
            create_key(dir)?;
            read_key(dir)
        }
        read => read,
    }
}

fn read_key(dir: &Dir) -> Result<[u8; KEY_LEN], Distrust> {
    let file = open_checked(dir, KEY_FILE, &read_only(), Private::Everything)?;
    let mut bytes = Vec::with_capacity(KEY_LEN + 1);
    file.take(KEY_LEN as u64 + 1).read_to_end(&mut bytes)?;
    bytes.try_into().map_err(|_| Distrust::KeyLength)
}

/// Writes a random key to a temporary file, then links it into place: a concurrent reader never
/// sees a partial key, and when two processes race the first link wins and both use it.
fn create_key(dir: &Dir) -> Result<(), Distrust> {
    let mut key = [0u8; KEY_LEN];
    random(&mut key)?;
    let (temporary, mut file) = create_temporary(dir, KEY_FILE)?;
    let linked = file
        .write_all(&key)
        .and_then(|()| file.sync_all())
        .and_then(|()| match dir.hard_link(&temporary, dir, KEY_FILE) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
            linked => linked,
        });
    let _ = dir.remove_file(&temporary);
    Ok(linked?)
}

/// Creates `<prefix>.tmp-<128 random bits>`, exclusively (so never through a link) and 0600.
fn create_temporary(dir: &Dir, prefix: &str) -> io::Result<(String, File)> {
    let mut bits = [0u8; 16];
    random(&mut bits)?;
    let name = format!(
        "{prefix}{TEMPORARY_INFIX}{:032x}",
        u128::from_le_bytes(bits)
    );
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    set_private_mode(&mut options);
    let file = dir.open_with(&name, &options)?;
    Ok((name, file))
}

fn random(bytes: &mut [u8]) -> io::Result<()> {
    getrandom::fill(bytes)
        .map_err(|e| io::Error::other(format!("no random bytes from the system: {e}")))
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::{PermissionsExt, symlink};
    use std::sync::{Arc, Mutex};

    /// The smallest valid module: compiling it is instant.
    const EMPTY_MODULE: &[u8] = b"\0asm\x01\0\0\0";
    const GUEST: &str = "00";

    /// A directory of its own for each test, removed afterwards.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(name: &str) -> Scratch {
            let dir = std::env::temp_dir().join(format!(
                "spx-cache-{name}-{}-{:x}",
                std::process::id(),
                rand_u64()
            ));
            Scratch(dir)
        }

        fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn rand_u64() -> u64 {
        let mut bytes = [0; 8];
        random(&mut bytes).unwrap();
        u64::from_le_bytes(bytes)
    }

    /// What one `load_or_compile` did: how it ended, how often it compiled, what it warned.
    struct Attempt {
        prepared: Prepared,
        compiles: usize,
        warnings: String,
    }

    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn attempt(engine: &Engine, dir: &Path, guest: &str) -> Attempt {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        let mut compiles = 0;
        let (_, prepared) = tracing::subscriber::with_default(subscriber, || {
            load_or_compile(engine, EMPTY_MODULE, guest, Some(dir), &mut |_| {
                compiles += 1
            })
            .unwrap()
        });
        let warnings = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
        Attempt {
            prepared,
            compiles,
            warnings,
        }
    }

    fn mode(path: &Path) -> u32 {
        fs::symlink_metadata(path).unwrap().permissions().mode() & 0o7777
    }

    /// The path of the entry for `guest` in `dir`, compiled and stored there.
    fn stored(engine: &Engine, dir: &Path, guest: &str) -> PathBuf {
        let first = attempt(engine, dir, guest);
        assert!(
            matches!(first.prepared, Prepared::Compiled(_)),
            "{}",
            first.warnings
        );
        dir.join(entry_name(engine, guest))
    }

    #[test]
    fn compiles_once_then_loads_and_keeps_its_files_private() {
        let engine = crate::engine::new().unwrap();
        let scratch = Scratch::new("roundtrip");
        let dir = scratch.path().join("missing-parent/cache");
        let first = attempt(&engine, &dir, GUEST);
        let second = attempt(&engine, &dir, GUEST);
        assert!(
            matches!(first.prepared, Prepared::Compiled(_)),
            "{}",
            first.warnings
        );
        assert!(
            matches!(second.prepared, Prepared::Loaded(_)),
            "{}",
            second.warnings
        );
        assert_eq!((first.compiles, second.compiles), (1, 0));
        assert_eq!(first.warnings + &second.warnings, "");
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(dir.parent().unwrap()), 0o700);
        assert_eq!(mode(&dir.join(KEY_FILE)), 0o600);
        assert_eq!(mode(&dir.join(entry_name(&engine, GUEST))), 0o600);
        assert_eq!(fs::read(dir.join(KEY_FILE)).unwrap().len(), KEY_LEN);
    }

    #[test]
    fn a_stale_temporary_is_removed_and_never_loaded() {
        let engine = crate::engine::new().unwrap();
        let scratch = Scratch::new("stale");
        let dir = scratch.path();
        let entry = stored(&engine, dir, GUEST);
        // What a process killed mid-write leaves: here a whole valid artifact under a temporary
        // name, with the entry itself gone.
        let stale = dir.join(format!(
            "{}{TEMPORARY_INFIX}0123456789abcdef",
            entry_name(&engine, GUEST)
        ));
        fs::rename(&entry, &stale).unwrap();
        let again = attempt(&engine, dir, GUEST);
        assert!(
            matches!(again.prepared, Prepared::Compiled(_)),
            "{}",
            again.warnings
        );
        assert_eq!(again.compiles, 1);
        assert!(!stale.exists(), "the stale temporary file is still there");
    }

    /// Something planted or damaged where the entry is: a warning, a fresh compile that replaces
    /// it, and the next start loads the replacement.
    #[test]
    fn a_planted_or_damaged_entry_is_refused_then_replaced() {
        let engine = crate::engine::new().unwrap();
        let other = Scratch::new("other-key");
        let foreign = fs::read(stored(&engine, other.path(), GUEST)).unwrap();
        type Plant = Box<dyn Fn(&Path, &Path)>;
        let cases: Vec<(&str, Plant, &str)> = vec![
            (
                "garbage",
                Box::new(|_, entry| fs::write(entry, b"\x7fELF not a module").unwrap()),
                "too short",
            ),
            (
                "garbage with a trailer",
                Box::new(|_, entry| {
                    fs::write(entry, [&[0u8; 4096][..], &[7; 32], TRAILER_TAG].concat()).unwrap()
                }),
                "MAC does not match",
            ),
            (
                "a valid artifact compiled under another cache's key",
                Box::new(move |_, entry| fs::write(entry, &foreign).unwrap()),
                "MAC does not match",
            ),
            (
                "a valid artifact of this cache, for another guest",
                Box::new(|dir, entry| {
                    let engine = crate::engine::new().unwrap();
                    let other = stored(&engine, dir, "11");
                    fs::copy(other, entry).unwrap();
                }),
                "MAC does not match",
            ),
            (
                "an artifact without a MAC (written by an older version)",
                Box::new(|_, entry| {
                    let engine = crate::engine::new().unwrap();
                    let module = Module::new(&engine, EMPTY_MODULE).unwrap();
                    fs::write(entry, module.serialize().unwrap()).unwrap();
                }),
                "no MAC",
            ),
            (
                "a truncated artifact",
                Box::new(|_, entry| {
                    let bytes = fs::read(entry).unwrap();
                    fs::write(entry, &bytes[..bytes.len() / 2]).unwrap();
                }),
                "",
            ),
            (
                "a symbolic link to a valid entry",
                Box::new(|dir, entry| {
                    let target = dir.join("elsewhere.cwasm");
                    fs::rename(entry, &target).unwrap();
                    symlink(&target, entry).unwrap();
                }),
                "symbolic link",
            ),
            (
                "an entry others can write",
                Box::new(|_, entry| {
                    fs::set_permissions(entry, fs::Permissions::from_mode(0o666)).unwrap()
                }),
                "mode is 0666",
            ),
            (
                "an entry of another user",
                Box::new(|_, entry| chown_to_nobody(entry)),
                "belongs to user 65534",
            ),
            (
                "a directory",
                Box::new(|_, entry| {
                    fs::remove_file(entry).unwrap();
                    fs::create_dir(entry).unwrap();
                }),
                "not a regular file",
            ),
        ];
        for (what, plant, why) in cases {
            let scratch = Scratch::new("planted");
            let dir = scratch.path();
            let entry = stored(&engine, dir, GUEST);
            plant(dir, &entry);
            let refused = attempt(&engine, dir, GUEST);
            assert_eq!(refused.compiles, 1, "{what}: {}", refused.warnings);
            assert!(
                refused.warnings.contains("refusing the cached module")
                    && refused.warnings.contains(why),
                "{what}: {}",
                refused.warnings
            );
            if what == "a directory" {
                // Not replaceable by a rename: compiled, used, not cached.
                assert_eq!(refused.prepared, Prepared::CompiledUncached, "{what}");
                continue;
            }
            assert!(matches!(refused.prepared, Prepared::Compiled(_)), "{what}");
            assert!(fs::symlink_metadata(&entry).unwrap().is_file(), "{what}");
            let next = attempt(&engine, dir, GUEST);
            assert!(
                matches!(next.prepared, Prepared::Loaded(_)),
                "{what}: {}",
                next.warnings
            );
        }
    }

    /// An untrusted directory, lock or key: a warning that says why, and a compile in memory.
    #[test]
    fn an_untrusted_directory_lock_or_key_means_compiling_in_memory() {
        let engine = crate::engine::new().unwrap();
        let outside = Scratch::new("outside");
        fs::create_dir_all(outside.path()).unwrap();
        let target = outside.path().join("target");
        type Spoil<'a> = Box<dyn Fn(&Path) -> PathBuf + 'a>;
        let lock_name = format!("{}.lock", entry_name(&engine, GUEST));
        let cases: Vec<(&str, Spoil, &str)> = vec![
            (
                "a group-writable directory",
                Box::new(|dir| {
                    fs::create_dir_all(dir).unwrap();
                    fs::set_permissions(dir, fs::Permissions::from_mode(0o770)).unwrap();
                    dir.to_owned()
                }),
                "mode is 0770",
            ),
            (
                "a world-writable sticky directory",
                Box::new(|dir| {
                    fs::create_dir_all(dir).unwrap();
                    fs::set_permissions(dir, fs::Permissions::from_mode(0o1777)).unwrap();
                    dir.to_owned()
                }),
                "mode is 1777",
            ),
            (
                "a directory of another user",
                Box::new(|dir| {
                    fs::create_dir_all(dir).unwrap();
                    chown_to_nobody(dir);
                    dir.to_owned()
                }),
                "belongs to user 65534",
            ),
            (
                "a symbolic link to a private directory",
                Box::new(|dir| {
                    let real = dir.with_extension("real");
                    fs::create_dir_all(&real).unwrap();
                    fs::set_permissions(&real, fs::Permissions::from_mode(0o700)).unwrap();
                    symlink(&real, dir).unwrap();
                    dir.to_owned()
                }),
                "symbolic link",
            ),
            (
                "a symbolic link as the key",
                Box::new(|dir| {
                    fs::create_dir_all(dir).unwrap();
                    symlink(&target, dir.join(KEY_FILE)).unwrap();
                    dir.to_owned()
                }),
                "key: it is a symbolic link",
            ),
            (
                "a key others can read",
                Box::new(|dir| {
                    fs::create_dir_all(dir).unwrap();
                    fs::write(dir.join(KEY_FILE), [1; KEY_LEN]).unwrap();
                    fs::set_permissions(dir.join(KEY_FILE), fs::Permissions::from_mode(0o644))
                        .unwrap();
                    dir.to_owned()
                }),
                "key: its mode is 0644",
            ),
            (
                "a key of another user",
                Box::new(|dir| {
                    fs::create_dir_all(dir).unwrap();
                    fs::write(dir.join(KEY_FILE), [1; KEY_LEN]).unwrap();
                    fs::set_permissions(dir.join(KEY_FILE), fs::Permissions::from_mode(0o600))
                        .unwrap();
                    chown_to_nobody(&dir.join(KEY_FILE));
                    dir.to_owned()
                }),
                "key: it belongs to user 65534",
            ),
            (
                "a short key",
                Box::new(|dir| {
                    fs::create_dir_all(dir).unwrap();
                    fs::write(dir.join(KEY_FILE), b"short").unwrap();
                    fs::set_permissions(dir.join(KEY_FILE), fs::Permissions::from_mode(0o600))
                        .unwrap();
                    dir.to_owned()
                }),
                "not 32 bytes",
            ),
            (
                "a symbolic link as the lock",
                Box::new(|dir| {
                    fs::create_dir_all(dir).unwrap();
                    symlink(&target, dir.join(&lock_name)).unwrap();
                    dir.to_owned()
                }),
                ".lock: it is a symbolic link",
            ),
        ];
        for (what, spoil, why) in cases {
            let scratch = Scratch::new("untrusted");
            let dir = spoil(&scratch.path().join("cache"));
            let refused = attempt(&engine, &dir, GUEST);
            assert_eq!(refused.prepared, Prepared::CompiledUncached, "{what}");
            assert_eq!(refused.compiles, 1, "{what}");
            assert!(
                refused.warnings.contains("not using the cache directory")
                    && refused.warnings.contains(why)
                    && refused.warnings.contains("--cache-dir"),
                "{what}: {}",
                refused.warnings
            );
            assert!(
                !dir.join(entry_name(&engine, GUEST)).exists(),
                "{what}: an entry was written"
            );
        }
        assert!(
            !outside.path().join("target").exists(),
            "a link was followed"
        );
    }

    #[test]
    fn a_directory_that_cannot_be_made_means_compiling_in_memory() {
        let engine = crate::engine::new().unwrap();
        let refused = attempt(&engine, Path::new("/proc/self/no-such-dir"), GUEST);
        assert_eq!(refused.prepared, Prepared::CompiledUncached);
        assert!(refused.warnings.contains("not using the cache directory"));
    }

    /// The tests run as root here, which may give files away; elsewhere this test cannot be set up.
    fn chown_to_nobody(path: &Path) {
        std::os::unix::fs::lchown(path, Some(65534), Some(65534))
            .expect("giving a file to `nobody` needs root (run the tests as root)");
    }
}
