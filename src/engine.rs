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
//!
//! The RustPython engine allocates its instances from a pool ([`pooled`]); see [`POOL_SLOTS`] for
//! why, and what happens when the pool is full.
//!
//! Which Python engine runs is not this module's business: each says what it needs of wasmtime
//! ([`Features`]) and is listed in `crate::sandbox::engines`.

use std::thread;
use std::time::Duration;

use wasmtime::{
    Config, Enabled, Engine, InstanceAllocationStrategy, OptLevel, PoolingAllocationConfig, Store,
};

use crate::limits::Limits;

/// How often the epoch advances, for unmetered guests: it bounds how late a timeout or a
/// cancellation can take effect.
pub const EPOCH_TICK: Duration = Duration::from_millis(5);

/// Fuel a metered guest burns between yields: about a millisecond of Python on this project's
/// 2-core reference machine (either engine burns 11-14 billion a second), so timeouts and
/// cancellations land as promptly as with the epoch ticker, without paying for epoch checks on top
/// of fuel checks.
pub const FUEL_YIELD_INTERVAL: u64 = 10_000_000;

/// Wasm stack for the guest (wasmtime's default). Python recursion ends as a clean
/// `RecursionError` at the default recursion limit; past a raised limit, at about 9,000 frames, it
/// overflows this and traps with `StackOverflow` instead of grinding on.
const MAX_WASM_STACK: usize = 512 << 10;

/// What a guest's code is compiled to use beyond wasmtime's defaults. Each Python engine says
/// what it needs (`crate::sandbox::engines`), so the compiled module of one never depends on
/// another's needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Features {
    /// Wasm exceptions, which CPython's `setjmp`/`longjmp` throws; off, the compiled module stays
    /// what it was without them.
    pub exceptions: bool,
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
    config_for(Features::default(), Metering::Fuel)
}

/// The configuration of modules and stores that use `features`.
pub fn config_for(features: Features, metering: Metering) -> Config {
    let mut config = Config::new();
    config
        .wasm_exceptions(features.exceptions)
        .consume_fuel(metering == Metering::Fuel)
        .epoch_interruption(metering == Metering::Off)
        .cranelift_opt_level(OptLevel::Speed)
        .max_wasm_stack(MAX_WASM_STACK)
        // The async fiber needs room for the wasm stack plus host frames on top of it.
        .async_stack_size(MAX_WASM_STACK + (1 << 20))
        .parallel_compilation(true);
    config
}

/// Instances the RustPython engine's pool holds at once: enough for every session the MCP server
/// allows (`--max-sessions` is at most 1024), a fresh call on each worker and a few spare. The
/// sandbox counts its live pooled instances, and past this many makes the next ones on an
/// engine without a pool (see `crate::sandbox`): a full pool never refuses a call.
///
/// Why a pool: a fresh call writes about a megabyte of the guest's snapshot. With instances
/// allocated on demand, each of those pages is a copy-on-write fault, and in a multi-threaded
/// server each fault also flushes the other cores' TLBs (an IPI): `perf` put that kernel work at
/// twice the guest's own time per fresh call. A pooled slot is reset when its instance is
/// dropped by copying back only the pages that were written, found with `PAGEMAP_SCAN` (Linux
/// 6.7 and later; older kernels fall back to wasmtime's `madvise` reset), and those pages stay
/// resident, so the next instance in the slot takes far fewer faults (see
/// [`POOL_KEEP_RESIDENT`] for what is left).
///
/// Each slot reserves address space only ([`Limits::MAX_MEMORY_BYTES`] plus guard pages, as an
/// instance on demand does) until used, then keeps at most [`POOL_KEEP_RESIDENT`] resident.
pub const POOL_SLOTS: u32 = 1100;

