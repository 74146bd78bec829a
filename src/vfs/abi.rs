//! WASI preview 1's numbers and memory layouts, as its witx (`typenames.witx` in wasmtime-wasi
//! 48.0.8) defines them and wasi-libc reads them: the only place they are spelled out.

/// An error number, in the order of the witx `errno` enum; only those this module answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub(crate) enum Errno {
    Badf = 8,
    Exist = 20,
    Fault = 21,
    Fbig = 22,
    Ilseq = 25,
    Inval = 28,
    Isdir = 31,
    Mfile = 33,
    Nametoolong = 37,
    Noent = 44,
    Nospc = 51,
    Notdir = 54,
    Notempty = 55,
    Notsup = 58,
    Perm = 63,
    Rofs = 69,
    Spipe = 70,
    Xdev = 75,
    Notcapable = 76,
}

impl Errno {
    /// What a host function returns to the guest: 0 for success, else the error number.
    pub(crate) fn code(result: Result<(), Errno>) -> i32 {
        match result {
            Ok(()) => 0,
            Err(e) => e as i32,
        }
    }
}

/// `filetype`: what a descriptor or directory entry is.
pub(crate) mod filetype {
    /// What stdio reports: wasmtime says `unknown` for a stream that is not a terminal, and
    /// wasi-libc's `isatty` is true for a character device, so this keeps `isatty()` false.
    pub(crate) const UNKNOWN: u8 = 0;
    pub(crate) const DIRECTORY: u8 = 3;
    pub(crate) const REGULAR_FILE: u8 = 4;
}

/// `rights`: the bits this module reports or looks at.
pub(crate) mod rights {
    pub(crate) const FD_DATASYNC: u64 = 1 << 0;
    pub(crate) const FD_READ: u64 = 1 << 1;
    pub(crate) const FD_SEEK: u64 = 1 << 2;
    pub(crate) const FD_FDSTAT_SET_FLAGS: u64 = 1 << 3;
    pub(crate) const FD_SYNC: u64 = 1 << 4;
    pub(crate) const FD_TELL: u64 = 1 << 5;
    pub(crate) const FD_WRITE: u64 = 1 << 6;
    pub(crate) const FD_ADVISE: u64 = 1 << 7;
    pub(crate) const FD_ALLOCATE: u64 = 1 << 8;
    pub(crate) const PATH_OPEN: u64 = 1 << 13;
    pub(crate) const FD_READDIR: u64 = 1 << 14;
    pub(crate) const PATH_READLINK: u64 = 1 << 15;
    pub(crate) const PATH_FILESTAT_GET: u64 = 1 << 18;
    pub(crate) const FD_FILESTAT_GET: u64 = 1 << 21;
    pub(crate) const FD_FILESTAT_SET_SIZE: u64 = 1 << 22;
    pub(crate) const POLL_FD_READWRITE: u64 = 1 << 27;
    /// Every right the witx defines (30 of them).
    pub(crate) const ALL: u64 = (1 << 30) - 1;

    /// A rights argument: bits the witx does not define are `EINVAL`, as in wasmtime.
    pub(crate) fn check(value: u64) -> Result<(), super::Errno> {
        if value & !ALL == 0 {
            Ok(())
        } else {
            Err(super::Errno::Inval)
        }
    }

    /// The rights wasi-libc's `openat` asks for only when opening for writing.
    pub(crate) const WRITE: u64 = FD_DATASYNC | FD_WRITE | FD_ALLOCATE | FD_FILESTAT_SET_SIZE;
    /// What an open file may do: read, never write.
    pub(crate) const FILE: u64 = FD_READ
        | FD_SEEK
        | FD_TELL
        | FD_ADVISE
        | FD_SYNC
        | FD_FDSTAT_SET_FLAGS
        | FD_FILESTAT_GET
        | POLL_FD_READWRITE;
    /// What an open directory may do: look things up and list them.
    pub(crate) const DIR: u64 =
        PATH_OPEN | FD_READDIR | PATH_READLINK | PATH_FILESTAT_GET | FD_FILESTAT_GET;
}

