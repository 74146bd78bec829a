//! Loading and linking the guest, and the [`Sandbox`] API: a fresh run is one call on a new
//! [`Instance`]; a session ([`crate::session`]) makes many calls on one.
//!
//! The guest gets WASI preview 1 with nothing of the host's behind it: no host directory, no
//! environment, no arguments, stdin at EOF, stdout and stderr captured by [`crate::output`]. Its
//! files and stdio are `crate::vfs`'s, in memory: the CPython engine's standard library, and a
//! call's own files when it brings some ([`files`]). The host functions
//! of `safe-python-protocol` ([`host`]) are the only other way out, and each bounds what it reads.
//! How a call ended is [`crate::outcome`]'s to say, from the trap and the host's records.

mod cow;
mod door;
pub mod files;
mod host;
mod instance;
mod mount;
pub(crate) mod pagemap;
mod pool;
pub(crate) mod scan_flag;
pub(crate) mod snapshot;
mod template;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use tokio::sync::OnceCell;
use wasmtime::{Engine, InstancePre, Linker, Module};
use wasmtime_wasi::p1;

use crate::cache::{self, CacheError, Prepared, Wasm};
use crate::cpython::{Artifacts, ArtifactsError, PINNED, Stdlib, StdlibError, install_hint};
use crate::engine::{EngineKind, Metering};
use crate::limits::Limits;
use crate::outcome::RunResult;
use crate::output::OutputObserver;
use crate::policy::ImportPolicy;
use crate::{embedded, engine};
use files::InputFiles;
use host::HostState;
pub(crate) use instance::Instance;
use pool::{Allocation, Pool};
use template::Template;
pub use template::{PreloadFailure, TemplateInfo, template_preloads};

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
    #[error(transparent)]
    Stdlib(#[from] StdlibError),
    /// Boxed, as `Files` is: the largest of the errors, and this one is returned everywhere.
    #[error(transparent)]
    Artifacts(Box<ArtifactsError>),
    #[error("the CPython engine is not installed in {}: {}", .0.display(), install_hint())]
    NotInstalled(PathBuf),
    #[error(
        "there is no cache directory to install the CPython engine into: choose one with --cache-dir or {}",
        cache::CACHE_DIR_ENV
    )]
    NoCacheDir,
    #[error("this guest module cannot be given files: its libc's preopen scan was not found")]
    NoFileSystem,
    /// Boxed: it names the path, and this error is returned everywhere.
    #[error(transparent)]
    Files(Box<files::FilesError>),
}

impl From<ArtifactsError> for SandboxError {
    fn from(e: ArtifactsError) -> SandboxError {
        SandboxError::Artifacts(Box::new(e))
    }
}

impl From<files::FilesError> for SandboxError {
    fn from(e: files::FilesError) -> SandboxError {
        SandboxError::Files(Box::new(e))
    }
}

/// Called before the guest is compiled (it takes tens of seconds), with the cache entry's path.
pub type CompileNotice = Box<dyn FnMut(Option<&Path>) + Send>;

/// Where to keep the compiled guest and what to say while compiling it.
#[derive(Default)]
pub struct SandboxOptions {
    /// Cache directory for the compiled guest; `None` means [`cache::default_dir`].
    pub cache_dir: Option<PathBuf>,
    pub on_compile: Option<CompileNotice>,
    /// Whether runs count instructions against [`Limits::fuel`].
    pub metering: Metering,
    /// Modules the CPython engine imports into its template, so that calls find them loaded:
    /// [`template_preloads`] of the server's policy. RustPython ignores it.
    pub preload: Vec<String>,
    /// How many RustPython instances the pool holds ([`engine::POOL_SLOTS`] when `None`; `Some(0)`
    /// allocates every instance on demand). Instances beyond it are allocated on demand.
    pub pool_slots: Option<u32>,
}

/// What one run may do and who hears its output.
#[derive(Clone, Default)]
pub struct RunOptions {
    pub limits: Limits,
    pub policy: Arc<ImportPolicy>,
    pub observer: Option<OutputObserver>,
    /// Files for the code: `None` gives it no file system at all (and costs nothing); `Some`
    /// serves these read-only under `/data` and lets the code write under `/out`, whose files
    /// come back in [`RunResult::files`]. In a session, they are added to the session's.
    pub files: Option<InputFiles>,
}

/// Which guest a sandbox runs, and what only that guest needs.
#[derive(Clone)]
pub(crate) enum Guest {
    RustPython,
    /// The reactor's standard library, served from memory to every instance.
    CPython(Stdlib),
}

