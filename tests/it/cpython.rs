//! The CPython engine through the library: the same contract as RustPython's (results, errors,
//! imports, limits, live output), and the data stack it exists for.

use std::sync::{Arc, Mutex};

use crate::common::{self, client, cpython, spawn};
use safe_python_executor::{
    ImportPolicy, Limit, Limits, Outcome, RunOptions, RunResult, Session, Stream,
};

fn run_with(code: &str, options: &RunOptions) -> RunResult {
    common::run_in(cpython(), code, options)
}

fn run(code: &str) -> RunResult {
    run_with(code, &RunOptions::default())
}

#[track_caller]
fn value(code: &str) -> Option<String> {
    common::completed_value(code, run(code))
}

fn allowing(modules: &[&str]) -> RunOptions {
    RunOptions {
        policy: Arc::new(ImportPolicy::with_extra(modules)),
        ..RunOptions::default()
    }
}

#[test]
fn cpython_prints_and_returns_the_last_value() {
    // `sys` is not allowed by default: the import is refused before anything prints.
    let refused = run("import sys\nprint(2**100)");
    assert_eq!(refused.stdout, "", "{refused:#?}");
    assert_eq!(
        refused.error().map(|e| e.kind.as_str()),
        Some("ImportError")
    );
    let result = run("print(2**100)\n(3, 15)");
    assert_eq!(result.stdout, "1267650600228229401496703205376\n");
    assert_eq!(result.result(), Some("(3, 15)"));
}

#[test]
fn cpython_gives_the_value_of_a_final_assignment() {
    assert_eq!(value("x = 1\nx += 41").as_deref(), Some("42"));
    assert_eq!(value("a, b = 1, 'x'").as_deref(), Some("(1, 'x')"));
    assert_eq!(value("y: int = 7").as_deref(), Some("7"));
    let counter = "class C:\n    count = 0\na = C()\na.count += 1";
    assert_eq!(value(counter).as_deref(), Some("1"));
    assert_eq!(value("d = {}\nd['k'] = 5").as_deref(), Some("5"));
    assert_eq!(value("d = {'k': 1}\nd['k'] *= 3").as_deref(), Some("3"));
    assert_eq!(value("print('hi')"), None);
}

#[test]
fn cpython_reports_python_errors_with_their_traceback() {
    let result = run("def f():\n    return 1 / 0\nf()");
    let error = result.error().expect("an error");
    assert_eq!(error.kind, "ZeroDivisionError");
    assert_eq!(error.message, "division by zero");
    assert!(
        error.traceback.contains("line 2, in f"),
        "{}",
        error.traceback
    );
    assert!(
        error.traceback.contains("return 1 / 0"),
        "{}",
        error.traceback
    );
    assert!(!error.traceback.contains("_install"), "{}", error.traceback);
    let refused = run("import os");
    let traceback = &refused.error().expect("an error").traceback;
    assert!(
        traceback.starts_with("Traceback (most recent call last):\n  File \"<code>\", line 1"),
        "{traceback}"
    );
    for driver in ["<turn", "checked_import", "hook", "<reactor>"] {
        assert!(!traceback.contains(driver), "{driver} in {traceback}");
    }
    let exit = run("raise SystemExit(3)");
    assert_eq!(exit.error().map(|e| e.kind.as_str()), Some("SystemExit"));
    let syntax = run("def (:");
    assert_eq!(syntax.error().map(|e| e.kind.as_str()), Some("SyntaxError"));
}

#[test]
fn cpython_imports_only_what_the_policy_allows() {
    for refused in [
        "import os",
        "import socket",
        "from os import path",
        "import numpy",
    ] {
        let result = run(refused);
        let error = result
            .error()
            .unwrap_or_else(|| panic!("{refused}: {result:#?}"));
        assert_eq!(error.kind, "ImportError", "{refused}: {result:#?}");
        assert!(
            error.message.contains("not allowed"),
            "{refused}: {error:?}"
        );
        // The driver asks the host for the allowed modules only to word a refusal.
        assert!(
            error.message.contains("(allowed: _pycodecs, abc, ")
                && error.message.contains(", math, "),
            "{refused}: {error:?}"
        );
    }
    for allowed in [
        "import math",
        "import collections.abc",
        "from datetime import date",
    ] {
        let result = run(allowed);
        assert!(!result.is_failure(), "{allowed}: {result:#?}");
    }
}

#[test]
fn cpython_parses_dates_with_strptime() {
    let code = "from datetime import datetime\nimport time\n\
                (datetime.strptime('2026-12-03 17:05', '%Y-%m-%d %H:%M').isoformat(), \
                 time.strptime('03/12/2026', '%d/%m/%Y').tm_yday)";
    assert_eq!(value(code).as_deref(), Some("('2026-12-03T17:05:00', 337)"));
    let refused = run("import _strptime");
    assert!(
        !refused.is_failure(),
        "the half of an allowed module: {refused:#?}"
    );
}

