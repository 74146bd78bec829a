//! An instance's files: mounting `/data` and `/out` (see [`super::files`]) and reading back what
//! the code wrote. `open` works on them as it is: natively on RustPython, and through the shim
//! in the CPython engine's template ([`super::files::open_shim_turn`]).

use wasmtime::Memory;

use super::files::{DATA_DIR, InputFiles, OUT_DIR};
use super::{Instance, Sandbox, SandboxError};
use crate::outcome::OutputFile;
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
