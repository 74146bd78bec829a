//! The CPython engine's door, `host.call`: one frame per protocol step (see
//! `safe_python_protocol::cpython`). It answers from the same host state, with the same rules, as
//! the RustPython guest's imports in [`super::host`]: the request, the import policy, the report.

use safe_python_protocol::{self as protocol, cpython::door};
use wasmtime::{Caller, Extern, Linker};

use super::SandboxError;
use super::host::{HostState, memory, read_guest};

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
                match answer(&mut caller, ptr, len)? {
                    Some(bytes) => deliver(&mut caller, &bytes, out_ptr, out_len).await,
                    None => Ok(REFUSED),
                }
            })
        },
    )?;
    Ok(())
}

/// The answer to the frame of `len` bytes at `ptr`; `None` refuses it. A frame the guest could
/// not have sent in good faith (outside its memory, an unknown opcode) is a protocol fault.
fn answer(
    caller: &mut Caller<'_, HostState>,
    ptr: i32,
    len: i32,
) -> wasmtime::Result<Option<Vec<u8>>> {
    let Some(payload_len) = u32::try_from(len).ok().and_then(|l| l.checked_sub(1)) else {
        return Ok(None);
    };
    let op = read_guest(caller, ptr, 1, 1)?[0];
    let payload = (ptr as u32).wrapping_add(1) as i32;
    Ok(Some(match op {
        door::REQUEST => caller.data().request.clone(),
        door::IMPORT_ALLOWED => {
            // A name too long to be one is refused unread: an `ImportError`, not a fault.
            let allowed = payload_len <= protocol::MAX_MODULE_NAME_BYTES && {
                let name = read_guest(
                    caller,
                    payload,
                    payload_len as i32,
                    protocol::MAX_MODULE_NAME_BYTES,
                )?;
                caller.data().import_allowed(&name)
            };
            vec![if allowed { b'1' } else { b'0' }]
        }
        door::REPORT => {
            if caller.data_mut().report_fits(payload_len) {
                let limit = caller.data().report_limit;
                match read_guest(caller, payload, payload_len as i32, limit) {
                    Ok(bytes) => caller.data_mut().report = Some(bytes),
                    Err(e) => caller.data_mut().protocol_fault = Some(format!("{e:#}")),
                }
            }
            Vec::new()
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
