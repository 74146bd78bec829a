//! Pre-initialises the guest with Wizer: runs its `sandbox_init` export once (building the
//! interpreter and importing the default modules) and writes the resulting memory image as a new
//! module, so that every run starts in milliseconds. Maintainers run it through `scripts/guest.sh`.
//!
//! Usage: wizen-guest IN.wasm OUT.wasm

use anyhow::{Context, bail};
use safe_python_executor::engine;
use safe_python_protocol::exports;
use wasmtime::{Engine, Linker, Store};
use wasmtime_wasi::p1::{self, WasiP1Ctx};
use wasmtime_wasi::{Deterministic, WasiCtxBuilder};
use wasmtime_wizer::Wizer;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [input, output] = args.as_slice() else {
        bail!("usage: wizen-guest IN.wasm OUT.wasm")
    };
    let wasm = std::fs::read(input).with_context(|| format!("reading {input}"))?;

    let engine = Engine::new(&engine::config()).map_err(anyhow::Error::msg)?;
    // Empty environment and no arguments, as at run time: whatever init reads is frozen in. The
    // randomness init draws (hash seed, thread RNG) is frozen in too, so make it a fixed sequence:
    // the snapshot is then the same on every build, and it was never secret anyway (runs reseed
    // `random` from the host's entropy).
    let wasi = WasiCtxBuilder::new()
        .inherit_stderr()
        .secure_random(Deterministic::new((0..=255).collect()))
        .insecure_random(Deterministic::new((0..=255).rev().collect()))
        .insecure_random_seed(0)
        .build_p1();
    let mut store = Store::new(&engine, wasi);
    store.set_fuel(u64::MAX).map_err(anyhow::Error::msg)?;
    store.set_epoch_deadline(u64::MAX);

    let mut linker: Linker<WasiP1Ctx> = Linker::new(&engine);
    p1::add_to_linker_async(&mut linker, |cx| cx).map_err(anyhow::Error::msg)?;
    let snapshot = Wizer::new()
        .init_func(exports::INIT)
        .run(&mut store, &wasm, async |store, module| {
            // The protocol's host functions are for runs, not for initialisation: trap if called.
            linker.define_unknown_imports_as_traps(module)?;
            linker.instantiate_async(store, module).await
        })
        .await
        .map_err(anyhow::Error::msg)
        .context("pre-initialising the guest")?;
    std::fs::write(output, &snapshot).with_context(|| format!("writing {output}"))?;
    eprintln!("wizen-guest: wrote {output} ({} bytes)", snapshot.len());
    Ok(())
}
