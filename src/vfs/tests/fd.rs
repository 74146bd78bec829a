//! The descriptor calls: reading, seeking, stat, listing, preopens, the table's bound and
//! hostile pointers.

use super::*;
use crate::vfs::abi::filetype;
use crate::vfs::fd_calls as fd;
use crate::vfs::fds::MAX_FDS;
use crate::vfs::memory::MAX_IOVECS;

const RC_PATH: &str = "matplotlib/mpl-data/matplotlibrc";

#[test]
fn a_file_reads_seeks_and_preads() {
    let (mut mem, mut files) = (mem(), files());
    let f = open(&mut mem, &mut files, RC_PATH).unwrap();
    assert_eq!(f, 4, "the lowest free number after the preopen");

    // Two buffers are filled in turn.
    let (iovs, n) = iovecs(&mut mem, &[(BUF_AT, 3), (BUF_AT + 100, 5)]);
    fd::fd_read(&mut mem, &mut files, f, iovs, n, OUT_AT).unwrap();
    assert_eq!(u32_at(&mem, OUT_AT), 8);
    assert_eq!(&mem[BUF_AT as usize..][..3], &RC[..3]);
    assert_eq!(&mem[BUF_AT as usize + 100..][..5], &RC[3..8]);
    fd::fd_tell(&mut mem, &files, f, OUT_AT).unwrap();
    assert_eq!(u64_at(&mem, OUT_AT), 8);

    let seek = |mem: &mut Vec<u8>, files: &mut Files, delta, whence| {
        fd::fd_seek(mem, files, f, delta, whence, OUT_AT).map(|()| u64_at(mem, OUT_AT))
    };
    assert_eq!(seek(&mut mem, &mut files, 2, 0), Ok(2));
    assert_eq!(seek(&mut mem, &mut files, -1, 1), Ok(1));
    assert_eq!(seek(&mut mem, &mut files, -3, 2), Ok(RC.len() as u64 - 3));
    assert_eq!(seek(&mut mem, &mut files, -1, 0), Err(Errno::Inval));
    assert_eq!(seek(&mut mem, &mut files, -100, 1), Err(Errno::Inval));
    assert_eq!(seek(&mut mem, &mut files, i64::MAX, 2), Err(Errno::Inval));
    assert_eq!(seek(&mut mem, &mut files, 0, 3), Err(Errno::Inval));

    // The rest of the file, then end of file.
    let (iovs, n) = iovecs(&mut mem, &[(BUF_AT, 100)]);
    fd::fd_read(&mut mem, &mut files, f, iovs, n, OUT_AT).unwrap();
    assert_eq!(u32_at(&mem, OUT_AT), 3);
    assert_eq!(&mem[BUF_AT as usize..][..3], &RC[RC.len() - 3..]);
    fd::fd_read(&mut mem, &mut files, f, iovs, n, OUT_AT).unwrap();
    assert_eq!(u32_at(&mem, OUT_AT), 0);

    // Past the end reads nothing; pread leaves the offset alone.
    assert_eq!(seek(&mut mem, &mut files, 1000, 0), Ok(1000));
    fd::fd_read(&mut mem, &mut files, f, iovs, n, OUT_AT).unwrap();
    assert_eq!(u32_at(&mem, OUT_AT), 0);
    fd::fd_pread(&mut mem, &files, f, iovs, n, 8, OUT_AT).unwrap();
    assert_eq!(u32_at(&mem, OUT_AT), RC.len() as u32 - 8);
    assert_eq!(&mem[BUF_AT as usize..][..RC.len() - 8], &RC[8..]);
    fd::fd_tell(&mut mem, &files, f, OUT_AT).unwrap();
    assert_eq!(u64_at(&mem, OUT_AT), 1000);

    // Closed, it is gone.
    fd::fd_close(&mut files, f).unwrap();
    assert_eq!(fd::fd_close(&mut files, f), Err(Errno::Badf));
    assert_eq!(
        fd::fd_read(&mut mem, &mut files, f, iovs, n, OUT_AT),
        Err(Errno::Badf)
    );
}

