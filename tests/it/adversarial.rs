//! The adversarial suite: every case in `tests/adversarial/cases.json` runs through the real MCP
//! server, and for every case the sandbox must hold:
//!
//! - the call ends within the timeout plus [`SLACK`], with the outcome the case expects;
//! - the server answers the next call;
//! - a canary environment variable set for the server never appears in any output;
//! - no host file content appears;
//! - the canary file in the server's working directory is untouched, and no file appears;
//! - the reply, text and structured content together as the client received them, serialises
//!   within the server's `--max-output` plus its fixed overhead (`REPLY_OVERHEAD_BYTES`).
//!
//! Cases marked `open_server` run against a server that allows importing os, sys, io, socket and
//! more: the allowlist is policy, the WebAssembly boundary is what must hold. The suite runs twice:
//! fresh, and with each case in a session of its own (started with `"new"`) holding state, which
//! must still hold it after the case; no reply may carry another case's session handle.
//!
//! The cases live in `tests/adversarial/*.json`, one file per class of attack (`cases.json` holds the
//! first corpus). To add a case, append `{"name", "code", "expect"}` to its class's file. `expect` is `completed`,
//! `error`, `error:<ExceptionType>`, `limit`, `limit:<timeout|fuel|memory|output|stack>`, `refused`
//! (a tool error before anything ran, as for code over the size limit), or `any`. A case with
//! `"repeat": N` sends its `code` N times over, for sources too big to keep in the file. A case with
//! `"session": "<value>"` sends that as its `session` argument in both passes (a guessed or forged
//! handle, say) instead of none or the pass's own handle. A case with `"cpython": {"expect",
//! "because"}` expects otherwise on the CPython engine, where its behaviour is legitimately
//! different (another exception type, a guarantee only RustPython's native driver gives); the
//! reason is mandatory. Both passes run on both engines.
//!
//! Below the suite, the attacks on sessions that a case file cannot express: handles taken from
//! another server, changed by one character, or used after their session was reset, expired or
//! evicted; eviction with busy sessions; and what the server reveals of other callers' sessions.

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::client::{
    Began, Client, connect, handle_in, new_session, refused, run_python, run_python_with,
    session_call, text,
};
use common::{Each, Engine};
use rmcp::ClientHandler;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use safe_python_executor::mcp::REPLY_OVERHEAD_BYTES;
use serde::Deserialize;
use serde_json::{Value, json};

/// The timeout of the servers that run the cases expected to time out (or to hit any limit): short,
/// so that the suite stays quick.
const TIMEOUT_SECS: u64 = 3;
/// The timeout of the servers that run every other case. Some cases do seconds of legitimate work
/// before the outcome they expect (a dict that grows to the memory limit, a 10 MB source); on a
/// loaded 2-core machine the short timeout would end them first and the test would fail for
/// nothing the sandbox did.
const PATIENT_TIMEOUT_SECS: u64 = 30;
/// How long after its timeout a call may end: the stop itself, undoing a session, and a megabyte
/// of source or reply through JSON, on a loaded machine.
const SLACK: Duration = Duration::from_secs(2);
/// The servers' `--max-output`.
const MAX_OUTPUT: usize = 65536;
const CANARY_ENV: &str = "SAFE_PYTHON_CANARY";
const CANARY_VALUE: &str = "canary-9f3b1c-never-visible";
const CANARY_FILE: &str = "canary.txt";
const CANARY_CONTENT: &str = "canary file content 7d2e";
const OPEN_MODULES: &str = "os,sys,io,pathlib,subprocess,socket,urllib,ctypes,builtins,importlib";

#[derive(Debug, Deserialize)]
struct Case {
    name: String,
    code: String,
    expect: String,
    #[serde(default)]
    open_server: bool,
    #[serde(default)]
    repeat: Option<usize>,
    #[serde(default)]
    session: Option<String>,
    /// Where CPython legitimately behaves otherwise than RustPython (another exception type, a
    /// guarantee only RustPython's native driver gives), what to expect of it there, and why.
    #[serde(default)]
    cpython: Option<Differs>,
}

#[derive(Debug, Deserialize)]
struct Differs {
    expect: String,
    because: String,
}

