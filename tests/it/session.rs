//! Sessions in process: the real guest in real wasmtime, many calls on one instance, the rollback
//! that undoes a call stopped by a limit, and the registry's life cycle of a call (the one the MCP
//! tool and the REPL share). The attacks on sessions over MCP are in tests/adversarial.rs.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::{runtime, sandbox, tight};
use safe_python_executor::session::registry::{
    REPLY_WAIT, RepliesOut, SessionError, SessionId, SessionLimits, SessionRequest, Sessions, Start,
};
use safe_python_executor::{ImportPolicy, Limit, Limits, RunOptions, Session, SessionRun};

fn session() -> Session {
    runtime()
        .block_on(Session::new(sandbox()))
        .expect("a session")
}

fn run_in(session: &mut Session, code: &str, options: &RunOptions) -> SessionRun {
    runtime()
        .block_on(session.run(code, options))
        .expect("no host fault")
}

/// Runs code that must complete and returns its result.
#[track_caller]
fn value(session: &mut Session, code: &str) -> Option<String> {
    let run = run_in(session, code, &RunOptions::default());
    assert!(
        !run.result.is_failure() && !run.rolled_back,
        "{code:?}: {run:#?}"
    );
    run.result.result().map(str::to_owned)
}

fn with_limits(limits: Limits) -> RunOptions {
    RunOptions {
        limits,
        ..RunOptions::default()
    }
}

#[test]
fn globals_functions_classes_and_imports_persist() {
    let mut s = session();
    value(
        &mut s,
        "import math\nx = 20\ndef double(v):\n    return 2 * v\nclass Box:\n    def __init__(self, v): self.v = v",
    );
    assert_eq!(value(&mut s, "double(x) + 2").as_deref(), Some("42"));
    assert_eq!(
        value(&mut s, "b = Box(math.floor(math.pi))\nb.v").as_deref(),
        Some("3")
    );
    assert_eq!(value(&mut s, "b.v + x").as_deref(), Some("23"));
    assert_eq!(s.calls(), 4);
}

#[test]
fn a_python_exception_keeps_what_ran_before_it() {
    let mut s = session();
    let run = run_in(
        &mut s,
        "kept = 'yes'\n1 / 0\nnot_reached = 1",
        &RunOptions::default(),
    );
    assert_eq!(run.result.error().unwrap().kind, "ZeroDivisionError");
    assert!(!run.rolled_back);
    assert_eq!(value(&mut s, "kept").as_deref(), Some("'yes'"));
    assert_eq!(
        value(&mut s, "'not_reached' in globals()").as_deref(),
        Some("False")
    );
}

#[test]
fn tracebacks_show_the_source_of_the_call_that_defined_the_function() {
    let mut s = session();
    value(&mut s, "def broken():\n    return {}['missing']");
    let run = run_in(&mut s, "x = 1\nbroken()", &RunOptions::default());
    let traceback = &run.result.error().unwrap().traceback;
    assert!(
        traceback.contains("File \"<call 2>\", line 2, in <module>"),
        "{traceback}"
    );
    assert!(
        traceback.contains("File \"<call 1>\", line 2, in broken\n    return {}['missing']"),
        "{traceback}"
    );
}

/// Sets state, runs `code` under `limits` (it must hit `limit` after changing that state), and
/// checks the session is back where it was, and goes on working.
#[track_caller]
fn rolled_back_after(limit: Limit, code: &str, options: RunOptions) {
    let mut s = session();
    value(&mut s, "x = 41\nitems = [1, 2, 3]");
    let run = run_in(
        &mut s,
        &format!("x = 100\nitems.append(4)\n{code}"),
        &options,
    );
    assert_eq!(run.result.limit(), Some(limit), "{run:#?}");
    assert!(run.rolled_back, "{run:#?}");
    assert_eq!(
        value(&mut s, "(x + 1, items)").as_deref(),
        Some("(42, [1, 2, 3])"),
        "after {limit:?}"
    );
    // The restored session keeps working, and can be stopped and restored again.
    value(&mut s, "y = x * 2");
    let again = run_in(&mut s, &format!("x = 0\n{code}"), &options);
    assert!(again.rolled_back);
    assert_eq!(value(&mut s, "(x, y)").as_deref(), Some("(41, 82)"));
}

