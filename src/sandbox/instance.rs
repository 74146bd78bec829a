//! One instance of the guest in a store of its own, and one call on it: setting the call's budget,
//! running it, and gathering what it produced.

use std::time::Instant;

use safe_python_protocol::{self as protocol, Request};
use wasmtime::{Memory, Store};

use super::cow::Image;
use super::host::{HostState, MemoryLimiter};
use super::pool::Allocation;
use super::{BoxFuture, RunOptions, Sandbox, SandboxError};
use crate::engine::{self, Metering};
use crate::limits::Limits;
use crate::outcome::{ImageCollector, Limit, Outcome, RunResult, Stats, classify};
use crate::toolcalls::calls::RunCalls;

/// An instance of the guest in a store of its own. A fresh run uses one for one call; a session
/// keeps one for many. It is instantiated by its first call, within that call's time limit.
pub(crate) struct Instance {
    pub(super) store: Store<HostState>,
    exports: Option<Exports>,
    allocation: Allocation,
}

struct Exports {
    instance: wasmtime::Instance,
    entry: Box<dyn Entry>,
    memory: Memory,
}

/// How calls enter one instance of a guest: its engine's ([`super::Guest::entry`]).
pub(crate) trait Entry: Send {
    /// Runs one call, whose request the guest fetches through the host.
    fn call<'a>(
        &'a mut self,
        store: &'a mut Store<HostState>,
        memory: Memory,
    ) -> BoxFuture<'a, wasmtime::Result<()>>;

    /// The instance's memory was overwritten with one that a prepared or completed instance left
    /// (the template's, or a session's).
    fn restored(&mut self) {}
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
    /// An empty store on [`Sandbox::allocation`]'s engine: each call sets its own limits.
    pub(crate) fn new(sandbox: &Sandbox) -> Result<Instance, SandboxError> {
        let allocation = sandbox.allocation()?;
        let state = HostState::new(sandbox.guest.preopens());
        let mut store = Store::new(allocation.engine(), state);
        store.limiter(|s| &mut s.limiter);
        let exports = None;
        Ok(Instance {
            store,
            exports,
            allocation,
        })
    }

    async fn instantiate(&mut self, sandbox: &Sandbox) -> wasmtime::Result<Memory> {
        let instance = self
            .allocation
            .pre
            .instantiate_async(&mut self.store)
            .await?;
        // A plain (not pre-initialised) guest still needs its reactor initialisation.
        if let Ok(init) = instance.get_typed_func::<(), ()>(&mut self.store, "_initialize") {
            init.call_async(&mut self.store, ()).await?;
        }
        let entry = sandbox.guest.entry(&instance, &mut self.store)?;
        let memory = instance
            .get_memory(&mut self.store, "memory")
            .ok_or_else(|| wasmtime::format_err!("the guest exports no memory"))?;
        self.exports = Some(Exports {
            instance,
            entry,
            memory,
        });
        Ok(memory)
    }

    /// Enters the guest for one call.
    async fn enter(&mut self, sandbox: &Sandbox) -> wasmtime::Result<()> {
        let memory = match &self.exports {
            Some(exports) => exports.memory,
            None => {
                let memory = self.instantiate(sandbox).await?;
                sandbox.prefault(memory.data_mut(&mut self.store));
                memory
            }
        };
        self.rescan(sandbox, memory)?;
        let Instance { store, exports, .. } = self;
        let exports = exports.as_mut().expect("instantiated above");
        exports.entry.call(store, memory).await
    }

    /// The wasmtime instance and its memory; `None` before its first call.
    pub(crate) fn exports(&self) -> Option<(wasmtime::Instance, Memory)> {
        self.exports.as_ref().map(|e| (e.instance, e.memory))
    }

    /// The stdout and stderr written since the last call began, or since the last take.
    pub(crate) fn take_output(&self) -> (Vec<u8>, Vec<u8>) {
        self.store.data().sink.take()
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
        let mut instance = Instance::new(sandbox)?;
        let memory = instance.instantiate_now(sandbox, memory_bytes).await?;
        instance.write_pages(memory, len, pages)?;
        Ok(instance)
    }

    /// A new instance, instantiated, whose run comes out the same in every process (see
    /// [`HostState::make_reproducible`]): what an engine's template is made from.
    pub(crate) async fn reproducible(sandbox: &Sandbox) -> Result<Instance, SandboxError> {
        let mut instance = Instance::new(sandbox)?;
        instance.store.data_mut().make_reproducible();
        instance
            .instantiate_now(sandbox, Limits::MAX_MEMORY_BYTES)
            .await?;
        Ok(instance)
    }

    /// Instantiates the module with a memory cap of `memory_bytes`.
    async fn instantiate_now(
        &mut self,
        sandbox: &Sandbox,
        memory_bytes: usize,
    ) -> Result<Memory, SandboxError> {
        self.store.data_mut().limiter.max = memory_bytes;
        // Instantiation runs no user code; give it what it needs.
        engine::arm(&mut self.store, sandbox.metering(), u64::MAX).map_err(SandboxError::Setup)?;
        self.instantiate(sandbox).await.map_err(SandboxError::Setup)
    }

    /// A new instance whose memory is `image`, mapped copy-on-write (an engine's template), then
    /// grown to `len` bytes and overwritten with `pages` as in [`Self::with_memory`].
    pub(crate) async fn with_image<'a>(
        sandbox: &Sandbox,
        memory_bytes: usize,
        image: &Image,
        len: usize,
        pages: impl Iterator<Item = (usize, &'a [u8])>,
    ) -> Result<Instance, SandboxError> {
        let mut instance =
            Instance::with_memory(sandbox, memory_bytes, image.len(), std::iter::empty()).await?;
        let Some((_, memory)) = instance.exports() else {
            let e = wasmtime::format_err!("the instance has no memory");
            return Err(SandboxError::Setup(e));
        };
        // A memory the kernel failed to map over may have lost its pages: the instance is dropped.
        if !image.map_over(memory.data_mut(&mut instance.store)) {
            let e = wasmtime::format_err!("cannot map the engine's template");
            return Err(SandboxError::Setup(e));
        }
        sandbox.prefault(memory.data_mut(&mut instance.store));
        instance.write_pages(memory, len, pages)?;
        Ok(instance)
    }

    /// Grows `memory` to `len` bytes and writes `pages` into it.
    fn write_pages<'a>(
        &mut self,
        memory: Memory,
        len: usize,
        pages: impl Iterator<Item = (usize, &'a [u8])>,
    ) -> Result<(), SandboxError> {
        let grow = len.saturating_sub(memory.data_size(&self.store)) as u64;
        memory
            .grow(&mut self.store, grow.div_ceil(WASM_PAGE))
            .map_err(SandboxError::Setup)?;
        for (offset, bytes) in pages {
            memory
                .write(&mut self.store, offset, bytes)
                .map_err(|e| SandboxError::Setup(e.into()))?;
        }
        // Memory restored into an instance is the engine's template, or a session's after a call
        // that completed.
        if let Some(exports) = self.exports.as_mut().filter(|_| len > 0) {
            exports.entry.restored();
        }
        Ok(())
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
        let request = sandbox.guest.encode_request(&Request {
            code: code.to_owned(),
            filename: filename.to_owned(),
            allowed: options.policy.allowed().to_vec(),
            max_field_bytes,
        });
        let size = self.memory().map_or(0, <[u8]>::len);
        let state = self.store.data_mut();
        state.request = request;
        state.policy = options.policy.clone();
        state.report = None;
        state.report_limit = protocol::report_limit(max_field_bytes);
        state.report_too_large = None;
        state.protocol_fault = None;
        state.images = ImageCollector::default();
        // Calls still in flight when this future is dropped (a cancelled call) end with it.
        let (_run_alive, run_life) = tokio::sync::watch::channel(());
        state.calls = RunCalls::new(
            options.tools.clone(),
            limits.max_output_bytes,
            options.on_tool_call.clone(),
            run_life,
        );
        state.deadline = Instant::now() + limits.timeout;
        let max = limits.memory_bytes.saturating_sub(state.input_bytes);
        let written = match state.files.folder_mut() {
            Ok(folder) => {
                folder.set_memory_limit(max);
                folder.bytes_counter()
            }
            Err(_) => Default::default(),
        };
        state.limiter = MemoryLimiter {
            max,
            peak: size,
            denied: false,
            files: written,
        };
        state
            .sink
            .begin(limits.max_output_bytes, options.observer.clone());
        let metered = sandbox.metering() == Metering::Fuel;
        engine::arm(&mut self.store, sandbox.metering(), limits.fuel)
            .map_err(SandboxError::Setup)?;

        let started = Instant::now();
        let ended = tokio::time::timeout(limits.timeout, self.enter(sandbox)).await;
        let wall = started.elapsed();

        // Unmetered, nothing was counted: the report says 0.
        let fuel_used = match self.store.get_fuel() {
            Ok(left) if metered => limits.fuel.saturating_sub(left),
            _ => 0,
        };
        let (images, images_left_out) = self.store.data_mut().images.take();
        let tool_calls = self.store.data_mut().calls.take_records();
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
                fuel: fuel_used,
                wall_ms: wall.as_millis().try_into().unwrap_or(u64::MAX),
                memory_peak_bytes: state.limiter.peak as u64,
            },
            images,
            images_left_out,
            files: Vec::new(),
            tool_calls,
        };
        // The report and the output came from the guest: cut them to size here, whatever it sent.
        result.bound(limits.max_output_bytes);
        Ok(Call { result, broken })
    }
}