impl Case {
    fn source(&self) -> String {
        self.code.repeat(self.repeat.unwrap_or(1))
    }

    /// Whether the case may run out of time by design, and so runs with the short timeout.
    fn may_time_out(&self, engine: Engine) -> bool {
        matches!(self.expect(engine), "any" | "limit" | "limit:timeout")
    }

    fn expect(&self, engine: Engine) -> &str {
        match (engine, &self.cpython) {
            (Engine::CPython, Some(differs)) => &differs.expect,
            _ => &self.expect,
        }
    }
}

async fn server(dir: &Path, engine: Engine, extra: &[&str]) -> Client {
    server_with_timeout((), dir, engine, TIMEOUT_SECS, extra).await
}

async fn server_with_timeout<H: ClientHandler>(
    handler: H,
    dir: &Path,
    engine: Engine,
    timeout: u64,
    extra: &[&str],
) -> Client<H> {
    let mut command = common::spawn::mcp_server(&[
        "--timeout",
        &timeout.to_string(),
        "--memory",
        "128",
        "--max-output",
        &MAX_OUTPUT.to_string(),
        // Compute-bound cases expect the timeout: the default fuel is only 3-4 s of compute on a
        // fast machine, which would make them a race between the two limits.
        "--fuel",
        "1000000000000",
    ]);
    command
        .args(engine.flags())
        .args(extra)
        .current_dir(dir)
        .env("SAFE_PYTHON_LOG", "error")
        .env(CANARY_ENV, CANARY_VALUE);
    let client = connect(handler, command).await;
    // The first call waits for the sandbox; keep it out of the timed cases.
    client.call_tool(run_python("None", None)).await.unwrap();
    client
}

/// What a session holds before each case, and must hold after it.
const KEPT: &str = "kept = 12345";

/// Checks `expect` against the reply; returns what went wrong.
fn check_expectation(expect: &str, reply: &CallToolResult) -> Result<(), String> {
    let (kind, detail) = expect.split_once(':').unwrap_or((expect, ""));
    let v = reply.structured_content.clone().unwrap_or(Value::Null);
    let error_type = v["error"]["type"].as_str();
    let limit = v["limit"].as_str();
    let ok = match kind {
        "any" => true,
        "refused" => reply.is_error == Some(true) && reply.structured_content.is_none(),
        "completed" => error_type.is_none() && limit.is_none(),
        "error" => {
            error_type.is_some()
                && limit.is_none()
                && (detail.is_empty() || error_type == Some(detail))
        }
        "limit" => limit.is_some() && (detail.is_empty() || limit == Some(detail)),
        other => return Err(format!("unknown expectation {other:?}")),
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "expected {expect}, got error {error_type:?}, limit {limit:?}, is_error {:?}",
            reply.is_error
        ))
    }
}

fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Every case of every class file, in file-name order. A case's name is prefixed with its class.
fn all_cases() -> Vec<Case> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/adversarial");
    let mut cases = Vec::new();
    for name in listing(&dir).into_iter().filter(|n| n.ends_with(".json")) {
        let text = std::fs::read_to_string(dir.join(&name)).unwrap();
        let class: Vec<Case> =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name} does not parse: {e}"));
        let prefix = name.trim_end_matches(".json");
        cases.extend(class.into_iter().map(|mut c| {
            c.name = format!("{prefix}/{}", c.name);
            if let Some(differs) = &c.cpython {
                assert!(
                    !differs.because.trim().is_empty(),
                    "{}: an engine-specific expectation says why",
                    c.name
                );
            }
            c
        }));
    }
    cases
}

#[tokio::test]
async fn hostile_code_never_escapes_hangs_or_kills_the_server() {
    run_suite(Engine::RustPython, false).await;
}

/// The same cases against the CPython engine, fresh calls.
#[tokio::test]
async fn cpython_hostile_code_never_breaks_the_server() {
    run_suite(Engine::CPython, false).await;
}

/// The same cases, each in a session holding state: whatever the case does, the session still
/// answers with its state afterwards (a case stopped by a limit is undone).
#[tokio::test]
async fn hostile_code_never_breaks_a_session() {
    run_suite(Engine::RustPython, true).await;
}

