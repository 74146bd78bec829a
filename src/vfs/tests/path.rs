//! Path resolution, the refusal of every write, and the tree builder.

use super::*;
use crate::vfs::abi::oflags;
use crate::vfs::fd_calls as fd;
use crate::vfs::folder_calls;
use crate::vfs::memory::MAX_PATH;
use crate::vfs::path_calls::TwoPaths;
use crate::vfs::tree::TreeError;

#[test]
fn paths_resolve_by_component_and_never_leave_their_directory() {
    let (mut mem, mut files) = (mem(), files());
    for ok in [
        "python315.zip",
        "./matplotlib//mpl-data/./matplotlibrc",
        "matplotlib/../python315.zip",
        "matplotlib/mpl-data/fonts/../../__init__.py",
        ".",
        "matplotlib/",
    ] {
        let fd = open(&mut mem, &mut files, ok).unwrap_or_else(|e| panic!("{ok}: {e:?}"));
        fd::fd_close(&mut files, fd).unwrap();
    }
    for (path, errno) in [
        ("..", Errno::Notcapable),
        ("../lib/python315.zip", Errno::Notcapable),
        ("matplotlib/../..", Errno::Notcapable),
        ("matplotlib/../../lib", Errno::Notcapable),
        ("/usr/local/lib/python315.zip", Errno::Notcapable),
        ("/", Errno::Notcapable),
        ("", Errno::Noent),
        ("missing", Errno::Noent),
        ("missing/..", Errno::Noent),
        ("matplotlib/missing/x", Errno::Noent),
        ("python315.zip/", Errno::Notdir),
        ("python315.zip/x", Errno::Notdir),
        ("python315.zip/..", Errno::Notdir),
        ("python315.zip/.", Errno::Notdir),
        ("MATPLOTLIB", Errno::Noent),
    ] {
        assert_eq!(open(&mut mem, &mut files, path), Err(errno), "{path:?}");
    }

    // From an opened directory, `..` stops at that directory, as with wasmtime's descriptors.
    let sub = open(&mut mem, &mut files, "matplotlib/mpl-data").unwrap();
    let from_sub = |mem: &mut Vec<u8>, files: &mut Files, path| {
        open_with(mem, files, sub, path, 0, READ_RIGHTS)
    };
    assert!(from_sub(&mut mem, &mut files, "fonts/../matplotlibrc").is_ok());
    assert_eq!(
        from_sub(&mut mem, &mut files, "../__init__.py"),
        Err(Errno::Notcapable)
    );

    // A file is no directory to start from; stdio and closed numbers are no descriptors.
    let file = open(&mut mem, &mut files, "python315.zip").unwrap();
    let from =
        |mem: &mut Vec<u8>, files: &mut Files, dir| open_with(mem, files, dir, "x", 0, READ_RIGHTS);
    assert_eq!(from(&mut mem, &mut files, file), Err(Errno::Notdir));
    assert_eq!(from(&mut mem, &mut files, 1), Err(Errno::Badf));
    assert_eq!(from(&mut mem, &mut files, 500), Err(Errno::Badf));
}

#[test]
fn path_arguments_are_checked() {
    let (mut mem, mut files) = (mem(), files());
    let end = mem.len() as u32;
    let stat = |mem: &mut Vec<u8>, files: &Files, ptr, len| {
        path_calls::path_filestat_get(mem, files, ROOT, 0, ptr, len, OUT_AT)
    };
    assert_eq!(stat(&mut mem, &files, end - 2, 3), Err(Errno::Fault));
    assert_eq!(stat(&mut mem, &files, u32::MAX, 2), Err(Errno::Fault));
    let (ptr, len) = put(&mut mem, PATH_AT, b"bad\xff");
    assert_eq!(stat(&mut mem, &files, ptr, len), Err(Errno::Ilseq));
    assert_eq!(
        stat(&mut mem, &files, 0, MAX_PATH + 1),
        Err(Errno::Nametoolong)
    );
    let (ptr, len) = put(&mut mem, PATH_AT, b"python315.zip");
    assert_eq!(
        path_calls::path_filestat_get(&mut mem, &files, ROOT, 2, ptr, len, OUT_AT),
        Err(Errno::Inval),
        "unknown lookup flags"
    );
    assert_eq!(
        path_calls::path_filestat_get(&mut mem, &files, ROOT, 0, ptr, len, end - 8),
        Err(Errno::Fault)
    );

    // `path_open`: a bad result pointer leaves no descriptor behind; unknown flags are EINVAL.
    let open_out = |mem: &mut Vec<u8>, files: &mut Files, oflags, base, out| {
        let (ptr, len) = put(mem, PATH_AT, b"python315.zip");
        let args = Open {
            fd: ROOT,
            lookup: 0,
            path: ptr,
            path_len: len,
            oflags,
            base,
            inheriting: 0,
            fdflags: 0,
            out,
        };
        path_calls::path_open(mem, files, args)
    };
    assert_eq!(
        open_out(&mut mem, &mut files, 0, READ_RIGHTS, end - 3),
        Err(Errno::Fault)
    );
    assert_eq!(
        open_out(&mut mem, &mut files, 1 << 4, READ_RIGHTS, OUT_AT),
        Err(Errno::Inval)
    );
    assert_eq!(
        open_out(&mut mem, &mut files, 0, 1 << 30, OUT_AT),
        Err(Errno::Inval)
    );
    assert_eq!(open(&mut mem, &mut files, "python315.zip"), Ok(4));
}

