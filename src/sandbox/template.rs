//! The CPython engine's template: the memory every fresh call and new session starts from. It is
//! an instance whose driver is installed and which has imported the data stack the server allows
//! (see [`template_preloads`]), kept as an image each new instance maps copy-on-write
//! ([`super::cow`]), or else as the pages that differ from a pristine instance. Importing
//! numpy and pandas takes over a second and matplotlib rebuilds its font list: done once here,
//! not in every call.
//!
//! The imports run as turns of the driver, not as a call: no `__main__` is made and no user state
//! exists yet, so the first call of each instance still makes its own and reseeds the random
//! generators. The import policy is the host's at every user import, whatever `sys.modules`
//! holds, so a module the data stack loaded but the allowlist does not name stays refused.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use std::iter::empty;

use super::cow::Image;
use super::snapshot::Snapshot;
use super::{Guest, Instance, Sandbox, SandboxError, files, pagemap};
use crate::limits::Limits;
use crate::policy::ImportPolicy;

/// What the template holds and what it cost, for `--check` and the benchmarks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateInfo {
    /// The modules imported into it: none when a preload failed.
    pub preloaded: Vec<String>,
    /// The module that could not be imported, and why: the template is then the plain one.
    pub failed: Option<PreloadFailure>,
    /// Memory the template holds: the pages it keeps, and their bookkeeping.
    pub bytes: usize,
    /// How long building it took, the failed attempt included.
    pub build_time: Duration,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot preload `{module}`: {reason}")]
pub struct PreloadFailure {
    pub module: String,
    /// The last line of the guest's traceback (e.g. `ModuleNotFoundError: No module named 'x'`).
    pub reason: String,
}

/// The template's memory and the report on it.
pub(super) struct Template {
    memory: Memory,
    info: TemplateInfo,
}

/// How a new instance gets the template's memory.
enum Memory {
    /// Mapped copy-on-write ([`super::cow`]). Sessions take their snapshots against `base`, an
    /// instance of the template never run, so that a snapshot holds only what the session
    /// changed.
    Image {
        image: Image,
        base: Arc<Mutex<Instance>>,
    },
    /// Copied, as the pages that differ from a pristine instance's (where there is no image).
    Pages(Snapshot),
}

/// The modules of the data stack `policy` allows, as the template imports them: matplotlib as
/// `matplotlib.pyplot`, so that its font list is built once. Only allowed modules: nothing is
/// loaded that the server's allowlist does not name.
pub fn template_preloads(policy: &ImportPolicy) -> Vec<String> {
    ImportPolicy::DATA_STACK
        .iter()
        .filter(|m| policy.allows(m))
        .map(|&m| match m {
            "matplotlib" => "matplotlib.pyplot".to_owned(),
            m => m.to_owned(),
        })
        .collect()
}

/// Memory a template's instance may take while it is made: a call sets its own limit.
const MAX: usize = Limits::MAX_MEMORY_BYTES;

/// The longest failure reason kept: the guest's stderr is not bounded while the template builds.
const MAX_REASON_BYTES: usize = 500;

impl Sandbox {
    /// Builds the CPython engine's template if it is not built yet, and says what it holds;
    /// `None` on RustPython, whose compiled snapshot is its template. Front ends call it at
    /// start-up so that no call pays for it; otherwise the first fresh call builds it.
    pub async fn template(&self) -> Result<Option<TemplateInfo>, SandboxError> {
        if let Guest::RustPython = self.guest {
            return Ok(None);
        }
        Ok(Some(self.built_template().await?.info.clone()))
    }

    pub(super) async fn built_template(&self) -> Result<Arc<Template>, SandboxError> {
        let template = self
            .template
            .get_or_try_init(|| async {
                let started = Instant::now();
                let (instance, failed) = match self.preloaded_instance().await? {
                    Ok(instance) => (instance, None),
                    Err(failure) => {
                        tracing::warn!(
                            "{failure}; fresh calls start without the data stack imported"
                        );
                        (self.with_open().await?, Some(failure))
                    }
                };
                let image = instance.memory().and_then(Image::new);
                let base = match &image {
                    Some(image) => Instance::with_image(self, MAX, image, 0, empty())
                        .await
                        .inspect_err(|e| tracing::warn!("{e:#}; it is copied instead"))
                        .ok(),
                    None => None,
                };
                let memory = match (image, base) {
                    (Some(image), Some(base)) => Memory::Image {
                        image,
                        base: Arc::new(Mutex::new(base)),
                    },
                    _ => {
                        let pristine = self.pristine().await?;
                        Memory::Pages(Self::capture(&instance, &pristine)?)
                    }
                };
                let info = TemplateInfo {
                    preloaded: match failed {
                        Some(_) => Vec::new(),
                        None => self.preload.to_vec(),
                    },
                    failed,
                    bytes: match &memory {
                        Memory::Image { image, .. } => image.held_bytes(),
                        Memory::Pages(snapshot) => snapshot.held_bytes(),
                    },
                    build_time: started.elapsed(),
                };
                tracing::info!(
                    preloaded = ?info.preloaded,
                    bytes = info.bytes,
                    ms = info.build_time.as_millis() as u64,
                    "the CPython engine's template is ready"
                );
                Ok::<_, SandboxError>(Arc::new(Template { memory, info }))
            })
            .await?;
        Ok(template.clone())
    }

