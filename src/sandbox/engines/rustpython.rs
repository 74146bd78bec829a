//! The RustPython engine: this project's guest (`guest/`), embedded in the binary
//! ([`crate::embedded`]), speaking `safe-python-protocol` through imports of its own. A fresh
//! instance is the module as compiled, a snapshot taken after the interpreter started, so it
//! needs no template; its instances come from a pool ([`crate::engine::POOL_SLOTS`] says why).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use safe_python_protocol as protocol;
use wasmtime::{Caller, Linker, Memory, Module, Store, TypedFunc};

use super::{About, Engine, Setup};
use crate::cache::{self, CacheError, Prepared, Wasm};
use crate::embedded;
use crate::engine::{self, Features, Metering};
use crate::policy::ImportPolicy;
use crate::sandbox::host::{HostState, ask_import, memory, read_guest, take_report};
use crate::sandbox::pool::Pool;
use crate::sandbox::service;
use crate::sandbox::{
    BoxFuture, Entry, Guest, Preparation, Sandbox, SandboxError, SandboxOptions, instance_pre,
};
use crate::vfs::Dir;

pub(super) static ABOUT: About = About {
    name: "RustPython",
    interpreter: "RustPython",
    described: "RustPython, a Python 3 interpreter: pure-Python standard library, no numpy or pandas",
    draws_figures: false,
};

/// What the guest's code needs of wasmtime: nothing beyond its defaults.
const FEATURES: Features = Features { exceptions: false };

/// The engine's home.
pub(super) struct RustPython;

impl Engine for RustPython {
    fn about(&self) -> &'static About {
        &ABOUT
    }

    /// Nothing: the guest is embedded.
    fn install(
        &self,
        _cache_dir: Option<&Path>,
        _setup: &mut Setup<'_>,
    ) -> Result<Option<PathBuf>, SandboxError> {
        Ok(None)
    }

    fn open(
        &self,
        options: SandboxOptions,
        _setup: &mut Setup<'_>,
        _preload: Option<&ImportPolicy>,
    ) -> Result<Sandbox, SandboxError> {
        Sandbox::new(options)
    }
}

/// A loaded guest that speaks `safe-python-protocol`: the embedded one, or one under test.
struct Protocol {
    /// Where its libc records its preopen scan, found by `build.rs` for the embedded guest.
    scan_flag: Option<u32>,
}

impl Guest for Protocol {
    fn link(&self, linker: &mut Linker<HostState>, module: &Module) -> Result<(), SandboxError> {
        check_abi(module)?;
        add_protocol_to_linker(linker).map_err(SandboxError::Link)
    }

    fn preopens(&self) -> &[(Arc<str>, Arc<Dir>)] {
        &[]
    }

    fn scan_flag(&self) -> Option<u32> {
        self.scan_flag
    }

    fn entry(
        &self,
        instance: &wasmtime::Instance,
        store: &mut Store<HostState>,
    ) -> wasmtime::Result<Box<dyn Entry>> {
        let run = instance.get_typed_func(store, protocol::exports::RUN)?;
        Ok(Box::new(Run(run)))
    }

    fn prepare<'a>(&'a self, _sandbox: &'a Sandbox) -> Option<BoxFuture<'a, Preparation>> {
        None
    }
}

/// The guest's `run` export, which fetches its request through the protocol.
struct Run(TypedFunc<(), ()>);

impl Entry for Run {
    fn call<'a>(
        &'a mut self,
        store: &'a mut Store<HostState>,
        _memory: Memory,
    ) -> BoxFuture<'a, wasmtime::Result<()>> {
        Box::pin(self.0.call_async(store, ()))
    }
}

impl Sandbox {
    /// Loads the embedded RustPython guest (from the compiled-module cache when it can), with its
    /// instances allocated from a pool of [`engine::POOL_SLOTS`], or on demand where the pool's
    /// address space cannot be reserved.
    pub fn new(options: SandboxOptions) -> Result<Sandbox, SandboxError> {
        Sandbox::with_pool(options, engine::POOL_SLOTS)
    }

