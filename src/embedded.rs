//! The guest artifact, embedded in the binary so that nothing is fetched or found at run time.

/// The pre-initialised RustPython module (built by `scripts/guest.sh`), as `build.rs` unpacked it
/// from `wasm/safe-python-guest.pack.xz`.
pub static WASM: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/safe-python-guest.wasm"));

/// SHA-256 of [`WASM`], computed by `build.rs`.
pub const SHA256: &str = env!("SAFE_PYTHON_GUEST_SHA256");
