//! Hashes the committed guest artifact so the compiled-module cache can be keyed on it without
//! hashing 40 MB at every start.

use sha2::{Digest, Sha256};

const GUEST: &str = "wasm/safe-python-guest.wasm";

fn main() {
    println!("cargo::rerun-if-changed={GUEST}");
    let wasm = std::fs::read(GUEST).unwrap_or_else(|e| {
        panic!(
            "cannot read the guest artifact {GUEST}: {e} (it is committed; see scripts/guest.sh)"
        )
    });
    let digest = Sha256::digest(&wasm);
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    println!("cargo::rustc-env=SAFE_PYTHON_GUEST_SHA256={hex}");
}
