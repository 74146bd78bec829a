//! Files without a file system: the input files a call gives the code, read-only under
//! [`DATA_DIR`], and the folder it may write, [`OUT_DIR`], both in host memory and nothing of the
//! host's. [`InputFiles`] checks what a client sends (paths, counts, sizes, depth) into typed
//! errors that name the problem; [`crate::outcome::OutputFile`] is what the code wrote, read back
//! after the call.
//!
//! The guests find folders by scanning the preopened descriptors once (wasi-libc), and both
//! guests' snapshots were taken after that scan, with no folder to find. So when a call brings
//! files, the host clears the flag that records the scan ([`super::scan_flag`]: found in the module
//! by reading the one function that sets it), and the guest scans again on its next path.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;

use crate::vfs::{Dir, Folder, FolderLimits, TreeBuilder};

use safe_python_protocol as protocol;
pub use safe_python_protocol::{DATA_DIR, OUT_DIR};

/// Bounds on the files of a call; each default is stated with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileLimits {
    /// Input files at most. Default: 256.
    pub max_files: usize,
    /// Bytes of one input file at most. Default: 32 MiB.
    pub max_file_bytes: usize,
    /// Bytes of all input files at most. Default: 64 MiB.
    pub max_total_bytes: usize,
    /// Folders from `/data` down to a file, the file included, at most (`a/b/c.csv` is 3); the
    /// same for what the code writes under `/out`. Default: 8.
    pub max_depth: usize,
    /// Bytes of a relative path at most. Default: 255.
    pub max_path_bytes: usize,
    /// Files and folders the code may make under `/out`. Default: 256.
    pub max_out_entries: usize,
    /// Bytes of all files under `/out` at most; they also count against the memory limit.
    /// Default: 64 MiB.
    pub max_out_bytes: usize,
}

impl Default for FileLimits {
    fn default() -> Self {
        FileLimits {
            max_files: 256,
            max_file_bytes: 32 << 20,
            max_total_bytes: 64 << 20,
            max_depth: 8,
            max_path_bytes: 255,
            max_out_entries: 256,
            max_out_bytes: 64 << 20,
        }
    }
}

impl FileLimits {
    pub(crate) fn folder(&self) -> FolderLimits {
        FolderLimits {
            max_entries: self.max_out_entries,
            max_depth: self.max_depth,
            max_bytes: self.max_out_bytes,
        }
    }
}

/// Why input files were refused: the client's mistake, named so that it can fix it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FilesError {
    #[error("file path `{0}` is absolute: give a path relative to {DATA_DIR}, such as `sales.csv`")]
    Absolute(String),
    #[error(
        "file path `{0}` is not a plain relative path: no empty names, `.`, `..`, backslashes or control characters"
    )]
    NotPlain(String),
    #[error("file path `{path}` is {len} bytes long; at most {max}")]
    PathTooLong {
        path: String,
        len: usize,
        max: usize,
    },
    #[error("file path `{path}` is {depth} folders deep; at most {max}")]
    TooDeep {
        path: String,
        depth: usize,
        max: usize,
    },
    #[error("{count} files given; at most {max}")]
    TooMany { count: usize, max: usize },
    #[error("file `{path}` is {size} bytes; at most {max} per file")]
    FileTooLarge {
        path: String,
        size: usize,
        max: usize,
    },
    #[error("the files total {total} bytes; at most {max}")]
    TotalTooLarge { total: usize, max: usize },
    #[error("file path `{0}` is given twice, or is both a file and a folder")]
    Conflict(String),
}

/// Input files, checked: relative paths to their bytes, served read-only under [`DATA_DIR`].
/// Cheap to clone (the bytes are shared).
#[derive(Debug, Clone, Default)]
pub struct InputFiles {
    files: BTreeMap<String, Bytes>,
    limits: FileLimits,
}

impl InputFiles {
    /// Checks `files` (relative path, content) against `limits`.
    pub fn new(
        files: impl IntoIterator<Item = (String, Vec<u8>)>,
        limits: FileLimits,
    ) -> Result<InputFiles, FilesError> {
        let mut checked = InputFiles {
            files: BTreeMap::new(),
            limits,
        };
        checked.add(files.into_iter().map(|(p, b)| (p, Bytes::from(b))))?;
        Ok(checked)
    }

    /// Adds `files`, replacing those at the same paths (a session's next call), within the limits.
    pub fn add(
        &mut self,
        files: impl IntoIterator<Item = (String, Bytes)>,
    ) -> Result<(), FilesError> {
        let limits = self.limits;
        for (path, bytes) in files {
            check_path(&path, &limits)?;
            if bytes.len() > limits.max_file_bytes {
                return Err(FilesError::FileTooLarge {
                    size: bytes.len(),
                    path,
                    max: limits.max_file_bytes,
                });
            }
            self.files.insert(path, bytes);
            if self.files.len() > limits.max_files {
                return Err(FilesError::TooMany {
                    count: self.files.len(),
                    max: limits.max_files,
                });
            }
        }
        let total = self.total_bytes();
        if total > limits.max_total_bytes {
            return Err(FilesError::TotalTooLarge {
                total,
                max: limits.max_total_bytes,
            });
        }
        // A path that is also a folder of another is found when the tree is built.
        self.tree().map(drop)
    }

