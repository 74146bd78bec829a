//! The preview 1 calls that act on a descriptor, each a plain function of the guest's memory and
//! the descriptor table. Arguments arrive as the unsigned form of the wasm values; results are
//! written to the guest only after every check passed, so a failed call changes nothing.
//!
//! No file of the read-only trees is open for writing: writing through one is `EBADF` (POSIX's
//! answer for a descriptor not open for writing), changing its times `EROFS`; stdio cannot seek
//! (`ESPIPE`). Files of the writable folder are written through [`super::folder_calls`].

use super::abi::{self, Errno, fdflags, filetype, rights, whence};
use super::fds::{Entry, Files};
use super::folder_calls as folder;
use super::memory;
use super::tree::Node;
use crate::output::OutputLimitReached;

pub(crate) fn fd_advise(files: &Files, fd: u32, advice: u32) -> Result<(), Errno> {
    if advice > u32::from(abi::ADVICE_LAST) {
        return Err(Errno::Inval);
    }
    match files.get(fd)? {
        Entry::File { .. } | Entry::FolderFile { .. } => Ok(()),
        _ => Err(Errno::Badf),
    }
}

pub(crate) fn fd_close(files: &mut Files, fd: u32) -> Result<(), Errno> {
    files.close(fd)
}

/// `fd_sync` and `fd_datasync`: nothing is ever pending.
pub(crate) fn fd_sync(files: &Files, fd: u32) -> Result<(), Errno> {
    match files.get(fd)? {
        Entry::File { .. } | Entry::FolderFile { .. } => Ok(()),
        _ => Err(Errno::Badf),
    }
}

pub(crate) fn fd_fdstat_get(mem: &mut [u8], files: &Files, fd: u32, out: u32) -> Result<(), Errno> {
    let stat = match files.get(fd)? {
        Entry::Stdin => abi::fdstat(filetype::UNKNOWN, 0, rights::FD_READ, rights::FD_READ),
        Entry::Output(_) => abi::fdstat(filetype::UNKNOWN, 0, rights::FD_WRITE, rights::FD_WRITE),
        // Files opened from a directory may ask for any right, writing included, so that
        // wasi-libc's `openat` asks `path_open` and gets `EROFS` (a read-only file system)
        // rather than refusing by itself with `ENOTCAPABLE`.
        Entry::Dir { .. } => abi::fdstat(filetype::DIRECTORY, 0, rights::DIR, rights::ALL),
        Entry::File { flags, .. } => {
            abi::fdstat(filetype::REGULAR_FILE, *flags, rights::FILE, rights::FILE)
        }
        Entry::FolderDir { .. } => abi::fdstat(filetype::DIRECTORY, 0, rights::DIR, rights::ALL),
        Entry::FolderFile { flags, write, .. } => {
            let rights = rights::FILE | if *write { rights::WRITE } else { 0 };
            abi::fdstat(filetype::REGULAR_FILE, *flags, rights, rights)
        }
    };
    memory::write(mem, out, &stat)
}

/// Files only, as in wasmtime; the synchronous-I/O flags cannot be set afterwards (`EINVAL`).
pub(crate) fn fd_fdstat_set_flags(files: &mut Files, fd: u32, flags: u32) -> Result<(), Errno> {
    let new = abi::flags(flags, fdflags::ALL)?;
    match files.get_mut(fd)? {
        Entry::File { flags, .. } | Entry::FolderFile { flags, .. } => {
            if new & (fdflags::DSYNC | fdflags::RSYNC | fdflags::SYNC) != 0 {
                return Err(Errno::Inval);
            }
            *flags = new;
            Ok(())
        }
        _ => Err(Errno::Badf),
    }
}

/// Rights cannot be changed, as in wasmtime.
pub(crate) fn fd_fdstat_set_rights(
    files: &Files,
    fd: u32,
    base: u64,
    inheriting: u64,
) -> Result<(), Errno> {
    rights::check(base)?;
    rights::check(inheriting)?;
    files.get(fd)?;
    Err(Errno::Notsup)
}

