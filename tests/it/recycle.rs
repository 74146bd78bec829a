//! Kept instances: the CPython engine resets the instance of a fresh call that returned normally
//! and gives it to the next fresh call (`sandbox::recycle`). Each test here runs on a sandbox of
//! its own that keeps one instance, so that each call takes the instance the call before it
//! left, and checks that the call finds nothing of the one before: not its globals, modules,
//! builtins, `sys` settings, random state, pending asyncio tasks, open files or `/out` files.
//! The reset runs after the call has returned, on a blocking thread: `spare_instances` waits for
//! it, so each test asserts the count before a call that must run on the kept instance.

use std::sync::Arc;
use std::time::Duration;

use safe_python_executor::{
    ImportPolicy, InputFiles, Limits, RunOptions, RunResult, Sandbox, Session,
};

use crate::common::{self, Engine, completed_value, run_in, runtime, tight};

/// What a call can see of the calls before it. It awaits first, so that any task an earlier call
/// left pending runs (and leaves its mark) before it looks.
const PROBE: &str = "\
import sys, builtins, os, asyncio
await asyncio.sleep(0.01)
def is_open(fd):
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False
(sorted(globals()), sorted(dir(builtins)), sorted(sys.modules), sorted(vars(sys)), sys.path,
 sys.getrecursionlimit(), getattr(builtins, 'leak', None), print is builtins.print, len('abc'),
 [fd for fd in range(64) if is_open(fd)], sorted(os.listdir('/out')), len(asyncio.all_tasks()))";

/// Calls that try to leave something behind, each of which completes.
const LEAVERS: &[(&str, &str)] = &[
    // Small enough for the template's heap: a call whose memory grows is not kept (below).
    ("globals", "secret = 'left-behind-' * 1000"),
    (
        "modules",
        "import sys, json\nsys.modules['planted'] = json\nimport random",
    ),
    (
        "builtins",
        "import builtins\nbuiltins.leak = 'builtins'\nbuiltins.len = lambda x: 42\n\
         builtins.print = lambda *a, **k: None",
    ),
    (
        "sys",
        "import sys\nsys.path.insert(0, '/evil')\nsys.leak = 1\nsys.setrecursionlimit(60)",
    ),
    (
        "a pending asyncio task",
        "import asyncio, builtins\nasync def later():\n    await asyncio.sleep(0)\n    \
         builtins.leak = 'task'\nawait asyncio.sleep(0)\nkept = asyncio.ensure_future(later())\n\
         never = asyncio.ensure_future(asyncio.sleep(3600))",
    ),
    (
        "open files",
        "import os\nraw = os.open('/out/raw.txt', os.O_WRONLY | os.O_CREAT)\nleft_open = open('/out/open.txt', 'w')\n\
         left_open.write('unflushed')",
    ),
    (
        "/out files",
        "open('/out/secret.txt', 'w').write('kept?')\nimport os\nos.mkdir('/out/dir')",
    ),
];

fn options() -> RunOptions {
    RunOptions {
        policy: Arc::new(ImportPolicy::with_extra([
            "sys", "builtins", "os", "asyncio", "json", "random",
        ])),
        files: Some(InputFiles::default()),
        ..RunOptions::default()
    }
}

/// A CPython sandbox of this test's own that keeps one instance.
fn keeping_one() -> Sandbox {
    let sandbox = common::opened(Engine::CPython);
    sandbox.keep_spare_instances(1);
    sandbox
}

fn probe(sandbox: &Sandbox) -> String {
    completed_value(PROBE, run_in(sandbox, PROBE, &options())).expect("a value")
}

#[track_caller]
fn completes(r: &RunResult, what: &str) {
    assert!(!r.is_failure(), "{what}: {r:#?}");
}

#[test]
fn a_kept_instance_carries_nothing_from_one_fresh_call_to_the_next() {
    let sandbox = keeping_one();
    let clean = probe(&sandbox);
    assert_eq!(
        sandbox.spare_instances(),
        1,
        "the probe's instance was kept"
    );
    for (what, code) in LEAVERS {
        for _ in 0..2 {
            // Each call runs on the instance the one before left, its reset done first.
            assert_eq!(
                sandbox.spare_instances(),
                1,
                "before a call that leaves {what}"
            );
            completes(&run_in(&sandbox, code, &options()), what);
            assert_eq!(
                sandbox.spare_instances(),
                1,
                "{what}: the instance was kept"
            );
            assert_eq!(probe(&sandbox), clean, "after a call that left {what}");
        }
    }
    // The output of a kept instance's earlier call does not reach the next either.
    let r = run_in(&sandbox, "print('first')", &options());
    assert_eq!(r.stdout, "first\n");
    let r = run_in(&sandbox, "print('second')", &options());
    assert_eq!(r.stdout, "second\n");
}

