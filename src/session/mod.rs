//! A session: one guest instance kept across calls, so that globals persist as in a notebook, and
//! put back to its state from before a call whenever that call is stopped.
//!
//! Between calls, an instance's whole state is its linear memory (the protocol's notes on sessions
//! say why). After a call that returned normally, the session records its memory as a
//! [`Snapshot`]: the pages that differ from those of a fresh instance. A call that hits a limit,
//! traps or is cancelled leaves the instance unusable or half-changed; the session then makes a new
//! instance and writes the snapshot into it, which is exactly the state from before that call.
//!
//! Files are the one state outside linear memory: the input files under `/data` and the folder
//! the code writes, `/out`, both held by the host. The session keeps them beside its snapshot
//! (the folder's bytes shared until written), restores them with it, and they count against the
//! memory limit of each call (see [`crate::sandbox::files`]).
//! [`registry`] keeps many sessions behind private handles, within bounds, for the MCP server and
//! the REPL.
//!
//! What a session holds, at most: its instance's linear memory (no larger than the memory limit)
//! plus its snapshot, whose saved pages never exceed that memory's size, and whose index adds 16
//! bytes per saved 4 KiB page (0.4 %). A rollback drops the broken instance before it builds the
//! new one, so the two never coexist; the page writes of a rollback and the freeing of the broken
//! instance run on a blocking thread, not on an async worker.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

mod handle;
pub mod registry;
pub mod store;

use crate::outcome::RunResult;
use crate::sandbox::files::{self, InputFiles};
use crate::sandbox::pagemap::{self, PAGE};
use crate::sandbox::snapshot::Snapshot;
use crate::sandbox::{Instance, RunOptions, Sandbox, SandboxError};
use crate::vfs::Folder;

/// A run of code in a session: how it went, and what became of the session.
#[derive(Debug)]
pub struct SessionRun {
    pub result: RunResult,
    /// Which call of the session this was, counting from 1.
    pub call: u64,
    /// The call was stopped (a limit, a trap) and the session was put back to its state from
    /// before it: nothing the call did was kept, though its output is reported.
    pub rolled_back: bool,
}

/// An interpreter whose `__main__` lives from one call to the next.
pub struct Session {
    sandbox: Sandbox,
    /// An instance as a fresh call starts with, never run, whose memory snapshots are taken
    /// against (see [`Sandbox::session_base`]).
    pristine: Arc<Mutex<Instance>>,
    instance: Instance,
    /// Shared only with a rollback in progress, whose thread writes it into the new instance.
    snapshot: Arc<Snapshot>,
    state: State,
    calls: u64,
    /// The memory cap of the latest call, for the instance a restore makes.
    memory_bytes: usize,
    /// The input files, once a call gave some (the file system is on from then on).
    inputs: Option<InputFiles>,
    /// The input files and `/out` as they were when the snapshot was taken.
    saved_files: Option<(InputFiles, Folder)>,
    #[cfg_attr(not(feature = "store"), allow(dead_code))]
    /// Which version of the session in the store ([`store`]) the snapshot is: 0 when none.
    version: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// At rest, and the snapshot holds this state.
    Saved,
    /// At rest, but the last call changed memory since the snapshot.
    Unsaved,
    /// A call did not finish (it was cancelled, or the host failed): restore before going on.
    Interrupted,
}

impl Session {
    /// An empty session, on a new instance (RustPython's is instantiated by its first call;
    /// CPython's starts from the engine's template, its driver installed).
    pub async fn new(sandbox: &Sandbox) -> Result<Session, SandboxError> {
        Ok(Session {
            pristine: sandbox.session_base().await?,
            instance: sandbox.new_instance().await?,
            sandbox: sandbox.clone(),
            snapshot: Arc::default(),
            state: State::Saved,
            calls: 0,
            memory_bytes: 0,
            inputs: None,
            saved_files: None,
            version: 0,
        })
    }

    #[cfg_attr(not(feature = "store"), allow(dead_code))]
    /// A session in the state a store kept ([`store::format`]), restored by its next call.
    pub(crate) async fn from_state(
        sandbox: &Sandbox,
        state: store::format::State,
    ) -> Result<Session, SandboxError> {
        Ok(Session {
            pristine: sandbox.session_base().await?,
            // Never run: the next call's [`Session::recover`] replaces it.
            instance: Instance::new(sandbox)?,
            sandbox: sandbox.clone(),
            snapshot: Arc::new(state.snapshot),
            state: State::Interrupted,
            calls: 0,
            memory_bytes: 0,
            inputs: None,
            saved_files: state.files,
            version: 0,
        })
    }

    /// The state a store keeps, as of the last [`Session::save`]: the snapshot, and the files.
    #[cfg_attr(not(feature = "store"), allow(dead_code))]
    pub(crate) fn saved(&self) -> (&Snapshot, Option<&(InputFiles, Folder)>) {
        (&self.snapshot, self.saved_files.as_ref())
    }

