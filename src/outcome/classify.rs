//! How a call ended, from what the host knows: the error a call that did not return ended with,
//! or, for one that returned, the host's own records of the call and the report the guest sent.
//! The records come in as plain facts ([`HostRecords`]), so this module knows nothing of the
//! sandbox that keeps them: another engine can hand in the same facts.

use safe_python_protocol::Report;
use wasmtime::Trap;
use wasmtime_wasi::I32Exit;

use super::{Limit, Outcome, PythonError};
use crate::output::OutputLimitReached;

/// What the host recorded during a call that returned normally.
#[derive(Debug, Clone, Copy)]
pub struct HostRecords<'a> {
    /// The report the guest sent, unread and untrusted; `None` if it sent none it could accept.
    pub report: Option<&'a [u8]>,
    /// The largest report this call accepted.
    pub report_limit: u32,
    /// The size of a report over `report_limit`, which was not read.
    pub report_too_large: Option<u32>,
    /// How the guest broke the protocol, if it did.
    pub protocol_fault: Option<&'a str>,
    /// The memory limiter refused to grow memory at some point of the call.
    pub memory_denied: bool,
}

/// How a call that returned normally ended: a protocol fault is a trap, an oversized report the
/// output limit, and a report is decoded; an exception raised after the limiter refused memory is
/// the memory limit, whatever the exception's class is called.
pub fn returned(records: &HostRecords<'_>) -> Outcome {
    if let Some(fault) = records.protocol_fault {
        return trapped(fault);
    }
    if let Some(len) = records.report_too_large {
        return Outcome::LimitReached {
            limit: Limit::Output,
            error: Some(PythonError {
                kind: "ReportTooLarge".into(),
                message: format!(
                    "the run's report ({len} bytes) is larger than the {} bytes this call \
                     accepts, so none of it was kept (result, exception or traceback)",
                    records.report_limit
                ),
                traceback: String::new(),
            }),
        };
    }
    match (records.report, records.memory_denied) {
        (None, _) => trapped("the guest returned without reporting"),
        (Some(bytes), true) => match decode_report(bytes) {
            Outcome::Raised(error) => Outcome::LimitReached {
                limit: Limit::Memory,
                error: Some(error),
            },
            other => other,
        },
        (Some(bytes), false) => decode_report(bytes),
    }
}

/// How a run that returned normally ended, from the bytes its guest reported. The bytes are
/// untrusted: whatever they hold, the answer is an outcome (a malformed report is a guest fault,
/// [`Outcome::Trapped`]), never a panic. An exception is only an exception here, whatever its
/// name: whether memory ran out is the host's own record (see [`returned`]).
pub fn decode_report(bytes: &[u8]) -> Outcome {
    match serde_json::from_slice::<Report>(bytes) {
        Ok(Report {
            error: Some(error), ..
        }) => Outcome::Raised(error),
        Ok(Report {
            result,
            error: None,
        }) => Outcome::Completed { result },
        Err(e) => trapped(&format!("the guest sent a malformed report: {e}")),
    }
}

/// How a call that did not return ended, from its error and whether the memory limiter refused
/// to grow memory during it.
pub fn trap(err: &wasmtime::Error, memory_denied: bool) -> Outcome {
    let limit = |limit| Outcome::LimitReached { limit, error: None };
    if err.downcast_ref::<OutputLimitReached>().is_some() {
        return limit(Limit::Output);
    }
    if let Some(exit) = err.downcast_ref::<I32Exit>() {
        return Outcome::Raised(PythonError {
            kind: "SystemExit".into(),
            message: exit.0.to_string(),
            traceback: format!("the process exited with status {}\n", exit.0),
        });
    }
    match err.downcast_ref::<Trap>() {
        Some(Trap::OutOfFuel) => limit(Limit::Fuel),
        Some(Trap::StackOverflow) => limit(Limit::Stack),
        Some(Trap::Interrupt) => limit(Limit::Timeout),
        // The guest's allocator aborts (an `unreachable`) when memory cannot grow; instantiation
        // fails outright when even the initial memory is over the cap.
        _ if memory_denied => limit(Limit::Memory),
        _ => trapped(&format!("{err:#}")),
    }
}

fn trapped(message: &str) -> Outcome {
    Outcome::Trapped {
        message: message.to_owned(),
    }
}
