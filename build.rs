//! Unpacks the committed guest (`wasm/safe-python-guest.pack.lzma`, see `build/guest_pack.rs`) into
//! `OUT_DIR` for the binaries to embed, checks it is the artifact `wasm/MANIFEST` describes, and
//! passes on its SHA-256, on which the compiled-module cache is keyed (so no start hashes 40 MB).
//! Unpacking takes 1.5 s, once per build: a run never pays for it.

#[path = "build/guest_pack.rs"]
mod guest_pack;

use std::io::Read;
use std::path::PathBuf;

use sha2::{Digest, Sha256};

const PACK: &str = "wasm/safe-python-guest.pack.lzma";
const MANIFEST: &str = "wasm/MANIFEST";
/// The most memory the LZMA decoder may take (its dictionary, set by `xz -9e`: 64 MiB).
const MAX_LZMA_KIB: u32 = 256 * 1024;

fn fail(what: &str) -> ! {
    panic!("{what} (the guest is committed in {PACK}; see scripts/guest.sh)")
}

fn main() {
    for input in [PACK, MANIFEST, "build/guest_pack.rs"] {
        println!("cargo::rerun-if-changed={input}");
    }
    let manifest = std::fs::read_to_string(MANIFEST)
        .unwrap_or_else(|e| fail(&format!("cannot read {MANIFEST}: {e}")));
    let expected = manifest
        .lines()
        .find_map(|l| l.strip_prefix("wasm_sha256="))
        .unwrap_or_else(|| fail(&format!("{MANIFEST} has no wasm_sha256")));

    let file =
        std::fs::File::open(PACK).unwrap_or_else(|e| fail(&format!("cannot read {PACK}: {e}")));
    let mut pack = Vec::new();
    lzma_rust2::LzmaReader::new_mem_limit(std::io::BufReader::new(file), MAX_LZMA_KIB, None)
        .and_then(|mut reader| reader.read_to_end(&mut pack))
        .unwrap_or_else(|e| fail(&format!("cannot decompress {PACK}: {e}")));
    let wasm = guest_pack::unpack(&pack).unwrap_or_else(|e| fail(&format!("{PACK}: {e}")));

    let hex: String = Sha256::digest(&wasm)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    if hex != expected {
        fail(&format!(
            "{PACK} unpacks to a guest with SHA-256 {hex}, not the {expected} of {MANIFEST}"
        ));
    }
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    std::fs::write(out.join("safe-python-guest.wasm"), &wasm)
        .unwrap_or_else(|e| fail(&format!("cannot write the guest to {}: {e}", out.display())));
    println!("cargo::rustc-env=SAFE_PYTHON_GUEST_SHA256={hex}");
}