#[test]
fn every_write_is_refused_as_on_a_read_only_file_system() {
    let (mut mem, mut files) = (mem(), files());
    let create = oflags::CREAT;
    for (path, oflags, base, errno) in [
        ("new.txt", create, READ_RIGHTS, Errno::Rofs),
        ("missing/new.txt", create, READ_RIGHTS, Errno::Noent),
        ("python315.zip/new.txt", create, READ_RIGHTS, Errno::Notdir),
        (
            "python315.zip",
            create | oflags::EXCL,
            READ_RIGHTS,
            Errno::Exist,
        ),
        ("new.txt", create | oflags::EXCL, READ_RIGHTS, Errno::Rofs),
        ("python315.zip", create, READ_RIGHTS, Errno::Rofs),
        ("python315.zip", oflags::TRUNC, READ_RIGHTS, Errno::Rofs),
        ("python315.zip", 0, rights::ALL, Errno::Rofs),
        ("python315.zip", 0, rights::FD_WRITE, Errno::Rofs),
        (
            "python315.zip",
            oflags::DIRECTORY,
            READ_RIGHTS,
            Errno::Notdir,
        ),
        ("matplotlib", 0, rights::FD_WRITE, Errno::Isdir),
        ("matplotlib", create, READ_RIGHTS, Errno::Isdir),
    ] {
        assert_eq!(
            open_with(&mut mem, &mut files, ROOT, path, u32::from(oflags), base),
            Err(errno),
            "{path} {oflags} {base:#x}"
        );
    }

    let one = |mem: &mut Vec<u8>, path: &str| put(mem, PATH_AT, path.as_bytes());
    for (path, mkdir) in [
        ("matplotlib", Errno::Exist),
        ("python315.zip", Errno::Exist),
        ("new", Errno::Rofs),
        ("new/", Errno::Rofs),
        ("missing/new", Errno::Noent),
        ("../new", Errno::Notcapable),
    ] {
        let (p, l) = one(&mut mem, path);
        let r = path_calls::path_create_directory(&mem, &mut files, ROOT, p, l);
        assert_eq!(r, Err(mkdir), "mkdir {path}");
        let r = path_calls::path_symlink(&mem, &files, p, l, ROOT, p, l);
        assert_eq!(r, Err(mkdir), "symlink {path}");
    }
    for (path, change) in [
        ("matplotlib", Errno::Rofs),
        ("python315.zip", Errno::Rofs),
        ("missing", Errno::Noent),
        ("/abs", Errno::Notcapable),
    ] {
        let (p, l) = one(&mut mem, path);
        for dir in [false, true] {
            let r = path_calls::path_remove(&mem, &mut files, ROOT, p, l, dir);
            assert_eq!(r, Err(change), "remove {path}");
        }
        let r = path_calls::path_filestat_set_times(&mem, &files, ROOT, 0, p, l, 0);
        assert_eq!(r, Err(change), "set times {path}");
    }
    let (p, l) = one(&mut mem, "python315.zip");
    let r = path_calls::path_readlink(&mem, &files, ROOT, p, l);
    assert_eq!(r, Err(Errno::Inval), "nothing is a link");
    let r = path_calls::path_filestat_set_times(&mem, &files, ROOT, 0, p, l, 1 << 4);
    assert_eq!(r, Err(Errno::Inval), "unknown time flags");

    // Links and renames need their source and refuse their target.
    // (`PATH_AT` holds "python315.zip", and its first 4 bytes name nothing.)
    let copy = put(&mut mem, PATH_AT + 100, b"copy");
    let two = |old_len, (new, new_len)| TwoPaths {
        old_fd: ROOT,
        old: PATH_AT,
        old_len,
        new_fd: ROOT,
        new,
        new_len,
    };
    let link = |args| path_calls::path_link(&mem, &files, 0, args);
    assert_eq!(link(two(l, copy)), Err(Errno::Rofs));
    assert_eq!(link(two(l, (p, l))), Err(Errno::Exist));
    assert_eq!(link(two(4, copy)), Err(Errno::Noent));
    for (args, errno) in [
        (two(l, copy), Errno::Rofs),
        (two(l, (p, l)), Errno::Rofs),
        (two(4, copy), Errno::Noent),
    ] {
        assert_eq!(path_calls::path_rename(&mem, &mut files, args), Err(errno));
    }

    // Through descriptors: a read-only file cannot be written, resized or retimed.
    let f = open(&mut mem, &mut files, "python315.zip").unwrap();
    assert_eq!(f, 4, "no refused call left a descriptor behind");
    let (iovs, n) = iovecs(&mut mem, &[(BUF_AT, 4)]);
    assert!(fd::fd_write(&mut mem, &mut files, f, iovs, n, OUT_AT).is_err());
    assert!(fd::fd_write(&mut mem, &mut files, ROOT, iovs, n, OUT_AT).is_err());
    for fd_ in [f, ROOT] {
        let pwrite = fd::fd_pwrite(&mut mem, &mut files, fd_, iovs, n, 0, OUT_AT);
        assert_eq!(pwrite, Err(Errno::Badf));
        assert_eq!(folder_calls::fd_allocate(&files, fd_), Err(Errno::Badf));
        let resize = folder_calls::fd_filestat_set_size(&mut files, fd_, 0);
        assert_eq!(resize, Err(Errno::Badf));
        assert_eq!(fd::fd_filestat_set_times(&files, fd_, 0), Err(Errno::Rofs));
        assert_eq!(
            fd::fd_fdstat_set_rights(&files, fd_, 0, 0),
            Err(Errno::Notsup)
        );
    }
    assert_eq!(fd::fd_filestat_set_times(&files, 1, 0), Err(Errno::Badf));
    assert_eq!(fd::fd_advise(&files, f, 5), Ok(()));
    assert_eq!(fd::fd_advise(&files, f, 6), Err(Errno::Inval));
    assert_eq!(fd::fd_sync(&files, f), Ok(()));
    assert_eq!(fd::fd_sync(&files, 1), Err(Errno::Badf));
}

