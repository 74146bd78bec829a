//! Code mode in the library, on both engines, fresh and in sessions: `import tools` and what it
//! offers, results and errors, the policy and the budget, concurrency under asyncio, the time
//! limit reaching a call in flight, and hostile frames. The upstreams here are a [`ToolHost`]
//! written for the tests; the MCP server's own upstreams (real MCP servers) are tested in
//! `tests/long/code_mode.rs`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use safe_python_executor::toolcalls::{
    BoxFuture, ServerTools, ToolAccess, ToolHost, ToolHostError, ToolInfo, ToolOutput, ToolPolicy,
};
use safe_python_executor::{ImportPolicy, Limit, Limits, RunOptions, RunResult, Sandbox, Session};
use serde_json::{Map, Value, json};

use crate::common;

fn engines() -> [(&'static str, &'static Sandbox); 2] {
    [
        ("rustpython", common::sandbox()),
        ("cpython", common::cpython()),
    ]
}

/// Upstreams for the tests: `lab` has tools that answer in each of the ways a tool can, and
/// `vault` has one that must never be reached when the policy leaves it out.
#[derive(Default)]
struct Lab {
    /// Every call that reached a tool, as `server.tool`.
    reached: Mutex<Vec<String>>,
    /// Calls of `slow` still running, and those dropped (cancelled) before they finished.
    slow_running: Arc<AtomicUsize>,
    slow_cancelled: Arc<AtomicUsize>,
}

fn tool(server: &str, name: &str, schema: Value) -> ToolInfo {
    ToolInfo {
        server: server.into(),
        name: name.into(),
        description: format!("The {name} tool of {server}, for tests."),
        input_schema: schema,
    }
}

fn text(t: &str) -> Value {
    json!({"type": "text", "text": t})
}

/// Counts a `slow` call as running while it lives, and as cancelled if dropped unfinished.
struct SlowGuard {
    running: Arc<AtomicUsize>,
    cancelled: Arc<AtomicUsize>,
    finished: bool,
}

