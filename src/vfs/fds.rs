//! The descriptor table of one store: stdio at 0, 1 and 2, the preopened directories from 3 on
//! (wasi-libc finds them by asking `fd_prestat_get` from 3 up until `EBADF`), then whatever the
//! guest opens, each new descriptor taking the lowest free number, as POSIX and wasmtime do.

use std::sync::Arc;

use super::abi::Errno;
use super::folder::Folder;
use super::tree::{Dir, File};
use crate::output::{OutputSink, Stream};

/// The most descriptors open at once, stdio and preopens included: past it, `EMFILE`. Each holds
/// only a reference into the shared tree, so this bounds the table, not the data.
pub(crate) const MAX_FDS: usize = 1024;

/// What a descriptor refers to.
pub(crate) enum Entry {
    /// Standard input, always at end of file.
    Stdin,
    /// Standard output or error, written to the store's [`OutputSink`].
    Output(Stream),
    Dir {
        dir: Arc<Dir>,
        /// The guest path of a preopened directory, which `fd_prestat_dir_name` gives.
        preopen: Option<Arc<str>>,
    },
    File {
        file: Arc<File>,
        offset: u64,
        /// The `fdflags` it was opened or last set with, which `fd_fdstat_get` reports.
        flags: u16,
    },
    /// A directory of the writable folder.
    FolderDir { ino: u64, preopen: Option<Arc<str>> },
    /// A file of the writable folder.
    FolderFile {
        ino: u64,
        offset: u64,
        flags: u16,
        read: bool,
        write: bool,
    },
}

/// The directory a path is resolved from.
pub(crate) enum Base {
    Tree(Arc<Dir>),
    Folder(u64),
}

/// The WASI file system of one store: its descriptors and where its output goes.
pub(crate) struct Files {
    fds: Vec<Option<Entry>>,
    sink: OutputSink,
    /// The writable folder, when one is mounted.
    folder: Option<Folder>,
}

impl Files {
    /// A table with stdio (stdout and stderr written to `sink`) and `preopens`, each a guest
    /// path (`"/usr/local/lib"`) and the directory served there, at 3, 4, ... in order.
    pub(crate) fn new(
        sink: OutputSink,
        preopens: impl IntoIterator<Item = (Arc<str>, Arc<Dir>)>,
    ) -> Files {
        let stdio = [
            Entry::Stdin,
            Entry::Output(Stream::Stdout),
            Entry::Output(Stream::Stderr),
        ];
        let preopens = preopens.into_iter().map(|(path, dir)| Entry::Dir {
            dir,
            preopen: Some(path),
        });
        Files {
            fds: stdio.into_iter().chain(preopens).map(Some).collect(),
            sink,
            folder: None,
        }
    }

    /// Mounts `folder` at the guest path `path`, as the next preopen: before the guest opens
    /// anything, so that the preopens stay numbered from 3 without a gap.
    pub(crate) fn mount(&mut self, path: Arc<str>, folder: Folder) {
        self.fds.push(Some(Entry::FolderDir {
            ino: Folder::ROOT,
            preopen: Some(path),
        }));
        self.folder = Some(folder);
    }

    /// Mounts the read-only `dir` at the guest path `path`, as the next preopen.
    pub(crate) fn mount_tree(&mut self, path: Arc<str>, dir: Arc<Dir>) {
        self.fds.push(Some(Entry::Dir {
            dir,
            preopen: Some(path),
        }));
    }

    /// Serves `dir` instead at the preopen of the guest path `path`.
    pub(crate) fn replace_tree(&mut self, path: &str, new: Arc<Dir>) {
        for entry in self.fds.iter_mut().flatten() {
            if let Entry::Dir {
                dir,
                preopen: Some(p),
            } = entry
                && &**p == path
            {
                *dir = new.clone();
            }
        }
    }

    pub(crate) fn folder(&self) -> Option<&Folder> {
        self.folder.as_ref()
    }

    pub(crate) fn folder_mut(&mut self) -> Result<&mut Folder, Errno> {
        self.folder.as_mut().ok_or(Errno::Badf)
    }

    pub(crate) fn sink(&self) -> &OutputSink {
        &self.sink
    }

    pub(crate) fn get(&self, fd: u32) -> Result<&Entry, Errno> {
        self.fds
            .get(fd as usize)
            .and_then(Option::as_ref)
            .ok_or(Errno::Badf)
    }

    pub(crate) fn get_mut(&mut self, fd: u32) -> Result<&mut Entry, Errno> {
        self.fds
            .get_mut(fd as usize)
            .and_then(Option::as_mut)
            .ok_or(Errno::Badf)
    }

    /// The directory `fd` refers to, for a call that resolves a path from it: `ENOTDIR` for a
    /// file, `EBADF` for stdio or a closed number.
    pub(crate) fn dir(&self, fd: u32) -> Result<Base, Errno> {
        match self.get(fd)? {
            Entry::Dir { dir, .. } => Ok(Base::Tree(dir.clone())),
            Entry::FolderDir { ino, .. } => Ok(Base::Folder(*ino)),
            Entry::File { .. } | Entry::FolderFile { .. } => Err(Errno::Notdir),
            Entry::Stdin | Entry::Output(_) => Err(Errno::Badf),
        }
    }

    /// Gives `entry` the lowest free number.
    pub(crate) fn insert(&mut self, entry: Entry) -> Result<u32, Errno> {
        let fd = match self.fds.iter().position(Option::is_none) {
            Some(free) => free,
            None if self.fds.len() < MAX_FDS => {
                self.fds.push(None);
                self.fds.len() - 1
            }
            None => return Err(Errno::Mfile),
        };
        self.fds[fd] = Some(entry);
        Ok(fd as u32)
    }

    /// Closes `fd`; stdio and preopens may be closed too, as in wasmtime.
    pub(crate) fn close(&mut self, fd: u32) -> Result<(), Errno> {
        let slot = self.fds.get_mut(fd as usize).ok_or(Errno::Badf)?;
        slot.take().map(|_| ()).ok_or(Errno::Badf)
    }

    /// Moves `from` to `to`, closing what `to` was; both must be open.
    pub(crate) fn renumber(&mut self, from: u32, to: u32) -> Result<(), Errno> {
        self.get(to)?;
        self.get(from)?;
        if from != to {
            let entry = self.fds[from as usize].take();
            self.fds[to as usize] = entry;
        }
        Ok(())
    }
}