#[test]
fn the_builder_takes_plain_relative_paths_only() {
    let mut b = TreeBuilder::default();
    b.insert_file("a/b/c.txt", Bytes::from_static(b"c"))
        .unwrap();
    b.insert_file("a/d.txt", Bytes::new()).unwrap();
    for bad in [
        "", "/a", "a/../x", "./x", "a//x", "a/", "x\0y", "..", "a/b/.",
    ] {
        assert!(
            matches!(
                b.insert_file(bad, Bytes::new()),
                Err(TreeError::InvalidPath(_))
            ),
            "{bad:?}"
        );
    }
    for taken in ["a/d.txt", "a/b", "a/d.txt/e", "a/b/c.txt/x"] {
        assert!(
            matches!(
                b.insert_file(taken, Bytes::new()),
                Err(TreeError::Conflict(_))
            ),
            "{taken:?}"
        );
    }
    let root = b.build();
    let mut files = Files::new(OutputSink::default(), [(Arc::from("/d"), root.clone())]);
    let mut mem = mem();
    let f = open(&mut mem, &mut files, "a/b/c.txt").unwrap();
    fd::fd_filestat_get(&mut mem, &files, f, OUT_AT).unwrap();
    assert_eq!(u64_at(&mem, OUT_AT + 32), 1);

    // Inodes are unique across trees: a second preopen never shares one.
    let other = tree();
    let ino = |dir: &Arc<Dir>| dir.listing(0).map(|(_, ino, _)| ino);
    assert_ne!(ino(&root), ino(&other));
}
