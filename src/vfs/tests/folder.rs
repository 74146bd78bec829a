//! The writable folder on its own: what POSIX says each change does, its bounds, and that a
//! clone (a session's undo state) is not changed by writes to the original.

use crate::vfs::abi::Errno;
use crate::vfs::folder::{Folder, FolderLimits};

const ROOT: u64 = Folder::ROOT;

fn folder() -> Folder {
    Folder::new(FolderLimits {
        max_entries: 4,
        max_depth: 2,
        max_bytes: 10,
    })
}

fn write(f: &mut Folder, path: &str, data: &[u8]) -> Result<(), Errno> {
    let opened = f.open(ROOT, path, true, false, true)?;
    f.write(opened.ino, 0, data, 0)
}

fn read(f: &Folder, path: &str) -> Result<Vec<u8>, Errno> {
    f.data(f.resolve(ROOT, path)?).map(<[u8]>::to_vec)
}

#[test]
fn files_and_folders_are_made_moved_and_removed() {
    let mut f = folder();
    f.mkdir(ROOT, "d").unwrap();
    assert_eq!(f.mkdir(ROOT, "d"), Err(Errno::Exist));
    write(&mut f, "d/a.txt", b"abc").unwrap();
    assert_eq!(read(&f, "d/./a.txt").unwrap(), b"abc");
    assert_eq!(read(&f, "d/../d/a.txt").unwrap(), b"abc");
    assert_eq!(
        f.open(ROOT, "d/a.txt", true, true, false).err(),
        Some(Errno::Exist)
    );
    assert_eq!(f.remove(ROOT, "d", true), Err(Errno::Notempty));
    assert_eq!(f.remove(ROOT, "d", false), Err(Errno::Isdir));
    assert_eq!(f.remove(ROOT, "d/a.txt", true), Err(Errno::Notdir));
    f.rename((ROOT, "d/a.txt"), (ROOT, "b.txt")).unwrap();
    assert_eq!(read(&f, "d/a.txt"), Err(Errno::Noent));
    assert_eq!(f.rename((ROOT, "d"), (ROOT, "d/e")), Err(Errno::Inval));
    let listed: Vec<_> = f
        .files()
        .into_iter()
        .map(|(p, d)| (p, d.to_vec()))
        .collect();
    assert_eq!(listed, [("b.txt".to_owned(), b"abc".to_vec())]);
    f.remove(ROOT, "b.txt", false).unwrap();
    f.remove(ROOT, "d", true).unwrap();
    assert_eq!(f.bytes(), 0);
    assert!(f.files().is_empty());
}

#[test]
fn paths_never_leave_the_folder() {
    let f = folder();
    for path in ["..", "../x", "/etc/passwd", "a/../../x"] {
        let found = f.resolve(ROOT, path);
        assert!(
            matches!(found, Err(Errno::Notcapable | Errno::Noent)),
            "{path}: {found:?}"
        );
    }
    assert_eq!(f.resolve(ROOT, ".."), Err(Errno::Notcapable));
}

#[test]
fn entries_depth_and_bytes_are_bounded() {
    let mut f = folder();
    assert_eq!(write(&mut f, "big", &[0; 11]), Err(Errno::Nospc));
    write(&mut f, "ten", &[0; 10]).unwrap();
    assert_eq!(write(&mut f, "one", &[0; 1]), Err(Errno::Nospc));
    // The files were made, empty, before their writes failed, as on a full disk.
    f.remove(ROOT, "big", false).unwrap();
    f.remove(ROOT, "one", false).unwrap();
    f.mkdir(ROOT, "a").unwrap();
    f.mkdir(ROOT, "a/b").unwrap();
    let deep = f.open(ROOT, "a/b/c", true, false, false).err();
    assert_eq!(deep, Some(Errno::Nospc), "too deep");
    f.open(ROOT, "y", true, false, false).unwrap();
    assert_eq!(
        f.open(ROOT, "z", true, false, false).err(),
        Some(Errno::Nospc)
    );
    // The memory limit counts linear memory with the files.
    let mut g = folder();
    g.set_memory_limit(100);
    let opened = g.open(ROOT, "m", true, false, false).unwrap();
    assert_eq!(g.write(opened.ino, 0, &[1; 5], 96), Err(Errno::Nospc));
    g.write(opened.ino, 0, &[1; 4], 96).unwrap();
}

#[test]
fn a_detached_copy_keeps_its_state_while_the_original_changes() {
    let mut f = folder();
    write(&mut f, "a", b"one").unwrap();
    let saved = f.detached();
    write(&mut f, "a", b"two!").unwrap();
    write(&mut f, "b", b"x").unwrap();
    assert_eq!(read(&saved, "a").unwrap(), b"one");
    assert_eq!(saved.resolve(ROOT, "b"), Err(Errno::Noent));
    assert_eq!((saved.bytes(), f.bytes()), (3, 5));
}
