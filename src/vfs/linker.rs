//! Defines every preview 1 call that takes a descriptor or a path in a [`Linker`], over the
//! store's [`Files`]. Call it after `wasmtime_wasi::p1::add_to_linker_async` with
//! `linker.allow_shadowing(true)`: these replace wasmtime-wasi's, so the guest's files are the
//! tree and nothing of the host's file system. The calls never block, so they are synchronous
//! functions, which an async-capable linker takes as well.

use wasmtime::{Caller, Extern, Linker};

use super::abi::Errno;
use super::fd_calls::{self as fd, WriteError};
use super::fds::Files;
use super::folder_calls as folder;
use super::path_calls::{self as path, Open, TwoPaths};

const MODULE: &str = "wasi_snapshot_preview1";

/// What a call's result becomes in the guest: an error number, or a trap.
trait Answer {
    fn answer(self) -> wasmtime::Result<i32>;
}

impl Answer for Result<(), Errno> {
    fn answer(self) -> wasmtime::Result<i32> {
        Ok(Errno::code(self))
    }
}

impl Answer for Result<(), WriteError> {
    fn answer(self) -> wasmtime::Result<i32> {
        match self {
            Ok(()) => Ok(0),
            Err(WriteError::Errno(e)) => Ok(e as i32),
            Err(WriteError::Limit(limit)) => Err(wasmtime::Error::new(limit)),
        }
    }
}

/// Runs `f` over the guest's memory and the store's files. A guest without a memory export
/// cannot speak WASI at all, so that is a trap.
fn call<T: 'static, R: Answer>(
    caller: &mut Caller<'_, T>,
    get: impl Fn(&mut T) -> &mut Files,
    f: impl FnOnce(&mut [u8], &mut Files) -> R,
) -> wasmtime::Result<i32> {
    let Some(Extern::Memory(memory)) = caller.get_export("memory") else {
        wasmtime::bail!("the guest exports no memory");
    };
    let (mem, data) = memory.data_and_store_mut(caller);
    f(mem, get(data)).answer()
}

/// Defines one call: its name, its wasm parameters (`u32` for `i32`, `u64` for `i64`: the
/// unsigned view of the same bits) and what it does with the memory and the files.
macro_rules! define {
    ($linker:ident, $get:ident, $name:ident($($arg:ident: $ty:ty),*), |$mem:pat_param, $files:pat_param| $body:expr) => {
        $linker.func_wrap(
            MODULE,
            stringify!($name),
            move |mut caller: Caller<'_, T>, $($arg: $ty),*| -> wasmtime::Result<i32> {
                call(&mut caller, $get, |$mem, $files| $body)
            },
        )?;
    };
}

