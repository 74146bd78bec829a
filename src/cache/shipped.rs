//! The guest compiled ahead of time and shipped beside the binaries (in the wheels, npm packages
//! and archives), so that a fresh install answers its first call in milliseconds instead of
//! compiling the guest for tens of seconds.
//!
//! A shipped module is trusted as the package that carries it is, like the executable beside it:
//! it has no MAC, and the cache neither copies nor checks it. Two checks keep a wrong one from
//! loading: a trailer binds it to the embedded guest's SHA-256 (a stale file from another version
//! is refused), and wasmtime refuses an artifact compiled by another wasmtime, under another
//! configuration (`--fuel off` compiles differently, so it falls back to the cache) or for a CPU
//! feature this machine lacks. It is compiled for the target's baseline CPU, which any machine of
//! that target can run.

use std::path::{Path, PathBuf};

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use wasmtime::{Config, Engine, Module};

use super::load;
use super::trust::Distrust;

/// The shipped module's file name, beside the executable.
pub const FILE_NAME: &str = "safe-python-guest.cwasm";

/// Ends a shipped module, after the SHA-256 (64 hex digits) of the guest it was compiled from.
const TAG: &[u8; 8] = b"spx-shp1";
const SHA256_HEX_LEN: usize = 64;
const TRAILER_LEN: usize = SHA256_HEX_LEN + TAG.len();

/// Why a shipped module was not used.
#[derive(Debug, thiserror::Error)]
pub enum Unusable {
    #[error("it is not a shipped guest (no trailer)")]
    NoTrailer,
    #[error("it was compiled from another guest (another version of this program?)")]
    OtherGuest,
    #[error(transparent)]
    Refused(#[from] Distrust),
}

/// Compiles `wasm` (whose SHA-256 is `wasm_sha256`, in hex) under `config` for `target`, a Rust
/// target triple such as `aarch64-unknown-linux-gnu`, and appends the trailer that binds it to
/// that guest.
pub fn precompile(
    mut config: Config,
    target: &str,
    wasm: &[u8],
    wasm_sha256: &str,
) -> wasmtime::Result<Vec<u8>> {
    if wasm_sha256.len() != SHA256_HEX_LEN {
        return Err(wasmtime::Error::msg(format!(
            "not a SHA-256: {wasm_sha256:?}"
        )));
    }
    config.target(target)?;
    let mut artifact = Engine::new(&config)?.precompile_module(wasm)?;
    artifact.extend_from_slice(wasm_sha256.as_bytes());
    artifact.extend_from_slice(TAG);
    Ok(artifact)
}

/// The shipped module beside the running executable, if there is one that `engine` can run:
/// its path and the module. Anything else is logged and left for the cache to handle.
pub(crate) fn beside_exe(engine: &Engine, wasm_sha256: &str) -> Option<(PathBuf, Module)> {
    let path = std::env::current_exe().ok()?.parent()?.join(FILE_NAME);
    match load(engine, &path, wasm_sha256) {
        Ok(Some(module)) => Some((path, module)),
        Ok(None) => None,
        // wasmtime's refusal is expected when the engine is configured otherwise than the shipped
        // module was compiled (`--fuel off`): not worth a warning at every start.
        Err(Unusable::Refused(why @ Distrust::Deserialize(_))) => {
            tracing::debug!("not using {}: {why}", path.display());
            None
        }
        Err(why) => {
            tracing::warn!(
                "not using the shipped compiled guest {}: {why}; the embedded guest is used instead",
                path.display()
            );
            None
        }
    }
}

/// The module shipped at `path`, if there is a file there bound to `wasm_sha256` that `engine`
/// can run; `Ok(None)` when there is none.
pub(crate) fn load(
    engine: &Engine,
    path: &Path,
    wasm_sha256: &str,
) -> Result<Option<Module>, Unusable> {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Ok(None);
    };
    let opened = Dir::open_ambient_dir(dir, ambient_authority())
        .and_then(|dir| dir.open_with(name, &load::open_options()));
    let file = match opened {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        opened => opened.map_err(Distrust::from)?.into_std(),
    };
    // SAFETY: the map is only read, and dropped before this returns. The file is part of the
    // installed package, which nobody but its installer changes (as the executable beside it).
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(Distrust::from)?;
    let (_, trailer) = map
        .split_last_chunk::<TRAILER_LEN>()
        .ok_or(Unusable::NoTrailer)?;
    let (guest, tag) = trailer.split_at(SHA256_HEX_LEN);
    if tag != TAG {
        return Err(Unusable::NoTrailer);
    }
    if guest != wasm_sha256.as_bytes() {
        return Err(Unusable::OtherGuest);
    }
    // SAFETY: wasmtime trusts the file to be an artifact it compiled and to stay unchanged while
    // the module lives. It is the package's own, trusted as the package is (see the module doc),
    // and wasmtime checks its version, configuration and target before running anything.
    Ok(Some(unsafe { load::deserialize(engine, file, &map) }?))
}
