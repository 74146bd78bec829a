//! One instance of the guest in a store of its own, and one call on it: setting the call's budget,
//! running it, and gathering what it produced.

use std::time::Instant;

use safe_python_protocol::{self as protocol, Request};
use wasmtime::{Memory, Store, TypedFunc};

use super::host::{HostState, MemoryLimiter};
use super::{RunOptions, Sandbox, SandboxError};
use crate::outcome::{Limit, Outcome, RunResult, Stats, classify};

/// An instance of the guest in a store of its own. A fresh run uses one for one call; a session
/// keeps one for many. It is instantiated by its first call, within that call's time limit.
pub(crate) struct Instance {
    store: Store<HostState>,
    exports: Option<Exports>,
}

#[derive(Clone)]
struct Exports {
    run: TypedFunc<(), ()>,
    memory: Memory,
}

/// How one call of an [`Instance`] went.
pub(crate) struct Call {
    pub result: RunResult,
    /// The call did not return normally (a trap, a timeout, an exit): the instance is in an
    /// unknown state and must not be called again.
    pub broken: bool,
}

/// The unit of wasm linear memory.
const WASM_PAGE: u64 = 64 << 10;

impl Instance {
    /// A store with nothing in it yet: each call sets its own limits.
    pub(crate) fn new(sandbox: &Sandbox) -> Instance {
        let mut store = Store::new(&sandbox.engine, HostState::new());
        store.limiter(|s| &mut s.limiter);
        Instance {
            store,
            exports: None,
        }
    }

    async fn instantiate(&mut self, sandbox: &Sandbox) -> wasmtime::Result<Exports> {
        let instance = sandbox.pre.instantiate_async(&mut self.store).await?;
        // A plain (not pre-initialised) guest still needs its reactor initialisation.
        if let Ok(init) = instance.get_typed_func::<(), ()>(&mut self.store, "_initialize") {
            init.call_async(&mut self.store, ()).await?;
        }
        let run = instance.get_typed_func::<(), ()>(&mut self.store, protocol::exports::RUN)?;
        let memory = instance
            .get_memory(&mut self.store, "memory")
            .ok_or_else(|| wasmtime::format_err!("the guest exports no memory"))?;
        Ok(self.exports.insert(Exports { run, memory }).clone())
    }

    /// The instance's linear memory; `None` before its first call.
    pub(crate) fn memory(&self) -> Option<&[u8]> {
        self.exports.as_ref().map(|e| e.memory.data(&self.store))
    }

    /// A new instance whose memory, grown to `len` bytes, is overwritten with `pages` (offset and
    /// bytes): the host-side half of restoring a session. See the protocol's notes on sessions for
    /// why memory is the whole state.
    pub(crate) async fn with_memory<'a>(
        sandbox: &Sandbox,
        memory_bytes: usize,
        len: usize,
        pages: impl Iterator<Item = (usize, &'a [u8])>,
    ) -> Result<Instance, SandboxError> {
        let mut instance = Instance::new(sandbox);
        instance.store.data_mut().limiter.max = memory_bytes;
        // Instantiation runs no user code; give it what it needs.
        let store = &mut instance.store;
        store.set_fuel(u64::MAX).map_err(SandboxError::Setup)?;
        store.set_epoch_deadline(1);
        store.epoch_deadline_async_yield_and_update(1);
        let memory = instance
            .instantiate(sandbox)
            .await
            .map_err(SandboxError::Setup)?
            .memory;
        let grow = len.saturating_sub(memory.data_size(&instance.store)) as u64;
        memory
            .grow(&mut instance.store, grow.div_ceil(WASM_PAGE))
            .map_err(SandboxError::Setup)?;
        for (offset, bytes) in pages {
            memory
                .write(&mut instance.store, offset, bytes)
                .map_err(|e| SandboxError::Setup(e.into()))?;
        }
        Ok(instance)
    }

    /// Runs `code` on this instance (instantiating it first if need be) under `options`.
    pub(crate) async fn call(
        &mut self,
        sandbox: &Sandbox,
        code: &str,
        filename: &str,
        options: &RunOptions,
    ) -> Result<Call, SandboxError> {
        let limits = &options.limits;
        let max_field_bytes = u32::try_from(limits.max_output_bytes)
            .unwrap_or(u32::MAX)
            .min(protocol::MAX_FIELD_BYTES);
        let request = serde_json::to_vec(&Request {
            code: code.to_owned(),
            filename: filename.to_owned(),
            allowed: options.policy.allowed().to_vec(),
            max_field_bytes,
        })
        .expect("a request always serialises");
        let size = self.memory().map_or(0, <[u8]>::len);
        let state = self.store.data_mut();
        state.request = request;
        state.policy = options.policy.clone();
        state.report = None;
        state.report_limit = protocol::report_limit(max_field_bytes);
        state.report_too_large = None;
        state.protocol_fault = None;
        state.deadline = Instant::now() + limits.timeout;
        state.limiter = MemoryLimiter {
            max: limits.memory_bytes,
            peak: size,
            denied: false,
        };
        state
            .sink
            .begin(limits.max_output_bytes, options.observer.clone());
        self.store
            .set_fuel(limits.fuel)
            .map_err(SandboxError::Setup)?;
        self.store.set_epoch_deadline(1);
        self.store.epoch_deadline_async_yield_and_update(1);

        let started = Instant::now();
        let ended = tokio::time::timeout(limits.timeout, async {
            let exports = match &self.exports {
                Some(exports) => exports.clone(),
                None => self.instantiate(sandbox).await?,
            };
            exports.run.call_async(&mut self.store, ()).await
        })
        .await;
        let wall = started.elapsed();

        let fuel_left = self.store.get_fuel().unwrap_or(0);
        let state = self.store.data();
        let (outcome, broken) = match ended {
            Err(_elapsed) => (
                Outcome::LimitReached {
                    limit: Limit::Timeout,
                    error: None,
                },
                true,
            ),
            Ok(Err(err)) => (classify::trap(&err, state.limiter.denied), true),
            Ok(Ok(())) => (classify::returned(&state.records()), false),
        };
        let (stdout, stderr) = state.sink.take();
        let mut result = RunResult {
            outcome,
            stdout: String::from_utf8_lossy(&stdout).into_owned(),
            stderr: String::from_utf8_lossy(&stderr).into_owned(),
            stats: Stats {
                fuel: limits.fuel.saturating_sub(fuel_left),
                wall_ms: wall.as_millis().try_into().unwrap_or(u64::MAX),
                memory_peak_bytes: state.limiter.peak as u64,
            },
        };
        // The report and the output came from the guest: cut them to size here, whatever it sent.
        result.bound(limits.max_output_bytes);
        Ok(Call { result, broken })
    }
}
