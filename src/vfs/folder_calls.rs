//! The writable folder's side of the preview 1 calls ([`super::folder`]): what `fd_calls` and
//! `path_calls` hand over when a descriptor or a path's directory is in the folder.

use std::sync::Arc;

use super::abi::{self, Errno, fdflags, filetype};
use super::fds::{Base, Entry, Files};
use super::folder::{Folder, Node};
use super::memory;

/// The `filestat` of a folder node.
pub(crate) fn stat(files: &Files, ino: u64) -> Result<[u8; 64], Errno> {
    let folder = files.folder().ok_or(Errno::Badf)?;
    let (kind, size) = folder.stat(ino)?;
    Ok(abi::filestat(ino, kind, size))
}

/// A folder file's bytes.
pub(crate) fn data(files: &Files, ino: u64) -> Result<&[u8], Errno> {
    files.folder().ok_or(Errno::Badf)?.data(ino)
}

/// The `index`th entry of the listing of `dir`, of either kind.
pub(crate) fn listing(
    files: &Files,
    dir: &Base,
    index: usize,
) -> Result<Option<(String, u64, u8)>, Errno> {
    match dir {
        Base::Tree(dir) => Ok(dir
            .listing(index)
            .map(|(name, ino, kind)| (name.to_owned(), ino, kind))),
        Base::Folder(ino) => files.folder().ok_or(Errno::Badf)?.listing(*ino, index),
    }
}

/// Writes the buffers to the folder file open at `fd`: at `at`, or else at its offset (its end
/// when opened to append), which then moves past them. How many bytes it wrote.
pub(crate) fn write(
    mem: &[u8],
    files: &mut Files,
    fd: u32,
    iovs: &[(u32, u32)],
    at: Option<u64>,
) -> Result<u32, Errno> {
    let Entry::FolderFile {
        ino,
        offset,
        flags,
        write: true,
        ..
    } = *files.get(fd)?
    else {
        return Err(Errno::Badf);
    };
    let memory_used = mem.len();
    let folder = files.folder_mut()?;
    let mut position = match at {
        Some(at) => at,
        None if flags & fdflags::APPEND != 0 => folder.data(ino)?.len() as u64,
        None => offset,
    };
    let mut written = 0u32;
    for &(ptr, len) in iovs {
        let bytes = memory::bytes(mem, ptr, len)?;
        folder.write(ino, position, bytes, memory_used)?;
        position += u64::from(len);
        written += len;
    }
    if at.is_none()
        && let Entry::FolderFile { offset, .. } = files.get_mut(fd)?
    {
        *offset = position;
    }
    Ok(written)
}

/// Opens `path` in the folder from the directory `base`, as `path_open` asks.
pub(crate) fn open(
    files: &mut Files,
    base: u64,
    path: &str,
    oflags: u16,
    writing: bool,
    fdflags: u16,
) -> Result<Entry, Errno> {
    use abi::oflags::{CREAT, DIRECTORY, EXCL, TRUNC};
    let folder = files.folder_mut()?;
    let opened = folder.open(
        base,
        path,
        oflags & CREAT != 0,
        oflags & EXCL != 0,
        oflags & TRUNC != 0 && writing,
    )?;
    if opened.is_dir {
        if writing {
            return Err(Errno::Isdir);
        }
        return Ok(Entry::FolderDir {
            ino: opened.ino,
            preopen: None,
        });
    }
    if oflags & DIRECTORY != 0 {
        return Err(Errno::Notdir);
    }
    Ok(Entry::FolderFile {
        ino: opened.ino,
        offset: 0,
        flags: fdflags,
        read: true,
        write: writing,
    })
}

/// The kind and size of `path` in the folder.
pub(crate) fn path_stat(files: &Files, base: u64, path: &str) -> Result<[u8; 64], Errno> {
    let folder = files.folder().ok_or(Errno::Badf)?;
    let ino = folder.resolve(base, path)?;
    let (kind, size) = folder.stat(ino)?;
    Ok(abi::filestat(ino, kind, size))
}

