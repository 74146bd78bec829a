//! Running the guest: the store and its limits, the host side of the guest protocol, and the
//! classification of how a call ended. A fresh run is one call on a new [`Guest`]; a session
//! ([`crate::session`]) makes many calls on one.
//!
//! The guest gets WASI preview 1 with nothing behind it: no preopened directories, no environment,
//! no arguments, stdin at EOF, stdout and stderr captured by [`crate::output`]. The host functions
//! of `safe-python-protocol` are the only other way out, and each bounds what it reads.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use safe_python_protocol::{self as protocol, Report, Request};
use tokio::sync::OnceCell;
use wasmtime::{
    Caller, Engine, Extern, InstancePre, Linker, Memory, Module, ResourceLimiter, Store, Trap,
    TypedFunc,
};
use wasmtime_wasi::p1::{self, WasiP1Ctx};
use wasmtime_wasi::{I32Exit, WasiCtxBuilder};

use crate::cache::{self, CacheError, Prepared};
use crate::limits::{ImportPolicy, Limits};
use crate::outcome::{Limit, Outcome, PythonError, RunResult, Stats};
use crate::output::{OutputLimitReached, OutputObserver, OutputSink, Stream};
use crate::{engine, guest};

/// Faults of the host or of the guest artifact: never caused by the code being run.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("cannot start the wasm engine: {0:#}")]
    Engine(wasmtime::Error),
    #[error(transparent)]
    Cache(#[from] CacheError),
    #[error("the guest module does not fit this host: {0}")]
    IncompatibleGuest(String),
    #[error("cannot link the guest: {0:#}")]
    Link(wasmtime::Error),
    #[error("cannot set up a run: {0:#}")]
    Setup(wasmtime::Error),
}

/// Called before the guest is compiled (it takes tens of seconds), with the cache entry's path.
pub type CompileNotice = Box<dyn FnMut(Option<&Path>) + Send>;

/// Where to keep the compiled guest and what to say while compiling it.
#[derive(Default)]
pub struct SandboxOptions {
    /// Cache directory for the compiled guest; `None` means [`cache::default_dir`].
    pub cache_dir: Option<PathBuf>,
    /// Do not cache at all: compile in memory.
    pub no_cache: bool,
    pub on_compile: Option<CompileNotice>,
}

/// What one run may do and who hears its output.
#[derive(Clone, Default)]
pub struct RunOptions {
    pub limits: Limits,
    pub policy: Arc<ImportPolicy>,
    pub observer: Option<OutputObserver>,
}

/// The compiled guest, ready to be instantiated any number of times, from any number of threads.
#[derive(Clone)]
pub struct Sandbox {
    engine: Engine,
    pre: InstancePre<HostState>,
    prepared: Prepared,
    /// A fresh instance, made when the first session needs it, that sessions compare their
    /// memory with. Never run; its memory is mapped from the compiled module, so it costs almost
    /// nothing.
    pristine: Arc<OnceCell<Arc<Mutex<Guest>>>>,
}

impl Sandbox {
    /// Loads the embedded guest (from the compiled-module cache when it can).
    pub fn new(mut options: SandboxOptions) -> Result<Sandbox, SandboxError> {
        let engine = engine::new().map_err(SandboxError::Engine)?;
        let dir = if options.no_cache {
            None
        } else {
            options.cache_dir.take().or_else(cache::default_dir)
        };
        let mut on_compile = options.on_compile.take();
        let (module, prepared) = cache::load_or_compile(
            &engine,
            guest::WASM,
            guest::SHA256,
            dir.as_deref(),
            &mut |p| {
                if let Some(f) = on_compile.as_mut() {
                    f(p)
                }
            },
        )?;
        Self::link(engine, module, prepared)
    }

