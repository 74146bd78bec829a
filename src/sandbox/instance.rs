//! One instance of the guest in a store of its own, and one call on it: setting the call's budget,
//! running it, and gathering what it produced.

use std::sync::Arc;
use std::time::{Duration, Instant};

use safe_python_protocol::{self as protocol, Request};
use wasmtime::{Memory, Store, TypedFunc};

use super::cow::Image;
use super::host::{HostState, MemoryLimiter};
use super::pool::Allocation;
use super::{Guest, RunOptions, Sandbox, SandboxError, door};
use crate::engine::{self, Metering};
use crate::limits::Limits;
use crate::outcome::{ImageCollector, Limit, Outcome, RunResult, Stats, classify};
use crate::policy::ImportPolicy;

/// An instance of the guest in a store of its own. A fresh run uses one for one call; a session
/// keeps one for many. It is instantiated by its first call, within that call's time limit.
pub(crate) struct Instance {
    pub(super) store: Store<HostState>,
    exports: Option<Exports>,
    allocation: Allocation,
}

#[derive(Clone)]
struct Exports {
    entry: Entry,
    memory: Memory,
}

/// How a call enters the guest.
#[derive(Clone)]
enum Entry {
    /// The RustPython guest's `run` export, which fetches its request through the protocol.
    Run(TypedFunc<(), ()>),
    /// The CPython reactor runs source text a turn at a time: first the driver, then one turn
    /// per call, which fetches its request through the door.
    Turn {
        turn: TypedFunc<(i32, i32), i32>,
        alloc: TypedFunc<i32, i32>,
        driver_installed: bool,
    },
}

/// How one call of an [`Instance`] went.
pub(crate) struct Call {
    pub result: RunResult,
    /// The call did not return normally (a trap, a timeout, an exit): the instance is in an
    /// unknown state and must not be called again.
    pub broken: bool,
}

/// How long a driver turn may wait in the host (for randomness, say): it runs the server's own
/// imports, not user code, so this only keeps a broken one from hanging there.
const DRIVER_TURN_TIME: Duration = Duration::from_secs(600);

/// The unit of wasm linear memory.
const WASM_PAGE: u64 = 64 << 10;

impl Instance {
    /// An empty store on [`Sandbox::allocation`]'s engine: each call sets its own limits.
    pub(crate) fn new(sandbox: &Sandbox) -> Result<Instance, SandboxError> {
        let allocation = sandbox.allocation()?;
        let mut store = Store::new(allocation.engine(), HostState::new(&sandbox.guest));
        store.limiter(|s| &mut s.limiter);
        let exports = None;
        Ok(Instance {
            store,
            exports,
            allocation,
        })
    }

    async fn instantiate(&mut self, sandbox: &Sandbox) -> wasmtime::Result<Exports> {
        let instance = self
            .allocation
            .pre
            .instantiate_async(&mut self.store)
            .await?;
        // A plain (not pre-initialised) guest still needs its reactor initialisation.
        if let Ok(init) = instance.get_typed_func::<(), ()>(&mut self.store, "_initialize") {
            init.call_async(&mut self.store, ()).await?;
        }
        let entry = match sandbox.guest {
            Guest::RustPython => {
                Entry::Run(instance.get_typed_func(&mut self.store, protocol::exports::RUN)?)
            }
            Guest::CPython(_) => Entry::Turn {
                turn: instance.get_typed_func(&mut self.store, door::TURN)?,
                alloc: instance.get_typed_func(&mut self.store, door::ALLOC)?,
                driver_installed: false,
            },
        };
        let memory = instance
            .get_memory(&mut self.store, "memory")
            .ok_or_else(|| wasmtime::format_err!("the guest exports no memory"))?;
        Ok(self.exports.insert(Exports { entry, memory }).clone())
    }

    /// Enters the guest for one call.
    async fn enter(&mut self, sandbox: &Sandbox) -> wasmtime::Result<()> {
        let exports = match &self.exports {
            Some(exports) => exports.clone(),
            None => self.instantiate(sandbox).await?,
        };
        self.rescan(sandbox, exports.memory)?;
        match exports.entry {
            Entry::Run(run) => run.call_async(&mut self.store, ()).await,
            Entry::Turn {
                turn,
                alloc,
                driver_installed,
            } => {
                if !driver_installed {
                    self.install_driver(turn.clone(), alloc.clone(), exports.memory)
                        .await?;
                }
                // A failed turn sends no report, which is how the call is judged.
                self.turn(turn, alloc, exports.memory, door::RUN_TURN)
                    .await
                    .map(drop)
            }
        }
    }

    /// Runs the CPython driver's turn, which every later call's turn relies on.
    async fn install_driver(
        &mut self,
        turn: TypedFunc<(i32, i32), i32>,
        alloc: TypedFunc<i32, i32>,
        memory: Memory,
    ) -> wasmtime::Result<()> {
        let status = self.turn(turn, alloc, memory, door::DRIVER).await?;
        if status != 0 {
            wasmtime::bail!(
                "the CPython engine's driver failed to start (status {status}); its stderr says why"
            );
        }
        self.mark_driver_installed();
        Ok(())
    }