/// Whether `path` names a directory of the folder (for `readlink`'s answer).
pub(crate) fn exists(files: &Files, base: u64, path: &str) -> Result<(), Errno> {
    let folder = files.folder().ok_or(Errno::Badf)?;
    folder.resolve(base, path).map(drop)
}

impl Folder {
    /// The `index`th entry of a directory's listing: `.`, `..`, then its entries by name.
    pub(crate) fn listing(
        &self,
        dir: u64,
        index: usize,
    ) -> Result<Option<(String, u64, u8)>, Errno> {
        let entries = self.entries(dir)?;
        Ok(match index {
            0 => Some((".".into(), dir, filetype::DIRECTORY)),
            1 => Some(("..".into(), dir, filetype::DIRECTORY)),
            _ => match entries.iter().nth(index - 2) {
                Some((name, &ino)) => Some((name.to_string(), ino, self.stat(ino)?.0)),
                None => None,
            },
        })
    }

    /// Every file, as its path from the folder and its bytes, in path order.
    pub(crate) fn files(&self) -> Vec<(String, Arc<Vec<u8>>)> {
        self.entries_by_path()
            .into_iter()
            .filter_map(|(path, data)| Some((path, data?)))
            .collect()
    }

    /// Every directory (`None`) and file (its bytes) by path, each directory before what it holds:
    /// what [`Folder::rebuild`] makes the folder again from (a session kept in a store).
    pub(crate) fn entries_by_path(&self) -> Vec<(String, Option<Arc<Vec<u8>>>)> {
        let mut out = Vec::new();
        self.collect(Self::ROOT, String::new(), &mut out);
        out
    }

    fn collect(&self, dir: u64, prefix: String, out: &mut Vec<(String, Option<Arc<Vec<u8>>>)>) {
        let Ok(entries) = self.entries(dir) else {
            return;
        };
        for (name, ino) in entries {
            let path = format!("{prefix}{name}");
            match self.nodes.get(ino) {
                Some(Node::File(data)) => out.push((path, Some(data.clone()))),
                Some(Node::Dir { .. }) => {
                    out.push((path.clone(), None));
                    self.collect(*ino, format!("{path}/"), out);
                }
                None => {}
            }
        }
    }

    #[cfg_attr(not(feature = "store"), allow(dead_code))]
    /// A folder holding `entries` (as [`Folder::entries_by_path`] lists them), made through the
    /// same checks as the guest's own calls: names, depth, count and bytes stay within `limits`
    /// whatever the entries say.
    pub(crate) fn rebuild(
        limits: super::folder::FolderLimits,
        entries: impl IntoIterator<Item = (String, Option<Vec<u8>>)>,
    ) -> Result<Folder, Errno> {
        let mut folder = Folder::new(limits);
        for (path, data) in entries {
            match data {
                None => folder.mkdir(Self::ROOT, &path)?,
                Some(data) => {
                    let opened = folder.open(Self::ROOT, &path, true, true, false)?;
                    if opened.is_dir {
                        return Err(Errno::Isdir);
                    }
                    folder.write(opened.ino, 0, &data, 0)?;
                }
            }
        }
        Ok(folder)
    }
}

/// Files of the read-only trees cannot grow; the folder's files need no room set aside.
pub(crate) fn fd_allocate(files: &Files, fd: u32) -> Result<(), Errno> {
    match files.get(fd)? {
        Entry::FolderFile { write: true, .. } => Err(Errno::Notsup),
        _ => Err(Errno::Badf),
    }
}

/// Only a folder's file open for writing can change its size.
pub(crate) fn fd_filestat_set_size(files: &mut Files, fd: u32, size: u64) -> Result<(), Errno> {
    match files.get(fd)? {
        Entry::FolderFile {
            ino, write: true, ..
        } => {
            let (ino, size) = (*ino, usize::try_from(size).map_err(|_| Errno::Fbig)?);
            files.folder_mut()?.resize(ino, size)
        }
        _ => Err(Errno::Badf),
    }
}