/// Defines the calls over the [`Files`] that `get` finds in the store's data.
pub(crate) fn add_to_linker<T: 'static>(
    linker: &mut Linker<T>,
    get: impl Fn(&mut T) -> &mut Files + Copy + Send + Sync + 'static,
) -> wasmtime::Result<()> {
    define!(linker, get, fd_advise(fd: u32, _offset: u64, _len: u64, advice: u32),
        |_, files| fd::fd_advise(files, fd, advice));
    define!(linker, get, fd_allocate(fd: u32, _offset: u64, _len: u64),
        |_, files| folder::fd_allocate(files, fd));
    define!(linker, get, fd_close(fd: u32), |_, files| fd::fd_close(files, fd));
    define!(linker, get, fd_datasync(fd: u32), |_, files| fd::fd_sync(files, fd));
    define!(linker, get, fd_fdstat_get(fd: u32, out: u32),
        |mem, files| fd::fd_fdstat_get(mem, files, fd, out));
    define!(linker, get, fd_fdstat_set_flags(fd: u32, flags: u32),
        |_, files| fd::fd_fdstat_set_flags(files, fd, flags));
    define!(linker, get, fd_fdstat_set_rights(fd: u32, base: u64, inheriting: u64),
        |_, files| fd::fd_fdstat_set_rights(files, fd, base, inheriting));
    define!(linker, get, fd_filestat_get(fd: u32, out: u32),
        |mem, files| fd::fd_filestat_get(mem, files, fd, out));
    define!(linker, get, fd_filestat_set_size(fd: u32, size: u64),
        |_, files| folder::fd_filestat_set_size(files, fd, size));
    define!(linker, get, fd_filestat_set_times(fd: u32, _atim: u64, _mtim: u64, flags: u32),
        |_, files| fd::fd_filestat_set_times(files, fd, flags));
    define!(linker, get, fd_pread(fd: u32, iovs: u32, iovs_len: u32, offset: u64, out: u32),
        |mem, files| fd::fd_pread(mem, files, fd, iovs, iovs_len, offset, out));
    define!(linker, get, fd_prestat_get(fd: u32, out: u32),
        |mem, files| fd::fd_prestat_get(mem, files, fd, out));
    define!(linker, get, fd_prestat_dir_name(fd: u32, ptr: u32, len: u32),
        |mem, files| fd::fd_prestat_dir_name(mem, files, fd, ptr, len));
    define!(linker, get, fd_pwrite(fd: u32, iovs: u32, iovs_len: u32, offset: u64, out: u32),
        |mem, files| fd::fd_pwrite(mem, files, fd, iovs, iovs_len, offset, out));
    define!(linker, get, fd_read(fd: u32, iovs: u32, iovs_len: u32, out: u32),
        |mem, files| fd::fd_read(mem, files, fd, iovs, iovs_len, out));
    define!(linker, get, fd_readdir(fd: u32, buf: u32, buf_len: u32, cookie: u64, out: u32),
        |mem, files| fd::fd_readdir(mem, files, fd, buf, buf_len, cookie, out));
    define!(linker, get, fd_renumber(from: u32, to: u32),
        |_, files| fd::fd_renumber(files, from, to));
    define!(linker, get, fd_seek(fd: u32, delta: i64, whence: u32, out: u32),
        |mem, files| fd::fd_seek(mem, files, fd, delta, whence, out));
    define!(linker, get, fd_sync(fd: u32), |_, files| fd::fd_sync(files, fd));
    define!(linker, get, fd_tell(fd: u32, out: u32),
        |mem, files| fd::fd_tell(mem, files, fd, out));
    define!(linker, get, fd_write(fd: u32, iovs: u32, iovs_len: u32, out: u32),
        |mem, files| fd::fd_write(mem, files, fd, iovs, iovs_len, out));
    define!(linker, get, path_create_directory(fd: u32, ptr: u32, len: u32),
        |mem, files| path::path_create_directory(mem, files, fd, ptr, len));
    define!(linker, get, path_filestat_get(fd: u32, lookup: u32, ptr: u32, len: u32, out: u32),
        |mem, files| path::path_filestat_get(mem, files, fd, lookup, ptr, len, out));
    define!(linker, get, path_filestat_set_times(
            fd: u32, lookup: u32, ptr: u32, len: u32, _atim: u64, _mtim: u64, flags: u32),
        |mem, files| path::path_filestat_set_times(mem, files, fd, lookup, ptr, len, flags));
    define!(linker, get, path_link(
            old_fd: u32, lookup: u32, old: u32, old_len: u32, new_fd: u32, new: u32, new_len: u32),
        |mem, files| path::path_link(mem, files, lookup,
            TwoPaths { old_fd, old, old_len, new_fd, new, new_len }));
    define!(linker, get, path_open(
            fd: u32, lookup: u32, path: u32, path_len: u32, oflags: u32, base: u64,
            inheriting: u64, fdflags: u32, out: u32),
        |mem, files| path::path_open(mem, files, Open {
            fd, lookup, path, path_len, oflags, base, inheriting, fdflags, out }));
    define!(linker, get, path_readlink(
            fd: u32, ptr: u32, len: u32, _buf: u32, _buf_len: u32, _out: u32),
        |mem, files| path::path_readlink(mem, files, fd, ptr, len));
    define!(linker, get, path_remove_directory(fd: u32, ptr: u32, len: u32),
        |mem, files| path::path_remove(mem, files, fd, ptr, len, true));
    define!(linker, get, path_rename(
            old_fd: u32, old: u32, old_len: u32, new_fd: u32, new: u32, new_len: u32),
        |mem, files| path::path_rename(mem, files,
            TwoPaths { old_fd, old, old_len, new_fd, new, new_len }));
    define!(linker, get, path_symlink(
            target: u32, target_len: u32, fd: u32, ptr: u32, len: u32),
        |mem, files| path::path_symlink(mem, files, target, target_len, fd, ptr, len));
    define!(linker, get, path_unlink_file(fd: u32, ptr: u32, len: u32),
        |mem, files| path::path_remove(mem, files, fd, ptr, len, false));
    Ok(())
}
