//! How `safe-python-mcp` ends when its client does not say goodbye: stdin closed at each stage of
//! a session, and SIGTERM or SIGINT in the middle of a run. Every way out is prompt and exits 0,
//! with stdout carrying nothing but whole JSON-RPC messages.
//!
//! (A client that closes stdin during a run is in `tests/it/mcp.rs`: rmcp gives the run 5 s first.)

#![cfg(unix)]

use crate::common;

use std::time::Duration;

use common::raw::Raw;
use serde_json::json;

/// How long a server with nothing in flight may take to notice and exit. Generous: this tells
/// "exits" from "hangs", it does not measure speed.
const EXIT_WITHIN: Duration = Duration::from_secs(5);

#[track_caller]
fn assert_exits_0(raw: &mut Raw, what: &str) {
    let status = raw
        .wait_exit(EXIT_WITHIN)
        .unwrap_or_else(|| panic!("{what}: the server is still running after {EXIT_WITHIN:?}"));
    assert!(status.success(), "{what}: {status:?}");
    raw.rest();
}

/// Over pipes and over sockets alike, the server reads and writes stdio on its runtime's own
/// threads (`mcp::stdio`): a call fresh and in a session, then stdin closed.
#[test]
fn stdio_on_pipes_or_sockets_serves_calls_and_ends_when_the_client_closes_it() {
    for mut raw in [Raw::start(), Raw::start_on_sockets()] {
        raw.initialize();
        if cfg!(target_os = "linux") {
            assert_eq!(raw.stdio_nonblocking(), [true, true]);
        }
        calls_then_stdin_closed(raw);
    }
}

fn calls_then_stdin_closed(mut raw: Raw) {
    raw.run_python(2, json!({"code": "print(6 * 7)", "session": "new"}), None);
    let reply = raw.response(2);
    assert_eq!(reply["result"]["structuredContent"]["stdout"], "42\n");
    let session = reply["result"]["structuredContent"]["session"]["id"].clone();
    raw.run_python(3, json!({"code": "x = 1 + 1\nx", "session": session}), None);
    assert_eq!(
        raw.response(3)["result"]["structuredContent"]["result"],
        "2"
    );
    raw.close_stdin();
    assert_exits_0(&mut raw, "stdin closed after calls");
}

#[test]
fn stdin_closed_before_initialize() {
    let mut raw = Raw::start();
    raw.close_stdin();
    assert_exits_0(&mut raw, "stdin closed before initialize");
}

#[test]
fn stdin_closed_right_after_initialize() {
    let mut raw = Raw::start();
    raw.initialize();
    raw.close_stdin();
    assert_exits_0(&mut raw, "stdin closed after initialize");
}

#[test]
fn stdin_closed_while_idle_after_a_call() {
    let mut raw = Raw::start();
    raw.initialize();
    raw.run_python(2, json!({"code": "6 * 7"}), None);
    assert_eq!(
        raw.response(2)["result"]["structuredContent"]["result"],
        "42"
    );
    raw.close_stdin();
    assert_exits_0(&mut raw, "stdin closed while idle");
}

/// A signal while a run that would go on for a minute is in progress: the run is stopped and the
/// server exits 0 at once, as a server asked to stop does.
fn signal_during_a_run(signal: libc::c_int) {
    let mut raw = Raw::start_with(
        &common::cache_dir(),
        &["--timeout", "60", "--fuel", "10000000000000"],
    );
    raw.initialize();
    raw.run_python(
        2,
        json!({"code": "print('running', flush=True)\nwhile True: pass"}),
        Some("p"),
    );
    // The run has started once its first output arrives.
    raw.message(|v| {
        v["method"] == "notifications/progress"
            && v["params"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("running"))
    });
    common::signal(raw.pid(), signal);
    assert_exits_0(&mut raw, &format!("signal {signal} during a run"));
}

#[test]
fn sigterm_during_a_run_stops_it_and_exits_0() {
    signal_during_a_run(libc::SIGTERM);
}

#[test]
fn sigint_during_a_run_stops_it_and_exits_0() {
    signal_during_a_run(libc::SIGINT);
}