/// The same cases in sessions on the CPython engine, whose rollback restores a far larger memory.
#[tokio::test]
async fn cpython_hostile_code_never_breaks_a_session() {
    run_suite(Engine::CPython, true).await;
}

async fn run_suite(engine: Engine, in_sessions: bool) {
    let cases = all_cases();
    assert!(cases.len() >= 60, "the suite has {} cases", cases.len());

    let temp = common::temp_dir("adversarial");
    let dir = temp.path();
    std::fs::write(dir.join(CANARY_FILE), CANARY_CONTENT).unwrap();
    let host_secret = std::fs::read_to_string("/etc/passwd")
        .ok()
        .and_then(|p| p.lines().next().map(str::to_owned));

    // Strict and open servers, each with the short and the patient timeout.
    let open_flags: &[&str] = &["--allow", OPEN_MODULES];
    let (strict, open, patient_strict, patient_open) = tokio::join!(
        server(dir, engine, &[]),
        server(dir, engine, open_flags),
        server_with_timeout((), dir, engine, PATIENT_TIMEOUT_SECS, &[]),
        server_with_timeout((), dir, engine, PATIENT_TIMEOUT_SECS, open_flags),
    );
    let mut failures = Vec::new();
    let mut handles: Vec<String> = Vec::new();
    for case in &cases {
        let short = case.may_time_out(engine);
        let client = match (case.open_server, short) {
            (false, true) => &strict,
            (true, true) => &open,
            (false, false) => &patient_strict,
            (true, false) => &patient_open,
        };
        let timeout = if short {
            TIMEOUT_SECS
        } else {
            PATIENT_TIMEOUT_SECS
        };
        let session = match in_sessions {
            true => Some(new_session(client, KEPT).await),
            false => None,
        };
        let session = session.as_deref();
        let started = Instant::now();
        let asked = case.session.as_deref().or(session);
        let reply = client.call_tool(run_python(&case.source(), asked)).await;
        let took = started.elapsed();
        let mut problems = Vec::new();
        match &reply {
            Err(e) => problems.push(format!("the call failed: {e}")),
            Ok(r) => {
                if let Err(e) = check_expectation(case.expect(engine), r) {
                    problems.push(e);
                }
                let sent = serde_json::to_string(r).unwrap().len();
                if sent > MAX_OUTPUT + REPLY_OVERHEAD_BYTES {
                    problems.push(format!(
                        "the reply is {sent} bytes, over {MAX_OUTPUT} + {REPLY_OVERHEAD_BYTES}"
                    ));
                }
                let everything = format!("{:?}{:?}", r.structured_content, r.content);
                if everything.contains(CANARY_VALUE) {
                    problems.push("the canary environment variable leaked".into());
                }
                if everything.contains(CANARY_CONTENT) {
                    problems.push("the canary file's content leaked".into());
                }
                if host_secret
                    .as_deref()
                    .is_some_and(|secret| !secret.is_empty() && everything.contains(secret))
                {
                    problems.push("host file content leaked".into());
                }
                if let Some(other) = handles.iter().find(|h| everything.contains(h.as_str())) {
                    problems.push(format!("another case's session handle {other} appeared"));
                }
                if case.session.is_some() && handle_in(r).is_some() {
                    problems.push("a guessed session value reached a session".into());
                }
            }
        }
        if took > Duration::from_secs(timeout) + SLACK {
            problems.push(format!("took {took:?}"));
        }
        let (next, expected) = match session {
            Some(_) => ("kept * 1", "12345"),
            None => ("6 * 7", "42"),
        };
        match client.call_tool(run_python(next, session)).await {
            Ok(r)
                if r.structured_content
                    .as_ref()
                    .is_some_and(|v| v["result"] == expected) => {}
            other => problems.push(format!(
                "the server did not answer the next call: {other:?}"
            )),
        }
        handles.extend(session.map(str::to_owned));
        if !problems.is_empty() {
            let outcome = reply
                .ok()
                .and_then(|r| r.structured_content)
                .map(|v| json!({"error": v["error"]["type"], "limit": v["limit"]}));
            failures.push(format!(
                "{}: {} (outcome {outcome:?})",
                case.name,
                problems.join("; ")
            ));
        }
    }
    for client in [strict, open, patient_strict, patient_open] {
        client.cancel().await.unwrap();
    }

    assert_eq!(
        listing(dir),
        [CANARY_FILE],
        "files appeared in the server's working directory"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join(CANARY_FILE)).unwrap(),
        CANARY_CONTENT
    );
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