/// Stdio reports zeros and an `unknown` type, as wasmtime does for a stream that is no terminal.
pub(crate) fn fd_filestat_get(
    mem: &mut [u8],
    files: &Files,
    fd: u32,
    out: u32,
) -> Result<(), Errno> {
    let stat = match files.get(fd)? {
        Entry::Dir { dir, .. } => stat_of(&Node::Dir(dir.clone())),
        Entry::File { file, .. } => stat_of(&Node::File(file.clone())),
        Entry::FolderDir { ino, .. } | Entry::FolderFile { ino, .. } => folder::stat(files, *ino)?,
        Entry::Stdin | Entry::Output(_) => [0; 64],
    };
    memory::write(mem, out, &stat)
}

fn stat_of(node: &Node) -> [u8; 64] {
    abi::filestat(node.ino(), node.filetype(), node.size())
}

pub(crate) fn fd_filestat_set_times(files: &Files, fd: u32, flags: u32) -> Result<(), Errno> {
    abi::flags(flags, abi::FSTFLAGS_ALL)?;
    match files.get(fd)? {
        Entry::Dir { .. } | Entry::File { .. } => Err(Errno::Rofs),
        // Every node of the folder keeps the one fixed time.
        Entry::FolderDir { .. } | Entry::FolderFile { .. } => Ok(()),
        Entry::Stdin | Entry::Output(_) => Err(Errno::Badf),
    }
}

/// Copies `data` from `offset` into the buffers in turn; how many bytes it copied.
fn read_at(mem: &mut [u8], data: &[u8], offset: u64, iovs: &[(u32, u32)]) -> Result<u32, Errno> {
    let mut rest = usize::try_from(offset)
        .ok()
        .and_then(|at| data.get(at..))
        .unwrap_or_default();
    let mut read = 0;
    for &(ptr, len) in iovs {
        if rest.is_empty() {
            break;
        }
        let buf = memory::bytes_mut(mem, ptr, len)?;
        let n = buf.len().min(rest.len());
        buf[..n].copy_from_slice(&rest[..n]);
        rest = &rest[n..];
        // At most the buffers' total, which `memory::iovecs` keeps within `u32`.
        read += n as u32;
    }
    Ok(read)
}

/// The first checks of every read and write, in the order wasmtime makes them: the descriptor
/// is open, the buffers lie in memory, and so does the place of the result. Returns the buffers.
fn transfer(
    mem: &[u8],
    files: &Files,
    fd: u32,
    iovs: u32,
    iovs_len: u32,
    out: u32,
) -> Result<Vec<(u32, u32)>, Errno> {
    files.get(fd)?;
    let iovs = memory::iovecs(mem, iovs, iovs_len)?;
    memory::check_out::<4>(mem, out)?;
    Ok(iovs)
}

/// What a read of a descriptor reads from: stdin (always at its end), stdout or stderr (which
/// cannot be read), or a file open for reading, as its bytes and the descriptor's offset.
enum Source<'f> {
    Stdin,
    Output,
    Bytes(&'f [u8], u64),
}

/// What a read of `fd` reads; `EISDIR` for a directory, `EBADF` for a file not open for reading.
fn source(files: &Files, fd: u32) -> Result<Source<'_>, Errno> {
    Ok(match files.get(fd)? {
        Entry::Stdin => Source::Stdin,
        Entry::Output(_) => Source::Output,
        Entry::Dir { .. } | Entry::FolderDir { .. } => return Err(Errno::Isdir),
        Entry::File { file, offset, .. } => Source::Bytes(file.data(), *offset),
        Entry::FolderFile { read: false, .. } => return Err(Errno::Badf),
        Entry::FolderFile { ino, offset, .. } => Source::Bytes(folder::data(files, *ino)?, *offset),
    })
}

