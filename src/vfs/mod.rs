//! An in-memory file system for WASI preview 1 guests: how the host serves files (CPython's
//! standard library zip, matplotlib's data, a call's input files) and takes the files the code
//! writes, without preopening any host directory, which is all wasmtime-wasi's preview 1 can
//! preopen.
//!
//! The API:
//! - [`TreeBuilder`] makes a tree of directories and files ([`Dir`], shared behind `Arc`; a
//!   file's contents are `bytes::Bytes`, so they are never copied per instance).
//! - [`Files::new`] is one store's descriptor table: stdio (stdout and stderr written to an
//!   [`OutputSink`](crate::output::OutputSink), whose limit traps as wasmtime-wasi's streams do)
//!   and the preopened directories, each a guest path and a tree; [`Files::mount`] adds the
//!   writable [`Folder`].
//! - [`add_to_linker`] shadows every preview 1 call that takes a descriptor or a path with one
//!   over the store's [`Files`]; the other calls (clocks, random, `poll_oneoff`, sockets, args,
//!   environment) stay wasmtime-wasi's.
//!
//! Everything the guest passes is hostile: pointers and lengths are checked against its memory
//! (`EFAULT`, never a panic or a trap), paths never leave the directory they start from, and
//! the host allocates nothing sized by the guest beyond capped arrays ([`memory`]). Error
//! numbers are the witx's, as wasi-libc reads them.
//!
//! A writable, bounded folder ([`Folder`], the guest's `/out`) can be mounted beside the trees:
//! its directories and files are descriptors of their own kinds, whose calls `folder_calls` answers.

mod abi;
mod fd_calls;
mod fds;
mod folder;
mod folder_calls;
mod linker;
mod memory;
mod path;
mod path_calls;
#[cfg(test)]
mod tests;
mod tree;

pub(crate) use fds::Files;
pub(crate) use folder::{Folder, FolderLimits};
pub(crate) use linker::add_to_linker;
pub(crate) use tree::{Dir, TreeBuilder};
