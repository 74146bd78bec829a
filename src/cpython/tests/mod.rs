//! Installing, finding and downloading the artifacts, each tried against fakes of the wheel: small
//! zips built here, with pins computed for them. All offline; the real wheel only in one ignored
//! test that the maintainers run.

#[cfg(feature = "fetch")]
mod fetch;
mod install;

use std::fs;
use std::io::{Cursor, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, ZipWriter};

use super::pins::LICENCES;
use super::{Member, PINNED, Pins, Progress, Stage, Wheel};

fn sha256(bytes: &[u8]) -> String {
    format!("{:x}", Sha256::digest(bytes))
}

/// A file of the fake wheel's artifacts folder: its path in that folder, bytes and SHA-256.
struct File {
    name: String,
    bytes: Vec<u8>,
    sha256: String,
}

impl File {
    fn new(name: &str, bytes: Vec<u8>) -> File {
        File {
            name: name.to_owned(),
            sha256: sha256(&bytes),
            bytes,
        }
    }
}

/// A fake of the wheel: its artifacts folder, and the bytes of the archive holding it.
struct Fake {
    files: Vec<File>,
    wheel: Vec<u8>,
    wheel_sha256: String,
}

/// The usual folder: every pinned member (the snapshot longer than one copy chunk), two licences,
/// `python.wasm`, which is not installed, and `SHA256SUMS` listing them all.
fn usual_files() -> Vec<File> {
    let pattern = |seed: u8, len: usize| -> Vec<u8> {
        (0..len).map(|i| (i as u8).wrapping_mul(seed)).collect()
    };
    let mut files = vec![
        File::new(PINNED.snapshot.name, pattern(7, 200_000)),
        File::new(PINNED.stdlib.name, pattern(13, 70_000)),
        File::new(
            PINNED.manifest.name,
            b"python 3.15.0\npackage zlib 1.3.1\n".to_vec(),
        ),
        File::new("python.wasm", b"\0asm not installed".to_vec()),
        File::new("LICENSES/cpython.txt", b"PSF LICENSE AGREEMENT".to_vec()),
        File::new("LICENSES/zlib.txt", b"zlib License".to_vec()),
    ];
    files.push(sums(&files));
    files
}

/// `SHA256SUMS` for `files`, as `sha256sum` writes it.
fn sums(files: &[File]) -> File {
    let list: String = files
        .iter()
        .map(|f| format!("{}  {}\n", f.sha256, f.name))
        .collect();
    File::new(PINNED.sums.name, list.into_bytes())
}

impl Fake {
    fn new() -> Fake {
        Fake::with(usual_files(), &[])
    }

    /// An archive of `files` under the artifacts folder, plus `raw` entries at exactly their paths.
    fn with(files: Vec<File>, raw: &[(&str, &[u8])]) -> Fake {
        let mut zip = ZipWriter::new(Cursor::new(Vec::new()));
        let options = SimpleFileOptions::default().compression_method(CompressionMethod::Deflated);
        let entries = files
            .iter()
            .map(|f| (format!("{}{}", PINNED.prefix, f.name), &f.bytes[..]));
        let raw = raw.iter().map(|(path, bytes)| (path.to_string(), *bytes));
        for (path, bytes) in entries.chain(raw) {
            zip.start_file(path, options).unwrap();
            zip.write_all(bytes).unwrap();
        }
        let wheel = zip.finish().unwrap().into_inner();
        Fake {
            files,
            wheel_sha256: sha256(&wheel),
            wheel,
        }
    }

    fn file(&self, name: &str) -> Option<&File> {
        self.files.iter().find(|f| f.name == name)
    }

    /// Pins that match this fake, served from `url`. A member it lacks is pinned as empty.
    fn pins<'a>(&'a self, url: &'a str) -> Pins<'a> {
        let member = |name: &'static str| match self.file(name) {
            Some(file) => Member {
                name,
                size: file.bytes.len() as u64,
                sha256: &file.sha256,
            },
            None => Member {
                name,
                size: 0,
                sha256: "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
            },
        };
        Pins {
            wheel: Wheel {
                url,
                size: self.wheel.len() as u64,
                sha256: &self.wheel_sha256,
                ..PINNED.wheel
            },
            snapshot: member(PINNED.snapshot.name),
            stdlib: member(PINNED.stdlib.name),
            manifest: member(PINNED.manifest.name),
            sums: member(PINNED.sums.name),
            ..PINNED
        }
    }

    /// Writes the wheel into `dir`, under its real name.
    fn write(&self, dir: &Path) -> PathBuf {
        let path = dir.join(PINNED.wheel.name);
        fs::write(&path, &self.wheel).unwrap();
        path
    }

    /// Whether `installed` holds exactly what an install of this fake must: the pinned members and
    /// the licences, nothing else.
    fn assert_installed(&self, installed: &Path) {
        let mut expected: Vec<&str> = vec![LICENCES];
        for file in &self.files {
            if file.name.starts_with(LICENCES)
                || PINNED.members().iter().any(|m| m.name == file.name)
            {
                assert_eq!(fs::read(installed.join(&file.name)).unwrap(), file.bytes);
                expected.extend(file.name.split('/').next());
            }
        }
        expected.sort();
        expected.dedup();
        let mut found: Vec<String> = names(installed);
        found.sort();
        assert_eq!(found, expected);
    }
}

/// The names in a directory.
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Checks that `seen` goes through `stages` in order, each from 0 up to its total.
fn assert_stages(seen: &[Progress], stages: &[Stage]) {
    let mut order: Vec<Stage> = seen.iter().map(|p| p.stage).collect();
    order.dedup();
    assert_eq!(order, stages);
    for stage in stages {
        let of: Vec<&Progress> = seen.iter().filter(|p| p.stage == *stage).collect();
        assert_eq!(of[0].done, 0, "{stage:?} starts at 0");
        assert!(
            of.windows(2).all(|w| w[0].done <= w[1].done),
            "{stage:?} goes forward"
        );
        let last = of[of.len() - 1];
        assert_eq!(last.done, last.total, "{stage:?} ends at its total");
    }
}