/// `oflags` of `path_open`.
pub(crate) mod oflags {
    pub(crate) const CREAT: u16 = 1 << 0;
    pub(crate) const DIRECTORY: u16 = 1 << 1;
    pub(crate) const EXCL: u16 = 1 << 2;
    pub(crate) const TRUNC: u16 = 1 << 3;
    pub(crate) const ALL: u16 = CREAT | DIRECTORY | EXCL | TRUNC;
}

/// A flags argument, which must fit `all` (the flags its type defines): `EINVAL` otherwise.
pub(crate) fn flags(value: u32, all: u16) -> Result<u16, Errno> {
    u16::try_from(value)
        .ok()
        .filter(|v| v & !all == 0)
        .ok_or(Errno::Inval)
}

/// `fdflags`.
pub(crate) mod fdflags {
    pub(crate) const APPEND: u16 = 1 << 0;
    pub(crate) const DSYNC: u16 = 1 << 1;
    pub(crate) const RSYNC: u16 = 1 << 3;
    pub(crate) const SYNC: u16 = 1 << 4;
    pub(crate) const ALL: u16 = (1 << 5) - 1;
}

/// `lookupflags`: only `symlink_follow`, which means nothing here (there are no links).
pub(crate) const LOOKUPFLAGS_ALL: u16 = 1;
/// `fstflags` of the `*_set_times` calls.
pub(crate) const FSTFLAGS_ALL: u16 = (1 << 4) - 1;
/// `advice` values run from `normal` (0) to `noreuse` (5).
pub(crate) const ADVICE_LAST: u8 = 5;

/// `whence` of `fd_seek`.
pub(crate) mod whence {
    pub(crate) const SET: u8 = 0;
    pub(crate) const CUR: u8 = 1;
    pub(crate) const END: u8 = 2;
}

/// The device number every node reports.
const DEV: u64 = 1;
/// The access, modification and change time of every node (2026-01-01T00:00:00Z, in
/// nanoseconds): fixed, so nothing about the host leaks, and after 1980, so `zipfile` takes it.
const TIME: u64 = 1_767_225_600_000_000_000;

/// `filestat` (64 bytes): device, inode, type, link count, size, and the three times.
pub(crate) fn filestat(ino: u64, filetype: u8, size: u64) -> [u8; 64] {
    let mut out = [0; 64];
    out[0..8].copy_from_slice(&DEV.to_le_bytes());
    out[8..16].copy_from_slice(&ino.to_le_bytes());
    out[16] = filetype;
    out[24..32].copy_from_slice(&1u64.to_le_bytes());
    out[32..40].copy_from_slice(&size.to_le_bytes());
    for at in [40, 48, 56] {
        out[at..at + 8].copy_from_slice(&TIME.to_le_bytes());
    }
    out
}

/// `fdstat` (24 bytes): type, flags, base and inheriting rights.
pub(crate) fn fdstat(filetype: u8, flags: u16, base: u64, inheriting: u64) -> [u8; 24] {
    let mut out = [0; 24];
    out[0] = filetype;
    out[2..4].copy_from_slice(&flags.to_le_bytes());
    out[8..16].copy_from_slice(&base.to_le_bytes());
    out[16..24].copy_from_slice(&inheriting.to_le_bytes());
    out
}

/// The 24-byte header of a `dirent`, its padding zeroed; the name follows it.
pub(crate) fn dirent(next: u64, ino: u64, name_len: u32, filetype: u8) -> [u8; 24] {
    let mut out = [0; 24];
    out[0..8].copy_from_slice(&next.to_le_bytes());
    out[8..16].copy_from_slice(&ino.to_le_bytes());
    out[16..20].copy_from_slice(&name_len.to_le_bytes());
    out[20] = filetype;
    out
}

/// `prestat` (8 bytes) of a preopened directory: tag `dir` (0) and its name's length.
pub(crate) fn prestat(name_len: u32) -> [u8; 8] {
    let mut out = [0; 8];
    out[4..8].copy_from_slice(&name_len.to_le_bytes());
    out
}