    /// A sandbox around another guest module speaking this crate's protocol, compiled in memory and
    /// never cached: for checking how the host copes with a faulty or hostile guest.
    pub fn with_guest(wasm: &[u8]) -> Result<Sandbox, SandboxError> {
        let engine = engine::new().map_err(SandboxError::Engine)?;
        let module =
            Module::new(&engine, wasm).map_err(|e| SandboxError::Cache(CacheError::Compile(e)))?;
        Self::link(engine, module, Prepared::CompiledUncached)
    }

    fn link(engine: Engine, module: Module, prepared: Prepared) -> Result<Sandbox, SandboxError> {
        check_abi(&module)?;
        let mut linker = Linker::new(&engine);
        p1::add_to_linker_async(&mut linker, |s: &mut HostState| &mut s.wasi)
            .map_err(SandboxError::Link)?;
        linker.allow_shadowing(true);
        add_wasi_overrides_to_linker(&mut linker).map_err(SandboxError::Link)?;
        linker.allow_shadowing(false);
        add_protocol_to_linker(&mut linker).map_err(SandboxError::Link)?;
        let pre = linker
            .instantiate_pre(&module)
            .map_err(SandboxError::Link)?;
        Ok(Sandbox {
            engine,
            pre,
            prepared,
            pristine: Arc::default(),
        })
    }

    /// The instance sessions compare their memory with (see [`crate::session`]).
    pub(crate) async fn pristine(&self) -> Result<Arc<Mutex<Guest>>, SandboxError> {
        let pristine = self
            .pristine
            .get_or_try_init(|| async {
                let guest =
                    Guest::with_memory(self, Limits::MAX_MEMORY_BYTES, 0, std::iter::empty())
                        .await?;
                Ok::<_, SandboxError>(Arc::new(Mutex::new(guest)))
            })
            .await?;
        Ok(pristine.clone())
    }

    /// How the compiled guest was obtained.
    pub fn prepared(&self) -> &Prepared {
        &self.prepared
    }

    /// Runs `code` in a fresh instance. Limits and Python errors are outcomes, not `Err`s.
    ///
    /// Dropping the returned future cancels the run at the guest's next epoch tick at the latest.
    pub async fn run(&self, code: &str, options: &RunOptions) -> Result<RunResult, SandboxError> {
        let mut guest = Guest::new(self);
        Ok(guest
            .call(self, code, FRESH_FILENAME, options)
            .await?
            .result)
    }
}

/// The name tracebacks give the code of a fresh run.
const FRESH_FILENAME: &str = "<code>";

/// An instance of the guest in a store of its own. A fresh run uses one for one call; a session
/// keeps one for many. It is instantiated by its first call, within that call's time limit.
pub(crate) struct Guest {
    store: Store<HostState>,
    exports: Option<Exports>,
}

#[derive(Clone)]
struct Exports {
    run: TypedFunc<(), ()>,
    memory: Memory,
}

/// How one call of a [`Guest`] went.
pub(crate) struct Call {
    pub result: RunResult,
    /// The call did not return normally (a trap, a timeout, an exit): the instance is in an
    /// unknown state and must not be called again.
    pub broken: bool,
}