pub(crate) fn fd_read(
    mem: &mut [u8],
    files: &mut Files,
    fd: u32,
    iovs: u32,
    iovs_len: u32,
    out: u32,
) -> Result<(), Errno> {
    let iovs = transfer(mem, files, fd, iovs, iovs_len, out)?;
    let read = match source(files, fd)? {
        Source::Stdin => 0,
        Source::Output => return Err(Errno::Badf),
        Source::Bytes(data, offset) => read_at(mem, data, offset, &iovs)?,
    };
    if let Entry::File { offset, .. } | Entry::FolderFile { offset, .. } = files.get_mut(fd)? {
        *offset += u64::from(read);
    }
    memory::write_u32(mem, out, read)
}

pub(crate) fn fd_pread(
    mem: &mut [u8],
    files: &Files,
    fd: u32,
    iovs: u32,
    iovs_len: u32,
    offset: u64,
    out: u32,
) -> Result<(), Errno> {
    let iovs = transfer(mem, files, fd, iovs, iovs_len, out)?;
    let read = match source(files, fd)? {
        Source::Stdin | Source::Output => return Err(Errno::Spipe),
        Source::Bytes(data, _) => read_at(mem, data, offset, &iovs)?,
    };
    memory::write_u32(mem, out, read)
}

/// Why `fd_write` failed: an error number for the guest, or the output limit, which traps.
#[derive(Debug)]
pub(crate) enum WriteError {
    Errno(Errno),
    Limit(OutputLimitReached),
}

impl From<Errno> for WriteError {
    fn from(e: Errno) -> WriteError {
        WriteError::Errno(e)
    }
}

/// Stdout and stderr go to the store's sink; past the output limit the call traps, which ends
/// the run as the output limit.
pub(crate) fn fd_write(
    mem: &mut [u8],
    files: &mut Files,
    fd: u32,
    iovs: u32,
    iovs_len: u32,
    out: u32,
) -> Result<(), WriteError> {
    let iovs = transfer(mem, files, fd, iovs, iovs_len, out)?;
    let stream = match files.get(fd)? {
        Entry::Output(stream) => *stream,
        Entry::FolderFile { .. } => {
            let written = folder::write(mem, files, fd, &iovs, None)?;
            return Ok(memory::write_u32(mem, out, written)?);
        }
        _ => return Err(Errno::Badf.into()),
    };
    let mut written = 0;
    for (ptr, len) in iovs.into_iter().filter(|&(_, len)| len > 0) {
        let bytes = memory::bytes(mem, ptr, len)?;
        files
            .sink()
            .write(stream, bytes)
            .map_err(WriteError::Limit)?;
        written += len;
    }
    Ok(memory::write_u32(mem, out, written)?)
}

pub(crate) fn fd_pwrite(
    mem: &mut [u8],
    files: &mut Files,
    fd: u32,
    iovs: u32,
    iovs_len: u32,
    offset: u64,
    out: u32,
) -> Result<(), Errno> {
    match files.get(fd)? {
        Entry::Stdin | Entry::Output(_) => Err(Errno::Spipe),
        Entry::FolderFile { .. } => {
            let iovs = memory::iovecs(mem, iovs, iovs_len)?;
            memory::check_out::<4>(mem, out)?;
            let written = folder::write(mem, files, fd, &iovs, Some(offset))?;
            memory::write_u32(mem, out, written)
        }
        _ => Err(Errno::Badf),
    }
}

/// `EBADF` for any descriptor but a preopen: that is how wasi-libc's scan of the preopens,
/// from 3 up, knows it is over.
pub(crate) fn fd_prestat_get(
    mem: &mut [u8],
    files: &Files,
    fd: u32,
    out: u32,
) -> Result<(), Errno> {
    match files.get(fd)? {
        Entry::Dir {
            preopen: Some(path),
            ..
        }
        | Entry::FolderDir {
            preopen: Some(path),
            ..
        } => memory::write(mem, out, &abi::prestat(path.len() as u32)),
        _ => Err(Errno::Badf),
    }
}

