//! An instance's files: mounting `/data` and `/out` (see [`super::files`]), installing the
//! working `open`, and reading back what the code wrote.

use std::sync::Arc;

use wasmtime::Memory;

use super::files::{self, DATA_DIR, InputFiles, OUT_DIR};
use super::{Guest, Instance, RunOptions, Sandbox, SandboxError};
use crate::limits::Limits;
use crate::outcome::OutputFile;
use crate::policy::ImportPolicy;
use crate::vfs::Folder;

impl Instance {
    /// Serves `inputs` under `/data` and `folder` under `/out` from now on; with `rescan`, the
    /// guest scans for them at its next entry (a restored session's memory has them already).
    pub(crate) fn mount_files(
        &mut self,
        sandbox: &Sandbox,
        inputs: &InputFiles,
        folder: Folder,
        rescan: bool,
    ) -> Result<(), SandboxError> {
        sandbox.scan_flag()?;
        let tree = inputs.tree()?;
        let state = self.store.data_mut();
        state.files.mount_tree(DATA_DIR.into(), tree);
        state.files.mount(OUT_DIR.into(), folder);
        state.input_bytes = inputs.total_bytes();
        state.rescan = rescan;
        Ok(())
    }

    /// Swaps the served input files for `inputs` (mounted already): a session's next call.
    pub(crate) fn replace_inputs(&mut self, inputs: &InputFiles) -> Result<(), SandboxError> {
        let tree = inputs.tree()?;
        let state = self.store.data_mut();
        state.files.replace_tree(DATA_DIR, tree);
        state.input_bytes = inputs.total_bytes();
        Ok(())
    }

    /// Makes the CPython engine's `open` say where files live ([`files::open_shim`]), as a call
    /// of its own. The RustPython guest's `open` does so natively: nothing to do there.
    pub(crate) async fn install_open(
        &mut self,
        sandbox: &Sandbox,
        limits: &Limits,
    ) -> Result<(), SandboxError> {
        if let Guest::RustPython = sandbox.guest {
            return Ok(());
        }
        let options = RunOptions {
            limits: limits.clone(),
            policy: Arc::new(ImportPolicy::with_extra(files::OPEN_SHIM_IMPORTS)),
            ..RunOptions::default()
        };
        let call = self
            .call(sandbox, &files::open_shim(), "<files>", &options)
            .await?;
        if call.broken || call.result.is_failure() {
            let why = match call.result.error() {
                Some(e) => format!("{}: {}", e.kind, e.message),
                None => format!("{:?}", call.result.outcome),
            };
            let e = wasmtime::format_err!("the file layer did not install: {why}");
            return Err(SandboxError::Setup(e));
        }
        Ok(())
    }

    /// The files the code wrote under `/out`, in path order.
    pub(crate) fn output_files(&self) -> Vec<OutputFile> {
        let Some(folder) = self.store.data().files.folder() else {
            return Vec::new();
        };
        folder
            .files()
            .into_iter()
            .map(|(path, data)| OutputFile::new(&path, data))
            .collect()
    }

    /// A copy of `/out`, to restore into another instance (a session's undo state).
    pub(crate) fn folder(&self) -> Option<Folder> {
        self.store.data().files.folder().map(Folder::detached)
    }

    /// Clears the guest's record of its preopen scan if folders were mounted since, so that
    /// it scans again (see [`super::files`]).
    pub(super) fn rescan(&mut self, sandbox: &Sandbox, memory: Memory) -> wasmtime::Result<()> {
        if std::mem::take(&mut self.store.data_mut().rescan) {
            // Checked when the folders were mounted.
            let flag = sandbox.scan_flag()? as usize;
            let byte = memory
                .data_mut(&mut self.store)
                .get_mut(flag)
                .ok_or_else(|| wasmtime::format_err!("the preopen scan flag is out of memory"))?;
            *byte = 0;
        }
        Ok(())
    }
}