    /// A new instance for one fresh call, from the template.
    pub(super) async fn instance_from_template(&self) -> Result<Instance, SandboxError> {
        match &self.built_template().await?.memory {
            Memory::Image { image, .. } => Instance::with_image(self, MAX, image, 0, empty()).await,
            Memory::Pages(t) => Instance::with_memory(self, MAX, t.len, t.pages()).await,
        }
    }

    /// The instance a session's snapshots are taken against: the template where it is mapped,
    /// otherwise (and on RustPython, whose compiled snapshot is its template) a pristine one.
    pub(crate) async fn session_base(&self) -> Result<Arc<Mutex<Instance>>, SandboxError> {
        if let Guest::CPython(_) = self.guest
            && let Memory::Image { base, .. } = &self.built_template().await?.memory
        {
            return Ok(base.clone());
        }
        self.pristine().await
    }

    /// A new instance holding `snapshot`, taken against [`Self::session_base`]: a session's
    /// rollback.
    pub(crate) async fn restore(
        &self,
        memory_bytes: usize,
        snapshot: &Snapshot,
    ) -> Result<Instance, SandboxError> {
        let (len, pages) = (snapshot.len, snapshot.pages());
        if let Guest::CPython(_) = self.guest
            && let Memory::Image { image, .. } = &self.built_template().await?.memory
        {
            return Instance::with_image(self, memory_bytes, image, len, pages).await;
        }
        Instance::with_memory(self, memory_bytes, len, pages).await
    }

    /// An instance with the driver installed and [`Self::preload`] imported, or the first module
    /// that failed to import.
    async fn preloaded_instance(&self) -> Result<Result<Instance, PreloadFailure>, SandboxError> {
        let mut instance = self.with_open().await?;
        // The turn's imports meet the policy as user code's do: it allows the preloads' packages.
        let packages = self.preload.iter().filter_map(|m| m.split('.').next());
        let policy = Arc::new(ImportPolicy::with_extra(packages));
        for module in self.preload.iter() {
            // The name becomes Python source: only plain dotted names.
            if !safe_python_protocol::is_module_name(module) {
                return Ok(Err(PreloadFailure {
                    module: module.clone(),
                    reason: "not a module name".into(),
                }));
            }
            // `__import__` binds no name in the turns' namespace.
            let status = instance
                .driver_turn(&format!("__import__('{module}')\n"), &policy)
                .await?;
            let (_, stderr) = instance.take_output();
            if status != 0 {
                let stderr = String::from_utf8_lossy(&stderr);
                let last = stderr.lines().rev().find(|l| !l.trim().is_empty());
                let mut reason = last
                    .unwrap_or("it failed with no message")
                    .trim()
                    .to_owned();
                if reason.len() > MAX_REASON_BYTES {
                    let cut = reason.floor_char_boundary(MAX_REASON_BYTES);
                    reason.truncate(cut);
                }
                return Ok(Err(PreloadFailure {
                    module: module.clone(),
                    reason,
                }));
            }
        }
        Ok(Ok(instance))
    }

    /// An instance with the driver installed, whose `open` says where files live
    /// ([`files::open_shim_turn`]): every instance of the engine starts from it.
    async fn with_open(&self) -> Result<Instance, SandboxError> {
        let mut instance = Instance::with_driver(self).await?;
        let policy = Arc::new(ImportPolicy::with_extra(files::OPEN_SHIM_IMPORTS));
        let status = instance
            .driver_turn(&files::open_shim_turn(), &policy)
            .await?;
        let (_, stderr) = instance.take_output();
        if status != 0 {
            let stderr = String::from_utf8_lossy(&stderr);
            let e = wasmtime::format_err!("the file layer did not install: {}", stderr.trim());
            return Err(SandboxError::Setup(e));
        }
        Ok(instance)
    }

    /// `instance`'s memory as the pages that differ from `pristine`'s.
    fn capture(instance: &Instance, pristine: &Mutex<Instance>) -> Result<Snapshot, SandboxError> {
        let pristine = pristine.lock().unwrap_or_else(PoisonError::into_inner);
        let (Some(live), Some(base)) = (instance.memory(), pristine.memory()) else {
            let e = wasmtime::format_err!("the template instance has no memory");
            return Err(SandboxError::Setup(e));
        };
        let mut snapshot = Snapshot::default();
        snapshot.capture(live, base, pagemap::written(live).as_deref());
        Ok(snapshot)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_allowed_modules_of_the_data_stack_are_preloaded() {
        assert!(template_preloads(&ImportPolicy::default()).is_empty());
        let numpy = ImportPolicy::with_extra(["numpy", "json"]);
        assert_eq!(template_preloads(&numpy), ["numpy"]);
        let data = ImportPolicy::with_extra([ImportPolicy::DATA_STACK_ALIAS]);
        let all = template_preloads(&data);
        assert!(all.contains(&"matplotlib.pyplot".to_owned()), "{all:?}");
        assert!(!all.contains(&"matplotlib".to_owned()), "{all:?}");
        assert_eq!(all.len(), ImportPolicy::DATA_STACK.len());
        // A submodule allowed alone does not allow its package's import.
        assert!(template_preloads(&ImportPolicy::with_extra(["numpy.linalg"])).is_empty());
    }
}
