//! Whether the cache directory and the files in it can be trusted: opened without following
//! symbolic links, owned by this user, writable by nobody else; the MAC key; temporary files and
//! directories, locks, and what killed writers leave behind. Shared with [`crate::cpython`], which
//! installs the CPython engine's artifacts into the same directory under the same rules.

use std::io::{self, Read, Write};
use std::path::Path;

use cap_fs_ext::{DirExt, FollowSymlinks, OpenOptionsFollowExt};
use cap_std::ambient_authority;
use cap_std::fs::{Dir, File, Metadata, OpenOptions};

use super::{KEY_FILE, KEY_LEN, TEMPORARY_INFIX};

/// Why the cache directory, or a file in it, is not trusted.
#[derive(Debug, thiserror::Error)]
pub enum Distrust {
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
    pub(crate) fn is_not_found(&self) -> bool {
        matches!(self, Distrust::Io(e) if e.kind() == io::ErrorKind::NotFound)
    }

    pub(crate) fn in_file(self, file: &str) -> Distrust {
        Distrust::In {
            file: file.to_owned(),
            why: Box::new(self),
        }
    }
}

/// Who may write a file or directory of the cache, besides its owner.
#[derive(Clone, Copy)]
pub(crate) enum Private {
    /// Nobody else may write it (the directory, entries, the lock).
    Writes,
    /// Nobody else may read or write it (the key).
    Everything,
}

/// Opens (creating it 0700 if missing) the cache directory, and checks that it can be trusted.
pub(crate) fn open_dir(path: &Path) -> Result<Dir, Distrust> {
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
pub(crate) fn open_checked(
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

pub(crate) fn read_only() -> OpenOptions {
    let mut options = OpenOptions::new();
    options.read(true);
    options
}

pub(crate) fn set_private_mode(options: &mut OpenOptions) {
    #[cfg(unix)]
    cap_std::fs::OpenOptionsExt::mode(options, 0o600);
    #[cfg(not(unix))]
    let _ = options;
}

/// Refuses what this user does not own, and what others may write (or read, if `Everything`).
#[cfg(unix)]
pub(crate) fn check_owner(meta: &Metadata, private: Private) -> Result<(), Distrust> {
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
pub(crate) fn check_owner(_: &Metadata, _: Private) -> Result<(), Distrust> {
    Ok(())
}

/// The cache's MAC key, created on first use.
pub(super) fn key(dir: &Dir) -> Result<[u8; KEY_LEN], Distrust> {
    match read_key(dir) {
        Err(why) if why.is_not_found() => {
            create_key(dir)?;
            read_key(dir)
        }
        read => read,
    }
}

pub(super) fn read_key(dir: &Dir) -> Result<[u8; KEY_LEN], Distrust> {
    let file = open_checked(dir, KEY_FILE, &read_only(), Private::Everything)?;
    let mut bytes = Vec::with_capacity(KEY_LEN + 1);
    file.take(KEY_LEN as u64 + 1).read_to_end(&mut bytes)?;
    bytes.try_into().map_err(|_| Distrust::KeyLength)
}

/// Writes a random key to a temporary file, then links it into place: a concurrent reader never
/// sees a partial key, and when two processes race the first link wins and both use it.
pub(super) fn create_key(dir: &Dir) -> Result<(), Distrust> {
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

/// Creates `<prefix>.tmp-<128 random bits>`, exclusively (so never through a link) and 0600, open
/// for writing and for reading back what was written.
pub(crate) fn create_temporary(dir: &Dir, prefix: &str) -> io::Result<(String, File)> {
    let name = random_name(prefix, TEMPORARY_INFIX)?;
    let mut options = OpenOptions::new();
    options.read(true).write(true).create_new(true);
    set_private_mode(&mut options);
    let file = dir.open_with(&name, &options)?;
    Ok((name, file))
}

/// `<prefix><infix><128 random bits>`: a name no other writer picks.
pub(crate) fn random_name(prefix: &str, infix: &str) -> io::Result<String> {
    let mut bits = [0u8; 16];
    random(&mut bits)?;
    Ok(format!("{prefix}{infix}{:032x}", u128::from_le_bytes(bits)))
}

/// Creates the directory `name` in `dir`, 0700 and exclusively (an existing name, a link
/// included, is an error), and opens it.
pub(crate) fn create_private_dir(dir: &Dir, name: &str) -> Result<Dir, Distrust> {
    #[cfg_attr(not(unix), expect(unused_mut, reason = "only Unix sets the mode"))]
    let mut builder = cap_std::fs::DirBuilder::new();
    #[cfg(unix)]
    cap_std::fs::DirBuilderExt::mode(&mut builder, 0o700);
    dir.create_dir_with(name, &builder)?;
    open_subdir(dir, name)
}

/// Opens the directory `name` in `dir` without following a symbolic link, and checks it is this
/// user's and that nobody else can write to it.
pub(crate) fn open_subdir(dir: &Dir, name: &str) -> Result<Dir, Distrust> {
    let sub = dir
        .open_dir_nofollow(name)
        .map_err(|e| match dir.symlink_metadata(name) {
            Ok(meta) if meta.is_symlink() => Distrust::Symlink,
            _ => Distrust::Io(e),
        })?;
    check_owner(&sub.dir_metadata()?, Private::Writes)?;
    Ok(sub)
}

/// Takes the lock file `name` in `dir`, waiting while another process holds it. Held until the
/// returned file is dropped.
pub(crate) fn lock(dir: &Dir, name: &str) -> Result<std::fs::File, Distrust> {
    let mut options = OpenOptions::new();
    options.read(true).write(true).create(true);
    set_private_mode(&mut options);
    let lock = open_checked(dir, name, &options, Private::Writes)
        .map_err(|why| why.in_file(name))?
        .into_std();
    lock.lock()?;
    Ok(lock)
}

/// Removes every file and directory in `dir` whose name starts with `prefix`: what a process killed
/// while writing left behind. Only call it under the lock its writers take, so that none of them
/// belongs to a live writer. Best effort: what cannot be removed stays, and is never read.
pub(crate) fn remove_stale(dir: &Dir, prefix: &str) {
    let Ok(entries) = dir.entries() else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().starts_with(prefix) {
            continue;
        }
        // A link is removed itself, never what it points to.
        let _ = match entry.file_type() {
            Ok(kind) if kind.is_dir() => dir.remove_dir_all(&name),
            _ => dir.remove_file(&name),
        };
    }
}

pub(super) fn random(bytes: &mut [u8]) -> io::Result<()> {
    getrandom::fill(bytes)
        .map_err(|e| io::Error::other(format!("no random bytes from the system: {e}")))
}