/// The compiled guest, ready to be instantiated any number of times, from any number of threads.
#[derive(Clone)]
pub struct Sandbox {
    metering: Metering,
    pre: InstancePre<HostState>,
    prepared: Prepared,
    guest: Guest,
    /// A fresh instance, made when first needed, that memory is compared with (by sessions,
    /// unless the CPython template is mapped: see [`Sandbox::session_base`]). Never run; its memory is mapped from the compiled module, so it costs almost
    /// nothing.
    pristine: Arc<OnceCell<Arc<Mutex<Instance>>>>,
    /// What the CPython engine's template imports.
    preload: Arc<[String]>,
    /// The CPython engine's template ([`template`]): every fresh call starts from it instead of
    /// installing the driver and importing the data stack again. Made by [`Sandbox::template`]
    /// or the first fresh call; holds no user state.
    template: Arc<OnceCell<Arc<Template>>>,
    /// Where the module's bytes are, to find its preopen-scan flag when files are first given.
    module_file: Option<Arc<PathBuf>>,
    /// That flag's address ([`scan_flag::scan_flag`]), found once.
    scan_flag: Arc<OnceLock<Option<u32>>>,
    /// The RustPython engine's instance pool, when `engine` has one ([`engine::pooled`]).
    pool: Option<Arc<Pool>>,
}

impl Sandbox {
    /// Loads the embedded RustPython guest (from the compiled-module cache when it can), with its
    /// instances allocated from a pool ([`engine::POOL_SLOTS`]), or on demand where the pool's
    /// address space cannot be reserved.
    pub fn new(mut options: SandboxOptions) -> Result<Sandbox, SandboxError> {
        let metering = options.metering;
        options.cache_dir = options.cache_dir.take().or_else(cache::default_dir);
        let slots = options.pool_slots.unwrap_or(engine::POOL_SLOTS);
        let pooled = (slots > 0).then(|| engine::pooled(metering, slots));
        let (engine, pool) = match pooled.transpose() {
            Ok(Some(engine)) => {
                let pool = Pool::new(slots, metering, options.cache_dir.clone());
                (engine, Some(Arc::new(pool)))
            }
            unpooled => {
                if let Err(e) = unpooled {
                    tracing::warn!("no instance pool ({e:#}): instances are allocated on demand");
                }
                let engine =
                    engine::new(EngineKind::RustPython, metering).map_err(SandboxError::Engine)?;
                (engine, None)
            }
        };
        let (module, prepared) = Self::load(&engine, Wasm::Embedded, embedded::SHA256, options)?;
        let sandbox = Self::link(&engine, metering, module, prepared, Guest::RustPython)?;
        Ok(Sandbox { pool, ..sandbox })
    }

    /// Loads the CPython engine from its installed artifacts (see [`crate::cpython`]). The first
    /// time, compiling its 100 MB module takes a minute or more; `options.on_compile` hears of it.
    pub fn cpython(
        artifacts: &Artifacts,
        mut options: SandboxOptions,
    ) -> Result<Sandbox, SandboxError> {
        let preload = std::mem::take(&mut options.preload);
        let stdlib = Stdlib::load(&artifacts.stdlib())?;
        let snapshot = artifacts.snapshot();
        let metering = options.metering;
        let engine = engine::new(EngineKind::CPython, metering).map_err(SandboxError::Engine)?;
        let (module, prepared) = Self::load(
            &engine,
            Wasm::File(&snapshot),
            PINNED.snapshot.sha256,
            options,
        )?;
        let sandbox = Self::link(&engine, metering, module, prepared, Guest::CPython(stdlib))?;
        Ok(Sandbox {
            preload: preload.into(),
            module_file: Some(Arc::new(snapshot)),
            ..sandbox
        })
    }

    fn load(
        engine: &Engine,
        wasm: Wasm<'_>,
        sha256: &str,
        mut options: SandboxOptions,
    ) -> Result<(Module, Prepared), SandboxError> {
        let dir = options.cache_dir.take().or_else(cache::default_dir);
        let mut on_compile = options.on_compile.take();
        Ok(cache::load_or_compile(
            engine,
            wasm,
            sha256,
            dir.as_deref(),
            &mut |p| {
                if let Some(f) = on_compile.as_mut() {
                    f(p)
                }
            },
        )?)
    }

    /// A sandbox around another guest module speaking this crate's protocol, compiled in memory and
    /// never cached: for checking how the host copes with a faulty or hostile guest.
    pub fn with_guest(wasm: &[u8]) -> Result<Sandbox, SandboxError> {
        let engine =
            engine::new(EngineKind::RustPython, Metering::Fuel).map_err(SandboxError::Engine)?;
        let module =
            Module::new(&engine, wasm).map_err(|e| SandboxError::Cache(CacheError::Compile(e)))?;
        let sandbox = Self::link(
            &engine,
            Metering::Fuel,
            module,
            Prepared::CompiledUncached,
            Guest::RustPython,
        )?;
        // Its libc is unknown: it gets no files.
        Ok(Sandbox {
            scan_flag: Arc::new(OnceLock::from(None)),
            ..sandbox
        })
    }

