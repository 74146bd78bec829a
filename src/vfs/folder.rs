//! The writable folder (`/out`): directories and files kept in host memory, in one store, within
//! bounds on how many entries, how deep and how many bytes. Nothing in it ever reaches the host's
//! file system; the host reads it back after a call ([`Folder::files`]).
//!
//! Nodes are numbered (their inode); a directory maps names to numbers and knows its parent, so
//! `..` never climbs above the folder. A file's bytes are shared behind `Arc` and copied on the
//! first write after a [`Clone`]: a session keeps a clone as its undo state for the price of the
//! index, not of the bytes.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::abi::{Errno, filetype};

/// Bounds of a writable folder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FolderLimits {
    /// Files and directories, the folder itself not counted.
    pub(crate) max_entries: usize,
    /// Directories from the folder down to a file, the file included (`a/b/c.txt` is 3).
    pub(crate) max_depth: usize,
    /// Bytes of all files together, at most. The store's memory limit also bounds them
    /// ([`Folder::set_memory_limit`]).
    pub(crate) max_bytes: usize,
}

/// The longest name a directory entry may have, as on common file systems.
const MAX_NAME: usize = 255;

/// Inode numbers of folder nodes start here, far from the read-only trees' (counted from 1).
const INO_BASE: u64 = 1 << 48;

#[derive(Debug, Clone)]
pub(crate) enum Node {
    Dir {
        parent: u64,
        entries: BTreeMap<Box<str>, u64>,
    },
    File(Arc<Vec<u8>>),
}

/// A writable folder.
#[derive(Debug, Clone)]
pub(crate) struct Folder {
    pub(super) nodes: HashMap<u64, Node>,
    next: u64,
    limits: FolderLimits,
    /// The bytes its files hold, shared with the store's memory limiter, which counts them with
    /// linear memory.
    bytes: Arc<AtomicUsize>,
    /// Linear memory plus file bytes may not pass this (the call's memory limit).
    memory_limit: usize,
}

/// What `open` found or made.
pub(crate) struct Opened {
    pub(crate) ino: u64,
    pub(crate) is_dir: bool,
}

impl Folder {
    pub(crate) const ROOT: u64 = INO_BASE;

    pub(crate) fn new(limits: FolderLimits) -> Folder {
        let root = Node::Dir {
            parent: Self::ROOT,
            entries: BTreeMap::new(),
        };
        Folder {
            nodes: HashMap::from([(Self::ROOT, root)]),
            next: Self::ROOT + 1,
            limits,
            bytes: Arc::default(),
            memory_limit: usize::MAX,
        }
    }

    /// The counter of file bytes, for the memory limiter.
    pub(crate) fn bytes_counter(&self) -> Arc<AtomicUsize> {
        self.bytes.clone()
    }

    /// Bytes its files hold.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }

    pub(crate) fn set_memory_limit(&mut self, limit: usize) {
        self.memory_limit = limit;
    }

    /// A copy with a counter of its own, to be restored into another store.
    pub(crate) fn detached(&self) -> Folder {
        Folder {
            bytes: Arc::new(AtomicUsize::new(self.bytes())),
            ..self.clone()
        }
    }

    pub(crate) fn node(&self, ino: u64) -> Result<&Node, Errno> {
        self.nodes.get(&ino).ok_or(Errno::Badf)
    }

    pub(crate) fn stat(&self, ino: u64) -> Result<(u8, u64), Errno> {
        Ok(match self.node(ino)? {
            Node::Dir { .. } => (filetype::DIRECTORY, 0),
            Node::File(data) => (filetype::REGULAR_FILE, data.len() as u64),
        })
    }

    pub(super) fn entries(&self, ino: u64) -> Result<&BTreeMap<Box<str>, u64>, Errno> {
        match self.node(ino)? {
            Node::Dir { entries, .. } => Ok(entries),
            Node::File(_) => Err(Errno::Notdir),
        }
    }

    /// The node at `path` from the directory `base`.
    pub(crate) fn resolve(&self, base: u64, path: &str) -> Result<u64, Errno> {
        if path.is_empty() {
            return Err(Errno::Noent);
        }
        let (parent, name) = self.parent_of(base, path)?;
        match name {
            None => Ok(parent),
            Some(name) => self.entries(parent)?.get(name).copied().ok_or(Errno::Noent),
        }
    }