#[test]
fn a_rollback_restores_every_byte_of_memory() {
    let mut s = session();
    value(&mut s, "data = [str(i) for i in range(50000)]\nx = 1");
    value(&mut s, "del data[::2]\nx = 2");
    let before = s.memory().expect("instantiated").to_vec();
    let run = run_in(
        &mut s,
        "data.extend(range(10**5))\nx = 3\nmore = 'y' * 10**6\nwhile True: pass",
        &with_limits(Limits {
            timeout: Duration::from_millis(500),
            ..Limits::default()
        }),
    );
    assert!(run.rolled_back, "{run:#?}");
    let after = s.memory().expect("restored");
    assert_eq!(after.len(), before.len());
    let differing = after
        .chunks(4096)
        .zip(before.chunks(4096))
        .filter(|(a, b)| a != b)
        .count();
    assert_eq!(differing, 0, "pages differ after the rollback");
}

#[test]
fn fuel_is_rolled_back() {
    rolled_back_after(
        Limit::Fuel,
        "while True: pass",
        with_limits(Limits {
            fuel: 2_000_000_000,
            timeout: Duration::from_secs(60),
            ..Limits::default()
        }),
    );
}

#[test]
fn timeout_is_rolled_back() {
    rolled_back_after(
        Limit::Timeout,
        "import time\ntime.sleep(30)",
        with_limits(Limits {
            timeout: Duration::from_millis(500),
            ..Limits::default()
        }),
    );
}

#[test]
fn memory_is_rolled_back() {
    rolled_back_after(
        Limit::Memory,
        "hog = []\nwhile True: hog.append('a' * 10**6)",
        with_limits(tight()),
    );
}

#[test]
fn stack_overflow_is_rolled_back() {
    rolled_back_after(
        Limit::Stack,
        "nested = []\nfor _ in range(200000): nested = [nested]\nrepr(nested)",
        with_limits(tight()),
    );
}

#[test]
fn output_flood_is_rolled_back() {
    rolled_back_after(
        Limit::Output,
        "while True: print('flood' * 100)",
        with_limits(tight()),
    );
}

#[test]
fn an_exit_is_rolled_back() {
    let mut s = session();
    value(&mut s, "x = 41");
    let options = RunOptions {
        policy: Arc::new(ImportPolicy::with_extra(["os"])),
        ..RunOptions::default()
    };
    let run = run_in(&mut s, "import os\nx = 0\nos._exit(3)", &options);
    assert_eq!(run.result.error().unwrap().kind, "SystemExit");
    assert!(run.rolled_back, "the instance is dead after proc_exit");
    assert_eq!(value(&mut s, "x + 1").as_deref(), Some("42"));
}

#[test]
fn a_limit_in_the_first_call_leaves_an_empty_session() {
    let mut s = session();
    let run = run_in(
        &mut s,
        "x = 1\nwhile True: pass",
        &with_limits(Limits {
            timeout: Duration::from_millis(300),
            ..Limits::default()
        }),
    );
    assert!(run.rolled_back);
    assert_eq!(value(&mut s, "'x' in globals()").as_deref(), Some("False"));
}

#[test]
fn a_cancelled_call_is_undone_before_the_next() {
    let mut s = session();
    value(&mut s, "x = 41");
    runtime().block_on(async {
        let cancelled = tokio::time::timeout(
            Duration::from_millis(300),
            s.run("x = 0\nwhile True: pass", &RunOptions::default()),
        )
        .await;
        assert!(cancelled.is_err(), "the call should still be running");
    });
    assert_eq!(value(&mut s, "x + 1").as_deref(), Some("42"));
}

