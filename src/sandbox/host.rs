//! The host side of the guest protocol, as every engine shares it: the state a store carries, the
//! memory limiter, the WASI calls shadowed here, bounded reads of guest memory, and the answers to
//! an import question and to a report, which each engine's own imports call.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use safe_python_protocol as protocol;
use wasmtime::{Caller, Extern, Linker, Memory, ResourceLimiter, Trap};
use wasmtime_wasi::p1::WasiP1Ctx;
use wasmtime_wasi::{HostMonotonicClock, HostWallClock, I32Exit, WasiCtxBuilder};

use crate::outcome::ImageCollector;
use crate::outcome::classify::HostRecords;
use crate::output::{OutputSink, Stream};
use crate::policy::ImportPolicy;
use crate::toolcalls::MODULE as TOOLS_MODULE;
use crate::toolcalls::calls::RunCalls;
use crate::vfs::{Dir, Files};

pub(crate) struct HostState {
    pub(super) wasi: WasiP1Ctx,
    /// The guest's in-memory files and stdio ([`crate::vfs`]).
    pub(super) files: Files,
    /// Set when folders were mounted that the guest has not scanned for yet.
    pub(super) rescan: bool,
    /// Bytes of the input files, which count against the memory limit.
    pub(super) input_bytes: usize,
    /// Where the guest's stdout and stderr go; [`WasiP1Ctx`] holds its streams.
    pub(super) sink: OutputSink,
    pub(super) limiter: MemoryLimiter,
    pub(super) request: Vec<u8>,
    pub(super) policy: Arc<ImportPolicy>,
    /// When the current call's time is up, for host functions that run long.
    pub(super) deadline: Instant,
    pub(super) report: Option<Vec<u8>>,
    /// The largest report this call accepts ([`protocol::report_limit`] of its request).
    pub(super) report_limit: u32,
    /// The size of a report over `report_limit`, which was not read.
    pub(super) report_too_large: Option<u32>,
    /// Set when the guest broke the protocol; the run then ends as a trap.
    pub(super) protocol_fault: Option<String>,
    /// The figures the CPython driver sent this call, within their bounds.
    pub(super) images: ImageCollector,
    /// This call's tool calls (code mode).
    pub(super) calls: RunCalls,
    /// The answer to the RustPython guest's last service frame, until it fetches it.
    pub(super) service_answer: Vec<u8>,
    /// Where `random_get` draws from in a [reproducible](HostState::make_reproducible) instance;
    /// `None`: the operating system's random source.
    pub(super) replayed_random: Option<blake3::OutputReader>,
}

impl HostState {
    /// A store's state whose guest sees `preopens` (an engine's standard library, if it has one).
    pub(super) fn new(preopens: &[(Arc<str>, Arc<Dir>)]) -> HostState {
        let sink = OutputSink::default();
        // The file calls, stdio included, are served from memory.
        let files = Files::new(sink.clone(), preopens.iter().cloned());
        let wasi = WasiCtxBuilder::new()
            .stdout(sink.stream(Stream::Stdout))
            .stderr(sink.stream(Stream::Stderr))
            .build_p1();
        HostState {
            replayed_random: None,
            wasi,
            files,
            rescan: false,
            input_bytes: 0,
            sink,
            limiter: MemoryLimiter::default(),
            request: Vec::new(),
            policy: Arc::default(),
            deadline: Instant::now(),
            report: None,
            report_limit: protocol::MAX_REPORT_BYTES,
            report_too_large: None,
            protocol_fault: None,
            images: ImageCollector::default(),
            calls: RunCalls::default(),
            service_answer: Vec::new(),
        }
    }

    /// Makes the instance's run come out the same in every process: its random bytes are a fixed
    /// stream and its clocks tick one microsecond per reading from a fixed time. For an engine's
    /// template, before it is instantiated, so that its memory (which sessions are snapshots
    /// against) is the same on every replica of the server, and a session stored by one restores
    /// on another. What that fixes was never secret: every call of a process starts from the same
    /// template, and each call's first run draws fresh seeds for `random` (the drivers do).
    pub(super) fn make_reproducible(&mut self) {
        let clock = TickingClock::default();
        self.wasi = WasiCtxBuilder::new()
            .stdout(self.sink.stream(Stream::Stdout))
            .stderr(self.sink.stream(Stream::Stderr))
            .wall_clock(clock.clone())
            .monotonic_clock(clock)
            .build_p1();
        let stream = blake3::Hasher::new_derive_key("safe-python-executor template random");
        self.replayed_random = Some(stream.finalize_xof());
    }

    /// Whether user code may import `name` (raw bytes from the guest), as the protocol answers
    /// it: [`protocol::HOST_MODULE`] for `tools` when the call has upstreams, [`protocol::ALLOWED`]
    /// for a module name, in UTF-8, that the policy allows, and 0 otherwise.
    pub(super) fn import_answer(&self, name: &[u8]) -> i32 {
        match std::str::from_utf8(name) {
            Ok(n) if n == TOOLS_MODULE && self.calls.enabled() => protocol::HOST_MODULE,
            Ok(n) if protocol::is_module_name(n) && self.policy.allows(n) => protocol::ALLOWED,
            _ => 0,
        }
    }