impl Guest {
    /// A store with nothing in it yet: each call sets its own limits.
    pub(crate) fn new(sandbox: &Sandbox) -> Guest {
        let sink = OutputSink::default();
        let wasi = WasiCtxBuilder::new()
            .stdout(sink.stream(Stream::Stdout))
            .stderr(sink.stream(Stream::Stderr))
            .build_p1();
        let state = HostState {
            wasi,
            sink,
            limiter: MemoryLimiter::default(),
            request: Vec::new(),
            policy: Arc::default(),
            deadline: Instant::now(),
            report: None,
            report_limit: protocol::MAX_REPORT_BYTES,
            report_too_large: None,
            protocol_fault: None,
        };
        let mut store = Store::new(&sandbox.engine, state);
        store.limiter(|s| &mut s.limiter);
        Guest {
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
    ) -> Result<Guest, SandboxError> {
        let mut guest = Guest::new(sandbox);
        guest.store.data_mut().limiter.max = memory_bytes;
        // Instantiation runs no user code; give it what it needs.
        let store = &mut guest.store;
        store.set_fuel(u64::MAX).map_err(SandboxError::Setup)?;
        store.set_epoch_deadline(1);
        store.epoch_deadline_async_yield_and_update(1);
        let memory = guest
            .instantiate(sandbox)
            .await
            .map_err(SandboxError::Setup)?
            .memory;
        let grow = len.saturating_sub(memory.data_size(&guest.store)) as u64;
        memory
            .grow(&mut guest.store, grow.div_ceil(WASM_PAGE))
            .map_err(SandboxError::Setup)?;
        for (offset, bytes) in pages {
            memory
                .write(&mut guest.store, offset, bytes)
                .map_err(|e| SandboxError::Setup(e.into()))?;
        }
        Ok(guest)
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
            Ok(Err(err)) => (classify_trap(&err, state), true),
            Ok(Ok(())) => (state.read_report(), false),
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

/// The unit of wasm linear memory.
const WASM_PAGE: u64 = 64 << 10;

/// Refuses a guest built for another protocol version with a message saying so, rather than a
/// wasmtime "unknown import" error.
fn check_abi(module: &Module) -> Result<(), SandboxError> {
    for import in module.imports() {
        let m = import.module();
        if m != "wasi_snapshot_preview1" && m != protocol::IMPORT_MODULE {
            return Err(SandboxError::IncompatibleGuest(format!(
                "it imports `{m}::{}`, but this host speaks protocol `{}` (rebuild the guest: scripts/guest.sh build)",
                import.name(),
                protocol::IMPORT_MODULE
            )));
        }
    }
    if module.get_export(protocol::exports::RUN).is_none() {
        return Err(SandboxError::IncompatibleGuest(format!(
            "it does not export `{}`",
            protocol::exports::RUN
        )));
    }
    Ok(())
}

struct HostState {
    wasi: WasiP1Ctx,
    /// Where the guest's stdout and stderr go; [`WasiP1Ctx`] holds its streams.
    sink: OutputSink,
    limiter: MemoryLimiter,
    request: Vec<u8>,
    policy: Arc<ImportPolicy>,
    /// When the current call's time is up, for host functions that run long.
    deadline: Instant,
    report: Option<Vec<u8>>,
    /// The largest report this call accepts ([`protocol::report_limit`] of its request).
    report_limit: u32,
    /// The size of a report over `report_limit`, which was not read.
    report_too_large: Option<u32>,
    /// Set when the guest broke the protocol; the run then ends as [`Outcome::Trapped`].
    protocol_fault: Option<String>,
}

impl HostState {
    fn read_report(&self) -> Outcome {
        if let Some(fault) = &self.protocol_fault {
            return trapped(fault);
        }
        if let Some(len) = self.report_too_large {
            return Outcome::LimitReached {
                limit: Limit::Output,
                error: Some(PythonError {
                    kind: "ReportTooLarge".into(),
                    message: format!(
                        "the run's report ({len} bytes) is larger than the {} bytes this call \
                         accepts, so none of it was kept (result, exception or traceback)",
                        self.report_limit
                    ),
                    traceback: String::new(),
                }),
            };
        }
        match (&self.report, self.limiter.denied) {
            (None, _) => trapped("the guest returned without reporting"),
            // Python got to raise after the limiter refused memory: the limit, whatever the
            // exception's class is called.
            (Some(bytes), true) => match decode_report(bytes) {
                Outcome::Raised(error) => Outcome::LimitReached {
                    limit: Limit::Memory,
                    error: Some(error),
                },
                other => other,
            },
            (Some(bytes), false) => decode_report(bytes),
        }
    }
}

/// How a run that returned normally ended, from the bytes its guest reported. The bytes are
/// untrusted: whatever they hold, the answer is an outcome (a malformed report is a guest fault,
/// [`Outcome::Trapped`]), never a panic. An exception is only an exception here, whatever its
/// name: whether memory ran out is the host's own record (see [`HostState::read_report`]).
pub fn decode_report(bytes: &[u8]) -> Outcome {
    match serde_json::from_slice::<Report>(bytes) {
        Ok(Report {
            error: Some(error), ..
        }) => Outcome::Raised(error),
        Ok(Report {
            result,
            error: None,
        }) => Outcome::Completed { result },
        Err(e) => trapped(&format!("the guest sent a malformed report: {e}")),
    }
}

fn trapped(message: &str) -> Outcome {
    Outcome::Trapped {
        message: message.to_owned(),
    }
}

fn classify_trap(err: &wasmtime::Error, state: &HostState) -> Outcome {
    let limit = |limit| Outcome::LimitReached { limit, error: None };
    if err.downcast_ref::<OutputLimitReached>().is_some() {
        return limit(Limit::Output);
    }
    if let Some(exit) = err.downcast_ref::<I32Exit>() {
        return Outcome::Raised(PythonError {
            kind: "SystemExit".into(),
            message: exit.0.to_string(),
            traceback: format!("the process exited with status {}\n", exit.0),
        });
    }
    match err.downcast_ref::<Trap>() {
        Some(Trap::OutOfFuel) => limit(Limit::Fuel),
        Some(Trap::StackOverflow) => limit(Limit::Stack),
        Some(Trap::Interrupt) => limit(Limit::Timeout),
        // The guest's allocator aborts (an `unreachable`) when memory cannot grow; instantiation
        // fails outright when even the initial memory is over the cap.
        _ if state.limiter.denied => limit(Limit::Memory),
        _ => trapped(&format!("{err:#}")),
    }
}

/// Caps linear memory and records its peak. Unlike `StoreLimits` it remembers whether growth was
/// refused, which is how an allocator abort is told apart from any other `unreachable`.
#[derive(Default)]
struct MemoryLimiter {
    max: usize,
    peak: usize,
    denied: bool,
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.max {
            self.denied = true;
            return Ok(false);
        }
        self.peak = self.peak.max(desired);
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        // The guest's one function table never grows at run time; a million entries is generous.
        Ok(desired <= 1 << 20)
    }

    fn instances(&self) -> usize {
        1
    }

    fn tables(&self) -> usize {
        1
    }

    fn memories(&self) -> usize {
        1
    }
}

fn memory(caller: &mut Caller<'_, HostState>) -> wasmtime::Result<Memory> {
    match caller.get_export("memory") {
        Some(Extern::Memory(m)) => Ok(m),
        _ => wasmtime::bail!("the guest exports no memory"),
    }
}

/// Copies `len` bytes at `ptr` out of the guest, refusing lengths over `max`.
fn read_guest(
    caller: &mut Caller<'_, HostState>,
    ptr: i32,
    len: i32,
    max: u32,
) -> wasmtime::Result<Vec<u8>> {
    let len = u32::try_from(len)
        .ok()
        .filter(|l| *l <= max)
        .ok_or_else(|| {
            wasmtime::format_err!("the guest asked the host to read {len} bytes (at most {max})")
        })?;
    let mut buf = vec![0; len as usize];
    memory(caller)?.read(&*caller, ptr as u32 as usize, &mut buf)?;
    Ok(buf)
}

/// WASI preview 1 error numbers (from its witx) that [`add_wasi_overrides_to_linker`] returns.
const ERRNO_FAULT: i32 = 21;
const ERRNO_IO: i32 = 29;

/// How much of a `random_get` buffer is filled at a time.
const RANDOM_CHUNK: usize = 1 << 20;

/// Shadows the WASI preview 1 calls whose wasmtime-wasi versions trap on arguments Python code
/// chooses (surveyed in wasmtime-wasi 48.0.8's `p1.rs`; every other call the guest can make with
/// its own arguments answers with an errno):
///
/// - `random_get` refuses a buffer over its per-call cap with a trap, which `os.urandom(10**7)`
///   reaches. This one fills any buffer inside the guest's memory in place, a chunk at a time
///   straight from the OS (the host allocates nothing), and stops with the run's time limit. A
///   buffer outside the guest's memory is `EFAULT`, an OS failure `EIO`: `OSError` in Python.
/// - `proc_exit` traps with a plain error for a status outside 0..126 (`os._exit(200)`); this one
///   exits with any status, which the host reports as `SystemExit` like the others.
fn add_wasi_overrides_to_linker(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    linker.func_wrap(
        "wasi_snapshot_preview1",
        "random_get",
        |mut caller: Caller<'_, HostState>, ptr: i32, len: i32| -> wasmtime::Result<i32> {
            let deadline = caller.data().deadline;
            let memory = memory(&mut caller)?;
            let data = memory.data_mut(&mut caller);
            let (start, len) = (ptr as u32 as usize, len as u32 as usize);
            let Some(buf) = start
                .checked_add(len)
                .and_then(|end| data.get_mut(start..end))
            else {
                return Ok(ERRNO_FAULT);
            };
            for chunk in buf.chunks_mut(RANDOM_CHUNK) {
                if Instant::now() > deadline {
                    return Err(Trap::Interrupt.into());
                }
                if getrandom::fill(chunk).is_err() {
                    return Ok(ERRNO_IO);
                }
            }
            Ok(0)
        },
    )?;
    linker.func_wrap(
        "wasi_snapshot_preview1",
        "proc_exit",
        |_: Caller<'_, HostState>, status: i32| -> wasmtime::Result<()> {
            Err(I32Exit(status).into())
        },
    )?;
    Ok(())
}