    /// Merges `other` into these files (a session's next call).
    pub fn merge(&mut self, other: &InputFiles) -> Result<(), FilesError> {
        self.add(other.files.iter().map(|(p, b)| (p.clone(), b.clone())))
    }

    #[cfg_attr(not(feature = "store"), allow(dead_code))]
    /// Each file's path and bytes, in path order.
    pub(crate) fn files(&self) -> impl Iterator<Item = (&str, &[u8])> {
        self.files.iter().map(|(p, b)| (p.as_str(), &b[..]))
    }

    pub fn limits(&self) -> &FileLimits {
        &self.limits
    }

    pub fn len(&self) -> usize {
        self.files.len()
    }

    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// Bytes of all the files.
    pub fn total_bytes(&self) -> usize {
        self.files.values().map(Bytes::len).sum()
    }

    /// The read-only tree the guest sees under [`DATA_DIR`].
    pub(crate) fn tree(&self) -> Result<Arc<Dir>, FilesError> {
        let mut tree = TreeBuilder::default();
        for (path, bytes) in &self.files {
            tree.insert_file(path, bytes.clone())
                .map_err(|_| FilesError::Conflict(path.clone()))?;
        }
        Ok(tree.build())
    }
}

fn check_path(path: &str, limits: &FileLimits) -> Result<(), FilesError> {
    if path.len() > limits.max_path_bytes {
        return Err(FilesError::PathTooLong {
            path: path.chars().take(limits.max_path_bytes).collect(),
            len: path.len(),
            max: limits.max_path_bytes,
        });
    }
    if path.starts_with('/') {
        return Err(FilesError::Absolute(path.to_owned()));
    }
    let plain = |name: &str| {
        !matches!(name, "" | "." | "..") && !name.chars().any(|c| c == '\\' || c.is_control())
    };
    if !path.split('/').all(plain) {
        return Err(FilesError::NotPlain(path.to_owned()));
    }
    let depth = path.split('/').count();
    if depth > limits.max_depth {
        return Err(FilesError::TooDeep {
            path: path.to_owned(),
            depth,
            max: limits.max_depth,
        });
    }
    Ok(())
}

/// An empty `/out` within the limits of `files`.
pub(crate) fn new_folder(files: &InputFiles) -> Folder {
    Folder::new(files.limits.folder())
}

/// The Python that makes the CPython engine's `open` (and `io.open`) say where files live when it
/// fails, as the RustPython guest's own `open` does. `{data}`, `{here}` and `{nowhere}` are
/// [`DATA_DIR`], [`protocol::FILES_ARE_HERE`] and [`protocol::NO_FILES_HERE`].
const OPEN_SHIM: &str = r#"
def _install_files():
    import builtins, errno, io, _io, posix
    real_open, stat = _io.open, posix.stat
    denied = {errno.EACCES, errno.EPERM, errno.EROFS, getattr(errno, "ENOTCAPABLE", 76)}
    def where():
        try:
            stat("{data}")
        except OSError:
            return "{nowhere}"
        return "{here}"
    def open(file, mode="r", buffering=-1, encoding=None, errors=None, newline=None,
             closefd=True, opener=None):
        try:
            return real_open(file, mode, buffering, encoding, errors, newline, closefd, opener)
        except OSError as e:
            if isinstance(file, int) or e.errno is None:
                raise
            kind = PermissionError if e.errno in denied else type(e)
            raise kind(e.errno, "%s: %s" % (e.strerror, where()), file) from None
    open.__doc__ = real_open.__doc__
    builtins.open = open
    io.open = open
_install_files()
"#;

/// A driver turn that installs [`OPEN_SHIM`] into the CPython engine's template, so that every
/// instance has it. The shim runs in a namespace of its own: its `open.__globals__` is that
/// namespace, not the turn's, which user code must not reach.
pub(crate) fn open_shim_turn() -> String {
    let shim = OPEN_SHIM
        .replace("{data}", DATA_DIR)
        .replace("{here}", protocol::FILES_ARE_HERE)
        .replace("{nowhere}", protocol::NO_FILES_HERE);
    // Rust's escaping of this ASCII text is a valid Python string literal.
    debug_assert!(shim.is_ascii());
    format!("exec(compile({shim:?}, '<files>', 'exec'), {{'__builtins__': __builtins__}})\n")
}

/// What [`OPEN_SHIM`] imports.
pub(crate) const OPEN_SHIM_IMPORTS: [&str; 5] = ["builtins", "errno", "io", "_io", "posix"];
