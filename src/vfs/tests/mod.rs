//! Every call over a `Vec<u8>` standing in for the guest's memory, and the linker's glue with a
//! real wasmtime and a module written in WAT.

mod fd;
mod folder;
mod linker;
mod path;
mod stdio;

use std::sync::Arc;

use bytes::Bytes;

use super::abi::{Errno, rights};
use super::path_calls::{self, Open};
use super::{Dir, Files, TreeBuilder};
use crate::output::OutputSink;

/// Where the preopen is, as the guest sees it.
const PREOPEN: &str = "/usr/local/lib";
const RC: &[u8] = b"backend: agg\nfont.size: 10\n";
/// The preopen's descriptor: the first after stdio.
const ROOT: u32 = 3;
/// What wasi-libc's `openat` asks for when opening to read: every right but writing ones.
const READ_RIGHTS: u64 = rights::ALL & !rights::WRITE;

fn tree() -> Arc<Dir> {
    let mut b = TreeBuilder::default();
    b.insert_file("python315.zip", Bytes::from_static(b"PK\x03\x04 zip"))
        .unwrap();
    b.insert_file("matplotlib/mpl-data/matplotlibrc", Bytes::from_static(RC))
        .unwrap();
    b.insert_file("matplotlib/mpl-data/fonts/a.ttf", Bytes::new())
        .unwrap();
    b.insert_file("matplotlib/__init__.py", Bytes::new())
        .unwrap();
    b.build()
}

fn files_with(sink: OutputSink) -> Files {
    Files::new(sink, [(Arc::from(PREOPEN), tree())])
}

fn files() -> Files {
    files_with(OutputSink::default())
}

/// A 64 KiB guest memory.
fn mem() -> Vec<u8> {
    vec![0; 64 << 10]
}

/// Where tests put their arguments and find their results.
const PATH_AT: u32 = 1024;
const OUT_AT: u32 = 2048;
const IOVS_AT: u32 = 3072;
const BUF_AT: u32 = 4096;

/// Puts `s` in memory at `at`; its pointer and length.
fn put(mem: &mut [u8], at: u32, s: &[u8]) -> (u32, u32) {
    mem[at as usize..at as usize + s.len()].copy_from_slice(s);
    (at, s.len() as u32)
}

fn u32_at(mem: &[u8], at: u32) -> u32 {
    u32::from_le_bytes(mem[at as usize..at as usize + 4].try_into().unwrap())
}

fn u64_at(mem: &[u8], at: u32) -> u64 {
    u64::from_le_bytes(mem[at as usize..at as usize + 8].try_into().unwrap())
}

/// `path_open` from `dir` as wasi-libc calls it, with `oflags` and `base` rights.
fn open_with(
    mem: &mut [u8],
    files: &mut Files,
    dir: u32,
    path: &str,
    oflags: u32,
    base: u64,
) -> Result<u32, Errno> {
    let (ptr, len) = put(mem, PATH_AT, path.as_bytes());
    path_calls::path_open(
        mem,
        files,
        Open {
            fd: dir,
            lookup: 1,
            path: ptr,
            path_len: len,
            oflags,
            base,
            inheriting: rights::ALL,
            fdflags: 0,
            out: OUT_AT,
        },
    )?;
    Ok(u32_at(mem, OUT_AT))
}

/// Opens `path` from the preopen to read.
fn open(mem: &mut [u8], files: &mut Files, path: &str) -> Result<u32, Errno> {
    open_with(mem, files, ROOT, path, 0, READ_RIGHTS)
}

/// Puts an iovec array of `(pointer, length)` buffers at [`IOVS_AT`]; its pointer and count.
fn iovecs(mem: &mut [u8], bufs: &[(u32, u32)]) -> (u32, u32) {
    for (i, (ptr, len)) in bufs.iter().enumerate() {
        let at = IOVS_AT as usize + 8 * i;
        mem[at..at + 4].copy_from_slice(&ptr.to_le_bytes());
        mem[at + 4..at + 8].copy_from_slice(&len.to_le_bytes());
    }
    (IOVS_AT, bufs.len() as u32)
}
