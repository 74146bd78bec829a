//! Loading and linking the guest, and the [`Sandbox`] API: a fresh run is one call on a new
//! [`Instance`]; a session ([`crate::session`]) makes many calls on one.
//!
//! The guest gets WASI preview 1 with nothing of the host's behind it: no host directory, no
//! environment, no arguments, stdin at EOF, stdout and stderr captured by [`crate::output`]. Its
//! files and stdio are `crate::vfs`'s, in memory: an engine's standard library, and a call's own
//! files when it brings some ([`files`]). The host functions of the engine's protocol (the shared
//! half in [`host`]) are the only other way out, and each bounds what it reads. How a call ended
//! is [`crate::outcome`]'s to say, from the trap and the host's records.
//!
//! Everything here is the same for every engine. What differs between them (linking, folders,
//! how a call enters, what a fresh instance starts from) each engine answers through [`Guest`],
//! in its own module under [`engines`].

mod cow;
pub mod engines;
pub mod files;
mod host;
mod instance;
mod mount;
pub(crate) mod pagemap;
mod pool;
mod prefault;
mod recycle;
pub(crate) mod scan_flag;
mod service;
pub(crate) mod snapshot;
mod template;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};

use safe_python_protocol::Request;
use tokio::sync::OnceCell;
use wasmtime::{Engine, InstancePre, Linker, Module, Store};
use wasmtime_wasi::p1;

use crate::cache::{self, CacheError, Prepared, Wasm};
use crate::cpython::{ArtifactsError, StdlibError, install_hint};
use crate::engine::Metering;
use crate::limits::Limits;
use crate::outcome::RunResult;
use crate::output::OutputObserver;
use crate::policy::ImportPolicy;
use crate::toolcalls::{ToolAccess, ToolCallObserver};
use crate::vfs::Dir;
pub use engines::{About, EngineKind, Setup, template_preloads};
use files::InputFiles;
use host::HostState;
use instance::Entry;
pub(crate) use instance::Instance;
use pool::{Allocation, Pool};
pub use recycle::MAX_KEPT_WRITTEN;
use template::Template;
pub use template::{PreloadFailure, TemplateInfo};

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

/// Where to keep the compiled guest and what to say while compiling it: what every engine is
/// opened with. What only one engine takes is an argument of its own constructor.
#[derive(Default)]
pub struct SandboxOptions {
    /// Cache directory for the compiled guest; `None` means [`cache::default_dir`].
    pub cache_dir: Option<PathBuf>,
    pub on_compile: Option<CompileNotice>,
    /// Whether runs count instructions against [`Limits::fuel`].
    pub metering: Metering,
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
    /// The upstream tools the code may call (code mode); `None`: `import tools` is refused.
    pub tools: Option<ToolAccess>,
    /// Told about each tool call as it finishes.
    pub on_tool_call: Option<ToolCallObserver>,
}

/// A future the sandbox awaits on an engine's behalf.
pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A loaded engine, as the engine-neutral code here drives it: everything about a guest that
/// differs from one engine to another (each engine's is in [`engines`]).
pub(crate) trait Guest: Send + Sync {
    /// Checks that `module` is a guest this engine's host can drive (saying what it lacks rather
    /// than failing to link), and links what it imports beyond WASI and the files.
    fn link(&self, linker: &mut Linker<HostState>, module: &Module) -> Result<(), SandboxError>;

    /// The read-only folders every instance sees, as guest path and tree.
    fn preopens(&self) -> &[(Arc<str>, Arc<Dir>)];

    /// Where the module's libc records that it has scanned the preopens ([`scan_flag`]); `None`:
    /// the guest cannot be given files.
    fn scan_flag(&self) -> Option<u32>;

    /// The request as this engine's guest reads it: the protocol's JSON, unless its door has a
    /// form of its own.
    fn encode_request(&self, request: &Request) -> Vec<u8> {
        serde_json::to_vec(request).expect("a request always serialises")
    }

    /// How calls enter `instance`, a new instance of the module in `store`.
    fn entry(
        &self,
        instance: &wasmtime::Instance,
        store: &mut Store<HostState>,
    ) -> wasmtime::Result<Box<dyn Entry>>;