#[test]
fn stat_gives_type_size_and_a_stable_inode() {
    let (mut mem, mut files) = (mem(), files());
    let f = open(&mut mem, &mut files, RC_PATH).unwrap();
    fd::fd_filestat_get(&mut mem, &files, f, OUT_AT).unwrap();
    let stat = mem[OUT_AT as usize..][..64].to_vec();
    assert_eq!(stat[16], filetype::REGULAR_FILE);
    assert_eq!(u64_at(&stat, 32), RC.len() as u64);
    assert_eq!(u64_at(&stat, 24), 1, "one link");
    assert_eq!(u64_at(&stat, 40), u64_at(&stat, 48), "fixed times");

    // The same node by path, and again from a second descriptor: the same inode.
    let (ptr, len) = put(&mut mem, PATH_AT, RC_PATH.as_bytes());
    path_calls::path_filestat_get(&mut mem, &files, ROOT, 1, ptr, len, OUT_AT).unwrap();
    assert_eq!(&mem[OUT_AT as usize..][..64], &stat[..]);
    let again = open(&mut mem, &mut files, RC_PATH).unwrap();
    fd::fd_filestat_get(&mut mem, &files, again, OUT_AT).unwrap();
    assert_eq!(&mem[OUT_AT as usize..][..64], &stat[..]);

    fd::fd_filestat_get(&mut mem, &files, ROOT, OUT_AT).unwrap();
    assert_eq!(mem[OUT_AT as usize + 16], filetype::DIRECTORY);
    assert_ne!(u64_at(&mem, OUT_AT + 8), u64_at(&stat, 8));
    fd::fd_filestat_get(&mut mem, &files, 1, OUT_AT).unwrap();
    assert_eq!(&mem[OUT_AT as usize..][..64], &[0; 64]);
}

#[test]
fn fdstat_says_what_each_descriptor_is_and_may_do() {
    let (mut mem, mut files) = (mem(), files());
    let fdstat = |mem: &mut Vec<u8>, files: &Files, at| {
        fd::fd_fdstat_get(mem, files, at, OUT_AT).unwrap();
        (mem[OUT_AT as usize], u64_at(mem, OUT_AT + 8))
    };
    // Not a character device: wasi-libc's `isatty` stays false, as under wasmtime.
    assert_eq!(
        fdstat(&mut mem, &files, 0),
        (filetype::UNKNOWN, rights::FD_READ)
    );
    assert_eq!(
        fdstat(&mut mem, &files, 2),
        (filetype::UNKNOWN, rights::FD_WRITE)
    );
    let (kind, base) = fdstat(&mut mem, &files, ROOT);
    assert_eq!(kind, filetype::DIRECTORY);
    assert_eq!(base & rights::FD_READDIR, rights::FD_READDIR);
    assert_eq!(u64_at(&mem, OUT_AT + 16), rights::ALL);
    let f = open(&mut mem, &mut files, RC_PATH).unwrap();
    let (kind, base) = fdstat(&mut mem, &files, f);
    assert_eq!(kind, filetype::REGULAR_FILE);
    assert_eq!(base & rights::WRITE, 0);
    assert_eq!(
        fd::fd_fdstat_get(&mut mem, &files, 99, OUT_AT),
        Err(Errno::Badf)
    );

    // Non-blocking may be set on a file; synchronous writing may not.
    fd::fd_fdstat_set_flags(&mut files, f, 4).unwrap();
    fd::fd_fdstat_get(&mut mem, &files, f, OUT_AT).unwrap();
    assert_eq!(mem[OUT_AT as usize + 2], 4);
    assert_eq!(fd::fd_fdstat_set_flags(&mut files, f, 2), Err(Errno::Inval));
    assert_eq!(
        fd::fd_fdstat_set_flags(&mut files, f, 1 << 5),
        Err(Errno::Inval)
    );
    assert_eq!(fd::fd_fdstat_set_flags(&mut files, 1, 4), Err(Errno::Badf));
}

