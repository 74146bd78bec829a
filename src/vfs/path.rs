//! Path resolution from a directory descriptor, component by component, never leaving it: an
//! absolute path, or a `..` above the directory the descriptor names, is `ENOTCAPABLE`, as
//! wasmtime's capability-based resolution answers (wasi-libc turns absolute paths into a
//! preopen and a relative path before they get here). There are no symbolic links.

use std::sync::Arc;

use super::abi::Errno;
use super::tree::{Dir, Node};

/// The node at `path` from `base`: `ENOENT` if missing (or `path` is empty), `ENOTDIR` through
/// a file (a trailing `/` included).
pub(crate) fn resolve(base: &Arc<Dir>, path: &str) -> Result<Node, Errno> {
    if path.is_empty() {
        return Err(Errno::Noent);
    }
    walk(base, path)
}

/// Why a call may not create `path`: `EEXIST` if something is there, `EROFS` if it could be
/// created on a writable file system, or whatever stops the way to it (`ENOENT` for a missing
/// parent).
pub(crate) fn refuse_create(base: &Arc<Dir>, path: &str) -> Errno {
    match resolve(base, path) {
        Ok(_) => Errno::Exist,
        Err(Errno::Noent) if !path.is_empty() => {
            let parent = path
                .trim_end_matches('/')
                .rsplit_once('/')
                .map_or("", |(parent, _)| parent);
            // The parent exists (a file there would have been `ENOTDIR` above).
            walk(base, parent).err().unwrap_or(Errno::Rofs)
        }
        Err(e) => e,
    }
}

/// Why a call may not change or remove what is at `path`: `EROFS` if it exists, else why not.
pub(crate) fn refuse_change(base: &Arc<Dir>, path: &str) -> Errno {
    match resolve(base, path) {
        Ok(_) => Errno::Rofs,
        Err(e) => e,
    }
}

/// Resolves `path`, the empty path being `base` itself. The stack of directories walked through
/// is what `..` returns to; it grows by one per name read, so with the path it is bounded by
/// [`super::memory::MAX_PATH`].
fn walk(base: &Arc<Dir>, path: &str) -> Result<Node, Errno> {
    if path.starts_with('/') {
        return Err(Errno::Notcapable);
    }
    let mut parents: Vec<&Arc<Dir>> = Vec::new();
    let mut here = base;
    let mut file = None;
    for name in path.split('/') {
        if file.is_some() {
            return Err(Errno::Notdir);
        }
        match name {
            "" | "." => {}
            ".." => here = parents.pop().ok_or(Errno::Notcapable)?,
            _ => match here.get(name).ok_or(Errno::Noent)? {
                Node::Dir(dir) => {
                    parents.push(here);
                    here = dir;
                }
                Node::File(f) => file = Some(f),
            },
        }
    }
    Ok(match file {
        Some(f) => Node::File(f.clone()),
        None => Node::Dir(here.clone()),
    })
}
