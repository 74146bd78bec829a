//! Checks that the committed guest (`wasm/safe-python-guest.pack.lzma`, see `build/guest_pack.rs`),
//! which the binaries embed packed, unpacks to the artifact `wasm/MANIFEST` describes, and passes on
//! what a run needs of it without unpacking it: its SHA-256, on which the compiled-module cache is
//! keyed, and where its wasi-libc records the preopen scan (`src/sandbox/scan_flag.rs`). Unpacking
//! takes 1.5 s, once per build; a run unpacks the guest only to compile it (a cache miss).

#[path = "build/guest_pack.rs"]
mod guest_pack;
#[path = "src/sandbox/scan_flag.rs"]
mod scan_flag;

use sha2::{Digest, Sha256};

const PACK: &str = "wasm/safe-python-guest.pack.lzma";
const MANIFEST: &str = "wasm/MANIFEST";

fn fail(what: &str) -> ! {
    panic!("{what} (the guest is committed in {PACK}; see scripts/guest.sh)")
}

fn main() {
    for input in [
        PACK,
        MANIFEST,
        "build/guest_pack.rs",
        "src/sandbox/scan_flag.rs",
    ] {
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
    let wasm = guest_pack::unpack_committed(std::io::BufReader::new(file))
        .unwrap_or_else(|e| fail(&format!("{PACK}: {e}")));

    let hex: String = Sha256::digest(&wasm)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    if hex != expected {
        fail(&format!(
            "{PACK} unpacks to a guest with SHA-256 {hex}, not the {expected} of {MANIFEST}"
        ));
    }
    let flag = scan_flag::scan_flag(&wasm).unwrap_or_else(|| {
        fail("the guest has no preopen scan flag: no call could be given files")
    });
    println!("cargo::rustc-env=SAFE_PYTHON_GUEST_SHA256={hex}");
    println!("cargo::rustc-env=SAFE_PYTHON_GUEST_SCAN_FLAG={flag}");
}