/// Reads a listing the way wasi-libc's `readdir` does, with a buffer of `size` bytes: from the
/// last whole entry's cookie again whenever the buffer came back full, and with a buffer twice
/// as large when it did not hold one whole entry.
fn list(mem: &mut [u8], files: &Files, dir: u32, mut size: u32) -> Vec<(String, u8)> {
    let mut names = Vec::new();
    let mut cookie = 0;
    loop {
        fd::fd_readdir(mem, files, dir, BUF_AT, size, cookie, OUT_AT).unwrap();
        let used = u32_at(mem, OUT_AT) as usize;
        let buf = &mem[BUF_AT as usize..][..used];
        let mut at = 0;
        while at + 24 <= used {
            let name_len = u32_at(buf, at as u32 + 16) as usize;
            if at + 24 + name_len > used {
                break;
            }
            assert_eq!(&buf[at + 21..at + 24], &[0; 3], "padding is zeroed");
            let name = String::from_utf8(buf[at + 24..][..name_len].to_vec()).unwrap();
            names.push((name, buf[at + 20]));
            cookie = u64_at(buf, at as u32);
            at += 24 + name_len;
        }
        if used < size as usize {
            return names;
        }
        if at == 0 {
            size *= 2;
        }
    }
}

#[test]
fn readdir_lists_by_name_and_resumes_at_cookies() {
    let (mut mem, mut files) = (mem(), files());
    let want: Vec<(String, u8)> = [
        (".", filetype::DIRECTORY),
        ("..", filetype::DIRECTORY),
        ("__init__.py", filetype::REGULAR_FILE),
        ("mpl-data", filetype::DIRECTORY),
    ]
    .map(|(n, t)| (n.to_owned(), t))
    .into();
    let dir = open(&mut mem, &mut files, "matplotlib").unwrap();
    for size in [4096, 40, 35, 26, 24, 1] {
        assert_eq!(list(&mut mem, &files, dir, size), want, "buffer of {size}");
    }

    // A buffer smaller than a header is filled, not overrun; a cookie past the end gives none.
    mem[BUF_AT as usize..][..16].fill(0xAA);
    fd::fd_readdir(&mut mem, &files, dir, BUF_AT, 10, 0, OUT_AT).unwrap();
    assert_eq!(u32_at(&mem, OUT_AT), 10);
    assert_eq!(mem[BUF_AT as usize + 10], 0xAA);
    for cookie in [4, 1000, u64::MAX] {
        fd::fd_readdir(&mut mem, &files, dir, BUF_AT, 100, cookie, OUT_AT).unwrap();
        assert_eq!(u32_at(&mem, OUT_AT), 0);
    }

    let f = open(&mut mem, &mut files, RC_PATH).unwrap();
    assert_eq!(
        fd::fd_readdir(&mut mem, &files, f, BUF_AT, 100, 0, OUT_AT),
        Err(Errno::Notdir)
    );
    assert_eq!(
        fd::fd_readdir(&mut mem, &files, 1, BUF_AT, 100, 0, OUT_AT),
        Err(Errno::Badf)
    );
}

#[test]
fn preopens_are_found_from_3_until_ebadf() {
    let (mut mem, mut files) = (mem(), files());
    fd::fd_prestat_get(&mut mem, &files, ROOT, OUT_AT).unwrap();
    assert_eq!(mem[OUT_AT as usize], 0, "a directory");
    assert_eq!(u32_at(&mem, OUT_AT + 4), PREOPEN.len() as u32);
    let short = PREOPEN.len() as u32 - 1;
    assert_eq!(
        fd::fd_prestat_dir_name(&mut mem, &files, ROOT, BUF_AT, short),
        Err(Errno::Nametoolong)
    );
    fd::fd_prestat_dir_name(&mut mem, &files, ROOT, BUF_AT, 100).unwrap();
    assert_eq!(&mem[BUF_AT as usize..][..PREOPEN.len()], PREOPEN.as_bytes());

    assert_eq!(
        fd::fd_prestat_get(&mut mem, &files, 4, OUT_AT),
        Err(Errno::Badf)
    );
    assert_eq!(
        fd::fd_prestat_get(&mut mem, &files, 1, OUT_AT),
        Err(Errno::Badf)
    );
    let dir = open(&mut mem, &mut files, "matplotlib").unwrap();
    assert_eq!(
        fd::fd_prestat_get(&mut mem, &files, dir, OUT_AT),
        Err(Errno::Badf)
    );
    assert_eq!(
        fd::fd_prestat_dir_name(&mut mem, &files, dir, BUF_AT, 100),
        Err(Errno::Notdir)
    );

    // A preopen may be closed or renumbered like any descriptor.
    fd::fd_renumber(&mut files, ROOT, dir).unwrap();
    assert_eq!(
        fd::fd_prestat_get(&mut mem, &files, ROOT, OUT_AT),
        Err(Errno::Badf)
    );
    fd::fd_prestat_get(&mut mem, &files, dir, OUT_AT).unwrap();
    assert_eq!(fd::fd_renumber(&mut files, ROOT, dir), Err(Errno::Badf));
    fd::fd_close(&mut files, dir).unwrap();
    assert_eq!(
        fd::fd_prestat_get(&mut mem, &files, dir, OUT_AT),
        Err(Errno::Badf)
    );
}