#[test]
fn sessions_do_not_share_state() {
    let mut a = session();
    let mut b = session();
    value(&mut a, "x = 'a'");
    value(&mut b, "x = 'b'");
    assert_eq!(value(&mut a, "x").as_deref(), Some("'a'"));
    assert_eq!(value(&mut b, "x").as_deref(), Some("'b'"));
    assert_eq!(
        common::run("x").error().map(|e| e.kind.as_str()),
        Some("NameError")
    );
}

#[test]
fn random_is_seeded_once_per_session() {
    let mut s = session();
    value(
        &mut s,
        "import random\nrandom.seed(7)\nfirst = random.random()",
    );
    let second = value(&mut s, "random.random()");
    let mut t = session();
    let expected = value(
        &mut t,
        "import random\nrandom.seed(7)\nrandom.random()\nrandom.random()",
    );
    assert_eq!(second, expected, "seeding in one call holds in the next");
}

/// Rollback relies on linear memory being an instance's whole state between calls: the guest may
/// have no mutable global but the shadow-stack pointer (see the protocol's notes on sessions).
#[test]
fn the_guest_has_no_mutable_global_but_the_stack_pointer() {
    use wasmparser::{KnownCustom, Name, Parser, Payload};
    let wasm = safe_python_executor::embedded::wasm().unwrap();
    let (mut mutable, mut names) = (Vec::new(), Vec::new());
    for payload in Parser::new(0).parse_all(&wasm) {
        match payload.unwrap() {
            Payload::GlobalSection(globals) => {
                for (index, global) in globals.into_iter().enumerate() {
                    if global.unwrap().ty.mutable {
                        mutable.push(index as u32);
                    }
                }
            }
            Payload::CustomSection(section) => {
                if let KnownCustom::Name(reader) = section.as_known() {
                    for name in reader {
                        if let Name::Global(map) = name.unwrap() {
                            names.extend(
                                map.into_iter()
                                    .map(|n| n.unwrap())
                                    .map(|n| (n.index, n.name.to_owned())),
                            );
                        }
                    }
                }
            }
            _ => {}
        }
    }
    let mutable_names: Vec<&str> = mutable
        .iter()
        .map(|i| {
            names
                .iter()
                .find(|(index, _)| index == i)
                .map_or("<unnamed>", |(_, name)| name.as_str())
        })
        .collect();
    assert_eq!(mutable_names, ["__stack_pointer"]);
}

/// Runs `code` through the registry in `request`'s session, never cancelled; returns the handle,
/// how the session started and the result.
async fn through(
    sessions: &Arc<Sessions>,
    request: SessionRequest,
    reset: bool,
    code: &str,
) -> (SessionId, Option<Start>, Option<String>) {
    let lease = sessions
        .checkout(request, reset, sandbox())
        .await
        .expect("a session");
    let ran = lease
        .run(code, &RunOptions::default(), std::future::pending())
        .await
        .expect("no host fault")
        .expect("not cancelled");
    (
        ran.session.id,
        ran.session.started,
        ran.result.result().map(str::to_owned),
    )
}

/// Runs `code` in `id`'s session and cancels it after 300 ms: the call is then undone in the
/// background, the session busy meanwhile.
async fn cancelled_in(sessions: &Arc<Sessions>, id: SessionId, code: &str) {
    let lease = sessions
        .checkout(SessionRequest::Continue(id), false, sandbox())
        .await
        .unwrap();
    let cancelled = lease
        .run(
            code,
            &RunOptions::default(),
            tokio::time::sleep(Duration::from_millis(300)),
        )
        .await
        .unwrap();
    assert!(
        cancelled.is_none(),
        "{code:?} ended before it was cancelled"
    );
}

/// A call that writes 96 MiB and never ends: undoing it takes a while.
const BIG_ENDLESS: &str = "big = b'x' * (96 << 20)\nwhile True: pass";

