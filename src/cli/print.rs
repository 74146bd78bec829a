//! What a run shows: the code's output live, then its result or what stopped it. All of it can be
//! the code's own text, so all of it goes through [`terminal`], escaped on a terminal.

use std::sync::Arc;

use super::terminal;
use crate::outcome::{Limit, Outcome, RunResult};
use crate::output::{OutputObserver, Stream};
use crate::policy::ImportPolicy;

/// Streams the code's output to this process's stdout and stderr as it is written.
pub(super) fn terminal_observer() -> OutputObserver {
    Arc::new(terminal::write)
}

/// After the live output: the result value, or what stopped the code, with the flag that would
/// have let it go on where there is one. All of it can be the code's text (a `__repr__`, an
/// exception's message), so it goes out as the live output does.
pub(super) fn print_plain(result: &RunResult, policy: &ImportPolicy) {
    terminal::finish();
    if !result.stdout.is_empty() && !result.stdout.ends_with('\n') && result.result().is_some() {
        terminal::write(Stream::Stdout, b"\n");
    }
    if let Some(value) = result.result() {
        terminal::write(Stream::Stdout, format!("{value}\n").as_bytes());
    }
    if let Some(error) = result.error() {
        let newline = if error.traceback.ends_with('\n') {
            ""
        } else {
            "\n"
        };
        terminal::write(
            Stream::Stderr,
            format!("{}{newline}", error.traceback).as_bytes(),
        );
    }
    let stopped = match &result.outcome {
        Outcome::Raised(error) => match policy.refused_in(error) {
            Some(module) if policy.denies(module) => {
                format!("sandbox-run: {module} is refused by --deny (or SAFE_PYTHON_DENY)\n")
            }
            Some(module) => format!("sandbox-run: to allow it, add `--allow {module}`\n"),
            None => return,
        },
        Outcome::LimitReached { limit, .. } => format!(
            "sandbox-run: limit reached ({}): {}{}\n",
            limit.as_str(),
            limit.explain(),
            raised_by(*limit)
        ),
        Outcome::Trapped { message } => {
            format!("sandbox-run: the interpreter trapped: {message}\n")
        }
        _ => return,
    };
    terminal::write(Stream::Stderr, stopped.as_bytes());
}

/// The flag that raises `limit`, as advice to append to its sentence.
fn raised_by(limit: Limit) -> &'static str {
    match limit {
        Limit::Timeout => " To allow longer: --timeout SECS.",
        Limit::Fuel => " To allow more: --fuel N, or --fuel off.",
        Limit::Memory => " To allow more: --memory MIB.",
        Limit::Output => " To allow more: --max-output BYTES.",
        // The interpreter's own stack: no flag changes it.
        Limit::Stack => "",
    }
}
