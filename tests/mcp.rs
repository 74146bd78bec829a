//! `safe-python-mcp` over real stdio: the rmcp client driving the real binary, and raw JSON-RPC
//! lines for what a well-behaved client would never send.

// MCP logging is deprecated by SEP-2577; the server still supports it, and this tests it.
#![allow(deprecated)]

mod common;

use std::process::Command as StdCommand;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientRequest, LoggingLevel,
    LoggingMessageNotificationParam, ProgressNotificationParam, Request, SetLevelRequestParams,
};
use rmcp::service::{NotificationContext, PeerRequestOptions, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::{Value, json};

use common::raw::Raw;

const BIN: &str = env!("CARGO_BIN_EXE_safe-python-mcp");

/// Records progress notifications with the time they arrived, and log messages.
#[derive(Clone, Default)]
struct Recorder {
    progress: Arc<Mutex<Vec<(Instant, ProgressNotificationParam)>>>,
    logs: Arc<Mutex<Vec<LoggingMessageNotificationParam>>>,
}

impl ClientHandler for Recorder {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.progress.lock().unwrap().push((Instant::now(), params));
    }

    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.logs.lock().unwrap().push(params);
    }
}

type Client = RunningService<RoleClient, Recorder>;

fn server_command(args: &[&str]) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(BIN);
    command
        .args(args)
        .env("SAFE_PYTHON_CACHE_DIR", common::cache_dir())
        .env("SAFE_PYTHON_LOG", "warn");
    command
}

async fn connect(args: &[&str]) -> (Client, Recorder) {
    let recorder = Recorder::default();
    let transport = TokioChildProcess::new(server_command(args)).expect("the server starts");
    let client = recorder
        .clone()
        .serve(transport)
        .await
        .expect("initialize succeeds");
    (client, recorder)
}

/// Waits until the server has its sandbox (compiled on a cold cache), so timings measure runs.
async fn warm_up(client: &Client) {
    client.call_tool(call("None")).await.expect("a first call");
}

fn call(code: &str) -> CallToolRequestParams {
    CallToolRequestParams::new("run_python")
        .with_arguments(json!({ "code": code }).as_object().unwrap().clone())
}

fn structured(result: &CallToolResult) -> &Value {
    result
        .structured_content
        .as_ref()
        .expect("structured content")
}

fn text(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect()
}

