//! Cancelling runs on the CPython engine, as `session.rs` and `mcp.rs` do on RustPython: dropping a
//! run's future stops it at the guest's next epoch tick, whether the code loops in Python, sleeps,
//! or computes inside numpy's compiled code; a session survives a cancelled call with its state as
//! before the call; and `notifications/cancelled` frees the call's worker at once.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use safe_python_executor::{ImportPolicy, Limits, RunOptions, Session, Stream};
use tokio::sync::Notify;

use crate::common::client::{cancel_after, connect, new_session, run_python, session_call};
use crate::common::{self, Each, Engine};

/// Code that runs for minutes once it has printed its first line (before which it may take a
/// while: importing numpy in a fresh instance takes seconds), named by what keeps it busy.
const ENDLESS: [(&str, &str); 3] = [
    (
        "a busy loop",
        "print('started', flush=True)\nwhile True: pass",
    ),
    (
        "a sleep",
        "import time\nprint('started', flush=True)\ntime.sleep(600)",
    ),
    (
        "numpy",
        "import numpy as np\nm = np.random.default_rng(0).random((2000, 2000))\n\
         print('started', flush=True)\nnp.linalg.svd(m)",
    ),
];

/// How long a call runs, once started, before it is cancelled.
const RUNS_FOR: Duration = Duration::from_millis(300);
/// How late after that the run may stop: many epoch ticks (5 ms) on a busy machine.
const PROMPTLY: Duration = Duration::from_secs(1);

/// Limits no case comes near: whatever stops a run here is the cancellation.
fn patient() -> RunOptions {
    RunOptions {
        limits: Limits {
            timeout: Duration::from_secs(120),
            fuel: 10_000_000_000_000,
            memory_bytes: 1 << 30,
            ..Limits::default()
        },
        policy: Arc::new(ImportPolicy::with_extra(["numpy"])),
        ..RunOptions::default()
    }
}

/// `patient()`, with `started` told when the code first writes to stdout.
fn watched(started: &Arc<Notify>) -> RunOptions {
    let started = started.clone();
    RunOptions {
        observer: Some(Arc::new(move |stream: Stream, _: &[u8]| {
            if stream == Stream::Stdout {
                started.notify_one();
            }
        })),
        ..patient()
    }
}

/// Polls `run` until `started` fires and `RUNS_FOR` more has passed, then drops it, which must
/// take effect within `PROMPTLY` of that point.
async fn cancel<T: std::fmt::Debug>(what: &str, started: &Notify, run: impl Future<Output = T>) {
    let due = {
        tokio::pin!(run);
        tokio::select! {
            ended = &mut run => panic!("{what}: the run ended before it was cancelled: {ended:?}"),
            due = async {
                started.notified().await;
                let due = tokio::time::Instant::now() + RUNS_FOR;
                tokio::time::sleep_until(due).await;
                due
            } => due,
        }
    };
    let late = due.elapsed();
    assert!(late < PROMPTLY, "{what}: the run stopped {late:?} late");
}

#[test]
fn cpython_fresh_runs_are_cancelled_promptly() {
    let sandbox = common::cpython();
    common::runtime().block_on(async {
        for (what, code) in ENDLESS {
            let started = Arc::new(Notify::new());
            let options = watched(&started);
            let began = Instant::now();
            cancel(what, &started, sandbox.run(code, &options)).await;
            eprintln!("{what}: cancelled after {:?}", began.elapsed());
        }
        let next = sandbox.run("6 * 7", &RunOptions::default()).await.unwrap();
        assert_eq!(next.result(), Some("42"), "{next:#?}");
    });
}

#[test]
fn cpython_cancelled_session_calls_are_undone() {
    common::runtime().block_on(async {
        let mut session = Session::new(common::cpython()).await.expect("a session");
        let first = session
            .run("import numpy as np\nx = 41\nxs = np.arange(3)", &patient())
            .await
            .unwrap();
        assert!(!first.result.is_failure(), "{first:#?}");
        for (what, code) in ENDLESS {
            let started = Arc::new(Notify::new());
            let options = watched(&started);
            let code = format!("x = 0\nxs = None\n{code}");
            cancel(what, &started, session.run(&code, &options)).await;
            let after = session
                .run("(x + 1, int(xs.sum()))", &patient())
                .await
                .unwrap();
            assert_eq!(after.result.result(), Some("(42, 3)"), "{what}: {after:#?}");
        }
    });
}

/// A CPython server with one worker and limits no case comes near.
async fn server() -> common::client::Client {
    let mut command = common::spawn::mcp_server(&[
        "--workers",
        "1",
        "--timeout",
        "120",
        "--fuel",
        "10000000000000",
        "--memory",
        "1024",
        "--allow",
        "numpy",
    ]);
    command.args(Engine::CPython.flags());
    let client = connect((), command).await;
    client
        .call_tool(run_python("None", None))
        .await
        .expect("a first call");
    client
}

/// How long each endless case runs before its cancellation is sent: past numpy's import.
fn mcp_runs_for(what: &str) -> Duration {
    match what {
        "numpy" => Duration::from_secs(3),
        _ => Duration::from_millis(500),
    }
}

#[tokio::test]
async fn cpython_mcp_cancellation_frees_the_worker() {
    let client = server().await;
    for (what, code) in ENDLESS {
        cancel_after(&client, run_python(code, None), mcp_runs_for(what)).await;
        // With one worker, this only runs once the cancelled run has let go of it.
        let started = Instant::now();
        let next = client.call_tool(run_python("'free'", None)).await.unwrap();
        let waited = started.elapsed();
        assert_eq!(
            next.structured_content.as_ref().map(|v| &v["result"]),
            Some(&serde_json::json!("'free'")),
            "{what}: {next:?}"
        );
        assert!(
            waited < Duration::from_secs(3),
            "{what}: the next call waited {waited:?}"
        );
    }
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn cpython_mcp_cancelled_session_call_is_undone() {
    let client = server().await;
    let session = new_session(&client, "import numpy as np\nx = 41\nxs = np.arange(3)").await;
    for (what, code) in ENDLESS {
        let code = format!("x = 0\nxs = None\n{code}");
        cancel_after(
            &client,
            run_python(&code, Some(&session)),
            mcp_runs_for(what),
        )
        .await;
        // The session is busy until the cancelled call has stopped and been undone.
        let started = Instant::now();
        let after = session_call(&client, &session, "(x + 1, int(xs.sum()))").await;
        let waited = started.elapsed();
        assert_eq!(after["result"], "(42, 3)", "{what}: {after}");
        assert!(
            waited < Duration::from_secs(5),
            "{what}: the next call waited {waited:?}"
        );
    }
    client.cancel().await.unwrap();
}
