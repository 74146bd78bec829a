//! The adversarial suite: every case in `tests/adversarial/cases.json` runs through the real MCP
//! server, and for every case the sandbox must hold:
//!
//! - the call ends within the timeout plus a second, with the outcome the case expects;
//! - the server answers the next call;
//! - a canary environment variable set for the server never appears in any output;
//! - no host file content appears;
//! - the canary file in the server's working directory is untouched, and no file appears;
//! - the reply, text and structured content together as the client received them, serialises
//!   within the server's `--max-output` plus its fixed overhead (`REPLY_OVERHEAD_BYTES`).
//!
//! Cases marked `open_server` run against a server that allows importing os, sys, io, socket and
//! more: the allowlist is policy, the WebAssembly boundary is what must hold. The suite runs twice:
//! fresh, and with each case in a session holding state, which must still hold it after the case.
//!
//! The cases live in `tests/adversarial/*.json`, one file per class of attack (`cases.json` holds the
//! first corpus). To add a case, append `{"name", "code", "expect"}` to its class's file. `expect` is `completed`,
//! `error`, `error:<ExceptionType>`, `limit`, `limit:<timeout|fuel|memory|output|stack>`, `refused`
//! (a tool error before anything ran, as for code over the size limit), or `any`. A case with
//! `"repeat": N` sends its `code` N times over, for sources too big to keep in the file.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt};
use safe_python_executor::mcp::REPLY_OVERHEAD_BYTES;
use serde::Deserialize;
use serde_json::{Value, json};

const TIMEOUT_SECS: u64 = 3;
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
}

impl Case {
    fn source(&self) -> String {
        self.code.repeat(self.repeat.unwrap_or(1))
    }
}

async fn server(dir: &Path, open: bool) -> RunningService<RoleClient, ()> {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_safe-python-mcp"));
    command
        .current_dir(dir)
        .env("SAFE_PYTHON_CACHE_DIR", common::cache_dir())
        .env("SAFE_PYTHON_LOG", "error")
        .env(CANARY_ENV, CANARY_VALUE)
        .args([
            "--timeout",
            &TIMEOUT_SECS.to_string(),
            "--memory",
            "128",
            "--max-output",
            &MAX_OUTPUT.to_string(),
        ]);
    if open {
        command.args(["--allow", OPEN_MODULES]);
    }
    let client =
        ().serve(TokioChildProcess::new(command).unwrap())
            .await
            .expect("the server starts");
    // The first call waits for the sandbox; keep it out of the timed cases.
    client.call_tool(call("None", None)).await.unwrap();
    client
}

/// `code` as a `run_python` call, fresh or in `session`.
fn call(code: &str, session: Option<&str>) -> CallToolRequestParams {
    let mut args = json!({ "code": code });
    if let Some(session) = session {
        args["session"] = json!(session);
    }
    CallToolRequestParams::new("run_python").with_arguments(args.as_object().unwrap().clone())
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
            c
        }));
    }
    cases
}

#[tokio::test]
async fn hostile_code_never_escapes_hangs_or_kills_the_server() {
    run_suite(false).await;
}

/// The same cases, each in a session holding state: whatever the case does, the session still
/// answers with its state afterwards (a case stopped by a limit is undone).
#[tokio::test]
async fn hostile_code_never_breaks_a_session() {
    run_suite(true).await;
}

async fn run_suite(in_sessions: bool) {
    let cases = all_cases();
    assert!(cases.len() >= 60, "the suite has {} cases", cases.len());

    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("adversarial-{}-{in_sessions}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(CANARY_FILE), CANARY_CONTENT).unwrap();
    let host_secret = std::fs::read_to_string("/etc/passwd")
        .ok()
        .and_then(|p| p.lines().next().map(str::to_owned));

    let strict = server(&dir, false).await;
    let open = server(&dir, true).await;
    let mut failures = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        let client = if case.open_server { &open } else { &strict };
        let session = in_sessions.then(|| format!("case-{i}"));
        let session = session.as_deref();
        if session.is_some() {
            client.call_tool(call(KEPT, session)).await.unwrap();
        }
        let started = Instant::now();
        let reply = client.call_tool(call(&case.source(), session)).await;
        let took = started.elapsed();
        let mut problems = Vec::new();
        match &reply {
            Err(e) => problems.push(format!("the call failed: {e}")),
            Ok(r) => {
                if let Err(e) = check_expectation(&case.expect, r) {
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
            }
        }
        if took > Duration::from_secs(TIMEOUT_SECS + 1) {
            problems.push(format!("took {took:?}"));
        }
        let (next, expected) = match session {
            Some(_) => ("kept * 1", "12345"),
            None => ("6 * 7", "42"),
        };
        match client.call_tool(call(next, session)).await {
            Ok(r)
                if r.structured_content
                    .as_ref()
                    .is_some_and(|v| v["result"] == expected) => {}
            other => problems.push(format!(
                "the server did not answer the next call: {other:?}"
            )),
        }
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
    strict.cancel().await.unwrap();
    open.cancel().await.unwrap();

    assert_eq!(
        listing(&dir),
        [CANARY_FILE],
        "files appeared in the server's working directory"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join(CANARY_FILE)).unwrap(),
        CANARY_CONTENT
    );
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}