    /// Whether a report of `len` bytes is to be read. A second report is a protocol fault and
    /// one over the call's limit is recorded as too large; neither is read.
    pub(super) fn report_fits(&mut self, len: u32) -> bool {
        if self.report.is_some() || self.report_too_large.is_some() {
            self.protocol_fault = Some("the guest reported twice".into());
            false
        } else if len > self.report_limit {
            self.report_too_large = Some(len);
            false
        } else {
            true
        }
    }

    /// What this call's host functions recorded, for [`crate::outcome::classify`].
    pub(super) fn records(&self) -> HostRecords<'_> {
        HostRecords {
            report: self.report.as_deref(),
            report_limit: self.report_limit,
            report_too_large: self.report_too_large,
            protocol_fault: self.protocol_fault.as_deref(),
            memory_denied: self.limiter.denied,
        }
    }
}

/// The clocks of a reproducible instance ([`HostState::make_reproducible`]): 2026-01-01 at the
/// first reading, one microsecond later at each next one (code that waits for time to pass still
/// sees it pass).
/// The wall clock and the monotonic one share their readings.
#[derive(Default, Clone)]
struct TickingClock(Arc<AtomicU64>);

impl TickingClock {
    const START: Duration = Duration::from_secs(1_767_225_600);

    fn tick(&self) -> Duration {
        Self::START + Duration::from_micros(self.0.fetch_add(1, Ordering::Relaxed))
    }
}

impl HostWallClock for TickingClock {
    fn resolution(&self) -> Duration {
        Duration::from_micros(1)
    }

    fn now(&self) -> Duration {
        self.tick()
    }
}

impl HostMonotonicClock for TickingClock {
    fn resolution(&self) -> u64 {
        1_000
    }

    fn now(&self) -> u64 {
        self.tick().as_nanos() as u64
    }
}

/// Caps linear memory and records its peak. Unlike `StoreLimits` it remembers whether growth was
/// refused, which is how an allocator abort is told apart from any other `unreachable`.
#[derive(Default)]
pub(super) struct MemoryLimiter {
    pub(super) max: usize,
    pub(super) peak: usize,
    pub(super) denied: bool,
    /// Bytes of the files the code wrote, which count with linear memory.
    pub(super) files: Arc<AtomicUsize>,
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired.saturating_add(self.files.load(Ordering::Relaxed)) > self.max {
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

pub(super) fn memory(caller: &mut Caller<'_, HostState>) -> wasmtime::Result<Memory> {
    match caller.get_export("memory") {
        Some(Extern::Memory(m)) => Ok(m),
        _ => wasmtime::bail!("the guest exports no memory"),
    }
}

/// Copies `len` bytes at `ptr` out of the guest, refusing lengths over `max`.
pub(super) fn read_guest(
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
pub(super) fn add_wasi_overrides_to_linker(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    linker.func_wrap(
        "wasi_snapshot_preview1",
        "random_get",
        |mut caller: Caller<'_, HostState>, ptr: i32, len: i32| -> wasmtime::Result<i32> {
            let deadline = caller.data().deadline;
            let memory = memory(&mut caller)?;
            let (data, state) = memory.data_and_store_mut(&mut caller);
            let (start, len) = (ptr as u32 as usize, len as u32 as usize);
            let Some(buf) = start
                .checked_add(len)
                .and_then(|end| data.get_mut(start..end))
            else {
                return Ok(ERRNO_FAULT);
            };
            if let Some(stream) = &mut state.replayed_random {
                stream.fill(buf);
                return Ok(0);
            }
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

/// Whether user code may import the module named by the `len` bytes at `ptr` (see
/// [`HostState::import_answer`]): both engines' way of asking. A name too long to be one is
/// refused unread: an `ImportError` for the code, not a trap.
pub(super) fn ask_import(
    caller: &mut Caller<'_, HostState>,
    ptr: i32,
    len: i32,
) -> wasmtime::Result<i32> {
    if !u32::try_from(len).is_ok_and(|l| l <= protocol::MAX_MODULE_NAME_BYTES) {
        return Ok(0);
    }
    let name = read_guest(caller, ptr, len, protocol::MAX_MODULE_NAME_BYTES)?;
    Ok(caller.data().import_answer(&name))
}

/// Keeps the report of `len` bytes at `ptr`, if it fits the call's limit: both engines' way of
/// reporting. What goes wrong is recorded for [`crate::outcome::classify`], never raised: a
/// negative length is read, and refused by `read_guest` as a protocol fault.
pub(super) fn take_report(caller: &mut Caller<'_, HostState>, ptr: i32, len: i32) {
    let fits = u32::try_from(len).map_or(true, |l| caller.data_mut().report_fits(l));
    if fits {
        let limit = caller.data().report_limit;
        match read_guest(caller, ptr, len, limit) {
            Ok(bytes) => caller.data_mut().report = Some(bytes),
            Err(e) => caller.data_mut().protocol_fault = Some(format!("{e:#}")),
        }
    }
}