#[test]
fn the_registry_takes_a_call_through_its_life_cycle() {
    runtime().block_on(async {
        let sessions = Sessions::new(SessionLimits {
            max: 2,
            idle: Duration::from_secs(600),
        });
        let (id, started, _) = through(&sessions, SessionRequest::New, false, "x = 41").await;
        assert_eq!(started, Some(Start::New));
        let same = SessionRequest::Continue(id);

        // A cancelled call is undone in the background; the next call waits for that.
        cancelled_in(&sessions, id, "x = 0\nwhile True: pass").await;
        let (_, started, result) = through(&sessions, same, false, "x + 1").await;
        assert_eq!((started, result.as_deref()), (None, Some("42")));

        // A reset empties the session under the same handle.
        let (again, started, result) = through(&sessions, same, true, "'x' in globals()").await;
        assert_eq!((again, started), (id, Some(Start::Reset)));
        assert_eq!(result.as_deref(), Some("False"));

        let forged: SessionId = "s_00000000000000000000000000000000".parse().unwrap();
        let refused = sessions
            .checkout(SessionRequest::Continue(forged), false, sandbox())
            .await;
        assert!(matches!(refused, Err(SessionError::Unknown { .. })));
    });
}

#[test]
fn a_held_session_is_never_evicted_and_a_full_registry_refuses() {
    runtime().block_on(async {
        let sessions = Sessions::new(SessionLimits {
            max: 1,
            idle: Duration::from_secs(600),
        });
        let (id, _, _) = through(&sessions, SessionRequest::New, false, "x = 1").await;
        let held = sessions
            .checkout(SessionRequest::Continue(id), false, sandbox())
            .await
            .unwrap();
        let full = sessions
            .checkout(SessionRequest::New, false, sandbox())
            .await;
        assert!(matches!(full, Err(SessionError::Full { max: 1 })));
        let ran = held
            .run("x + 1", &RunOptions::default(), std::future::pending())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(ran.result.result(), Some("2"));

        // Idle once its call (and the snapshot after it) is done: a new session takes its place.
        let mut newer = None;
        for _ in 0..100 {
            match sessions
                .checkout(SessionRequest::New, false, sandbox())
                .await
            {
                Ok(lease) => {
                    newer = Some(lease);
                    break;
                }
                Err(SessionError::Full { .. }) => {
                    tokio::time::sleep(Duration::from_millis(10)).await
                }
                Err(e) => panic!("{e}"),
            }
        }
        assert!(newer.is_some(), "the session stayed busy");
        let gone = sessions
            .checkout(SessionRequest::Continue(id), false, sandbox())
            .await;
        assert!(matches!(gone, Err(SessionError::Evicted { max: 1, .. })));
    });
}

/// A cancelled call is undone in the background, the session busy meanwhile; a new session asked
/// for then, on a full registry, waits for the undo and takes the session's place instead of being
/// refused as if a call still ran (the undo of [`BIG_ENDLESS`] outlasts the request).
#[test]
fn a_session_undoing_a_cancelled_call_makes_room_for_a_new_one() {
    runtime().block_on(async {
        let sessions = Sessions::new(SessionLimits {
            max: 1,
            idle: Duration::from_secs(600),
        });
        let (mut id, _, _) = through(&sessions, SessionRequest::New, false, "x = 1").await;
        for round in 0..3 {
            cancelled_in(&sessions, id, BIG_ENDLESS).await;
            let newer = sessions
                .checkout(SessionRequest::New, false, sandbox())
                .await
                .unwrap_or_else(|e| panic!("round {round}: {e}"));
            id = newer.id();
        }
    });
}

