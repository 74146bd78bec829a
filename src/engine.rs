//! The wasmtime engine: its configuration and the epoch ticker that makes a running guest yield.
//!
//! Engine-wide switches live here (fuel metering, epoch interruption, async execution); the budget
//! of one run is set on its `Store` in [`crate::sandbox`]. One engine serves every run of a process.
//! The ticker enforces no limit itself: at each tick the guest yields to the async executor, which
//! is what lets a run's timeout (a timer around the call) or its cancellation take effect.

use std::thread;
use std::time::Duration;

use wasmtime::{Config, Engine, OptLevel};

/// How often the epoch advances: it bounds how late a timeout or a cancellation can take effect.
pub const EPOCH_TICK: Duration = Duration::from_millis(5);

/// Wasm stack for the guest (wasmtime's default). Python recursion ends as a clean
/// `RecursionError` at the default recursion limit; past a raised limit, at about 9,000 frames, it
/// overflows this and traps with `StackOverflow` instead of grinding on.
const MAX_WASM_STACK: usize = 512 << 10;

/// The configuration every module and store of this crate is made with. The wizening tool uses it
/// too, so a snapshot is taken under the same semantics it will run under.
pub fn config() -> Config {
    let mut config = Config::new();
    config
        .consume_fuel(true)
        .epoch_interruption(true)
        .cranelift_opt_level(OptLevel::Speed)
        .max_wasm_stack(MAX_WASM_STACK)
        // The async fiber needs room for the wasm stack plus host frames on top of it.
        .async_stack_size(MAX_WASM_STACK + (1 << 20))
        .parallel_compilation(true);
    config
}

/// Builds the engine and starts its epoch ticker, which stops once the engine is dropped.
pub fn new() -> wasmtime::Result<Engine> {
    let engine = Engine::new(&config())?;
    let weak = engine.weak();
    thread::Builder::new()
        .name("sandbox-epoch".into())
        .spawn(move || {
            while let Some(engine) = weak.upgrade() {
                engine.increment_epoch();
                drop(engine);
                thread::sleep(EPOCH_TICK);
            }
        })
        .map_err(wasmtime::Error::new)?;
    Ok(engine)
}