    fn link(
        engine: &Engine,
        metering: Metering,
        module: Module,
        prepared: Prepared,
        guest: Guest,
    ) -> Result<Sandbox, SandboxError> {
        let pre = instance_pre(engine, &module, &guest)?;
        Ok(Sandbox {
            metering,
            pre,
            prepared,
            guest,
            pristine: Arc::default(),
            preload: Arc::new([]),
            template: Arc::default(),
            module_file: None,
            scan_flag: Arc::default(),
            pool: None,
        })
    }

    /// Where a new instance comes from (see [`pool::Allocation`]).
    pub(crate) fn allocation(&self) -> Result<Allocation, SandboxError> {
        pool::allocate(self.pool.as_ref(), &self.pre, &self.guest)
    }

    /// Where the guest's libc records that it has scanned the preopens: read from the module
    /// the first time files are given (the embedded guest's bytes, or the CPython module's file).
    pub(crate) fn scan_flag(&self) -> Result<u32, SandboxError> {
        let flag = self
            .scan_flag
            .get_or_init(|| match (&self.guest, &self.module_file) {
                (Guest::RustPython, _) => embedded::scan_flag(),
                (Guest::CPython(_), Some(path)) => std::fs::read(path.as_path())
                    .ok()
                    .and_then(|wasm| scan_flag::scan_flag(&wasm)),
                (Guest::CPython(_), None) => None,
            });
        flag.ok_or(SandboxError::NoFileSystem)
    }

    /// The instance sessions compare their memory with (see [`crate::session`]).
    pub(crate) async fn pristine(&self) -> Result<Arc<Mutex<Instance>>, SandboxError> {
        let pristine = self
            .pristine
            .get_or_try_init(|| async {
                let instance =
                    Instance::with_memory(self, Limits::MAX_MEMORY_BYTES, 0, std::iter::empty())
                        .await?;
                Ok::<_, SandboxError>(Arc::new(Mutex::new(instance)))
            })
            .await?;
        Ok(pristine.clone())
    }

    /// A new instance for one fresh call: RustPython's from its snapshot as compiled, CPython's
    /// from the engine's template.
    pub(crate) async fn fresh(&self) -> Result<Instance, SandboxError> {
        if let Guest::RustPython = self.guest {
            return Instance::new(self);
        }
        self.instance_from_template().await
    }

    /// Whether runs count instructions (see [`Metering`]).
    pub fn metering(&self) -> Metering {
        self.metering
    }

    /// How the compiled guest was obtained.
    pub fn prepared(&self) -> &Prepared {
        &self.prepared
    }

    /// Runs `code` in a fresh instance. Limits and Python errors are outcomes, not `Err`s.
    ///
    /// Dropping the returned future cancels the run at the guest's next epoch tick at the latest.
    pub async fn run(&self, code: &str, options: &RunOptions) -> Result<RunResult, SandboxError> {
        let mut instance = self.fresh().await?;
        if let Some(files) = &options.files {
            let folder = files::new_folder(files);
            instance.mount_files(self, files, folder, true)?;
        }
        let mut result = instance
            .call(self, code, FRESH_FILENAME, options)
            .await?
            .result;
        result.files = instance.output_files();
        Ok(result)
    }
}

/// Links the guest's imports: WASI preview 1, with the calls shadowed in [`host`] and the files
/// served from memory, and the guest's own protocol.
fn instance_pre(
    engine: &Engine,
    module: &Module,
    guest: &Guest,
) -> Result<InstancePre<HostState>, SandboxError> {
    let mut linker = Linker::new(engine);
    p1::add_to_linker_async(&mut linker, |s: &mut HostState| &mut s.wasi)
        .map_err(SandboxError::Link)?;
    linker.allow_shadowing(true);
    host::add_wasi_overrides_to_linker(&mut linker).map_err(SandboxError::Link)?;
    // Both guests' files and stdio are served from memory ([`crate::vfs`]).
    crate::vfs::add_to_linker(&mut linker, |s: &mut HostState| &mut s.files)
        .map_err(SandboxError::Link)?;
    match guest {
        Guest::RustPython => {
            host::check_abi(module)?;
            linker.allow_shadowing(false);
            host::add_protocol_to_linker(&mut linker).map_err(SandboxError::Link)?;
        }
        Guest::CPython(_) => {
            door::check_abi(module)?;
            linker.allow_shadowing(false);
            door::add_to_linker(&mut linker).map_err(SandboxError::Link)?;
        }
    }
    linker.instantiate_pre(module).map_err(SandboxError::Link)
}

/// The name tracebacks give the code of a fresh run.
const FRESH_FILENAME: &str = "<code>";
