//! The glue: a module written in WAT opens a file through the imports, reads it, and writes
//! what it read to stdout.

use wasmtime::{Engine, Linker, Module, Store};

use super::*;
use crate::output::OutputLimitReached;
use crate::vfs::add_to_linker;

/// Opens `matplotlib/mpl-data/matplotlibrc` from fd 3, reads up to 64 bytes and writes them to
/// fd 1; returns 0, or the first error number, plus 1000 times the step that failed.
const GUEST: &str = r#"
(module
  (import "wasi_snapshot_preview1" "path_open"
    (func $path_open (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_read"
    (func $fd_read (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write"
    (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_close" (func $fd_close (param i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 100) "matplotlib/mpl-data/matplotlibrc")
  (func (export "run") (result i32)
    (local $errno i32)
    ;; fd 3, follow links, the path, no oflags, read rights, fdflags 0, the new fd at 200.
    (local.set $errno (call $path_open (i32.const 3) (i32.const 1) (i32.const 100) (i32.const 32)
      (i32.const 0) (i64.const 2) (i64.const 2) (i32.const 0) (i32.const 200)))
    (if (local.get $errno) (then (return (i32.add (i32.const 1000) (local.get $errno)))))
    ;; One iovec at 300: 64 bytes at 400; the count read at 208.
    (i32.store (i32.const 300) (i32.const 400))
    (i32.store (i32.const 304) (i32.const 64))
    (local.set $errno
      (call $fd_read (i32.load (i32.const 200)) (i32.const 300) (i32.const 1) (i32.const 208)))
    (if (local.get $errno) (then (return (i32.add (i32.const 2000) (local.get $errno)))))
    ;; Write what was read to stdout.
    (i32.store (i32.const 304) (i32.load (i32.const 208)))
    (local.set $errno (call $fd_write (i32.const 1) (i32.const 300) (i32.const 1) (i32.const 212)))
    (if (local.get $errno) (then (return (i32.add (i32.const 3000) (local.get $errno)))))
    (local.set $errno (call $fd_close (i32.load (i32.const 200))))
    (if (local.get $errno) (then (return (i32.add (i32.const 4000) (local.get $errno)))))
    (i32.const 0)))
"#;

/// Runs the guest with a sink of `limit` bytes: its result, and what reached stdout.
fn run(limit: usize) -> (wasmtime::Result<i32>, Vec<u8>) {
    struct State {
        files: Files,
    }
    let engine = Engine::default();
    let module = Module::new(&engine, wat::parse_str(GUEST).unwrap()).unwrap();
    let mut linker = Linker::new(&engine);
    add_to_linker(&mut linker, |s: &mut State| &mut s.files).unwrap();
    let sink = OutputSink::default();
    sink.begin(limit, None);
    let mut store = Store::new(
        &engine,
        State {
            files: files_with(sink.clone()),
        },
    );
    let instance = linker.instantiate(&mut store, &module).unwrap();
    let run = instance
        .get_typed_func::<(), i32>(&mut store, "run")
        .unwrap();
    let result = run.call(&mut store, ());
    (result, sink.take().0)
}

#[test]
fn a_wasm_guest_opens_and_reads_a_file_through_the_imports() {
    let (result, stdout) = run(1 << 20);
    assert_eq!(result.unwrap(), 0);
    assert_eq!(stdout, RC);
}

#[test]
fn the_output_limit_traps_the_guest() {
    let (result, stdout) = run(4);
    let err = result.unwrap_err();
    assert!(
        err.downcast_ref::<OutputLimitReached>().is_some(),
        "{err:?}"
    );
    assert!(stdout.starts_with(&RC[..4]));
}