    /// [`Sandbox::new`] with a pool of `slots` instances; 0 allocates every instance on demand.
    /// Instances beyond the pool are allocated on demand.
    pub fn with_pool(mut options: SandboxOptions, slots: u32) -> Result<Sandbox, SandboxError> {
        let metering = options.metering;
        options.cache_dir = options.cache_dir.take().or_else(cache::default_dir);
        let guest: Arc<dyn Guest> = Arc::new(Protocol {
            scan_flag: embedded::scan_flag(),
        });
        let pooled = (slots > 0).then(|| engine::pooled(FEATURES, metering, slots));
        let (engine, pool) = match pooled.transpose() {
            Ok(Some(engine)) => {
                let (guest, cache_dir) = (guest.clone(), options.cache_dir.clone());
                // Past the pool, the same module on an engine without one.
                let overflow = move || {
                    let engine = unpooled(metering)?;
                    let (module, _) = cache::load_or_compile(
                        &engine,
                        Wasm::Embedded,
                        embedded::SHA256,
                        cache_dir.as_deref(),
                        &mut |_| {},
                    )?;
                    instance_pre(&engine, &module, &*guest)
                };
                (engine, Some(Arc::new(Pool::new(slots, Box::new(overflow)))))
            }
            unpooled_engine => {
                if let Err(e) = unpooled_engine {
                    tracing::warn!("no instance pool ({e:#}): instances are allocated on demand");
                }
                (unpooled(metering)?, None)
            }
        };
        let (module, prepared) = Self::load(&engine, Wasm::Embedded, embedded::SHA256, options)?;
        let sandbox = Self::link(&engine, metering, module, prepared, guest)?;
        Ok(Sandbox { pool, ..sandbox })
    }

    /// A sandbox around another guest module speaking this crate's protocol, compiled in memory
    /// and never cached: for checking how the host copes with a faulty or hostile guest.
    pub fn with_guest(wasm: &[u8]) -> Result<Sandbox, SandboxError> {
        let engine = unpooled(Metering::Fuel)?;
        let module =
            Module::new(&engine, wasm).map_err(|e| SandboxError::Cache(CacheError::Compile(e)))?;
        // Its libc is unknown: it gets no files.
        let guest = Arc::new(Protocol { scan_flag: None });
        Self::link(
            &engine,
            Metering::Fuel,
            module,
            Prepared::CompiledUncached,
            guest,
        )
    }

    /// The embedded guest compiled ahead of time for `target` (a Rust target triple), as
    /// [`Sandbox::new`] runs it by default (fuel metering on), bound to that guest: the
    /// [`cache::shipped`] module that release packages carry beside each platform's binaries.
    pub fn precompile(target: &str) -> Result<Vec<u8>, SandboxError> {
        let compile = |e| SandboxError::Cache(CacheError::Compile(e));
        let wasm = embedded::wasm().map_err(|e| compile(wasmtime::Error::msg(e)))?;
        cache::shipped::precompile(
            engine::config_for(FEATURES, Metering::Fuel),
            target,
            &wasm,
            embedded::SHA256,
        )
        .map_err(compile)
    }
}

/// The engine without a pool.
fn unpooled(metering: Metering) -> Result<wasmtime::Engine, SandboxError> {
    engine::new(FEATURES, metering).map_err(SandboxError::Engine)
}

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

/// The imports of `safe-python-protocol`, answered from the store's state.
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
        |mut caller: Caller<'_, HostState>, ptr: i32, len: i32| ask_import(&mut caller, ptr, len),
    )?;
    linker.func_wrap(
        M,
        imports::REPORT,
        |mut caller: Caller<'_, HostState>, ptr: i32, len: i32| {
            take_report(&mut caller, ptr, len);
            Ok(())
        },
    )?;
    linker.func_wrap_async(
        M,
        imports::SERVICE_CALL,
        |mut caller: Caller<'_, HostState>, (ptr, len): (i32, i32)| {
            Box::new(async move {
                // An empty frame has no opcode: refused, as any frame the host cannot answer.
                let Some(payload_len) = u32::try_from(len).ok().and_then(|l| l.checked_sub(1))
                else {
                    return Ok(-1);
                };
                let op = read_guest(&mut caller, ptr, 1, 1)?[0];
                let payload = (ptr as u32).wrapping_add(1) as i32;
                let answer = service::answer(&mut caller, op, payload, payload_len).await?;
                Ok(match answer {
                    Some(answer) => {
                        let len = i32::try_from(answer.len()).unwrap_or(-1);
                        caller.data_mut().service_answer = answer;
                        len
                    }
                    None => -1,
                })
            })
        },
    )?;
    linker.func_wrap(
        M,
        imports::SERVICE_ANSWER,
        |mut caller: Caller<'_, HostState>, ptr: i32| {
            let answer = std::mem::take(&mut caller.data_mut().service_answer);
            memory(&mut caller)?.write(&mut caller, ptr as u32 as usize, &answer)?;
            Ok(())
        },
    )?;
    Ok(())
}
