//! The writable folder's side of the preview 1 calls ([`super::folder`]): what `fd_calls` and
//! `path_calls` hand over when a descriptor or a path's directory is in the folder.

use super::abi::{self, Errno, fdflags};
use super::fds::{Base, Entry, Files};
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
