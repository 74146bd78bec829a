//! The immutable tree of directories and files the guest reads, built once and shared by every
//! instance behind `Arc`: a file's contents are [`Bytes`], so a 54 MB zip is never copied.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;

use super::abi::filetype;

/// Why a path could not be put in the tree: always the host's mistake, never the guest's.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TreeError {
    #[error("`{0}` is not a relative path of plain names (no `.`, `..`, empty names or NUL)")]
    InvalidPath(String),
    #[error("`{0}` is already in the tree, or a file stands where it needs a directory")]
    Conflict(String),
}

/// A directory: its entries sorted by name, so a `fd_readdir` cookie is an index and lookups
/// are a binary search.
#[derive(Debug)]
pub(crate) struct Dir {
    ino: u64,
    entries: Vec<(Box<str>, Node)>,
}

/// A regular file.
#[derive(Debug)]
pub(crate) struct File {
    ino: u64,
    data: Bytes,
}

/// What a name in a directory refers to. (A writable, size-bounded directory would be a variant
/// of its own here, with its budget kept by the descriptor table.)
#[derive(Debug, Clone)]
pub(crate) enum Node {
    Dir(Arc<Dir>),
    File(Arc<File>),
}

impl Dir {
    /// The entry called `name`.
    pub(crate) fn get(&self, name: &str) -> Option<&Node> {
        self.entries
            .binary_search_by(|(n, _)| (**n).cmp(name))
            .ok()
            .map(|i| &self.entries[i].1)
    }

    /// The `index`th entry of a listing, as `fd_readdir` gives them: `.`, `..`, then the entries
    /// by name; each as (name, inode, file type). `..` reports this directory's own inode, as
    /// wasmtime does: a directory does not know its parent.
    pub(crate) fn listing(&self, index: usize) -> Option<(&str, u64, u8)> {
        match index {
            0 => Some((".", self.ino, filetype::DIRECTORY)),
            1 => Some(("..", self.ino, filetype::DIRECTORY)),
            _ => {
                let (name, node) = self.entries.get(index - 2)?;
                Some((name, node.ino(), node.filetype()))
            }
        }
    }
}

impl File {
    pub(crate) fn data(&self) -> &Bytes {
        &self.data
    }
}

impl Node {
    pub(crate) fn ino(&self) -> u64 {
        match self {
            Node::Dir(d) => d.ino,
            Node::File(f) => f.ino,
        }
    }

    pub(crate) fn filetype(&self) -> u8 {
        match self {
            Node::Dir(_) => filetype::DIRECTORY,
            Node::File(_) => filetype::REGULAR_FILE,
        }
    }

    /// A file's length; a directory's size is 0.
    pub(crate) fn size(&self) -> u64 {
        match self {
            Node::Dir(_) => 0,
            Node::File(f) => f.data.len() as u64,
        }
    }
}

/// Inode numbers, unique across every tree of the process, so two preopens never share one.
static NEXT_INO: AtomicU64 = AtomicU64::new(1);

fn next_ino() -> u64 {
    NEXT_INO.fetch_add(1, Ordering::Relaxed)
}

/// Builds a tree from files at relative paths; parent directories are made as needed.
#[derive(Default)]
pub(crate) struct TreeBuilder {
    root: BTreeMap<String, Pending>,
}

enum Pending {
    Dir(BTreeMap<String, Pending>),
    File(Bytes),
}

impl TreeBuilder {
    /// Puts `data` at `path`, a relative path of plain names separated by `/`
    /// (`"matplotlib/mpl-data/matplotlibrc"`).
    pub(crate) fn insert_file(&mut self, path: &str, data: Bytes) -> Result<(), TreeError> {
        if !path.split('/').all(plain) {
            return Err(TreeError::InvalidPath(path.to_owned()));
        }
        let conflict = || TreeError::Conflict(path.to_owned());
        let (parents, file) = path.rsplit_once('/').unwrap_or(("", path));
        let mut dir = &mut self.root;
        for name in parents.split('/').filter(|n| !n.is_empty()) {
            let entry = dir
                .entry(name.to_owned())
                .or_insert_with(|| Pending::Dir(BTreeMap::new()));
            dir = match entry {
                Pending::Dir(d) => d,
                Pending::File(_) => return Err(conflict()),
            };
        }
        if dir.contains_key(file) {
            return Err(conflict());
        }
        dir.insert(file.to_owned(), Pending::File(data));
        Ok(())
    }

    /// The finished tree: its root directory, with an inode number for every node.
    pub(crate) fn build(self) -> Arc<Dir> {
        freeze(self.root)
    }
}

/// A name that can be looked up: not empty, `.` or `..`, with no `/` or NUL.
fn plain(name: &str) -> bool {
    !matches!(name, "" | "." | "..") && !name.contains(['/', '\0'])
}

fn freeze(entries: BTreeMap<String, Pending>) -> Arc<Dir> {
    let ino = next_ino();
    let entries = entries
        .into_iter()
        .map(|(name, pending)| {
            let node = match pending {
                Pending::Dir(d) => Node::Dir(freeze(d)),
                Pending::File(data) => Node::File(Arc::new(File {
                    ino: next_ino(),
                    data,
                })),
            };
            (name.into_boxed_str(), node)
        })
        .collect();
    Arc::new(Dir { ino, entries })
}