#[test]
fn cpython_runs_numpy_and_pandas_when_allowed() {
    let code = "import numpy as np\nimport pandas as pd\n\
                df = pd.DataFrame({'a': np.arange(4), 'b': [1.5, 2.5, 3.5, 4.5]})\n\
                print(df.describe().loc['mean'].to_dict())\nint(df['a'].sum())";
    let result = run_with(code, &allowing(&["numpy", "pandas"]));
    assert!(!result.is_failure(), "{result:#?}");
    assert_eq!(result.stdout, "{'a': 1.5, 'b': 3.0}\n");
    assert_eq!(result.result(), Some("6"));
}

#[test]
fn cpython_stops_at_every_limit() {
    let limited = |limits: Limits, code: &str| {
        run_with(
            code,
            &RunOptions {
                limits,
                ..RunOptions::default()
            },
        )
    };
    let short = Limits {
        timeout: std::time::Duration::from_millis(500),
        ..Limits::default()
    };
    let endless = limited(short.clone(), "while True: pass");
    assert_eq!(endless.limit(), Some(Limit::Timeout), "{endless:#?}");
    let sleeper = limited(short, "import time\ntime.sleep(30)");
    assert_eq!(sleeper.limit(), Some(Limit::Timeout), "{sleeper:#?}");
    let fuel = Limits {
        fuel: 50_000_000,
        ..Limits::default()
    };
    let burnt = limited(fuel, "while True: pass");
    assert_eq!(burnt.limit(), Some(Limit::Fuel), "{burnt:#?}");
    let memory = Limits {
        memory_bytes: 128 << 20,
        ..Limits::default()
    };
    let hog = limited(memory, "x = []\nwhile True: x.append(' ' * 10**6)");
    assert!(matches!(hog.limit(), Some(Limit::Memory)), "{hog:#?}");
    let output = Limits {
        max_output_bytes: 10_000,
        ..Limits::default()
    };
    let chatty = limited(output, "while True: print('x' * 100)");
    assert_eq!(chatty.limit(), Some(Limit::Output), "{chatty:#?}");
}

#[test]
fn cpython_streams_output_as_it_is_written() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let options = RunOptions {
        observer: Some(Arc::new(move |stream: Stream, bytes: &[u8]| {
            sink.lock().unwrap().push((stream, bytes.to_vec()));
        })),
        ..allowing(&["sys"])
    };
    let result = run_with(
        "import sys\nprint('out')\nprint('err', file=sys.stderr)",
        &options,
    );
    assert!(!result.is_failure(), "{result:#?}");
    let seen = seen.lock().unwrap();
    let text = |stream| {
        seen.iter()
            .filter(|(s, _)| *s == stream)
            .flat_map(|(_, b)| b.clone())
            .collect::<Vec<u8>>()
    };
    assert_eq!(text(Stream::Stdout), b"out\n", "{seen:?}");
    assert_eq!(text(Stream::Stderr), b"err\n", "{seen:?}");
}

#[test]
fn cpython_sees_no_host_file() {
    let result = run_with("import os\nsorted(os.listdir('/'))", &allowing(&["os"]));
    assert!(
        matches!(
            result.outcome,
            Outcome::Raised(_) | Outcome::Completed { .. }
        ),
        "{result:#?}"
    );
    for path in [
        "/etc/passwd",
        "/proc/self/environ",
        "../../etc/passwd",
        "/usr/local/lib/../../../etc/passwd",
    ] {
        let result = run(&format!("open({path:?}).read()"));
        let error = result
            .error()
            .unwrap_or_else(|| panic!("{path}: {result:#?}"));
        assert!(
            ["FileNotFoundError", "PermissionError", "OSError"].contains(&error.kind.as_str()),
            "{path}: {error:?}"
        );
        // A run given no files is told so, as on RustPython.
        assert!(
            error.message.contains(safe_python_protocol::NO_FILES_HERE),
            "{path}: {}",
            error.message
        );
        // The shim that says so leaves no frame in the traceback, as RustPython's native `open`.
        assert!(!error.traceback.contains("<files>"), "{}", error.traceback);
    }
}

#[test]
fn cpython_sessions_keep_state_and_undo_a_stopped_call() {
    let runtime = common::runtime();
    let mut session = runtime
        .block_on(Session::new(cpython()))
        .expect("a session");
    let mut call = |code: &str, timeout_ms: u64| {
        let options = RunOptions {
            limits: Limits {
                timeout: std::time::Duration::from_millis(timeout_ms),
                ..Limits::default()
            },
            ..allowing(&["numpy"])
        };
        runtime
            .block_on(session.run(code, &options))
            .expect("no host fault")
    };
    let first = call("import numpy as np\nx = 41\nxs = np.arange(3)", 10_000);
    assert!(!first.result.is_failure(), "{first:#?}");
    let stopped = call("x = 0\nxs = None\nwhile True: pass", 500);
    assert!(stopped.rolled_back, "{stopped:#?}");
    let after = call("def f():\n    return x + 1\n(f(), int(xs.sum()))", 10_000);
    assert_eq!(after.result.result(), Some("(42, 3)"), "{after:#?}");
    let fresh = run("x");
    assert_eq!(
        fresh.error().map(|e| e.kind.as_str()),
        Some("NameError"),
        "{fresh:#?}"
    );
}

