//! The per-run budget: every resource a run may use, with its default and unit.
//!
//! The CLI flags and the MCP server's options both map into [`Limits`], so the two front ends can
//! never disagree about a default or a unit. What code may import is [`crate::policy`]'s.

use std::time::Duration;

/// Resources one run may use. Every run gets all of them; only fuel can be switched off, for a
/// whole sandbox ([`crate::engine::Metering`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Wall-clock time for the whole run, including time spent sleeping or blocked in the host.
    /// Default: 10 s.
    pub timeout: Duration,
    /// Instruction budget, in wasmtime fuel units (roughly one per wasm instruction; either engine
    /// burns 11-14 billion a second of compute on this project's 2-core x86 reference machine, so
    /// the default is 3-4 s of compute). Machine-independent, unlike `timeout`. Default: 40
    /// billion.
    pub fuel: u64,
    /// Cap on the guest's linear memory, in bytes. Default: 256 MiB.
    pub memory_bytes: usize,
    /// Cap on stdout and stderr together, in bytes. Output past it is cut with a notice and the run
    /// is stopped. The result's `repr` is cut to as many characters. Default: 1 MiB.
    pub max_output_bytes: usize,
}

impl Limits {
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
    pub const DEFAULT_FUEL: u64 = 40_000_000_000;
    pub const DEFAULT_MEMORY_BYTES: usize = 256 << 20;
    pub const DEFAULT_MAX_OUTPUT_BYTES: usize = 1 << 20;
    /// wasm32 cannot address more than 4 GiB.
    pub const MAX_MEMORY_BYTES: usize = 4 << 30;
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            timeout: Self::DEFAULT_TIMEOUT,
            fuel: Self::DEFAULT_FUEL,
            memory_bytes: Self::DEFAULT_MEMORY_BYTES,
            max_output_bytes: Self::DEFAULT_MAX_OUTPUT_BYTES,
        }
    }
}
