//! The guest artifact, embedded in the binary so that nothing is fetched or found at run time.

/// The pre-initialised RustPython module (`wasm/safe-python-guest.wasm`, built by `scripts/guest.sh`).
pub static WASM: &[u8] = include_bytes!("../wasm/safe-python-guest.wasm");

/// SHA-256 of [`WASM`], computed by `build.rs`.
pub const SHA256: &str = env!("SAFE_PYTHON_GUEST_SHA256");
