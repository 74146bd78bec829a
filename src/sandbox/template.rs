//! An engine's template: the memory every fresh call and new session starts from, when the
//! engine prepares one ([`super::Guest::prepare`]; the CPython engine installs its driver and
//! imports the data stack the server allows, which takes over a second: done once here, not in
//! every call). It is kept as an image each new instance maps copy-on-write ([`super::cow`]), or
//! else as the pages that differ from a pristine instance. An engine without one starts each
//! fresh call from its module as compiled.

use std::iter::empty;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::cow::Image;
use super::instance::Instance;
use super::snapshot::Snapshot;
use super::{Sandbox, SandboxError, pagemap};
use crate::limits::Limits;

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

/// Memory a template's instance may take while it is made: a call sets its own limit.
const MAX: usize = Limits::MAX_MEMORY_BYTES;

impl Sandbox {
    /// Builds the engine's template if it is not built yet, and says what it holds; `None` for an
    /// engine without one (RustPython's compiled snapshot is its template). Front ends call it at
    /// start-up so that no call pays for it; otherwise the first fresh call builds it.
    pub async fn template(&self) -> Result<Option<TemplateInfo>, SandboxError> {
        Ok(self.built_template().await?.map(|t| t.info.clone()))
    }

    async fn built_template(&self) -> Result<Option<Arc<Template>>, SandboxError> {
        let template = self
            .template
            .get_or_try_init(|| async {
                let started = Instant::now();
                let Some(prepare) = self.guest.prepare(self) else {
                    return Ok(None);
                };
                let (instance, preloads) = prepare.await?;
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
                let (preloaded, failed) = match preloads {
                    Ok(preloaded) => (preloaded, None),
                    Err(failure) => (Vec::new(), Some(failure)),
                };
                let info = TemplateInfo {
                    preloaded,
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
                    "the engine's template is ready"
                );
                Ok::<_, SandboxError>(Some(Arc::new(Template { memory, info })))
            })
            .await?;
        Ok(template.clone())
    }

    /// An instance for one fresh call: one kept from an earlier call if any (see
    /// [`Self::recycle`]), otherwise [`Self::new_instance`].
    pub(crate) async fn fresh(&self) -> Result<Instance, SandboxError> {
        match self.spares.take().await {
            Some(kept) => Ok(kept),
            None => self.new_instance().await,
        }
    }

    /// A new instance of the engine's template, or of the module as compiled where it has none.
    /// A session starts on one rather than on a kept instance, whose pages that a call wrote and
    /// the reset put back it would compare again each time it records its state.
    pub(crate) async fn new_instance(&self) -> Result<Instance, SandboxError> {
        match self.built_template().await?.as_deref() {
            Some(Template {
                memory: Memory::Image { image, .. },
                ..
            }) => Instance::with_image(self, MAX, image, 0, empty()).await,
            Some(Template {
                memory: Memory::Pages(t),
                ..
            }) => Instance::with_memory(self, MAX, t.len, t.pages()).await,
            None => Instance::new(self),
        }
    }

    /// The template's image, once built, where fresh instances map it (and so are kept, see
    /// [`Self::recycle`]).
    pub(super) fn template_image(&self) -> Option<&Image> {
        match &self.template.get()?.as_deref()?.memory {
            Memory::Image { image, .. } => Some(image),
            Memory::Pages(_) => None,
        }
    }

    /// Takes back `instance`, made by [`Self::fresh`], after a call that returned normally: where
    /// the template is mapped, it is reset and kept for the next fresh call ([`super::recycle`]).
    pub(crate) fn recycle(&self, instance: Instance) {
        if let Some(image) = self.template_image() {
            self.spares.put(instance, image, self);
        }
    }

    /// The instance a session's snapshots are taken against: the template where it is mapped,
    /// otherwise (and for an engine without a template) a pristine one.
    pub(crate) async fn session_base(&self) -> Result<Arc<Mutex<Instance>>, SandboxError> {
        if let Some(template) = self.built_template().await?
            && let Memory::Image { base, .. } = &template.memory
        {
            return Ok(base.clone());
        }
        self.pristine().await
    }

    #[cfg_attr(not(feature = "store"), allow(dead_code))]
    /// What a session's snapshot means something against: this server's version and the memory of
    /// [`Self::session_base`], hashed once. Two servers agree on it when a snapshot taken by one
    /// restores to the same state on the other (a session moved through a store).
    pub(crate) async fn session_fingerprint(&self) -> Result<[u8; 32], SandboxError> {
        let hash = self
            .fingerprint
            .get_or_try_init(|| async {
                let base = self.session_base().await?;
                let base = base.lock().unwrap_or_else(PoisonError::into_inner);
                let mut hasher = blake3::Hasher::new();
                hasher.update(env!("CARGO_PKG_VERSION").as_bytes());
                hasher.update(&[0]);
                hasher.update_rayon(base.memory().unwrap_or_default());
                Ok::<_, SandboxError>(*hasher.finalize().as_bytes())
            })
            .await?;
        Ok(*hash)
    }

    /// A new instance holding `snapshot`, taken against [`Self::session_base`]: a session's
    /// rollback.
    pub(crate) async fn restore(
        &self,
        memory_bytes: usize,
        snapshot: &Snapshot,
    ) -> Result<Instance, SandboxError> {
        let (len, pages) = (snapshot.len, snapshot.pages());
        if let Some(template) = self.built_template().await?
            && let Memory::Image { image, .. } = &template.memory
        {
            return Instance::with_image(self, memory_bytes, image, len, pages).await;
        }
        Instance::with_memory(self, memory_bytes, len, pages).await
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
