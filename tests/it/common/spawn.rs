//! The one place that starts the binaries under test, as ripgrep's `TestCommand` does: each
//! command carries the suite's shared module cache, so no test compiles the guest again, and a
//! test adds its own flags, environment and working directory on top.

use std::io::Write;
use std::process::{Command, Output, Stdio};

pub const MCP: &str = env!("CARGO_BIN_EXE_safe-python-mcp");
pub const SANDBOX_RUN: &str = env!("CARGO_BIN_EXE_sandbox-run");

/// `safe-python-mcp` with `args`, the suite's module cache and warnings only on its stderr.
pub fn mcp_server(args: &[&str]) -> Command {
    let mut command = Command::new(MCP);
    command
        .args(args)
        .env("SAFE_PYTHON_CACHE_DIR", super::cache_dir())
        .env("SAFE_PYTHON_LOG", "warn");
    command
}

/// `sandbox-run` with `args` and the suite's module cache.
pub fn sandbox_run(args: &[&str]) -> Command {
    let mut command = Command::new(SANDBOX_RUN);
    command
        .args(args)
        .env("SAFE_PYTHON_CACHE_DIR", super::cache_dir());
    command
}

/// Runs `command` to its end with `stdin` as its input (none: `/dev/null`), capturing its output.
pub fn output(mut command: Command, stdin: Option<&str>) -> Output {
    let mut child = command
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{command:?} does not start: {e}"));
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
    }
    child.wait_with_output().unwrap()
}