// Sessions are private to whoever started them.

/// A server for the session attacks, with `extra` flags.
async fn session_server(extra: &[&str]) -> Client {
    server(
        Path::new(env!("CARGO_TARGET_TMPDIR")),
        Engine::RustPython,
        extra,
    )
    .await
}

/// Runs `code` in `session` and returns its result.
async fn result_in<H: ClientHandler>(client: &Client<H>, session: &str, code: &str) -> Value {
    let v = session_call(client, session, code).await;
    assert_eq!(v["session"]["id"], session, "{v}");
    v["result"].clone()
}

/// A handle of the right form that no server drew (one in 2^128 that one did).
const FORGED: &str = "s_00000000000000000000000000000000";

/// Flips the hexadecimal digit at `at` of a handle.
fn changed(handle: &str, at: usize) -> String {
    let mut bytes = handle.as_bytes().to_vec();
    bytes[at] = if bytes[at] == b'0' { b'1' } else { b'0' };
    String::from_utf8(bytes).unwrap()
}

#[tokio::test]
async fn guessed_forged_and_foreign_handles_reach_no_session() {
    let (one, two) = tokio::join!(session_server(&[]), session_server(&[]));
    let a = new_session(&one, "kept = 'a'").await;
    let b = new_session(&two, "kept = 'b'").await;
    let a2 = new_session(&one, "kept = 'a2'").await;
    for handle in [&a, &b, &a2] {
        assert!(
            handle.len() == 34
                && handle.starts_with("s_")
                && handle[2..]
                    .bytes()
                    .all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')),
            "{handle}"
        );
    }
    assert!(a != b && a != a2 && b != a2);

    // Another server's handle, a handle with one digit changed, handles of the right form.
    assert!(
        refused(&one, &b)
            .await
            .contains("No session has the handle")
    );
    assert!(
        refused(&two, &a)
            .await
            .contains("No session has the handle")
    );
    for at in [2, 17, 33] {
        refused(&one, &changed(&a, at)).await;
    }
    refused(&one, FORGED).await;
    // Names that worked before handles, and near misses of "new".
    for guess in ["main", "0", "a", "case-0", "default", "New", "new ", ""] {
        assert!(
            refused(&one, guess)
                .await
                .contains("is not a session handle"),
            "{guess:?}"
        );
    }
    // None of it touched the real sessions.
    assert_eq!(result_in(&one, &a, "kept").await, "'a'");
    assert_eq!(result_in(&one, &a2, "kept").await, "'a2'");
    assert_eq!(result_in(&two, &b, "kept").await, "'b'");
    one.cancel().await.unwrap();
    two.cancel().await.unwrap();
}