#[tokio::test]
async fn tools_list_describes_run_python_with_its_schemas() {
    let (client, _) = connect(&["--allow", "json", "--timeout", "7"]).await;
    let tools = client.list_all_tools().await.unwrap();
    assert_eq!(tools.len(), 1);
    let tool = &tools[0];
    assert_eq!(tool.name, "run_python");
    let input = serde_json::to_value(&*tool.input_schema).unwrap();
    assert_eq!(input["required"], json!(["code"]));
    assert_eq!(input["properties"]["code"]["type"], "string");
    let output =
        serde_json::to_value(tool.output_schema.as_deref().expect("an output schema")).unwrap();
    for field in ["stdout", "stderr", "result", "error", "limit", "stats"] {
        assert!(
            output["properties"].get(field).is_some(),
            "output schema lacks {field}: {output}"
        );
    }
    let description = tool.description.as_deref().unwrap();
    for needle in [
        "collections",
        "json",
        "unicodedata",
        "7 s",
        "256 MiB",
        "last expression",
        "no files, no network",
        "print",
    ] {
        assert!(
            description.contains(needle),
            "description lacks {needle:?}: {description}"
        );
    }
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn success_exception_and_limit_results() {
    let (client, _) = connect(&["--timeout", "1", "--fuel", "1000000000000"]).await;
    warm_up(&client).await;

    let ok = client.call_tool(call("print('hi')\n6 * 7")).await.unwrap();
    assert_eq!(ok.is_error, Some(false));
    assert_eq!(structured(&ok)["stdout"], "hi\n");
    assert_eq!(structured(&ok)["result"], "42");
    assert_eq!(structured(&ok)["error"], Value::Null);
    assert_eq!(text(&ok), "hi\nResult: 42\n");

    let raised = client
        .call_tool(call("print('before')\n1/0"))
        .await
        .unwrap();
    assert_eq!(raised.is_error, Some(true));
    assert_eq!(structured(&raised)["error"]["type"], "ZeroDivisionError");
    let t = text(&raised);
    assert!(
        t.starts_with("before\nTraceback (most recent call last):"),
        "{t}"
    );
    assert!(t.ends_with("ZeroDivisionError: division by zero\n"), "{t}");

    let started = Instant::now();
    let limited = client.call_tool(call("while True: pass")).await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(limited.is_error, Some(true));
    assert_eq!(structured(&limited)["limit"], "timeout");
    assert!(
        text(&limited).contains("Limit reached (timeout)"),
        "{}",
        text(&limited)
    );

    let exit = client.call_tool(call("raise SystemExit(1)")).await.unwrap();
    assert_eq!(structured(&exit)["error"]["type"], "SystemExit");
    // The server survived all of it.
    assert_eq!(
        structured(&client.call_tool(call("1 + 1")).await.unwrap())["result"],
        "2"
    );
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn output_streams_as_progress_before_the_result() {
    let (client, recorder) = connect(&[]).await;
    let code = "import time\nfor i in range(3):\n    print('line', i)\n    time.sleep(0.4)";
    let result = client.call_tool(call(code)).await.unwrap();
    let done = Instant::now();
    assert_eq!(structured(&result)["stdout"], "line 0\nline 1\nline 2\n");
    let progress = recorder.progress.lock().unwrap().clone();
    let streamed: String = progress
        .iter()
        .filter_map(|(_, p)| p.message.clone())
        .collect();
    assert!(
        streamed.ends_with("line 0\nline 1\nline 2\n"),
        "{streamed:?}"
    );
    let first = progress
        .iter()
        .find(|(_, p)| p.message.as_deref().is_some_and(|m| m.contains("line 0")))
        .unwrap();
    assert!(
        done - first.0 > Duration::from_millis(700),
        "the first line arrived only {:?} before the result",
        done - first.0
    );
    let values: Vec<f64> = progress.iter().map(|(_, p)| p.progress).collect();
    assert!(
        values.windows(2).all(|w| w[0] < w[1]),
        "progress must increase: {values:?}"
    );
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn output_goes_out_as_log_messages_once_a_level_is_set() {
    let (client, recorder) = connect(&[]).await;
    client.call_tool(call("print('unlogged')")).await.unwrap();
    assert!(
        recorder.logs.lock().unwrap().is_empty(),
        "no log messages before logging/setLevel"
    );
    client
        .set_level(SetLevelRequestParams::new(LoggingLevel::Info))
        .await
        .unwrap();
    client
        .call_tool(call("print('logged')\n1/0"))
        .await
        .unwrap();
    let logs = recorder.logs.lock().unwrap().clone();
    let stdout: String = logs
        .iter()
        .filter(|l| l.logger.as_deref() == Some("stdout"))
        .filter_map(|l| l.data.as_str())
        .collect();
    assert_eq!(stdout, "logged\n");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn cancellation_stops_the_run_and_frees_its_slot() {
    let (client, _) = connect(&[
        "--workers",
        "1",
        "--timeout",
        "60",
        "--fuel",
        "10000000000000",
    ])
    .await;
    warm_up(&client).await;
    let handle = client
        .send_cancellable_request(
            ClientRequest::CallToolRequest(Request::new(call("while True: pass"))),
            PeerRequestOptions::no_options(),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    handle.cancel(Some("test".into())).await.unwrap();
    // With one worker, this only runs once the cancelled run has let go of it.
    let started = Instant::now();
    let next = client.call_tool(call("'free'")).await.unwrap();
    assert_eq!(structured(&next)["result"], "'free'");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "the next call waited {:?}",
        started.elapsed()
    );
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_stuck_call_does_not_delay_the_others() {
    let (client, _) = connect(&[
        "--workers",
        "8",
        "--timeout",
        "20",
        "--fuel",
        "10000000000000",
    ])
    .await;
    warm_up(&client).await;
    let client = Arc::new(client);
    let stuck = tokio::spawn({
        let client = client.clone();
        async move { client.call_tool(call("while True: pass")).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = Instant::now();
    let quick: Vec<_> = (0..7)
        .map(|i| {
            let client = client.clone();
            tokio::spawn(async move {
                client
                    .call_tool(call(&format!("sum(range({i} * 1000))")))
                    .await
            })
        })
        .collect();
    for (i, task) in quick.into_iter().enumerate() {
        let r = task.await.unwrap().unwrap();
        let expected: u64 = (0..i as u64 * 1000).sum();
        assert_eq!(structured(&r)["result"], expected.to_string());
    }
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "seven quick calls took {:?}",
        started.elapsed()
    );
    assert!(
        !stuck.is_finished(),
        "the stuck call should still be running"
    );
    stuck.abort();
}

#[tokio::test]
async fn bad_arguments_get_errors_not_crashes() {
    let (client, _) = connect(&[]).await;
    let bad = [
        CallToolRequestParams::new("no_such_tool")
            .with_arguments(json!({"code": "1"}).as_object().unwrap().clone()),
        CallToolRequestParams::new("run_python"),
        CallToolRequestParams::new("run_python")
            .with_arguments(json!({"code": 5}).as_object().unwrap().clone()),
        CallToolRequestParams::new("run_python")
            .with_arguments(json!({"source": "1"}).as_object().unwrap().clone()),
    ];
    for params in bad {
        let name = params.name.clone();
        let err = client
            .call_tool(params)
            .await
            .expect_err("a JSON-RPC error");
        assert!(
            format!("{err}").contains("-32602")
                || format!("{err:?}").contains("InvalidParams")
                || format!("{err:?}").contains("-32602"),
            "{name}: {err:?}"
        );
    }
    let huge = client
        .call_tool(call(&"x = 1\n".repeat(2 << 20)))
        .await
        .unwrap();
    assert_eq!(huge.is_error, Some(true));
    assert!(text(&huge).contains("the limit is"), "{}", text(&huge));
    assert_eq!(
        structured(&client.call_tool(call("'still here'")).await.unwrap())["result"],
        "'still here'"
    );
    client.cancel().await.unwrap();
}

#[test]
fn initialize_and_tools_list_answer_at_once_even_on_a_cold_cache() {
    // An empty cache: the server is compiling the guest in the background meanwhile.
    let cold = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("cold-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&cold);
    let mut raw = Raw::start_with(&cold, &[]);
    let started = Instant::now();
    raw.initialize();
    raw.send(r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#);
    assert_eq!(raw.response(2)["result"]["tools"][0]["name"], "run_python");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "took {:?}",
        started.elapsed()
    );
    drop(raw);
    let _ = std::fs::remove_dir_all(&cold);
}

#[test]
fn malformed_json_and_unknown_methods_do_not_kill_the_server() {
    let mut raw = Raw::start();
    raw.initialize();
    raw.send("{this is not json");
    raw.send(r#"{"jsonrpc":"2.0","id":7,"method":"no/such/method"}"#);
    assert!(
        raw.response(7)["error"]["code"].is_i64(),
        "an error for the unknown method"
    );
    raw.send(r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"run_python","arguments":{"code":"print(1)"}}}"#);
    assert_eq!(
        raw.response(8)["result"]["structuredContent"]["stdout"],
        "1\n"
    );
}

#[test]
fn a_client_that_disconnects_mid_run_lets_the_server_exit() {
    let mut raw = Raw::start();
    raw.initialize();
    raw.send(r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"run_python","arguments":{"code":"while True: pass"}}}"#);
    std::thread::sleep(Duration::from_millis(300));
    raw.close_stdin();
    // rmcp gives in-flight calls 5 s to finish after the client goes away, then cancels them.
    let status = raw
        .wait_exit(Duration::from_secs(10))
        .expect("the server exits when its client goes away");
    assert!(status.success(), "{status:?}");
}

#[test]
fn check_runs_a_self_test() {
    let out = StdCommand::new(BIN)
        .arg("--check")
        .env("SAFE_PYTHON_CACHE_DIR", common::cache_dir())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("ok: refuses imports outside the allowlist"),
        "{stdout}"
    );
    assert!(stdout.contains("self-test passed"), "{stdout}");
}
