//! The preview 1 calls that take a path, resolved from a directory descriptor by [`super::path`].
//! The tree is read-only: opening to write, creating, removing, renaming, linking and setting
//! times are refused, with the error a read-only file system gives (`EROFS`, or `EEXIST` when
//! the name to create is taken), after the same checks a writable one would make, so a missing
//! parent is still `ENOENT`. Nothing but `path_open` changes any state.

use std::sync::Arc;

use super::abi::{self, Errno, LOOKUPFLAGS_ALL, fdflags, oflags, rights};
use super::fds::{Entry, Files};
use super::memory;
use super::path::{refuse_change, refuse_create, resolve};
use super::tree::{Dir, Node};

/// The directory `fd` names and the path at `ptr`, the two arguments every call here starts with.
fn dir_and_path<'m>(
    mem: &'m [u8],
    files: &Files,
    fd: u32,
    ptr: u32,
    len: u32,
) -> Result<(Arc<Dir>, &'m str), Errno> {
    let dir = files.dir(fd)?;
    Ok((dir, memory::path(mem, ptr, len)?))
}

/// The arguments of `path_open`, as the guest passed them.
pub(crate) struct Open {
    pub(crate) fd: u32,
    pub(crate) lookup: u32,
    pub(crate) path: u32,
    pub(crate) path_len: u32,
    pub(crate) oflags: u32,
    pub(crate) base: u64,
    pub(crate) inheriting: u64,
    pub(crate) fdflags: u32,
    pub(crate) out: u32,
}

/// Opens a file to read it, or a directory to look into or list. Asking to create, truncate or
/// write is `EROFS` for a file and `EISDIR` for a directory; `O_CREAT | O_EXCL` on an existing
/// name is `EEXIST`, on a missing one `EROFS`.
pub(crate) fn path_open(mem: &mut [u8], files: &mut Files, args: Open) -> Result<(), Errno> {
    abi::flags(args.lookup, LOOKUPFLAGS_ALL)?;
    let oflags = abi::flags(args.oflags, oflags::ALL)?;
    rights::check(args.base)?;
    rights::check(args.inheriting)?;
    let fdflags = abi::flags(args.fdflags, fdflags::ALL)?;
    let (dir, path) = dir_and_path(mem, files, args.fd, args.path, args.path_len)?;
    memory::check_out::<4>(mem, args.out)?;
    let creating = oflags & oflags::CREAT != 0;
    let node = match resolve(&dir, path) {
        Err(Errno::Noent) if creating => return Err(refuse_create(&dir, path)),
        found => found?,
    };
    if creating && oflags & oflags::EXCL != 0 {
        return Err(Errno::Exist);
    }
    let writing = args.base & rights::WRITE != 0 || oflags & (oflags::CREAT | oflags::TRUNC) != 0;
    let entry = match node {
        Node::Dir(_) if writing => return Err(Errno::Isdir),
        Node::Dir(dir) => Entry::Dir { dir, preopen: None },
        Node::File(_) if oflags & oflags::DIRECTORY != 0 => return Err(Errno::Notdir),
        Node::File(_) if writing => return Err(Errno::Rofs),
        Node::File(file) => Entry::File {
            file,
            offset: 0,
            flags: fdflags,
        },
    };
    let fd = files.insert(entry)?;
    memory::write_u32(mem, args.out, fd)
}

/// `lookup` only says whether to follow symbolic links, of which there are none.
pub(crate) fn path_filestat_get(
    mem: &mut [u8],
    files: &Files,
    fd: u32,
    lookup: u32,
    ptr: u32,
    len: u32,
    out: u32,
) -> Result<(), Errno> {
    abi::flags(lookup, LOOKUPFLAGS_ALL)?;
    let (dir, path) = dir_and_path(mem, files, fd, ptr, len)?;
    memory::check_out::<64>(mem, out)?;
    let node = resolve(&dir, path)?;
    memory::write(
        mem,
        out,
        &abi::filestat(node.ino(), node.filetype(), node.size()),
    )
}

pub(crate) fn path_filestat_set_times(
    mem: &[u8],
    files: &Files,
    fd: u32,
    lookup: u32,
    ptr: u32,
    len: u32,
    fst_flags: u32,
) -> Result<(), Errno> {
    abi::flags(lookup, LOOKUPFLAGS_ALL)?;
    abi::flags(fst_flags, abi::FSTFLAGS_ALL)?;
    let (dir, path) = dir_and_path(mem, files, fd, ptr, len)?;
    Err(refuse_change(&dir, path))
}

pub(crate) fn path_create_directory(
    mem: &[u8],
    files: &Files,
    fd: u32,
    ptr: u32,
    len: u32,
) -> Result<(), Errno> {
    let (dir, path) = dir_and_path(mem, files, fd, ptr, len)?;
    Err(refuse_create(&dir, path))
}

/// `path_remove_directory` and `path_unlink_file`.
pub(crate) fn path_remove(
    mem: &[u8],
    files: &Files,
    fd: u32,
    ptr: u32,
    len: u32,
) -> Result<(), Errno> {
    let (dir, path) = dir_and_path(mem, files, fd, ptr, len)?;
    Err(refuse_change(&dir, path))
}

/// A path in one directory and a path in another, the arguments of a link or a rename.
pub(crate) struct TwoPaths {
    pub(crate) old_fd: u32,
    pub(crate) old: u32,
    pub(crate) old_len: u32,
    pub(crate) new_fd: u32,
    pub(crate) new: u32,
    pub(crate) new_len: u32,
}

/// The source must exist; the new name is refused as a creation would be.
pub(crate) fn path_link(
    mem: &[u8],
    files: &Files,
    lookup: u32,
    args: TwoPaths,
) -> Result<(), Errno> {
    abi::flags(lookup, LOOKUPFLAGS_ALL)?;
    let (old_dir, old) = dir_and_path(mem, files, args.old_fd, args.old, args.old_len)?;
    let (new_dir, new) = dir_and_path(mem, files, args.new_fd, args.new, args.new_len)?;
    resolve(&old_dir, old)?;
    Err(refuse_create(&new_dir, new))
}

/// The source must exist; a rename may replace what is at the new name, so that is no `EEXIST`.
pub(crate) fn path_rename(mem: &[u8], files: &Files, args: TwoPaths) -> Result<(), Errno> {
    let (old_dir, old) = dir_and_path(mem, files, args.old_fd, args.old, args.old_len)?;
    let (new_dir, new) = dir_and_path(mem, files, args.new_fd, args.new, args.new_len)?;
    resolve(&old_dir, old)?;
    match refuse_create(&new_dir, new) {
        Errno::Exist => Err(Errno::Rofs),
        e => Err(e),
    }
}

/// The link's target is only text, read to check it as wasmtime does.
pub(crate) fn path_symlink(
    mem: &[u8],
    files: &Files,
    target: u32,
    target_len: u32,
    fd: u32,
    ptr: u32,
    len: u32,
) -> Result<(), Errno> {
    memory::path(mem, target, target_len)?;
    let (dir, path) = dir_and_path(mem, files, fd, ptr, len)?;
    Err(refuse_create(&dir, path))
}

/// Nothing is a symbolic link: `EINVAL` for anything that exists, as `readlink` says.
pub(crate) fn path_readlink(
    mem: &[u8],
    files: &Files,
    fd: u32,
    ptr: u32,
    len: u32,
) -> Result<(), Errno> {
    let (dir, path) = dir_and_path(mem, files, fd, ptr, len)?;
    resolve(&dir, path)?;
    Err(Errno::Inval)
}