/// `ENOTDIR` for an open descriptor that is not a preopen, as wasmtime answers.
pub(crate) fn fd_prestat_dir_name(
    mem: &mut [u8],
    files: &Files,
    fd: u32,
    ptr: u32,
    len: u32,
) -> Result<(), Errno> {
    let (Entry::Dir {
        preopen: Some(path),
        ..
    }
    | Entry::FolderDir {
        preopen: Some(path),
        ..
    }) = files.get(fd)?
    else {
        return Err(Errno::Notdir);
    };
    if path.len() > len as usize {
        return Err(Errno::Nametoolong);
    }
    memory::write(mem, ptr, path.as_bytes())
}

/// Lists a directory from `cookie` on (0 is its start, each entry's `d_next` the cookie of the
/// next) as 24-byte headers each followed by a name, cutting the last one where the buffer
/// ends: a full buffer is how the caller knows to ask again.
pub(crate) fn fd_readdir(
    mem: &mut [u8],
    files: &Files,
    fd: u32,
    buf: u32,
    buf_len: u32,
    cookie: u64,
    out: u32,
) -> Result<(), Errno> {
    let dir = files.dir(fd)?;
    memory::check_out::<4>(mem, out)?;
    let area = memory::bytes_mut(mem, buf, buf_len)?;
    let mut used = 0;
    let mut index = usize::try_from(cookie).unwrap_or(usize::MAX);
    while let Some((name, ino, kind)) = folder::listing(files, &dir, index)? {
        index += 1;
        let header = abi::dirent(index as u64, ino, name.len() as u32, kind);
        for part in [&header[..], name.as_bytes()] {
            let n = part.len().min(area.len() - used);
            area[used..used + n].copy_from_slice(&part[..n]);
            used += n;
        }
        if used == area.len() {
            break;
        }
    }
    memory::write_u32(mem, out, used as u32)
}

pub(crate) fn fd_renumber(files: &mut Files, from: u32, to: u32) -> Result<(), Errno> {
    files.renumber(from, to)
}

/// Offsets past the end are allowed (reads there find nothing); past `i64::MAX`, which the
/// guest's `off_t` cannot hold, they are `EINVAL`.
pub(crate) fn fd_seek(
    mem: &mut [u8],
    files: &mut Files,
    fd: u32,
    delta: i64,
    whence: u32,
    out: u32,
) -> Result<(), Errno> {
    let len = match files.get(fd)? {
        Entry::File { file, .. } => file.data().len(),
        Entry::FolderFile { ino, .. } => folder::data(files, *ino)?.len(),
        Entry::Stdin | Entry::Output(_) => return Err(Errno::Spipe),
        Entry::Dir { .. } | Entry::FolderDir { .. } => return Err(Errno::Badf),
    };
    memory::check_out::<8>(mem, out)?;
    let (Entry::File { offset, .. } | Entry::FolderFile { offset, .. }) = files.get_mut(fd)? else {
        return Err(Errno::Badf);
    };
    let from = match u8::try_from(whence) {
        Ok(whence::SET) => 0,
        Ok(whence::CUR) => *offset,
        Ok(whence::END) => len as u64,
        _ => return Err(Errno::Inval),
    };
    let new = from
        .checked_add_signed(delta)
        .filter(|n| i64::try_from(*n).is_ok())
        .ok_or(Errno::Inval)?;
    *offset = new;
    memory::write_u64(mem, out, new)
}

pub(crate) fn fd_tell(mem: &mut [u8], files: &Files, fd: u32, out: u32) -> Result<(), Errno> {
    match files.get(fd)? {
        Entry::File { offset, .. } | Entry::FolderFile { offset, .. } => {
            memory::write_u64(mem, out, *offset)
        }
        Entry::Stdin | Entry::Output(_) => Err(Errno::Spipe),
        Entry::Dir { .. } | Entry::FolderDir { .. } => Err(Errno::Badf),
    }
}
