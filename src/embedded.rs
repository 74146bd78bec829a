//! The guest artifact, embedded in the binary so that nothing is fetched or found at run time: packed
//! as it is committed (9.7 MB instead of 48, see `build/guest_pack.rs`), and unpacked only when it
//! must be compiled, which a warm module cache spares every start.

#[path = "../build/guest_pack.rs"]
mod guest_pack;

/// The pre-initialised RustPython module (built by `scripts/guest.sh`), packed and LZMA-compressed.
static PACK: &[u8] = include_bytes!("../wasm/safe-python-guest.pack.lzma");

/// SHA-256 of the unpacked guest, which `build.rs` checked against `wasm/MANIFEST`.
pub const SHA256: &str = env!("SAFE_PYTHON_GUEST_SHA256");

/// Where the guest's wasi-libc records that it has scanned the preopens
/// (`src/sandbox/scan_flag.rs`), found by `build.rs`.
pub fn scan_flag() -> Option<u32> {
    env!("SAFE_PYTHON_GUEST_SCAN_FLAG").parse().ok()
}

/// The guest module, unpacked (about 1.5 s): only to compile it.
pub fn wasm() -> Result<Vec<u8>, String> {
    guest_pack::unpack_committed(PACK).map_err(|e| format!("the embedded guest: {e}"))
}
