//! Packs the pre-initialised guest for committing and publishing (see `build/guest_pack.rs`);
//! maintainers run it through `scripts/guest.sh build`, which then compresses the pack with xz.
//!
//! Usage: pack-guest IN.wasm OUT.pack

#[path = "../../build/guest_pack.rs"]
mod guest_pack;

use anyhow::{Context, bail, ensure};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [input, output] = args.as_slice() else {
        bail!("usage: pack-guest IN.wasm OUT.pack")
    };
    let wasm = std::fs::read(input).with_context(|| format!("reading {input}"))?;
    let pack = guest_pack::pack(&wasm);
    let unpacked = guest_pack::unpack(&pack).map_err(anyhow::Error::msg)?;
    ensure!(unpacked == wasm, "the pack does not unpack to {input}");
    std::fs::write(output, &pack).with_context(|| format!("writing {output}"))?;
    Ok(())
}