impl Drop for SlowGuard {
    fn drop(&mut self) {
        self.running.fetch_sub(1, Ordering::SeqCst);
        if !self.finished {
            self.cancelled.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl ToolHost for Lab {
    fn servers(&self) -> Vec<String> {
        vec!["lab".into(), "vault".into(), "down".into()]
    }

    fn tools(
        &self,
        server: &str,
        by: Option<Instant>,
    ) -> BoxFuture<'_, Result<Vec<ToolInfo>, String>> {
        let server = server.to_owned();
        Box::pin(async move {
            let all = self.catalogue(by).await;
            let listed = all.into_iter().find(|s| s.server == server);
            listed.map_or_else(|| Err(format!("no server {server}")), |s| s.tools)
        })
    }

    fn catalogue(&self, _by: Option<Instant>) -> BoxFuture<'_, Vec<ServerTools>> {
        let object = json!({"type": "object"});
        let echo =
            json!({"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]});
        let lab = ["echo", "two-texts", "fail", "slow", "image", "big", "plain"]
            .into_iter()
            .map(|n| {
                tool(
                    "lab",
                    n,
                    if n == "echo" {
                        echo.clone()
                    } else {
                        object.clone()
                    },
                )
            })
            .collect();
        Box::pin(async move {
            vec![
                ServerTools {
                    server: "lab".into(),
                    tools: Ok(lab),
                },
                ServerTools {
                    server: "vault".into(),
                    tools: Ok(vec![tool("vault", "get-env", object.clone())]),
                },
                ServerTools {
                    server: "down".into(),
                    tools: Err("it exited with status 1 as it started".into()),
                },
            ]
        })
    }

    fn call(
        &self,
        server: &str,
        tool: &str,
        arguments: Map<String, Value>,
    ) -> BoxFuture<'static, Result<ToolOutput, ToolHostError>> {
        self.reached
            .lock()
            .unwrap()
            .push(format!("{server}.{tool}"));
        let args = Value::Object(arguments);
        let ok = |content: Vec<Value>, structured: Option<Value>| {
            Ok(ToolOutput {
                is_error: false,
                structured,
                content,
            })
        };
        let output = match tool {
            "echo" => ok(vec![text("echoed")], Some(json!({"echo": args}))),
            "two-texts" => ok(vec![text("one"), text("two")], None),
            "plain" => ok(vec![text(&args.to_string())], None),
            "fail" => Ok(ToolOutput {
                is_error: true,
                structured: None,
                content: vec![text("the lab is closed")],
            }),
            "image" => ok(
                vec![
                    text("a pixel"),
                    json!({"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}),
                ],
                None,
            ),
            "big" => ok(vec![text(&"x".repeat(3 << 20))], None),
            "get-env" => ok(vec![text("SECRET=hunter2")], None),
            "slow" => {
                let secs = args.get("secs").and_then(Value::as_f64).unwrap_or(0.2);
                self.slow_running.fetch_add(1, Ordering::SeqCst);
                let guard = SlowGuard {
                    running: self.slow_running.clone(),
                    cancelled: self.slow_cancelled.clone(),
                    finished: false,
                };
                return Box::pin(async move {
                    // Moved whole into the future: it drops (and counts) with it.
                    let mut guard = guard;
                    tokio::time::sleep(Duration::from_secs_f64(secs)).await;
                    guard.finished = true;
                    ok(vec![text("slept")], None)
                });
            }
            _ => Err(ToolHostError::Failed {
                server: server.into(),
                reason: "no such tool".into(),
            }),
        };
        Box::pin(async move { output })
    }
}

fn options(lab: &Arc<Lab>, globs: &[&str], max_calls: u32) -> RunOptions {
    let globs: Vec<String> = globs.iter().map(|g| g.to_string()).collect();
    RunOptions {
        policy: Arc::new(ImportPolicy::with_extra(["asyncio"])),
        tools: Some(ToolAccess {
            host: lab.clone(),
            policy: Arc::new(ToolPolicy::new(&globs, max_calls).unwrap()),
        }),
        ..RunOptions::default()
    }
}

/// Runs `code` fresh on each engine, with a lab of its own, under `globs` and `max_calls`.
fn in_labs(code: &str, globs: &[&str], max_calls: u32) -> Vec<(&'static str, Arc<Lab>, RunResult)> {
    engines()
        .into_iter()
        .map(|(engine, sandbox)| {
            let lab = Arc::new(Lab::default());
            let r = common::run_in(sandbox, code, &options(&lab, globs, max_calls));
            (engine, lab, r)
        })
        .collect()
}

/// Runs `code` fresh on both engines with the lab (every tool of `lab` allowed, `vault` not),
/// and checks its value.
#[track_caller]
fn on_both(code: &str, expected: &str) -> Vec<RunResult> {
    in_labs(code, &["lab.*", "down.*"], 20)
        .into_iter()
        .map(|(engine, lab, r)| {
            assert_eq!(
                common::completed_value(code, r.clone()).as_deref(),
                Some(expected),
                "{engine}: {code}"
            );
            assert!(
                !lab.reached
                    .lock()
                    .unwrap()
                    .iter()
                    .any(|c| c.starts_with("vault.")),
                "{engine}: a tool outside the policy was reached"
            );
            r
        })
        .collect()
}

#[test]
fn without_upstreams_tools_is_not_importable() {
    for (engine, sandbox) in engines() {
        let r = common::run_in(sandbox, "import tools", &RunOptions::default());
        assert_eq!(
            r.error().map(|e| e.kind.as_str()),
            Some("ImportError"),
            "{engine}: {r:?}"
        );
    }
}

#[test]
fn a_call_returns_structured_content_as_a_dict() {
    let results = on_both("import tools\ntools.lab.echo(x=3)", "{'echo': {'x': 3}}");
    for r in results {
        assert_eq!(r.tool_calls.len(), 1);
        assert_eq!(r.tool_calls[0].server, "lab");
        assert_eq!(r.tool_calls[0].tool, "echo");
        assert!(r.tool_calls[0].ok);
        let report = serde_json::to_value(&r).unwrap();
        assert_eq!(report["tool_calls"]["count"], 1, "{report}");
        assert_eq!(report["tool_calls"]["calls"][0]["tool"], "echo");
    }
}

#[test]
fn text_blocks_are_joined_and_names_become_identifiers() {
    on_both("import tools\ntools.lab.two_texts()", "'one\\ntwo'");
    on_both(
        "import tools\ntools.call('lab', 'two-texts')",
        "'one\\ntwo'",
    );
    on_both(
        "from tools import call\ncall('lab', 'plain', a=[1, None, 'é'])",
        "'{\"a\":[1,null,\"é\"]}'",
    );
}

#[test]
fn images_come_back_as_objects() {
    on_both(
        "import tools\nr = tools.lab.image()\n(r[0], type(r[1]).__name__, r[1].mime_type, r[1].data[:4])",
        "('a pixel', 'Image', 'image/png', b'\\x89PNG')",
    );
}

#[test]
fn a_tool_error_is_caught_as_tool_error() {
    on_both(
        "import tools\ntry:\n    tools.lab.fail()\nexcept tools.ToolError as e:\n    m = str(e)\nm",
        "'lab.fail: the lab is closed'",
    );
}

#[test]
fn a_tool_outside_the_policy_is_refused_before_the_upstream() {
    on_both(
        "import tools\ntry:\n    tools.call('vault', 'get-env')\nexcept PermissionError as e:\n    m = str(e)\nm",
        "\"the tool 'vault.get-env' may not be called from this sandbox\"",
    );
    // Nor is it listed, or reachable by attribute.
    on_both(
        "import tools\n[t.name for t in tools.search('')]",
        "['big', 'echo', 'fail', 'image', 'plain', 'slow', 'two-texts']",
    );
    on_both(
        "import tools\ntry:\n    tools.vault.get_env\nexcept AttributeError:\n    m = 'hidden'\nm",
        "'hidden'",
    );
}

#[test]
fn the_budget_is_enforced_per_run() {
    let code = "import tools\nn = 0\ntry:\n    while True:\n        tools.lab.echo(x=n)\n        n += 1\nexcept tools.CallBudgetExceeded:\n    pass\nn";
    for (engine, lab, r) in in_labs(code, &[], 7) {
        assert_eq!(r.result(), Some("7"), "{engine}: {r:?}");
        assert_eq!(lab.reached.lock().unwrap().len(), 7, "{engine}");
        assert_eq!(r.tool_calls.len(), 7, "{engine}");
    }
}

#[test]
fn many_calls_in_one_run_keep_the_reply_small() {
    let code = "import tools\ntotal = 0\nfor i in range(200):\n    total += tools.lab.echo(x=i)['echo']['x']\ntotal";
    for (engine, _, r) in in_labs(code, &[], 1000) {
        assert_eq!(r.result(), Some("19900"), "{engine}: {r:?}");
        let report = serde_json::to_string(&r).unwrap();
        assert!(
            report.len() < 8 << 10,
            "{engine}: a {}-byte report",
            report.len()
        );
        assert!(report.contains("\"count\":200"), "{engine}");
    }
}

#[test]
fn an_unavailable_upstream_and_an_unknown_tool_are_python_errors() {
    on_both(
        "import tools\ntry:\n    tools.call('down', 'x')\nexcept tools.UpstreamError as e:\n    m = str(e)\n'exited' in m",
        "True",
    );
    on_both(
        "import tools\ntry:\n    tools.call('lab', 'nope')\nexcept ValueError as e:\n    m = str(e)\nm",
        "\"the upstream server 'lab' has no tool 'nope'\"",
    );
    on_both(
        "import tools\ntry:\n    tools.call('nowhere', 'x')\nexcept ValueError as e:\n    m = str(e)\nm.split(' (')[0]",
        "\"there is no upstream server 'nowhere'\"",
    );
}

#[test]
fn a_result_over_the_limit_is_refused_not_delivered() {
    on_both(
        "import tools\ntry:\n    tools.lab.big()\nexcept ValueError as e:\n    m = str(e)\n'over this sandbox' in m",
        "True",
    );
}

#[test]
fn hostile_arguments_and_frames_get_python_errors() {
    let cases = [
        // Not JSON.
        ("tools.lab.plain(x=object())", "TypeError"),
        ("tools.lab.plain(x=float('nan'))", "ValueError"),
        // Deeper than the host parses, and larger than it reads.
        (
            "a = []\nfor _ in range(100000):\n    a = [a]\ntools.lab.plain(x=a)",
            "ValueError",
        ),
        (
            "d = {}\nfor _ in range(150):\n    d = {'k': d}\ntools.lab.plain(x=d)",
            "ValueError",
        ),
        ("tools.lab.plain(x='y' * (2 << 20))", "ValueError"),
        // Names that are not tools, or not strings.
        ("tools.call('lab', '../../etc')", "ValueError"),
        ("tools.call(1, 2)", "TypeError"),
        // Frames forged by hand.
        (
            "tools._service(b'W' + b'{\"ids\": [12345], \"timeout\": 0}')",
            "OK",
        ),
        (
            "tools._service(b'T' + b'{\"server\": \"vault\", \"tool\": \"get-env\", \"arguments\": {}}')",
            "OK",
        ),
        ("tools._service(b'T' + b'[1, 2')", "OK"),
        ("tools._service(b'Z')", "OSError"),
        ("tools._service(b'')", "OSError"),
        ("tools._service(b'Mos')", "OSError"),
    ];
    let ended = |r: &RunResult| match (&r.outcome, r.error()) {
        (_, Some(e)) => e.kind.clone(),
        (safe_python_executor::Outcome::Completed { .. }, None) => "OK".into(),
        (other, None) => format!("{other:?}"),
    };
    let rt = common::runtime();
    for (engine, sandbox) in engines() {
        // Fresh, and all in one session, which must still work after them.
        let lab = Arc::new(Lab::default());
        let opts = options(&lab, &["lab.*"], 100);
        let mut session = rt.block_on(Session::new(sandbox)).expect("a session");
        for (code, expected) in cases {
            let code = format!("import tools\n{code}");
            let fresh = common::run_in(sandbox, &code, &opts);
            let kept = rt
                .block_on(session.run(&code, &opts))
                .expect("no host fault")
                .result;
            for (how, r) in [("fresh", fresh), ("in a session", kept)] {
                let got = ended(&r);
                assert!(
                    expected.split('|').any(|e| e == got),
                    "{engine}, {how}: {code:?} ended as {got}, not {expected}: {r:?}"
                );
            }
        }
        let r = rt
            .block_on(session.run("tools.lab.echo(x=1)", &opts))
            .unwrap()
            .result;
        assert_eq!(r.result(), Some("{'echo': {'x': 1}}"), "{engine}: {r:?}");
        let reached = lab.reached.lock().unwrap();
        assert!(
            !reached.iter().any(|c| c.starts_with("vault.")),
            "{engine}: the vault was reached: {reached:?}"
        );
    }
}

#[test]
fn asyncio_runs_calls_concurrently() {
    // Five calls of 0.3 s each: concurrently well under the 1.5 s they take one after another.
    let code = "import asyncio, time, tools\nasync def main():\n    t = time.monotonic()\n    r = await asyncio.gather(*(tools.lab.slow.acall(secs=0.3) for _ in range(5)))\n    return r, time.monotonic() - t\nr, took = asyncio.run(main())\n(r, took < 1.2)";
    on_both(
        code,
        "(['slept', 'slept', 'slept', 'slept', 'slept'], True)",
    );
    on_both(
        "import tools\nawait tools.acall('lab', 'echo', x=1)",
        "{'echo': {'x': 1}}",
    );
}

#[test]
fn the_time_limit_stops_and_cancels_a_call_in_flight() {
    for (engine, sandbox) in engines() {
        let lab = Arc::new(Lab::default());
        let mut opts = options(&lab, &[], 20);
        opts.limits = Limits {
            timeout: Duration::from_millis(700),
            ..Limits::default()
        };
        let r = common::run_in(sandbox, "import tools\ntools.lab.slow(secs=30)", &opts);
        assert_eq!(r.limit(), Some(Limit::Timeout), "{engine}: {r:?}");
        assert!(r.stats.wall_ms < 3000, "{engine}: {} ms", r.stats.wall_ms);
        assert_eq!(r.tool_calls.len(), 1, "{engine}");
        assert!(!r.tool_calls[0].ok, "{engine}");
        // The call's future was dropped: the upstream call was cancelled.
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(lab.slow_cancelled.load(Ordering::SeqCst), 1, "{engine}");
        assert_eq!(lab.slow_running.load(Ordering::SeqCst), 0, "{engine}");
    }
}

#[test]
fn help_and_search_describe_tools() {
    on_both(
        "import tools\nhelp(tools.lab.echo)\n'x: int' in tools.lab.echo.__doc__",
        "True",
    );
    for r in on_both(
        "import tools\nrepr(tools.search('image'))[:40]",
        "'tools.lab.image()\\n\\nThe image tool of lab'",
    ) {
        assert!(r.stdout.is_empty());
    }
    let results = on_both("import tools\nhelp(tools.lab.echo)\n1", "1");
    for r in results {
        assert!(r.stdout.contains("tools.lab.echo(x: int)"), "{}", r.stdout);
        assert!(r.stdout.contains("\"required\""), "{}", r.stdout);
    }
}

#[test]
fn calls_work_in_sessions_and_a_rolled_back_call_is_still_reported() {
    for (engine, sandbox) in engines() {
        let lab = Arc::new(Lab::default());
        let opts = options(&lab, &[], 20);
        let mut limited = opts.clone();
        limited.limits = Limits {
            timeout: Duration::from_millis(700),
            ..Limits::default()
        };
        let rt = common::runtime();
        let mut session = rt.block_on(Session::new(sandbox)).expect("a session");
        let run = |session: &mut Session, code: &str, opts: &RunOptions| {
            rt.block_on(session.run(code, opts))
                .expect("no host fault")
                .result
        };
        let r = run(
            &mut session,
            "import tools\nn = tools.lab.echo(x=1)['echo']['x']",
            &opts,
        );
        assert!(!r.is_failure(), "{engine}: {r:?}");
        // Stopped by the time limit after a call went through: rolled back, and reported.
        let r = run(
            &mut session,
            "n = 100\ntools.lab.echo(x=2)\nimport time\nwhile True: pass",
            &limited,
        );
        assert_eq!(r.limit(), Some(Limit::Timeout), "{engine}: {r:?}");
        assert_eq!(r.tool_calls.len(), 1, "{engine}: {r:?}");
        assert!(r.tool_calls[0].ok);
        let r = run(&mut session, "n + tools.lab.echo(x=5)['echo']['x']", &opts);
        assert_eq!(r.result(), Some("6"), "{engine}: {r:?}");
        assert_eq!(lab.reached.lock().unwrap().len(), 3, "{engine}");
    }
}