    /// Records that this CPython instance's memory holds the driver (RustPython has none).
    fn mark_driver_installed(&mut self) {
        if let Some(Exports {
            entry: Entry::Turn {
                driver_installed, ..
            },
            ..
        }) = &mut self.exports
        {
            *driver_installed = true;
        }
    }

    /// A CPython instance whose driver is installed and which has run no call: what the
    /// engine's template is built on (see [`super::template`]). Its budget is instantiation's, and its output is dropped.
    pub(crate) async fn with_driver(sandbox: &Sandbox) -> Result<Instance, SandboxError> {
        let mut instance =
            Instance::with_memory(sandbox, Limits::MAX_MEMORY_BYTES, 0, std::iter::empty()).await?;
        instance.store.data().sink.begin(usize::MAX, None);
        if let Some(Exports {
            entry: Entry::Turn { turn, alloc, .. },
            memory,
        }) = instance.exports.clone()
        {
            instance
                .install_driver(turn, alloc, memory)
                .await
                .map_err(SandboxError::Setup)?;
        }
        Ok(instance)
    }

    /// A turn of the driver's own on a CPython instance whose driver is installed (not a call:
    /// no request, no `__main__`), with instantiation's budget, the imports it makes judged by
    /// `policy` (a turn's code is not the driver's): its exit status. Its output stays in the
    /// instance's sink until [`Self::take_output`].
    pub(crate) async fn driver_turn(
        &mut self,
        source: &str,
        policy: &Arc<ImportPolicy>,
    ) -> Result<i32, SandboxError> {
        let state = self.store.data_mut();
        state.policy = policy.clone();
        state.deadline = Instant::now() + DRIVER_TURN_TIME;
        let Some(Exports {
            entry: Entry::Turn { turn, alloc, .. },
            memory,
        }) = self.exports.clone()
        else {
            let e = wasmtime::format_err!("a driver turn needs an instantiated CPython instance");
            return Err(SandboxError::Setup(e));
        };
        self.turn(turn, alloc, memory, source)
            .await
            .map_err(SandboxError::Setup)
    }

    /// The stdout and stderr written since the last call began, or since the last take.
    pub(crate) fn take_output(&self) -> (Vec<u8>, Vec<u8>) {
        self.store.data().sink.take()
    }

    /// One turn of the reactor: `source` copied into memory it allocates, then run; its exit
    /// status (0 when the source ran without an uncaught exception, which it prints on stderr).
    async fn turn(
        &mut self,
        turn: TypedFunc<(i32, i32), i32>,
        alloc: TypedFunc<i32, i32>,
        memory: Memory,
        source: &str,
    ) -> wasmtime::Result<i32> {
        let len = i32::try_from(source.len())?;
        let at = alloc.call_async(&mut self.store, len).await?;
        if at == 0 {
            wasmtime::bail!("the guest could not allocate {len} bytes for a turn");
        }
        memory.write(&mut self.store, at as u32 as usize, source.as_bytes())?;
        turn.call_async(&mut self.store, (at, len)).await
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
        instance.store.data_mut().limiter.max = memory_bytes;
        // Instantiation runs no user code; give it what it needs.
        engine::arm(&mut instance.store, sandbox.metering(), u64::MAX)
            .map_err(SandboxError::Setup)?;
        let memory = instance
            .instantiate(sandbox)
            .await
            .map_err(SandboxError::Setup)?
            .memory;
        instance.write_pages(memory, len, pages)?;
        Ok(instance)
    }

    /// A new instance whose memory is `image`, mapped copy-on-write (the CPython engine's
    /// template), then grown to `len` bytes and overwritten with `pages` as in
    /// [`Self::with_memory`].
    pub(crate) async fn with_image<'a>(
        sandbox: &Sandbox,
        memory_bytes: usize,
        image: &Image,
        len: usize,
        pages: impl Iterator<Item = (usize, &'a [u8])>,
    ) -> Result<Instance, SandboxError> {
        let mut instance =
            Instance::with_memory(sandbox, memory_bytes, image.len(), std::iter::empty()).await?;
        let Some(memory) = instance.exports.as_ref().map(|e| e.memory) else {
            let e = wasmtime::format_err!("the instance has no memory");
            return Err(SandboxError::Setup(e));
        };
        // A memory the kernel failed to map over may have lost its pages: the instance is dropped.
        if !image.map_over(memory.data_mut(&mut instance.store)) {
            let e = wasmtime::format_err!("cannot map the CPython engine's template");
            return Err(SandboxError::Setup(e));
        }
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
        // Memory restored into an instance holds the CPython driver: it is the engine's template,
        // or a session's after a call that completed.
        if len > 0 {
            self.mark_driver_installed();
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
        state.images = ImageCollector::default();
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
        };
        // The report and the output came from the guest: cut them to size here, whatever it sent.
        result.bound(limits.max_output_bytes);
        Ok(Call { result, broken })
    }
}
