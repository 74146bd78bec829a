//! The cache's trust rules, each tried against the attack it stops.

mod mapping;
mod shipped;
mod support;

use super::*;
use crate::engine;
use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use support::*;

#[test]
fn compiles_once_then_loads_and_keeps_its_files_private() {
    let engine = engine::new(Default::default(), Default::default()).unwrap();
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
    let engine = engine::new(Default::default(), Default::default()).unwrap();
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
    let engine = engine::new(Default::default(), Default::default()).unwrap();
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
                let engine = engine::new(Default::default(), Default::default()).unwrap();
                let other = stored(&engine, dir, "11");
                fs::copy(other, entry).unwrap();
            }),
            "MAC does not match",
        ),
        (
            "an artifact without a MAC (written by an older version)",
            Box::new(|_, entry| {
                let engine = engine::new(Default::default(), Default::default()).unwrap();
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
    let engine = engine::new(Default::default(), Default::default()).unwrap();
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
                fs::set_permissions(dir.join(KEY_FILE), fs::Permissions::from_mode(0o644)).unwrap();
                dir.to_owned()
            }),
            "key: its mode is 0644",
        ),
        (
            "a key of another user",
            Box::new(|dir| {
                fs::create_dir_all(dir).unwrap();
                fs::write(dir.join(KEY_FILE), [1; KEY_LEN]).unwrap();
                fs::set_permissions(dir.join(KEY_FILE), fs::Permissions::from_mode(0o600)).unwrap();
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
                fs::set_permissions(dir.join(KEY_FILE), fs::Permissions::from_mode(0o600)).unwrap();
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
    let engine = engine::new(Default::default(), Default::default()).unwrap();
    let refused = attempt(&engine, Path::new("/proc/self/no-such-dir"), GUEST);
    assert_eq!(refused.prepared, Prepared::CompiledUncached);
    assert!(refused.warnings.contains("not using the cache directory"));
}
