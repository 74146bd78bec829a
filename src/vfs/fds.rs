//! The descriptor table of one store: stdio at 0, 1 and 2, the preopened directories from 3 on
//! (wasi-libc finds them by asking `fd_prestat_get` from 3 up until `EBADF`), then whatever the
//! guest opens, each new descriptor taking the lowest free number, as POSIX and wasmtime do.

use std::sync::Arc;

use super::abi::Errno;
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
}

/// The WASI file system of one store: its descriptors and where its output goes.
pub(crate) struct Files {
    fds: Vec<Option<Entry>>,
    sink: OutputSink,
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
        }
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
    pub(crate) fn dir(&self, fd: u32) -> Result<Arc<Dir>, Errno> {
        match self.get(fd)? {
            Entry::Dir { dir, .. } => Ok(dir.clone()),
            Entry::File { .. } => Err(Errno::Notdir),
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