    /// The instance the engine's template is made of ([`template`]), prepared on `sandbox`, and
    /// what it imported; `None` when a fresh instance is the module as compiled, which is then
    /// the template.
    fn prepare<'a>(&'a self, sandbox: &'a Sandbox) -> Option<BoxFuture<'a, Preparation>>;
}

/// An engine's template instance ([`Guest::prepare`]), with the modules it imported or the one
/// that failed (the template is then the plain one).
pub(crate) type Preparation = Result<(Instance, Result<Vec<String>, PreloadFailure>), SandboxError>;

/// The compiled guest, ready to be instantiated any number of times, from any number of threads.
#[derive(Clone)]
pub struct Sandbox {
    metering: Metering,
    pre: InstancePre<HostState>,
    prepared: Prepared,
    guest: Arc<dyn Guest>,
    /// A fresh instance, made when first needed, that memory is compared with (by sessions,
    /// unless a template is mapped: see [`Sandbox::session_base`]). Never run; its memory is
    /// mapped from the compiled module, so it costs almost nothing.
    pristine: Arc<OnceCell<Arc<Mutex<Instance>>>>,
    /// The engine's template ([`template`]), where it has one: every fresh call starts from it.
    /// Made by [`Sandbox::template`] or the first fresh call; holds no user state.
    template: Arc<OnceCell<Option<Arc<Template>>>>,
    /// The instance pool, when the engine has one ([`crate::engine::pooled`]).
    pool: Option<Arc<Pool>>,
    #[cfg_attr(not(feature = "store"), allow(dead_code))]
    /// What a session's memory depends on, hashed when a session store first needs it (see
    /// [`Sandbox::session_fingerprint`]).
    fingerprint: Arc<OnceCell<[u8; 32]>>,
    /// The pages a fresh call writes, once [`Sandbox::warm_up`] learned them.
    hot_pages: Arc<OnceLock<prefault::HotPages>>,
    /// Instances of the template kept for the next fresh calls ([`recycle`]).
    spares: Arc<recycle::Spares>,
}

impl Sandbox {
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

    /// A sandbox running `module` as `guest`, its instances made on `engine`.
    fn link(
        engine: &Engine,
        metering: Metering,
        module: Module,
        prepared: Prepared,
        guest: Arc<dyn Guest>,
    ) -> Result<Sandbox, SandboxError> {
        let pre = instance_pre(engine, &module, &*guest)?;
        Ok(Sandbox {
            metering,
            pre,
            prepared,
            guest,
            pristine: Arc::default(),
            template: Arc::default(),
            pool: None,
            fingerprint: Arc::default(),
            hot_pages: Arc::default(),
            spares: Arc::new(recycle::Spares::new()),
        })
    }

    /// Where a new instance comes from (see [`pool::Allocation`]).
    pub(crate) fn allocation(&self) -> Result<Allocation, SandboxError> {
        pool::allocate(self.pool.as_ref(), &self.pre)
    }

    /// Where the guest's libc records that it has scanned the preopens.
    pub(crate) fn scan_flag(&self) -> Result<u32, SandboxError> {
        self.guest.scan_flag().ok_or(SandboxError::NoFileSystem)
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
        let call = instance.call(self, code, FRESH_FILENAME, options).await?;
        let mut result = call.result;
        result.files = instance.output_files();
        self.take_back(instance, call.broken);
        Ok(result)
    }
}

/// Links the guest's imports: WASI preview 1, with the calls shadowed in [`host`] and the files
/// served from memory, and the engine's own.
fn instance_pre(
    engine: &Engine,
    module: &Module,
    guest: &dyn Guest,
) -> Result<InstancePre<HostState>, SandboxError> {
    let mut linker = Linker::new(engine);
    p1::add_to_linker_async(&mut linker, |s: &mut HostState| &mut s.wasi)
        .map_err(SandboxError::Link)?;
    linker.allow_shadowing(true);
    host::add_wasi_overrides_to_linker(&mut linker).map_err(SandboxError::Link)?;
    // Every guest's files and stdio are served from memory ([`crate::vfs`]).
    crate::vfs::add_to_linker(&mut linker, |s: &mut HostState| &mut s.files)
        .map_err(SandboxError::Link)?;
    linker.allow_shadowing(false);
    guest.link(&mut linker, module)?;
    linker.instantiate_pre(module).map_err(SandboxError::Link)
}

/// The name tracebacks give the code of a fresh run.
const FRESH_FILENAME: &str = "<code>";