    /// The directory that holds the last name of `path`, and that name (`None` when the path
    /// ends at a directory: `.`, `..` or nothing). An absolute path, or `..` above the folder,
    /// is `ENOTCAPABLE`.
    fn parent_of<'p>(&self, base: u64, path: &'p str) -> Result<(u64, Option<&'p str>), Errno> {
        if path.starts_with('/') {
            return Err(Errno::Notcapable);
        }
        let trimmed = path.trim_end_matches('/');
        let must_be_dir = trimmed.len() != path.len();
        let (head, last) = trimmed.rsplit_once('/').unwrap_or(("", trimmed));
        let mut here = base;
        for name in head.split('/') {
            here = self.step(here, name)?;
        }
        match last {
            "" | "." => Ok((here, None)),
            ".." => Ok((self.step(here, "..")?, None)),
            name => {
                if must_be_dir && let Some(&ino) = self.entries(here)?.get(name) {
                    self.entries(ino)?;
                }
                Ok((here, Some(name)))
            }
        }
    }

    /// One step of a walk from the directory `here`.
    fn step(&self, here: u64, name: &str) -> Result<u64, Errno> {
        let entries = self.entries(here)?;
        match name {
            "" | "." => Ok(here),
            ".." if here == Self::ROOT => Err(Errno::Notcapable),
            ".." => match self.node(here)? {
                Node::Dir { parent, .. } => Ok(*parent),
                Node::File(_) => Err(Errno::Notdir),
            },
            _ => {
                let ino = *entries.get(name).ok_or(Errno::Noent)?;
                self.entries(ino).map(|_| ino)
            }
        }
    }

    /// How deep `dir` is: the folder is 0.
    fn depth(&self, mut dir: u64) -> usize {
        let mut depth = 0;
        while dir != Self::ROOT {
            match self.nodes.get(&dir) {
                Some(Node::Dir { parent, .. }) => dir = *parent,
                _ => break,
            }
            depth += 1;
        }
        depth
    }

    /// Checks that `name` may be added to `dir`.
    fn check_new(&self, dir: u64, name: &str) -> Result<(), Errno> {
        if name.contains('\0') {
            return Err(Errno::Inval);
        }
        if name.len() > MAX_NAME {
            return Err(Errno::Nametoolong);
        }
        if self.nodes.len() > self.limits.max_entries {
            return Err(Errno::Nospc);
        }
        if self.depth(dir) + 1 > self.limits.max_depth {
            return Err(Errno::Nospc);
        }
        Ok(())
    }

    fn add(&mut self, dir: u64, name: &str, node: Node) -> Result<u64, Errno> {
        self.check_new(dir, name)?;
        let ino = self.next;
        self.next += 1;
        self.nodes.insert(ino, node);
        if let Some(Node::Dir { entries, .. }) = self.nodes.get_mut(&dir) {
            entries.insert(name.into(), ino);
        }
        Ok(ino)
    }

    /// Opens (or creates, with `create`; empties, with `truncate`) what is at `path`.
    pub(crate) fn open(
        &mut self,
        base: u64,
        path: &str,
        create: bool,
        exclusive: bool,
        truncate: bool,
    ) -> Result<Opened, Errno> {
        let (dir, name) = self.parent_of(base, path)?;
        let found = match name {
            None => Some(dir),
            Some(name) => self.entries(dir)?.get(name).copied(),
        };
        let ino = match (found, name) {
            (Some(_), _) if create && exclusive => return Err(Errno::Exist),
            (Some(ino), _) => ino,
            (None, Some(name)) if create => self.add(dir, name, Node::File(Arc::default()))?,
            (None, _) => return Err(Errno::Noent),
        };
        let is_dir = matches!(self.node(ino)?, Node::Dir { .. });
        if truncate && !is_dir {
            self.resize(ino, 0)?;
        }
        Ok(Opened { ino, is_dir })
    }

    pub(crate) fn mkdir(&mut self, base: u64, path: &str) -> Result<(), Errno> {
        let (dir, name) = self.parent_of(base, path)?;
        let name = name.ok_or(Errno::Exist)?;
        if self.entries(dir)?.contains_key(name) {
            return Err(Errno::Exist);
        }
        let node = Node::Dir {
            parent: dir,
            entries: BTreeMap::new(),
        };
        self.add(dir, name, node).map(drop)
    }

    /// Removes a file (`dir` false) or an empty directory (`dir` true).
    pub(crate) fn remove(&mut self, base: u64, path: &str, dir: bool) -> Result<(), Errno> {
        let (parent, name) = self.parent_of(base, path)?;
        let name = name.ok_or(if dir { Errno::Inval } else { Errno::Isdir })?;
        let ino = *self.entries(parent)?.get(name).ok_or(Errno::Noent)?;
        match (self.node(ino)?, dir) {
            (Node::Dir { .. }, false) => return Err(Errno::Isdir),
            (Node::File(_), true) => return Err(Errno::Notdir),
            (Node::Dir { entries, .. }, true) if !entries.is_empty() => {
                return Err(Errno::Notempty);
            }
            _ => {}
        }
        self.resize(ino, 0)?;
        self.nodes.remove(&ino);
        if let Some(Node::Dir { entries, .. }) = self.nodes.get_mut(&parent) {
            entries.remove(name);
        }
        Ok(())
    }

    /// Moves what is at `old` to `new`, replacing a file there (or an empty directory, with a
    /// directory), as `rename` does.
    pub(crate) fn rename(&mut self, old: (u64, &str), new: (u64, &str)) -> Result<(), Errno> {
        let (old_dir, old_name) = self.parent_of(old.0, old.1)?;
        let (new_dir, new_name) = self.parent_of(new.0, new.1)?;
        let (old_name, new_name) = (old_name.ok_or(Errno::Inval)?, new_name.ok_or(Errno::Inval)?);
        let ino = *self.entries(old_dir)?.get(old_name).ok_or(Errno::Noent)?;
        let moving_dir = matches!(self.node(ino)?, Node::Dir { .. });
        // A directory may not move into itself.
        let mut up = new_dir;
        while moving_dir && up != Self::ROOT {
            if up == ino {
                return Err(Errno::Inval);
            }
            up = match self.node(up)? {
                Node::Dir { parent, .. } => *parent,
                Node::File(_) => break,
            };
        }
        if let Some(&there) = self.entries(new_dir)?.get(new_name) {
            if there == ino {
                return Ok(());
            }
            self.remove(new_dir, new_name, moving_dir)?;
        } else if new_name.len() > MAX_NAME {
            return Err(Errno::Nametoolong);
        } else if self.depth(new_dir) + 1 > self.limits.max_depth {
            return Err(Errno::Nospc);
        }
        if let Some(Node::Dir { entries, .. }) = self.nodes.get_mut(&old_dir) {
            entries.remove(old_name);
        }
        if let Some(Node::Dir { entries, .. }) = self.nodes.get_mut(&new_dir) {
            entries.insert(new_name.into(), ino);
        }
        if let Some(Node::Dir { parent, .. }) = self.nodes.get_mut(&ino) {
            *parent = new_dir;
        }
        Ok(())
    }

    /// A file's bytes.
    pub(crate) fn data(&self, ino: u64) -> Result<&[u8], Errno> {
        match self.node(ino)? {
            Node::File(data) => Ok(data),
            Node::Dir { .. } => Err(Errno::Isdir),
        }
    }

    /// Makes room for a file to become `len` bytes long: `ENOSPC` past the folder's bytes or,
    /// with `memory` (the guest's linear memory), past the memory limit.
    fn reserve(&self, old: usize, len: usize, memory: usize) -> Result<(), Errno> {
        let total = self.bytes() - old + len;
        if len > old && (total > self.limits.max_bytes || total + memory > self.memory_limit) {
            return Err(Errno::Nospc);
        }
        Ok(())
    }

    fn file_mut(&mut self, ino: u64) -> Result<&mut Vec<u8>, Errno> {
        match self.nodes.get_mut(&ino).ok_or(Errno::Badf)? {
            Node::File(data) => Ok(Arc::make_mut(data)),
            Node::Dir { .. } => Err(Errno::Isdir),
        }
    }

    /// Sets a file's length (zeros fill what grows).
    pub(crate) fn resize(&mut self, ino: u64, len: usize) -> Result<(), Errno> {
        let old = match self.node(ino)? {
            Node::File(data) => data.len(),
            Node::Dir { .. } => return Ok(()),
        };
        self.reserve(old, len, 0)?;
        self.file_mut(ino)?.resize(len, 0);
        self.bytes.fetch_sub(old, Ordering::Relaxed);
        self.bytes.fetch_add(len, Ordering::Relaxed);
        Ok(())
    }

    /// Writes `bytes` at `offset` of a file, with `memory` bytes of linear memory in use.
    pub(crate) fn write(
        &mut self,
        ino: u64,
        offset: u64,
        bytes: &[u8],
        memory: usize,
    ) -> Result<(), Errno> {
        let old = self.data(ino)?.len();
        let at = usize::try_from(offset).map_err(|_| Errno::Fbig)?;
        let end = at.checked_add(bytes.len()).ok_or(Errno::Fbig)?;
        let len = old.max(end);
        self.reserve(old, len, memory)?;
        let data = self.file_mut(ino)?;
        data.resize(len, 0);
        data[at..end].copy_from_slice(bytes);
        self.bytes.fetch_add(len - old, Ordering::Relaxed);
        Ok(())
    }
}
