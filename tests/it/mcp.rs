//! `safe-python-mcp` over real stdio: the rmcp client driving the real binary, and raw JSON-RPC
//! lines for what a well-behaved client would never send.

// MCP logging is deprecated by SEP-2577; the server still supports it, and this tests it.
#![allow(deprecated)]

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, LoggingLevel, LoggingMessageNotificationParam,
    ProgressNotificationParam, SetLevelRequestParams,
};
use rmcp::service::NotificationContext;
use rmcp::{ClientHandler, RoleClient};
use serde_json::{Value, json};

use common::client::{
    cancel_after, new_session, refused, run_python, run_python_with, session_call, structured, text,
};
use common::raw::Raw;
use common::spawn::mcp_server;

use crate::fuzz_smoke::targets;

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

type Client = common::client::Client<Recorder>;

/// A server with `args`, and what its client was sent.
async fn connect(args: &[&str]) -> (Client, Recorder) {
    let recorder = Recorder::default();
    let client = common::client::connect(recorder.clone(), mcp_server(args)).await;
    (client, recorder)
}

/// Waits until the server has its sandbox (compiled on a cold cache), so timings measure runs.
async fn warm_up(client: &Client) {
    client.call_tool(call("None")).await.expect("a first call");
}

/// `code` as a fresh `run_python` call.
fn call(code: &str) -> CallToolRequestParams {
    run_python(code, None)
}

