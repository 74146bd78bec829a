//! The release builds of the platforms this Linux x86_64 machine can only emulate, run from their
//! archives as `scripts/dist.sh` leaves them: Linux aarch64 under qemu-user, Windows x86_64 under
//! wine 8. Each must run code with its shipped compiled guest, compiling nothing.

use crate::common;
use crate::dist::{built_here, is_empty, unpacked_archive};
use crate::install::run_ok;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// What `print(2**100)` prints.
const BIG: &str = "1267650600228229401496703205376";

/// The Rust target dist.sh built for `platform`.
fn target(platform: &str) -> String {
    built_here()
        .into_iter()
        .find(|(p, _)| p == platform)
        .unwrap_or_else(|| panic!("scripts/dist.sh does not build {platform} here"))
        .1
}

#[test]
fn the_linux_aarch64_build_runs_under_qemu_with_its_shipped_guest() {
    let work = common::temp_dir("qemu");
    let dir = unpacked_archive(&target("linux-arm64"), work.path());
    let cache = work.path().join("module-cache");
    // qemu-user backs the instance pool's address-space reservation (terabytes) with real memory:
    // under an address-space limit the reservation fails and the pool is skipped, as it should be.
    let started = Instant::now();
    let out = run_ok(
        Command::new("bash")
            .arg("-c")
            .arg(r#"ulimit -v 16000000 && exec qemu-aarch64-static -L /usr/aarch64-linux-gnu "$@""#)
            .arg("qemu")
            .arg(dir.join("sandbox-run"))
            .args(["-c", "print(2**100)"])
            .env("SAFE_PYTHON_CACHE_DIR", &cache),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!(
        "aarch64 sandbox-run under qemu: {:.1} s, stderr: {}",
        started.elapsed().as_secs_f64(),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout.trim(), BIG);
    assert!(
        is_empty(&cache),
        "the aarch64 build compiled its guest instead of loading the shipped one"
    );
}

/// A wine prefix of its own, whose wineserver is stopped when it is dropped.
struct Wine {
    prefix: tempfile::TempDir,
}

impl Wine {
    fn new(name: &str) -> Wine {
        Wine {
            prefix: common::temp_dir(name),
        }
    }

    /// Runs `exe` (in `dir`) with `args` and the module cache `cache`; returns its stdout and how
    /// long it took.
    fn run(&self, dir: &Path, exe: &str, args: &[&str], cache: &Path) -> (String, Duration) {
        let started = Instant::now();
        let out = run_ok(
            Command::new("wine")
                .arg(dir.join(exe))
                .args(args)
                .env("WINEPREFIX", self.prefix.path())
                .env("WINEDEBUG", "-all")
                .env("SAFE_PYTHON_CACHE_DIR", windows_path(cache)),
        );
        (
            String::from_utf8_lossy(&out.stdout).replace("\r\n", "\n"),
            started.elapsed(),
        )
    }
}

impl Drop for Wine {
    fn drop(&mut self) {
        let _ = Command::new("wineserver")
            .arg("-k")
            .env("WINEPREFIX", self.prefix.path())
            .status();
    }
}

/// `path` as a Windows program under wine sees it: the host's `/` is drive `Z:`.
fn windows_path(path: &Path) -> String {
    format!("Z:{}", path.display()).replace('/', "\\")
}

/// Builds the test-only `ProcessPrng` stand-in (tests/long/wine/bcryptprimitives.c) into `dir`.
fn stand_in_dll(dir: &Path) {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/long/wine/bcryptprimitives.c");
    run_ok(
        Command::new("x86_64-w64-mingw32-gcc")
            .args(["-shared", "-O2", "-o"])
            .arg(dir.join("bcryptprimitives.dll"))
            .arg(source)
            .arg("-ladvapi32"),
    );
}

/// The DLLs `exe` imports, as its import table names them.
fn imported_dlls(exe: &Path) -> Vec<String> {
    let out = run_ok(
        Command::new("x86_64-w64-mingw32-objdump")
            .arg("-p")
            .arg(exe),
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.trim().strip_prefix("DLL Name: "))
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_windows_build_runs_under_wine_loads_its_cache_and_its_shipped_guest() {
    let work = common::temp_dir("wine");
    let shipped = unpacked_archive(&target("win32-x64"), work.path());
    // Only Windows' own DLLs: none of MinGW's runtime (libgcc_s, libwinpthread, libstdc++), which
    // a user's machine does not have.
    for exe in ["sandbox-run.exe", "safe-python-mcp.exe"] {
        let dlls = imported_dlls(&shipped.join(exe));
        assert!(!dlls.is_empty(), "{exe} imports nothing?");
        let foreign: Vec<_> = dlls
            .iter()
            .filter(|d| d.to_ascii_lowercase().starts_with("lib"))
            .collect();
        assert!(foreign.is_empty(), "{exe} needs MinGW's {foreign:?}");
    }
    stand_in_dll(&shipped);
    // The same binaries without the shipped guest: the first start compiles and caches it, the
    // second must load the cache (under wine, mapping it used to fail and every start compiled).
    let bare = work.path().join("bare");
    std::fs::create_dir(&bare).unwrap();
    for file in ["sandbox-run.exe", "bcryptprimitives.dll"] {
        std::fs::copy(shipped.join(file), bare.join(file)).unwrap();
    }
    let code = ["-c", "print(2**100)"];
    let wine = Wine::new("wine-prefix");
    let cache = work.path().join("module-cache");
    let (out, compiled) = wine.run(&bare, "sandbox-run.exe", &code, &cache);
    assert_eq!(out.trim(), BIG);
    assert!(!is_empty(&cache), "the first start cached nothing");
    let (out, loaded) = wine.run(&bare, "sandbox-run.exe", &code, &cache);
    assert_eq!(out.trim(), BIG);
    eprintln!(
        "sandbox-run.exe under wine: first start (compiles) {:.1} s, second (cached) {:.1} s",
        compiled.as_secs_f64(),
        loaded.as_secs_f64()
    );
    assert!(
        loaded * 4 < compiled,
        "the second start ({loaded:?}) was not much quicker than the compile ({compiled:?})"
    );

    // From the archive, in a fresh prefix with a fresh cache: the shipped guest, nothing compiled.
    let wine = Wine::new("wine-prefix-fresh");
    let fresh = work.path().join("fresh-cache");
    let (out, shipped_start) = wine.run(&shipped, "sandbox-run.exe", &code, &fresh);
    assert_eq!(out.trim(), BIG);
    let (check, _) = wine.run(&shipped, "safe-python-mcp.exe", &["--check"], &fresh);
    assert!(check.contains("self-test passed"), "{check}");
    eprintln!(
        "sandbox-run.exe under wine with the shipped guest, fresh prefix: {:.1} s",
        shipped_start.as_secs_f64()
    );
    assert!(
        is_empty(&fresh),
        "the Windows build compiled its guest instead of loading the shipped one"
    );
}