#[tokio::test]
async fn a_handle_after_reset_eviction_or_expiry_says_which() {
    let client = session_server(&["--max-sessions", "2", "--session-idle", "2"]).await;
    let x = new_session(&client, "kept = 1").await;
    let y = new_session(&client, "kept = 2").await;

    // A reset empties the session, and the handle goes on working.
    let args = json!({"code": "'kept' in globals()", "session": x, "reset": true});
    let reply = client.call_tool(run_python_with(args)).await.unwrap();
    let v = reply.structured_content.unwrap();
    assert_eq!(
        (&v["result"], &v["session"]["started"]),
        (&json!("False"), &json!("reset"))
    );
    assert_eq!(v["session"]["id"], x);
    assert_eq!(result_in(&client, &x, "kept = 3\nkept").await, "3");

    // y is now the least recently used idle session: a third one evicts it.
    let z = new_session(&client, "kept = 4").await;
    let evicted = refused(&client, &y).await;
    assert!(evicted.contains("was closed to make room"), "{evicted}");
    assert_eq!(result_in(&client, &x, "kept").await, "3");

    tokio::time::sleep(Duration::from_millis(2600)).await;
    let expired = refused(&client, &z).await;
    assert!(expired.contains("has expired"), "{expired}");
    let unknown = refused(&client, FORGED).await;
    let not_a_handle = refused(&client, "main").await;
    let messages = [&evicted, &expired, &unknown, &not_a_handle];
    for (i, m) in messages.iter().enumerate() {
        for other in &messages[i + 1..] {
            assert_ne!(m.lines().next(), other.lines().next());
        }
    }
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_busy_session_is_never_evicted_and_none_starts_when_all_are_busy() {
    // Each busy call marks itself once running, then sleeps 2 s; the new session is asked for only
    // then, so that on a loaded machine it cannot overtake the busy calls and find them idle.
    let began = Began::default();
    let client = server_with_timeout(
        began.clone(),
        Path::new(env!("CARGO_TARGET_TMPDIR")),
        Engine::RustPython,
        PATIENT_TIMEOUT_SECS,
        &["--max-sessions", "2", "--workers", "4"],
    )
    .await;
    let busy = |name: &str| format!("{}time.sleep(2)\nkept", Began::mark(name));
    let a = new_session(&client, "import time\nkept = 'a'").await;
    let b = new_session(&client, "kept = 'b'").await;
    // a is the least recently used, but busy: the new session evicts b.
    let long = client.call_tool(run_python(&busy("a1"), Some(&a)));
    let newer = async {
        began.wait("a1").await;
        new_session(&client, "import time\nkept = 'c'").await
    };
    let (long, c) = tokio::join!(long, newer);
    assert_eq!(long.unwrap().structured_content.unwrap()["result"], "'a'");
    assert!(refused(&client, &b).await.contains("closed to make room"));

    // Both open sessions busy: a new one is refused, and nothing is evicted.
    let busy_a = client.call_tool(run_python(&busy("a2"), Some(&a)));
    let busy_c = client.call_tool(run_python(&busy("c2"), Some(&c)));
    let attempt = async {
        began.wait("a2").await;
        began.wait("c2").await;
        client
            .call_tool(run_python("kept = 'd'", Some("new")))
            .await
            .unwrap()
    };
    let (busy_a, busy_c, full) = tokio::join!(busy_a, busy_c, attempt);
    assert_eq!(busy_a.unwrap().structured_content.unwrap()["result"], "'a'");
    assert_eq!(busy_c.unwrap().structured_content.unwrap()["result"], "'c'");
    let text = text(&full);
    assert_eq!(full.is_error, Some(true), "{text}");
    assert!(full.structured_content.is_none(), "{full:?}");
    assert!(
        text.contains("all 2 open sessions are running calls"),
        "{text}"
    );
    assert_eq!(result_in(&client, &a, "kept").await, "'a'");
    assert_eq!(result_in(&client, &c, "kept").await, "'c'");
    // Once they are idle again, a new session takes the place of the least recently used.
    new_session(&client, "kept = 'd'").await;
    assert!(refused(&client, &a).await.contains("closed to make room"));
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn nothing_tells_a_caller_of_another_callers_session() {
    let client = session_server(&[]).await;
    let mine = new_session(&client, "kept = 'private'").await;
    let mut everything_else = vec![
        serde_json::to_string(&client.list_all_tools().await.unwrap()).unwrap(),
        serde_json::to_string(&client.peer_info()).unwrap(),
    ];
    let near_miss = changed(&mine, 5);
    for session in [None, Some("new"), Some("main"), Some(near_miss.as_str())] {
        let reply = client.call_tool(run_python("1", session)).await.unwrap();
        everything_else.push(format!("{reply:?}"));
    }
    for said in &everything_else {
        assert!(!said.contains(&mine), "{said}");
    }
    let tools = client.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names, ["run_python"], "no tool lists sessions");
    let listed = client
        .call_tool(CallToolRequestParams::new("list_sessions"))
        .await;
    assert!(listed.is_err(), "{listed:?}");
    client.cancel().await.unwrap();
}