/// The front ends take `--engine cpython`: the suite's cache directory holds the engine.
pub(crate) fn engine_args(extra: &[&'static str]) -> Vec<&'static str> {
    common::cpython_artifacts();
    [&["--engine", "cpython"], extra].concat()
}

#[test]
fn sandbox_run_runs_pandas_on_the_cpython_engine() {
    let code = "import pandas as pd\ndf = pd.DataFrame({'city': ['Oslo', 'Lima', 'Oslo'], 't': [3, 19, 5]})\n\
                df.groupby('city')['t'].mean().to_dict()";
    let args = engine_args(&["--allow", "pandas", "-c", code]);
    let out = spawn::output(spawn::sandbox_run(&args), None);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(stdout, "{'Lima': 19.0, 'Oslo': 4.0}\n");
}

#[tokio::test]
async fn the_mcp_server_runs_the_cpython_engine() {
    let args = engine_args(&["--allow", "numpy"]);
    let client = client::connect((), spawn::mcp_server(&args)).await;
    let reply = client
        .call_tool(client::run_python(
            "import numpy as np\nprint(np.linspace(0, 1, 3))\nnp.float64(2.5) * 2",
            None,
        ))
        .await
        .expect("a reply");
    let body = client::structured(&reply);
    assert_eq!(body["stdout"], "[0.  0.5 1. ]\n", "{body}");
    assert_eq!(body["result"], "np.float64(5.0)", "{body}");
    client.cancel().await.expect("the server stops");
}

#[test]
fn without_the_engine_installed_each_call_says_how_to_install_it() {
    let empty = common::temp_dir("no-cpython");
    let mut command = spawn::sandbox_run(&["--engine", "cpython", "-c", "1"]);
    command.arg("--cache-dir").arg(empty.path());
    let out = spawn::output(command, None);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    assert!(
        stderr.contains("the CPython engine is not installed"),
        "{stderr}"
    );
    assert!(stderr.contains("--engine cpython --check"), "{stderr}");
}

#[test]
fn cpython_fresh_calls_start_from_the_template_and_share_nothing() {
    let changed = run("import math, random\nmath.pi = 3\nrandom.seed(1)\nleak = 1");
    assert!(!changed.is_failure(), "{changed:#?}");
    assert_eq!(
        value("import math\nmath.pi").as_deref(),
        Some("3.141592653589793")
    );
    assert_eq!(
        run("leak").error().map(|e| e.kind.as_str()),
        Some("NameError")
    );
    let draw = "import random\nrandom.random()";
    assert_ne!(value(draw), value(draw), "each fresh call is seeded afresh");
}

/// Code may compile an AST, as in CPython, under any file name but the standard library's: the
/// audit hook cannot see an AST's file name, so the driver's `compile` checks it.
#[test]
fn compiling_an_ast_works_but_not_under_a_standard_library_name() {
    let options = RunOptions {
        policy: Arc::new(ImportPolicy::with_extra(["ast"])),
        ..RunOptions::default()
    };
    let code = "import ast\neval(compile(ast.parse('6 * 7', mode='eval'), '<mine>', 'eval'))";
    let r = common::run_in(common::cpython(), code, &options);
    assert_eq!(common::completed_value(code, r).as_deref(), Some("42"));
    for forged in [
        "'/usr/local/lib/python315.zip/json/x.py'",
        "b'/usr/local/lib/python315.zip/json/x.py'",
        "type('S', (str,), {'startswith': lambda *a: False})('<frozen x>')",
    ] {
        let code = format!(
            "import ast\ncode = compile(ast.parse('import socket'), {forged}, 'exec')\nexec(code)"
        );
        let r = common::run_in(common::cpython(), &code, &options);
        let error = r.error().unwrap_or_else(|| panic!("{forged}: {r:#?}"));
        assert_eq!(error.kind, "RuntimeError", "{forged}: {error:#?}");
    }
}

/// A call's turn goes straight to the driver's `run`: through the reactor, each turn's source
/// would be parsed, compiled and registered in `linecache` (half the fuel of a fresh `x = 1`),
/// which leaves one more `<turn N>` entry there per call.
#[test]
fn a_calls_turn_is_not_compiled_by_the_reactor() {
    let runtime = common::runtime();
    let mut session = runtime
        .block_on(Session::new(cpython()))
        .expect("a session");
    let turns =
        "import linecache\nsum(k[0].startswith('<turn') for k in linecache._interactive_cache)";
    let options = allowing(&["linecache"]);
    let counts: Vec<_> = (0..3)
        .map(|_| {
            let r = runtime.block_on(session.run(turns, &options));
            let r = r.expect("no host fault").result;
            common::completed_value(turns, r)
        })
        .collect();
    assert!(counts[0].is_some(), "{counts:?}");
    assert!(counts.windows(2).all(|w| w[0] == w[1]), "{counts:?}");
}