fn add_protocol_to_linker(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    use protocol::{IMPORT_MODULE as M, imports};
    linker.func_wrap(
        M,
        imports::REQUEST_LEN,
        |caller: Caller<'_, HostState>| -> i32 { caller.data().request.len() as i32 },
    )?;
    linker.func_wrap(
        M,
        imports::REQUEST_READ,
        |mut caller: Caller<'_, HostState>, ptr: i32| {
            let request = std::mem::take(&mut caller.data_mut().request);
            memory(&mut caller)?.write(&mut caller, ptr as u32 as usize, &request)?;
            caller.data_mut().request = request;
            Ok(())
        },
    )?;
    linker.func_wrap(
        M,
        imports::IMPORT_ALLOWED,
        |mut caller: Caller<'_, HostState>, ptr: i32, len: i32| {
            // A name too long to be one, or not UTF-8, is refused rather than read: an
            // `ImportError` for the code, not a trap.
            if !u32::try_from(len).is_ok_and(|l| l <= protocol::MAX_MODULE_NAME_BYTES) {
                return Ok(0);
            }
            let name = read_guest(&mut caller, ptr, len, protocol::MAX_MODULE_NAME_BYTES)?;
            let allowed = std::str::from_utf8(&name)
                .is_ok_and(|n| protocol::is_module_name(n) && caller.data().policy.allows(n));
            Ok(i32::from(allowed))
        },
    )?;
    linker.func_wrap(
        M,
        imports::REPORT,
        |mut caller: Caller<'_, HostState>, ptr: i32, len: i32| {
            let state = caller.data();
            let limit = state.report_limit;
            if state.report.is_some() || state.report_too_large.is_some() {
                caller.data_mut().protocol_fault = Some("the guest reported twice".into());
            } else if u32::try_from(len).is_ok_and(|l| l > limit) {
                caller.data_mut().report_too_large = Some(len as u32);
            } else {
                match read_guest(&mut caller, ptr, len, limit) {
                    Ok(bytes) => caller.data_mut().report = Some(bytes),
                    Err(e) => caller.data_mut().protocol_fault = Some(format!("{e:#}")),
                }
            }
            Ok(())
        },
    )?;
    Ok(())
}