#[test]
fn a_kept_instance_draws_its_own_random_state_each_call() {
    let sandbox = keeping_one();
    // A call that seeds `random` and returns: the next one must not draw from that seed.
    let seed = "import random\nrandom.seed(7)";
    let seeded = "import random\nrandom.random() == random.Random(7).random()";
    let draw = "import random\nrandom.random(), random.getrandbits(64)";
    let mut draws = Vec::new();
    for _ in 0..3 {
        completes(&run_in(&sandbox, seed, &options()), "seeding");
        assert_eq!(sandbox.spare_instances(), 1, "the seeded instance was kept");
        let r = run_in(&sandbox, seeded, &options());
        assert_eq!(completed_value(seeded, r).as_deref(), Some("False"));
        assert_eq!(sandbox.spare_instances(), 1, "the instance was kept");
        let r = run_in(&sandbox, draw, &options());
        draws.push(completed_value(draw, r).expect("a value"));
    }
    for (i, a) in draws.iter().enumerate() {
        for b in &draws[i + 1..] {
            assert_ne!(
                a, b,
                "two calls on a kept instance drew the same: {draws:?}"
            );
        }
    }
}

#[test]
fn an_instance_stopped_by_a_trap_or_grown_is_not_kept() {
    let sandbox = keeping_one();
    let clean = probe(&sandbox);
    let limited = |limits: Limits| RunOptions {
        limits,
        ..options()
    };
    let stopped = [
        (
            "timeout",
            "import builtins\nbuiltins.leak = 1\nwhile True: pass",
            limited(Limits {
                timeout: Duration::from_millis(300),
                ..tight()
            }),
        ),
        (
            "fuel",
            "import builtins\nbuiltins.leak = 1\nwhile True: pass",
            limited(Limits {
                fuel: 50_000_000,
                ..tight()
            }),
        ),
        // Completed, but its memory grew past the template's: it cannot be put back.
        (
            "growth",
            "import builtins\nbuiltins.leak = 1\nhog = bytearray(200 << 20)\ndel hog",
            options(),
        ),
    ];
    for (how, code, options) in stopped {
        // The call runs on the instance the probe left (its reset done first).
        assert_eq!(sandbox.spare_instances(), 1, "before {how}");
        let _ = run_in(&sandbox, code, &options);
        assert_eq!(sandbox.spare_instances(), 0, "kept after {how}");
        assert_eq!(probe(&sandbox), clean, "after {how}");
    }
    // Calls that end in Python (a `MemoryError` for memory denied, `sys.exit`) return normally:
    // their instances are reset like any other, and the next call finds nothing of them.
    let ended_in_python = [
        (
            "a MemoryError",
            "import builtins\nbuiltins.leak = 1\nhog = bytearray(1 << 30)",
            limited(Limits {
                memory_bytes: 64 << 20,
                ..tight()
            }),
        ),
        (
            "an exit",
            "import builtins, sys\nbuiltins.leak = 1\nsys.exit(3)",
            options(),
        ),
    ];
    for (how, code, options) in ended_in_python {
        assert_eq!(sandbox.spare_instances(), 1, "before {how}");
        assert!(run_in(&sandbox, code, &options).is_failure(), "{how}");
        assert_eq!(probe(&sandbox), clean, "after {how}");
    }
}

#[test]
fn a_session_takes_no_kept_instance_and_leaves_none() {
    let sandbox = keeping_one();
    let clean = probe(&sandbox);
    runtime().block_on(async {
        let options = options();
        let leave = "import builtins\nbuiltins.leak = 'fresh call'\nsecret = 1";
        let r = sandbox.run(leave, &options).await.unwrap();
        completes(&r, "the fresh call");
        assert_eq!(sandbox.spare_instances(), 1);
        // The session starts on a new instance: the kept one stays for fresh calls.
        let mut session = Session::new(&sandbox).await.unwrap();
        assert_eq!(sandbox.spare_instances(), 1);
        let r = session.run(PROBE, &options).await.unwrap();
        assert_eq!(r.result.result(), Some(clean.as_str()), "{r:#?}");
        let r = session
            .run("import builtins\nbuiltins.leak = 'session'", &options)
            .await
            .unwrap();
        assert!(!r.result.is_failure(), "{r:#?}");
        drop(session);
        // A closed session's instance is not kept: fresh calls never see its state.
        assert_eq!(sandbox.spare_instances(), 1);
    });
    assert_eq!(probe(&sandbox), clean);
}
