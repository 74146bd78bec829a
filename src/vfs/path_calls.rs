//! The preview 1 calls that take a path, resolved from a directory descriptor by [`super::path`].
//! The tree is read-only: opening to write, creating, removing, renaming, linking and setting
//! times are refused, with the error a read-only file system gives (`EROFS`, or `EEXIST` when
//! the name to create is taken), after the same checks a writable one would make, so a missing
//! parent is still `ENOENT`. Nothing but `path_open` changes any state there. Paths from a
//! directory of the writable folder go to [`super::folder_calls`]; nothing moves or links between
//! the two (`EXDEV`), and the folder has no symbolic links (`EPERM`).

use super::abi::{self, Errno, LOOKUPFLAGS_ALL, fdflags, oflags, rights};
use super::fds::{Base, Entry, Files};
use super::folder_calls as folder;
use super::memory;
use super::path::{refuse_change, refuse_create, resolve};
use super::tree::Node;

/// The directory `fd` names and the path at `ptr`, the two arguments every call here starts with.
fn dir_and_path<'m>(
    mem: &'m [u8],
    files: &Files,
    fd: u32,
    ptr: u32,
    len: u32,
) -> Result<(Base, &'m str), Errno> {
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
    let (base, path) = dir_and_path(mem, files, args.fd, args.path, args.path_len)?;
    memory::check_out::<4>(mem, args.out)?;
    let writing = args.base & rights::WRITE != 0 || oflags & (oflags::CREAT | oflags::TRUNC) != 0;
    let dir = match base {
        Base::Tree(dir) => dir,
        Base::Folder(ino) => {
            let entry = folder::open(files, ino, path, oflags, writing, fdflags)?;
            let fd = files.insert(entry)?;
            return memory::write_u32(mem, args.out, fd);
        }
    };
    let creating = oflags & oflags::CREAT != 0;
    let node = match resolve(&dir, path) {
        Err(Errno::Noent) if creating => return Err(refuse_create(&dir, path)),
        found => found?,
    };
    if creating && oflags & oflags::EXCL != 0 {
        return Err(Errno::Exist);
    }
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
    let (base, path) = dir_and_path(mem, files, fd, ptr, len)?;
    memory::check_out::<64>(mem, out)?;
    let stat = match base {
        Base::Tree(dir) => {
            let node = resolve(&dir, path)?;
            abi::filestat(node.ino(), node.filetype(), node.size())
        }
        Base::Folder(ino) => folder::path_stat(files, ino, path)?,
    };
    memory::write(mem, out, &stat)
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
    match dir_and_path(mem, files, fd, ptr, len)? {
        (Base::Tree(dir), path) => Err(refuse_change(&dir, path)),
        // Every node of the folder keeps the one fixed time.
        (Base::Folder(ino), path) => folder::exists(files, ino, path),
    }
}

pub(crate) fn path_create_directory(
    mem: &[u8],
    files: &mut Files,
    fd: u32,
    ptr: u32,
    len: u32,
) -> Result<(), Errno> {
    match dir_and_path(mem, files, fd, ptr, len)? {
        (Base::Tree(dir), path) => Err(refuse_create(&dir, path)),
        (Base::Folder(ino), path) => files.folder_mut()?.mkdir(ino, path),
    }
}

/// `path_remove_directory` (`dir`) and `path_unlink_file`.
pub(crate) fn path_remove(
    mem: &[u8],
    files: &mut Files,
    fd: u32,
    ptr: u32,
    len: u32,
    dir: bool,
) -> Result<(), Errno> {
    match dir_and_path(mem, files, fd, ptr, len)? {
        (Base::Tree(tree), path) => Err(refuse_change(&tree, path)),
        (Base::Folder(ino), path) => files.folder_mut()?.remove(ino, path, dir),
    }
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
    match (
        dir_and_path(mem, files, args.old_fd, args.old, args.old_len)?,
        dir_and_path(mem, files, args.new_fd, args.new, args.new_len)?,
    ) {
        ((Base::Tree(old_dir), old), (Base::Tree(new_dir), new)) => {
            resolve(&old_dir, old)?;
            Err(refuse_create(&new_dir, new))
        }
        ((Base::Folder(_), _), (Base::Folder(_), _)) => Err(Errno::Perm),
        _ => Err(Errno::Xdev),
    }
}

/// The source must exist; a rename may replace what is at the new name, so that is no `EEXIST`.
pub(crate) fn path_rename(mem: &[u8], files: &mut Files, args: TwoPaths) -> Result<(), Errno> {
    match (
        dir_and_path(mem, files, args.old_fd, args.old, args.old_len)?,
        dir_and_path(mem, files, args.new_fd, args.new, args.new_len)?,
    ) {
        ((Base::Tree(old_dir), old), (Base::Tree(new_dir), new)) => {
            resolve(&old_dir, old)?;
            match refuse_create(&new_dir, new) {
                Errno::Exist => Err(Errno::Rofs),
                e => Err(e),
            }
        }
        ((Base::Folder(old_dir), old), (Base::Folder(new_dir), new)) => {
            files.folder_mut()?.rename((old_dir, old), (new_dir, new))
        }
        _ => Err(Errno::Xdev),
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
    match dir_and_path(mem, files, fd, ptr, len)? {
        (Base::Tree(dir), path) => Err(refuse_create(&dir, path)),
        (Base::Folder(_), _) => Err(Errno::Perm),
    }
}

/// Nothing is a symbolic link: `EINVAL` for anything that exists, as `readlink` says.
pub(crate) fn path_readlink(
    mem: &[u8],
    files: &Files,
    fd: u32,
    ptr: u32,
    len: u32,
) -> Result<(), Errno> {
    match dir_and_path(mem, files, fd, ptr, len)? {
        (Base::Tree(dir), path) => resolve(&dir, path).map(drop)?,
        (Base::Folder(ino), path) => folder::exists(files, ino, path)?,
    }
    Err(Errno::Inval)
}