/// Bytes of a used slot's memory reset by copying and kept resident; written pages beyond it are
/// given back to the kernel. Without userfaultfd, the kernel reports every resident private page
/// as written, so each reset copies the slot's whole resident set (the pages any call in it
/// wrote, up to this): a trade between copying and faulting. A fresh trivial call writes about
/// 1 MiB. Measured with `benches/speed/` (load average 5.5 on 2 cores): 1, 2 and 4 MiB within
/// noise of each other, 0 (reset by `madvise`, faults again) 25-50% fewer fresh calls per
/// second, 16 MiB no better. More does not help because wasmtime 48 takes at most 32 written
/// regions per scan and gives back the rest, so scattered writes still fault: about 120 page
/// faults per fresh trivial call in the server (`perf record -e page-faults` over the bench).
/// The pages a trivial call writes are now populated before its guest runs (`Sandbox::warm_up`),
/// so those faults no longer flush other cores' TLBs.
/// Sessions count resident pages as possibly written when they snapshot
/// (`crate::sandbox::pagemap`), so this also bounds the extra pages a session in a reused slot
/// compares.
pub const POOL_KEEP_RESIDENT: usize = 4 << 20;

/// Bytes of a used slot's function table reset in place and kept resident, as
/// [`POOL_KEEP_RESIDENT`] does for memory. The guest's table is filled lazily: a call reads an
/// entry, finds it empty and has wasmtime write it, and a page first read then written is a
/// copy-on-write fault that flushes the other cores' TLBs. Decommitted after each call (wasmtime's
/// default), the table caused the 7 flushes per fresh `x = 1` call that were left once the sandbox
/// populates the memory pages a call writes (`Sandbox::warm_up`); kept resident, none (see
/// docs/benchmarks.md). A call writes few of its pages; this bounds them.
pub const POOL_TABLE_KEEP_RESIDENT: usize = 1 << 20;

/// An engine whose instances are allocated from a pool of `slots` (by default [`POOL_SLOTS`]): the
/// same compiled code as [`new`]'s (allocation is not part of the compilation settings), so both
/// load the same cached module.
pub fn pooled(features: Features, metering: Metering, slots: u32) -> wasmtime::Result<Engine> {
    let mut pool = PoolingAllocationConfig::new();
    pool.total_core_instances(slots)
        .total_memories(slots)
        .total_tables(slots)
        .total_stacks(slots)
        // The guest's one function table, at the size the memory limiter allows it.
        .table_elements(1 << 20)
        .max_core_instance_size(16 << 20)
        .max_memory_size(Limits::MAX_MEMORY_BYTES)
        .linear_memory_keep_resident(POOL_KEEP_RESIDENT)
        .table_keep_resident(POOL_TABLE_KEEP_RESIDENT)
        // Reuse the slots used last before touching new ones: the slots a server ever uses are
        // then as many as its instances at once, and so is what they keep resident. With
        // wasmtime's default (100 unused slots kept warm), an idle server held 571 MiB of private
        // memory after 2,000 fresh calls 8 at a time (benches/speed/); with 0, see the README.
        .max_unused_warm_slots(0)
        .pagemap_scan(Enabled::Auto);
    let mut config = config_for(features, metering);
    config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    start(Engine::new(&config)?, metering)
}

/// Builds an engine for guests that use `features`, and for an unmetered one starts its epoch
/// ticker, which stops once the engine is dropped.
pub fn new(features: Features, metering: Metering) -> wasmtime::Result<Engine> {
    start(Engine::new(&config_for(features, metering))?, metering)
}

/// Starts `engine`'s epoch ticker if it is unmetered.
fn start(engine: Engine, metering: Metering) -> wasmtime::Result<Engine> {
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

/// Gives `store` its `fuel` when metered, and makes its guest yield now and then so that a
/// timeout or a cancellation can take effect.
pub fn arm<T>(store: &mut Store<T>, metering: Metering, fuel: u64) -> wasmtime::Result<()> {
    match metering {
        Metering::Fuel => {
            store.fuel_async_yield_interval(Some(FUEL_YIELD_INTERVAL))?;
            store.set_fuel(fuel)
        }
        Metering::Off => {
            store.set_epoch_deadline(1);
            store.epoch_deadline_async_yield_and_update(1);
            Ok(())
        }
    }
}
