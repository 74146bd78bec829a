//! Compiles the embedded guest ahead of time for one release target, as `scripts/dist.sh` ships it
//! beside that platform's binaries (`safe-python-guest.cwasm`): a fresh install then answers its
//! first call without compiling the guest.
//!
//!     cargo run --locked --example precompile_guest -- TARGET OUTPUT
//!
//! TARGET is a Rust target triple. An example rather than a binary: compiling for another
//! architecture needs Cranelift's backend for it, which the dev-dependencies add for examples and
//! tests only, so the shipped binaries carry just their own.

use anyhow::{Context, bail};
use safe_python_executor::sandbox::Sandbox;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [target, output] = args.as_slice() else {
        bail!("usage: precompile_guest TARGET OUTPUT (a Rust target triple, the file to write)");
    };
    let started = std::time::Instant::now();
    let artifact =
        Sandbox::precompile(target).with_context(|| format!("compiling the guest for {target}"))?;
    // Renamed into place, so that an interrupted run leaves no partial file that looks finished.
    let partial = format!("{output}.partial");
    std::fs::write(&partial, &artifact).with_context(|| format!("writing {partial}"))?;
    std::fs::rename(&partial, output).with_context(|| format!("renaming {partial}"))?;
    eprintln!(
        "precompile_guest: {output}: {} MB for {target} in {:.1} s",
        artifact.len() >> 20,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
