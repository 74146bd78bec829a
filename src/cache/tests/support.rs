//! What the cache's tests share: a scratch directory per test, and one attempt at loading a
//! module with what it compiled and logged.

use super::super::trust::random;
use super::super::*;
use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::sync::{Arc, Mutex};

/// The smallest valid module: compiling it is instant.
pub(super) const EMPTY_MODULE: &[u8] = b"\0asm\x01\0\0\0";
pub(super) const GUEST: &str = "00";

/// A directory of its own for each test, removed afterwards.
pub(super) struct Scratch(PathBuf);

impl Scratch {
    pub(super) fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!(
            "spx-cache-{name}-{}-{:x}",
            std::process::id(),
            rand_u64()
        ));
        Scratch(dir)
    }

    pub(super) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

pub(super) fn rand_u64() -> u64 {
    let mut bytes = [0; 8];
    random(&mut bytes).unwrap();
    u64::from_le_bytes(bytes)
}

/// What one `load_or_compile` did: how it ended, how often it compiled, what it warned, and all
/// it logged down to debug level.
pub(super) struct Attempt {
    pub(super) prepared: Prepared,
    pub(super) compiles: usize,
    pub(super) warnings: String,
    pub(super) log: String,
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

pub(super) fn attempt(engine: &Engine, dir: &Path, guest: &str) -> Attempt {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::DEBUG)
        .finish();
    let mut compiles = 0;
    let (_, prepared) = tracing::subscriber::with_default(subscriber, || {
        load_or_compile(
            engine,
            Wasm::Bytes(EMPTY_MODULE),
            guest,
            Some(dir),
            &mut |_| compiles += 1,
        )
        .unwrap()
    });
    let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let warnings = log
        .lines()
        .filter(|line| line.contains(" WARN ") || line.contains(" ERROR "))
        .map(|line| format!("{line}\n"))
        .collect();
    Attempt {
        prepared,
        compiles,
        warnings,
        log,
    }
}

pub(super) fn mode(path: &Path) -> u32 {
    fs::symlink_metadata(path).unwrap().permissions().mode() & 0o7777
}

/// The path of the entry for `guest` in `dir`, compiled and stored there.
pub(super) fn stored(engine: &Engine, dir: &Path, guest: &str) -> PathBuf {
    let first = attempt(engine, dir, guest);
    assert!(
        matches!(first.prepared, Prepared::Compiled(_)),
        "{}",
        first.warnings
    );
    dir.join(entry_name(engine, guest))
}

/// The tests run as root here, which may give files away; elsewhere this test cannot be set up.
pub(super) fn chown_to_nobody(path: &Path) {
    std::os::unix::fs::lchown(path, Some(65534), Some(65534))
        .expect("giving a file to `nobody` needs root (run the tests as root)");
}