    /// Runs `code` in this session's `__main__`. A Python exception keeps whatever the code did
    /// before raising, as Python does; a limit, a trap or an exit undoes the whole call.
    ///
    /// Dropping the future mid-run is allowed: the session is then restored before its next call
    /// (or by [`Session::recover`]).
    pub async fn run(
        &mut self,
        code: &str,
        options: &RunOptions,
    ) -> Result<SessionRun, SandboxError> {
        self.memory_bytes = options.limits.memory_bytes;
        self.recover().await?;
        self.save();
        // After the save: a call that is undone takes the files it brought with it.
        if let Some(files) = &options.files {
            self.add_files(files)?;
        }
        self.calls += 1;
        let filename = format!("<call {}>", self.calls);
        self.state = State::Interrupted;
        let call = self
            .instance
            .call(&self.sandbox, code, &filename, options)
            .await?;
        let rolled_back = call.broken || call.result.limit().is_some();
        if rolled_back {
            self.restore().await?;
        } else {
            self.state = State::Unsaved;
        }
        let mut result = call.result;
        result.files = self.instance.output_files();
        Ok(SessionRun {
            result,
            call: self.calls,
            rolled_back,
        })
    }

    /// Adds `files` to the session's input files; the first time, mounts them and `/out`.
    fn add_files(&mut self, files: &InputFiles) -> Result<(), SandboxError> {
        if let Some(inputs) = &mut self.inputs {
            let mut merged = inputs.clone();
            merged.merge(files)?;
            self.instance.replace_inputs(&merged)?;
            *inputs = merged;
            return Ok(());
        }
        let folder = files::new_folder(files);
        self.instance
            .mount_files(&self.sandbox, files, folder, true)?;
        self.inputs = Some(files.clone());
        Ok(())
    }

    /// Restores the session if a call was left unfinished; otherwise does nothing.
    pub async fn recover(&mut self) -> Result<(), SandboxError> {
        if self.state == State::Interrupted {
            self.restore().await?;
        }
        Ok(())
    }

    /// Records the current state as the one to go back to if the next call is stopped. Each call
    /// does it first when needed; doing it as soon as a call is answered takes it off the next
    /// call's path. It compares the pages the instance wrote (on Linux; elsewhere, all of them)
    /// with a fresh instance's, and copies those that differ.
    pub fn save(&mut self) {
        if self.state != State::Unsaved {
            return;
        }
        let started = Instant::now();
        self.saved_files = self.inputs.clone().zip(self.instance.folder());
        let pristine = self.pristine.lock().unwrap_or_else(PoisonError::into_inner);
        let (Some(live), Some(base)) = (self.instance.memory(), pristine.memory()) else {
            // Never instantiated: a fresh instance is the state to go back to.
            self.snapshot = Arc::default();
            self.state = State::Saved;
            return;
        };
        // A rollback that was given up may still hold the old snapshot: start a new one then.
        if Arc::get_mut(&mut self.snapshot).is_none() {
            self.snapshot = Arc::default();
        }
        let snapshot = Arc::get_mut(&mut self.snapshot).expect("not shared");
        snapshot.capture(live, base, pagemap::written(live).as_deref());
        self.state = State::Saved;
        tracing::debug!(
            memory = live.len(),
            saved = snapshot.offsets.len() * PAGE,
            micros = started.elapsed().as_micros() as u64,
            "session snapshot"
        );
    }

    /// Makes a new instance holding the snapshot's state, on a blocking thread: the broken
    /// instance is freed first, then the pages are written. The session stays marked unfinished
    /// until this completes, so a rollback that is dropped midway is done again by the next call.
    async fn restore(&mut self) -> Result<(), SandboxError> {
        let started = Instant::now();
        let broken = std::mem::replace(&mut self.instance, Instance::new(&self.sandbox)?);
        let snapshot = self.snapshot.clone();
        let sandbox = self.sandbox.clone();
        let memory_bytes = self.memory_bytes;
        let runtime = tokio::runtime::Handle::current();
        let restored = tokio::task::spawn_blocking(move || {
            drop(broken);
            if snapshot.len == 0 {
                return Instance::new(&sandbox);
            }
            runtime.block_on(sandbox.restore(memory_bytes, &snapshot))
        })
        .await;
        self.instance = match restored {
            Ok(instance) => instance?,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => {
                let e = wasmtime::Error::msg(format!("the rollback stopped: {e}"));
                return Err(SandboxError::Setup(e));
            }
        };
        self.inputs = None;
        if let Some((inputs, folder)) = &self.saved_files {
            // The restored memory has scanned for these folders already.
            self.instance
                .mount_files(&self.sandbox, inputs, folder.detached(), false)?;
            self.inputs = Some(inputs.clone());
        }
        self.state = State::Saved;
        tracing::debug!(
            micros = started.elapsed().as_micros() as u64,
            "session restored"
        );
        Ok(())
    }

    /// Calls made so far, stopped ones included.
    pub fn calls(&self) -> u64 {
        self.calls
    }

    /// Size of the session's linear memory, in bytes.
    pub fn memory_bytes(&self) -> usize {
        self.memory().map_or(0, <[u8]>::len)
    }

    /// The interpreter's linear memory: the session's whole state between calls. `None` before
    /// its first call.
    pub fn memory(&self) -> Option<&[u8]> {
        self.instance.memory()
    }

    /// Bytes the session keeps to undo a call: the pages of its snapshot.
    pub fn snapshot_bytes(&self) -> usize {
        self.snapshot.held_bytes()
    }
}