/// Eviction stays least-recently-used when the least recently used session is only finishing its
/// last call: a new session waits for it and evicts it, not the more recently used idle one.
#[test]
fn a_finishing_session_is_evicted_in_its_turn_not_a_newer_idle_one() {
    runtime().block_on(async {
        let sessions = Sessions::new(SessionLimits {
            max: 2,
            idle: Duration::from_secs(600),
        });
        let (older, _, _) = through(&sessions, SessionRequest::New, false, "x = 1").await;
        let (newer, _, _) = through(&sessions, SessionRequest::New, false, "x = 2").await;
        cancelled_in(&sessions, older, BIG_ENDLESS).await;
        // `older` is undoing its call, `newer` idle: the new session takes `older`'s place.
        let (_, started, _) = through(&sessions, SessionRequest::New, false, "x = 3").await;
        assert_eq!(started, Some(Start::New));
        let gone = sessions
            .checkout(SessionRequest::Continue(older), false, sandbox())
            .await;
        assert!(
            matches!(gone, Err(SessionError::Evicted { .. })),
            "{:?}",
            gone.err()
        );
        let (_, _, kept) = through(&sessions, SessionRequest::Continue(newer), false, "x").await;
        assert_eq!(kept.as_deref(), Some("2"));
    });
}

/// Where the front end tells when replies are out (stdio), a session records its state after the
/// reply to its call, and meanwhile stays locked: its next call waits for the record, and finds
/// it. A front end that has gone holds nothing up.
#[test]
fn a_session_records_its_state_once_the_reply_is_out() {
    runtime().block_on(async {
        let replies = RepliesOut::default();
        let sessions = Sessions::after_replies(
            SessionLimits::default(),
            replies.watch(Duration::from_secs(600)),
        );
        let (id, _, _) = through(&sessions, SessionRequest::New, false, "x = 1").await;
        let next = sessions.checkout(SessionRequest::Continue(id), false, sandbox());
        let early = tokio::time::timeout(Duration::from_millis(300), next).await;
        assert!(early.is_err(), "recorded before the reply was out");

        replies.sent();
        let (_, _, x) = soon(through(
            &sessions,
            SessionRequest::Continue(id),
            false,
            "x += 1; x",
        ))
        .await;
        assert_eq!(x.as_deref(), Some("2"));
        // What that call left is the state that a call stopped by a limit goes back to.
        replies.sent();
        let lease = soon(sessions.checkout(SessionRequest::Continue(id), false, sandbox()))
            .await
            .unwrap();
        let stopped = lease
            .run(
                "x = 100\nwhile True: pass",
                &with_limits(tight()),
                std::future::pending(),
            )
            .await
            .unwrap()
            .unwrap();
        assert!(stopped.session.rolled_back, "{stopped:#?}");
        replies.sent();
        let (_, _, x) = soon(through(&sessions, SessionRequest::Continue(id), false, "x")).await;
        assert_eq!(x.as_deref(), Some("2"));
        drop(replies);
        let (_, _, x) = soon(through(&sessions, SessionRequest::Continue(id), false, "x")).await;
        assert_eq!(x.as_deref(), Some("2"));
        let (_, _, x) = soon(through(&sessions, SessionRequest::Continue(id), false, "x")).await;
        assert_eq!(x.as_deref(), Some("2"));
    });
}

/// `step`, taken after the reply is out or the front end has gone: it must not wait out the
/// 600 s that the test's sessions would otherwise wait for a reply.
async fn soon<T>(step: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), step)
        .await
        .expect("held up until the wait for a reply ran out")
}

/// A reply that never goes out holds its session's record up for [`REPLY_WAIT`] at most: a new
/// session that evicts it is admitted rather than refused as if a call still ran.
#[test]
fn a_reply_that_never_goes_out_holds_its_session_up_briefly() {
    runtime().block_on(async {
        let replies = RepliesOut::default();
        let sessions = Sessions::after_replies(
            SessionLimits {
                max: 1,
                idle: Duration::from_secs(600),
            },
            replies.watch(REPLY_WAIT),
        );
        let (mut id, _, _) = through(&sessions, SessionRequest::New, false, "x = 1").await;
        for round in 0..3 {
            let (newer, started, _) = through(&sessions, SessionRequest::New, false, "x = 2").await;
            assert_eq!(started, Some(Start::New), "round {round}");
            let gone = sessions
                .checkout(SessionRequest::Continue(id), false, sandbox())
                .await;
            assert!(matches!(gone, Err(SessionError::Evicted { .. })));
            id = newer;
        }
        drop(replies);
    });
}