#[test]
fn open_descriptors_are_bounded_and_numbers_reused() {
    let (mut mem, mut files) = (mem(), files());
    let mut opened = Vec::new();
    loop {
        match open(&mut mem, &mut files, RC_PATH) {
            Ok(fd) => opened.push(fd),
            Err(e) => {
                assert_eq!(e, Errno::Mfile);
                break;
            }
        }
    }
    assert_eq!(opened.len(), MAX_FDS - 4, "stdio and the preopen count too");
    fd::fd_close(&mut files, 10).unwrap();
    fd::fd_close(&mut files, 7).unwrap();
    assert_eq!(open(&mut mem, &mut files, RC_PATH), Ok(7));
    assert_eq!(open(&mut mem, &mut files, "matplotlib"), Ok(10));
    assert_eq!(open(&mut mem, &mut files, RC_PATH), Err(Errno::Mfile));
}

#[test]
fn hostile_pointers_are_efault_and_change_nothing() {
    let (mut mem, mut files) = (mem(), files());
    let end = mem.len() as u32;
    let f = open(&mut mem, &mut files, RC_PATH).unwrap();
    let tell = |mem: &mut Vec<u8>, files: &Files| {
        fd::fd_tell(mem, files, f, OUT_AT).unwrap();
        u64_at(mem, OUT_AT)
    };

    // The iovec array, a buffer in it, or the result outside memory: nothing is read.
    let cases = [
        (end - 4, 1, vec![]),
        (u32::MAX, 1, vec![]),
        (IOVS_AT, 2, vec![(BUF_AT, 4), (end - 2, 4)]),
        (IOVS_AT, 1, vec![(u32::MAX, 2)]),
    ];
    for (at, count, bufs) in cases {
        iovecs(&mut mem, &bufs);
        assert_eq!(
            fd::fd_read(&mut mem, &mut files, f, at, count, OUT_AT),
            Err(Errno::Fault),
            "{at} {count} {bufs:?}"
        );
    }
    let (iovs, n) = iovecs(&mut mem, &[(BUF_AT, 4)]);
    assert_eq!(
        fd::fd_read(&mut mem, &mut files, f, iovs, n, end - 3),
        Err(Errno::Fault)
    );
    assert_eq!(
        fd::fd_seek(&mut mem, &mut files, f, 5, 0, end - 7),
        Err(Errno::Fault)
    );
    assert_eq!(tell(&mut mem, &files), 0);
    assert_eq!(
        fd::fd_read(&mut mem, &mut files, f, iovs, MAX_IOVECS + 1, OUT_AT),
        Err(Errno::Inval)
    );

    assert_eq!(
        fd::fd_fdstat_get(&mut mem, &files, f, end - 23),
        Err(Errno::Fault)
    );
    assert_eq!(
        fd::fd_filestat_get(&mut mem, &files, f, end - 63),
        Err(Errno::Fault)
    );
    assert_eq!(
        fd::fd_prestat_get(&mut mem, &files, ROOT, end - 7),
        Err(Errno::Fault)
    );
    assert_eq!(
        fd::fd_prestat_dir_name(&mut mem, &files, ROOT, end - 4, 100),
        Err(Errno::Fault)
    );
    assert_eq!(
        fd::fd_readdir(&mut mem, &files, ROOT, end - 10, 11, 0, OUT_AT),
        Err(Errno::Fault)
    );
    assert_eq!(
        fd::fd_readdir(&mut mem, &files, ROOT, BUF_AT, 100, 0, u32::MAX),
        Err(Errno::Fault)
    );
    assert_eq!(fd::fd_tell(&mut mem, &files, f, end), Err(Errno::Fault));
}