#[tokio::test]
async fn tools_list_describes_run_python_with_its_schemas() {
    let (client, _) = connect(&["--allow", "json", "--timeout", "7"]).await;
    let tools = client.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names, ["run_python"]);
    let tool = &tools[0];
    let input = serde_json::to_value(&*tool.input_schema).unwrap();
    assert_eq!(input["required"], json!(["code"]));
    assert_eq!(input["properties"]["code"]["type"], "string");
    assert_eq!(
        input["properties"]["session"]["anyOf"][0]["pattern"], "^(new|s_[0-9a-f]{32})$",
        "{input}"
    );
    assert!(input["properties"]["reset"].is_object(), "{input}");
    // The fuzz oracle for the arguments (fuzz/src/lib.rs) reads the schema from the type: it is
    // the one clients are given.
    assert_eq!(
        tool.input_schema,
        targets::run_python_schema(),
        "the tool's input schema is not its arguments' type's"
    );
    let output =
        serde_json::to_value(tool.output_schema.as_deref().expect("an output schema")).unwrap();
    for field in [
        "stdout", "stderr", "result", "error", "limit", "stats", "session",
    ] {
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
        "no host files, no network",
        "/data",
        "/out",
        "print",
        "`session`",
        "undone",
        "30 min",
        "at most 16 are open",
        "`session: \"new\"`",
        "private",
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
    // The first notification by which "line 0" had arrived whole: a line may come in pieces.
    let mut so_far = String::new();
    let first = progress
        .iter()
        .find(|(_, p)| {
            so_far.push_str(p.message.as_deref().unwrap_or_default());
            so_far.contains("line 0\n")
        })
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

/// What went out as log messages with logger `stdout`, joined.
fn logged_stdout(recorder: &Recorder) -> String {
    let logs = recorder.logs.lock().unwrap();
    logs.iter()
        .filter(|l| l.logger.as_deref() == Some("stdout"))
        .filter_map(|l| l.data.as_str())
        .collect()
}

#[tokio::test]
async fn output_goes_out_as_log_messages_once_a_level_is_set() {
    let (client, recorder) = connect(&[]).await;
    client.call_tool(call("print('unlogged')")).await.unwrap();
    assert!(
        recorder.logs.lock().unwrap().is_empty(),
        "no log messages before logging/setLevel"
    );
    // Output goes out at level info: a client that asked for warnings and worse gets none.
    client
        .set_level(SetLevelRequestParams::new(LoggingLevel::Warning))
        .await
        .unwrap();
    client.call_tool(call("print('too low')")).await.unwrap();
    assert!(
        recorder.logs.lock().unwrap().is_empty(),
        "info messages after logging/setLevel warning"
    );
    client
        .set_level(SetLevelRequestParams::new(LoggingLevel::Info))
        .await
        .unwrap();
    client
        .call_tool(call("print('logged')\n1/0"))
        .await
        .unwrap();
    assert_eq!(logged_stdout(&recorder), "logged\n");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn stdout_and_stderr_are_in_the_structured_content_and_the_text() {
    let (client, _) = connect(&["--allow", "sys"]).await;
    let reply = client
        .call_tool(call(
            "import sys\nprint('out')\nprint('err', file=sys.stderr)",
        ))
        .await
        .unwrap();
    assert_eq!(reply.is_error, Some(false), "{reply:?}");
    assert_eq!(structured(&reply)["stdout"], "out\n");
    assert_eq!(structured(&reply)["stderr"], "err\n");
    assert_eq!(text(&reply), "out\n[stderr]\nerr\n");
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
    cancel_after(
        &client,
        call("while True: pass"),
        Duration::from_millis(500),
    )
    .await;
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
    let (client, recorder) = connect(&[
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
        async move {
            let code = "print('stuck', flush=True)\nwhile True: pass";
            client.call_tool(call(code)).await
        }
    });
    // The quick calls start once the stuck one holds its worker.
    while !notifications(&recorder)
        .2
        .iter()
        .any(|m| m.contains("stuck"))
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
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

/// Whether `err` is a JSON-RPC invalid-params error.
fn is_invalid_params(err: &rmcp::ServiceError) -> bool {
    let debug = format!("{err:?}");
    debug.contains("InvalidParams") || debug.contains("-32602")
}

/// Sends `params`, which must get a tool error (no structured content), and returns its text.
async fn tool_error(client: &Client, params: CallToolRequestParams) -> String {
    let reply = client.call_tool(params).await.expect("a tool result");
    assert_eq!(reply.is_error, Some(true), "{reply:?}");
    assert!(reply.structured_content.is_none(), "{reply:?}");
    text(&reply)
}

#[tokio::test]
async fn bad_arguments_get_errors_not_crashes() {
    let (client, _) = connect(&[]).await;
    // An unknown tool is the client's mistake: a JSON-RPC error.
    let err = client
        .call_tool(
            CallToolRequestParams::new("no_such_tool")
                .with_arguments(json!({"code": "1"}).as_object().unwrap().clone()),
        )
        .await
        .expect_err("a JSON-RPC error");
    assert!(is_invalid_params(&err), "{err:?}");
    // Arguments that do not decode are the model's to correct: a tool error that names the
    // problem (the 2025-11-25 specification, and rmcp's tool router).
    for (params, needle) in [
        (
            CallToolRequestParams::new("run_python"),
            "missing field `code`",
        ),
        (
            run_python_with(json!({"code": 5})),
            "invalid type: integer `5`",
        ),
        (
            run_python_with(json!({"source": "1"})),
            "unknown field `source`",
        ),
    ] {
        let said = tool_error(&client, params).await;
        assert!(said.contains(needle), "{needle}: {said}");
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
    let cold = common::temp_dir("cold-cache");
    let mut raw = Raw::start_with(cold.path(), &[]);
    let started = Instant::now();
    raw.initialize();
    raw.send(r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#);
    assert_eq!(raw.response(2)["result"]["tools"][0]["name"], "run_python");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "took {:?}",
        started.elapsed()
    );
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
    raw.run_python(8, json!({"code": "print(1)"}), None);
    assert_eq!(
        raw.response(8)["result"]["structuredContent"]["stdout"],
        "1\n"
    );
}

#[test]
fn a_client_that_disconnects_mid_run_lets_the_server_exit() {
    let mut raw = Raw::start();
    raw.initialize();
    raw.run_python(3, json!({"code": "while True: pass"}), None);
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
    let out = mcp_server(&["--check"]).output().unwrap();
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

// Sessions, over MCP from the real client. The attacks on them are in tests/adversarial.rs.

fn in_session(session: &str, code: &str) -> CallToolRequestParams {
    run_python(code, Some(session))
}

#[tokio::test]
async fn sessions_keep_state_between_calls_and_apart_from_each_other() {
    let (client, _) = connect(&[]).await;
    let started = client
        .call_tool(in_session(
            "new",
            "import math\nx = 20\ndef double(v):\n    return 2 * v\nclass P:\n    r = math.pi",
        ))
        .await
        .unwrap();
    let first = structured(&started);
    let a = first["session"]["id"].as_str().unwrap().to_owned();
    assert_eq!(first["session"]["call"], 1);
    assert_eq!(first["session"]["started"], "new");
    assert_eq!(first["session"]["rolled_back"], false);
    // The text gives the handle too, for clients that show the model only the text.
    assert!(
        text(&started).contains(&format!("Session started: {a}.")),
        "{}",
        text(&started)
    );
    let second = session_call(&client, &a, "double(x) + round(P.r)").await;
    assert_eq!(second["result"], "43");
    assert_eq!(second["session"]["id"], a.as_str());
    assert_eq!(second["session"]["call"], 2);
    assert_eq!(second["session"]["started"], Value::Null);

    let b = new_session(&client, "x = 'bee'").await;
    assert_ne!(a, b);
    assert_eq!(session_call(&client, &a, "x").await["result"], "20");
    assert_eq!(session_call(&client, &b, "x").await["result"], "'bee'");
    // A call without a session sees none of it, and says nothing of sessions.
    let fresh = structured(&client.call_tool(call("x")).await.unwrap()).clone();
    assert_eq!(fresh["error"]["type"], "NameError");
    assert!(fresh.get("session").is_none(), "{fresh}");

    // An exception keeps what ran before it.
    let raised = session_call(&client, &a, "y = 1\n1/0").await;
    assert_eq!(raised["error"]["type"], "ZeroDivisionError");
    assert_eq!(raised["session"]["rolled_back"], false);
    assert_eq!(session_call(&client, &a, "y").await["result"], "1");

    let reset = client
        .call_tool(run_python_with(
            json!({"code": "'x' in globals()", "session": a, "reset": true}),
        ))
        .await
        .unwrap();
    assert_eq!(structured(&reset)["result"], "False");
    assert_eq!(structured(&reset)["session"]["started"], "reset");
    assert_eq!(structured(&reset)["session"]["id"], a.as_str());
    assert_eq!(session_call(&client, &b, "x").await["result"], "'bee'");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_call_that_hits_a_limit_is_undone_whatever_the_limit() {
    let (client, _) = connect(&[
        "--timeout",
        "4",
        "--fuel",
        "2000000000",
        "--memory",
        "128",
        "--max-output",
        "65536",
    ])
    .await;
    let s = new_session(&client, "x = 41\nitems = [1, 2]").await;
    for (limit, code) in [
        ("fuel", "while True: pass"),
        ("timeout", "import time\ntime.sleep(60)"),
        // A refused allocation; growth until the allocator aborts is tested in tests/it/session.rs.
        ("memory", "hog = 'a' * (200 * 2**20)"),
        (
            "stack",
            "nested = []\nfor _ in range(200000): nested = [nested]\nrepr(nested)",
        ),
        ("output", "while True: print('flood' * 100)"),
    ] {
        let reply = client
            .call_tool(in_session(&s, &format!("x = 0\nitems.append(3)\n{code}")))
            .await
            .unwrap();
        let v = structured(&reply);
        assert_eq!(v["limit"], limit, "{v}");
        assert_eq!(v["session"]["rolled_back"], true, "{v}");
        assert!(
            text(&reply).contains(&format!(
                "Session {s} was restored to its state from before this call"
            )),
            "{}",
            text(&reply)
        );
        assert_eq!(
            session_call(&client, &s, "(x + 1, items)").await["result"],
            "(42, [1, 2])",
            "after the {limit} limit"
        );
    }
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn the_least_recently_used_session_is_evicted_and_says_so() {
    let (client, _) = connect(&["--max-sessions", "2"]).await;
    let a = new_session(&client, "x = 'a'").await;
    let b = new_session(&client, "x = 'b'").await;
    session_call(&client, &a, "x").await; // a is now more recent than b
    let c = new_session(&client, "x = 'c'").await; // evicts b
    assert_eq!(session_call(&client, &a, "x").await["result"], "'a'");
    assert_eq!(session_call(&client, &c, "x").await["result"], "'c'");
    let said = refused(&client, &b).await;
    assert!(
        said.contains(&format!("Session {b} was closed to make room")),
        "{said}"
    );
    assert!(said.contains("at most 2 are open"), "{said}");
    assert!(said.contains("session: \"new\""), "{said}");
    client.cancel().await.unwrap();
}

/// A session call replies before its session has recorded its new state: a new session asked for
/// straight after the reply waits for that, and takes the full server's room, instead of being
/// refused as if the session were still running a call.
#[tokio::test]
async fn a_session_that_has_just_replied_makes_room_for_a_new_one() {
    let (client, _) = connect(&["--max-sessions", "1"]).await;
    let mut handle = new_session(&client, "x = -1").await;
    for i in 0..30 {
        assert_eq!(
            session_call(&client, &handle, "x").await["result"],
            format!("{}", i - 1)
        );
        handle = new_session(&client, &format!("x = {i}")).await;
    }
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn an_idle_session_expires_and_says_so() {
    let (client, _) = connect(&["--session-idle", "1"]).await;
    let idle = new_session(&client, "x = 1").await;
    session_call(&client, &idle, "x").await;
    tokio::time::sleep(Duration::from_millis(1800)).await;
    let said = refused(&client, &idle).await;
    assert!(
        said.contains(&format!(
            "Session {idle} has expired: it was closed after 1 s without a call"
        )),
        "{said}"
    );
    assert!(said.contains("session: \"new\""), "{said}");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn calls_to_one_session_queue_while_other_sessions_run_alongside() {
    let (client, _) = connect(&["--workers", "3"]).await;
    let client = Arc::new(client);
    let shared = new_session(&client, "import time\nn = 0").await;
    let mut others = Vec::new();
    for _ in 0..3 {
        others.push(new_session(&client, "import time").await);
    }

    // Three read-sleep-write increments of one variable: only one at a time gives 3.
    let started = Instant::now();
    let same: Vec<_> = (0..3)
        .map(|_| {
            let (client, shared) = (client.clone(), shared.clone());
            tokio::spawn(async move {
                session_call(&client, &shared, "v = n\ntime.sleep(0.5)\nn = v + 1").await
            })
        })
        .collect();
    for task in same {
        assert_eq!(task.await.unwrap()["error"], Value::Null);
    }
    assert!(
        started.elapsed() >= Duration::from_millis(1500),
        "they overlapped"
    );
    assert_eq!(session_call(&client, &shared, "n").await["result"], "3");

    // Three sessions sleeping 1 s each, at once: far less than the 3 s they would take in turn.
    let started = Instant::now();
    let apart: Vec<_> = others
        .into_iter()
        .map(|s| {
            let client = client.clone();
            tokio::spawn(async move { session_call(&client, &s, "time.sleep(1)").await })
        })
        .collect();
    for task in apart {
        assert_eq!(task.await.unwrap()["error"], Value::Null);
    }
    assert!(
        started.elapsed() < Duration::from_millis(2500),
        "three sessions took {:?}: they did not run side by side",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_cancelled_session_call_is_undone() {
    let (client, _) = connect(&["--timeout", "60", "--fuel", "10000000000000"]).await;
    let c = new_session(&client, "x = 41").await;
    let endless = in_session(&c, "x = 0\nwhile True: pass");
    cancel_after(&client, endless, Duration::from_millis(500)).await;
    assert_eq!(session_call(&client, &c, "x + 1").await["result"], "42");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn bad_session_arguments_are_refused() {
    let (client, _) = connect(&[]).await;
    for (args, needle) in [
        (
            json!({"code": "1", "session": 5}),
            "invalid type: integer `5`",
        ),
        (
            json!({"code": "1", "session": null, "reset": true}),
            "`reset` needs `session`",
        ),
        (
            json!({"code": "1", "reset": true}),
            "`reset` needs `session`",
        ),
        (
            json!({"code": "1", "session": "new", "reset": "yes"}),
            "invalid type: string \"yes\"",
        ),
    ] {
        let said = tool_error(&client, run_python_with(args.clone())).await;
        assert!(said.contains(needle), "{args}: {said}");
    }
    // A string that is neither "new" nor a handle is a tool error that says what to do.
    for value in ["", "a\u{0}b", &"x".repeat(5000)] {
        let said = refused(&client, value).await;
        assert!(said.contains("is not a session handle"), "{said}");
        assert!(said.len() < 400, "the reply quotes too much: {said}");
    }
    let err = client
        .call_tool(CallToolRequestParams::new("list_sessions"))
        .await
        .expect_err("there is no list_sessions");
    assert!(is_invalid_params(&err), "{err:?}");
    client.cancel().await.unwrap();
}

// Live output under a flood.

/// The progress notifications recorded so far: how many, the bytes of their messages as sent
/// (escaped in JSON), and the messages.
fn notifications(recorder: &Recorder) -> (usize, usize, Vec<String>) {
    let progress = recorder.progress.lock().unwrap();
    let messages: Vec<String> = progress
        .iter()
        .filter_map(|(_, p)| p.message.clone())
        .collect();
    let bytes = messages
        .iter()
        .map(|m| serde_json::to_string(m).unwrap().len() - 2)
        .sum();
    (progress.len(), bytes, messages)
}

#[tokio::test]
async fn a_notification_storm_is_coalesced_and_bounded() {
    use safe_python_executor::mcp::{MAX_UPDATE_BYTES, MAX_UPDATES};
    let (client, recorder) = connect(&["--allow", "sys", "--timeout", "30"]).await;
    warm_up(&client).await;
    recorder.progress.lock().unwrap().clear();
    // Stream switches at every byte, half of them escapes that JSON sends as six bytes.
    let code = "import sys\nfor i in range(200000):\n    sys.stdout.write('a')\n    sys.stderr.write('\\x1b')\n'done'";
    let reply = client.call_tool(call(code)).await.unwrap();
    assert_eq!(structured(&reply)["result"], "'done'", "{}", text(&reply));
    let (count, bytes, messages) = notifications(&recorder);
    assert!(
        (1..=MAX_UPDATES).contains(&count),
        "{count} notifications for 400000 writes"
    );
    assert!(bytes <= MAX_UPDATE_BYTES, "{bytes} bytes of notifications");
    assert!(
        messages[0].starts_with("a[stderr] \u{1b}[stdout] a"),
        "both streams share an update: {:?}",
        &messages[0][..40]
    );
    let last = messages.last().unwrap();
    assert!(last.contains("live output stopped"), "{last:?}");
    // The reply still carries the output.
    let stdout = structured(&reply)["stdout"].as_str().unwrap();
    assert!(stdout.starts_with("aaaa"), "{:?}", &stdout[..40]);
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_cancelled_call_sends_no_more_notifications() {
    let (client, recorder) = connect(&["--timeout", "60", "--fuel", "10000000000000"]).await;
    warm_up(&client).await;
    let ticking = call("import time\nwhile True:\n    print('tick' * 100)\n    time.sleep(0.005)");
    cancel_after(&client, ticking, Duration::from_millis(1000)).await;
    // What was in flight when the cancellation went out has arrived by now.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (at_cancel, ..) = notifications(&recorder);
    assert!(at_cancel > 0, "the call streamed before it was cancelled");
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let (later, ..) = notifications(&recorder);
    assert_eq!(
        later, at_cancel,
        "notifications kept coming after the cancellation"
    );
    client.cancel().await.unwrap();
}

/// An exception of tens of MB, with the memory to raise it: the reply, as the client received it,
/// stays within the output limit plus the fixed overhead, and says what it cut.
#[tokio::test]
async fn an_exception_of_tens_of_megabytes_gets_a_bounded_reply() {
    use safe_python_executor::Limits;
    use safe_python_executor::mcp::REPLY_OVERHEAD_BYTES;
    let (client, _) = connect(&["--memory", "1024", "--timeout", "30"]).await;
    let reply = client
        .call_tool(call("raise ValueError('x' * (20 * 2**20))"))
        .await
        .unwrap();
    let sent = serde_json::to_string(&reply).unwrap().len();
    assert!(
        sent <= Limits::DEFAULT_MAX_OUTPUT_BYTES + REPLY_OVERHEAD_BYTES,
        "{sent} bytes"
    );
    let error = &structured(&reply)["error"];
    assert_eq!(error["type"], "ValueError", "{}", text(&reply));
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains(" bytes) cut here"),
        "{}",
        &text(&reply)[..200]
    );
    assert!(
        text(&reply).contains("bytes) cut here"),
        "the text says what was cut too"
    );
    client.cancel().await.unwrap();
}
