//! How calls enter the CPython reactor: as turns of source text, the first of every instance
//! installing the driver ([`door::DRIVER`]), then one turn of [`door::RUN_TURN`] per call. The
//! driver's own turns, which prepare the template, run here too.

use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::{Memory, Store, TypedFunc};

use super::door;
use crate::policy::ImportPolicy;
use crate::sandbox::host::HostState;
use crate::sandbox::{BoxFuture, Entry, Instance, Sandbox, SandboxError};

/// How long a driver turn may wait in the host (for randomness, say): it runs the server's own
/// imports, not user code, so this only keeps a broken one from hanging there.
const DRIVER_TURN_TIME: Duration = Duration::from_secs(600);

/// The reactor's exports that run a turn, and whether the instance's memory holds the driver.
pub(super) struct Turns {
    turn: TypedFunc<(i32, i32), i32>,
    alloc: TypedFunc<i32, i32>,
    driver_installed: bool,
}

impl Turns {
    /// The turns of `instance`, whose driver is not installed yet.
    pub(super) fn new(
        instance: &wasmtime::Instance,
        store: &mut Store<HostState>,
    ) -> wasmtime::Result<Turns> {
        Ok(Turns {
            turn: instance.get_typed_func(&mut *store, door::TURN)?,
            alloc: instance.get_typed_func(&mut *store, door::ALLOC)?,
            driver_installed: false,
        })
    }

    /// One turn of the reactor: `source` copied into memory it allocates, then run; its exit
    /// status (0 when the source ran without an uncaught exception, which it prints on stderr).
    async fn turn(
        &self,
        store: &mut Store<HostState>,
        memory: Memory,
        source: &str,
    ) -> wasmtime::Result<i32> {
        let len = i32::try_from(source.len())?;
        let at = self.alloc.call_async(&mut *store, len).await?;
        if at == 0 {
            wasmtime::bail!("the guest could not allocate {len} bytes for a turn");
        }
        memory.write(&mut *store, at as u32 as usize, source.as_bytes())?;
        self.turn.call_async(&mut *store, (at, len)).await
    }

    /// Runs the driver's turn, which every later call's turn relies on.
    async fn install_driver(
        &mut self,
        store: &mut Store<HostState>,
        memory: Memory,
    ) -> wasmtime::Result<()> {
        let status = self.turn(store, memory, door::DRIVER).await?;
        if status != 0 {
            wasmtime::bail!(
                "the CPython engine's driver failed to start (status {status}); its stderr says why"
            );
        }
        self.driver_installed = true;
        Ok(())
    }
}

impl Entry for Turns {
    fn call<'a>(
        &'a mut self,
        store: &'a mut Store<HostState>,
        memory: Memory,
    ) -> BoxFuture<'a, wasmtime::Result<()>> {
        Box::pin(async move {
            if !self.driver_installed {
                self.install_driver(store, memory).await?;
            }
            // A failed turn sends no report, which is how the call is judged.
            self.turn(store, memory, door::RUN_TURN).await.map(drop)
        })
    }

    /// Memory restored into an instance holds the driver: it is the template's, or a session's
    /// after a call that completed.
    fn restored(&mut self) {
        self.driver_installed = true;
    }
}

/// `instance`'s turns and memory: it must have been instantiated.
fn turns(instance: &mut Instance) -> Result<(Turns, Memory), SandboxError> {
    let Some((handle, memory)) = instance.exports() else {
        let e = wasmtime::format_err!("a driver turn needs an instantiated instance");
        return Err(SandboxError::Setup(e));
    };
    let turns = Turns::new(&handle, &mut instance.store).map_err(SandboxError::Setup)?;
    Ok((turns, memory))
}

/// A new instance whose driver is installed and which has run no call: what the template is
/// built on. Its budget is instantiation's, and its output is dropped.
pub(super) async fn with_driver(sandbox: &Sandbox) -> Result<Instance, SandboxError> {
    // The template is made from it: the same memory on every replica (see the function).
    let mut instance = Instance::reproducible(sandbox).await?;
    instance.store.data().sink.begin(usize::MAX, None);
    let (mut turns, memory) = turns(&mut instance)?;
    turns
        .install_driver(&mut instance.store, memory)
        .await
        .map_err(SandboxError::Setup)?;
    Ok(instance)
}

/// A turn of the driver's own on `instance`, whose driver is installed (not a call: no request,
/// no `__main__`), with instantiation's budget, the imports it makes judged by `policy` (a turn's
/// code is not the driver's): its exit status. Its output stays in the instance's sink until
/// [`Instance::take_output`].
pub(super) async fn driver_turn(
    instance: &mut Instance,
    source: &str,
    policy: &Arc<ImportPolicy>,
) -> Result<i32, SandboxError> {
    let state = instance.store.data_mut();
    state.policy = policy.clone();
    state.deadline = Instant::now() + DRIVER_TURN_TIME;
    let (turns, memory) = turns(instance)?;
    turns
        .turn(&mut instance.store, memory, source)
        .await
        .map_err(SandboxError::Setup)
}
