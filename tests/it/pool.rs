//! Fresh calls on pooled instances: the RustPython engine allocates instances from a pool whose
//! slots are reset and reused (`engine::pooled`), so each test here runs calls one after another
//! on one sandbox, which puts each call in the slot the previous one left, and checks that nothing
//! of the previous call is there: not its globals, builtins, modules, files or random state,
//! whether it completed or was stopped by a limit. And a full pool refuses nothing. The suite's
//! sandboxes are warmed up as the server's are, so each fresh instance of either engine starts
//! with the pages a trivial call writes already populated (`sandbox::prefault`): the first test
//! runs on both.

use std::sync::Arc;
use std::time::Duration;

use safe_python_executor::{
    ImportPolicy, InputFiles, Limits, RunOptions, RunResult, Sandbox, SandboxOptions, Session,
};

use crate::common::{
    self, Each, Engine, completed_value, run_in, run_with, runtime, sandbox, tight,
};

/// What a fresh interpreter looks like to its code: the names in `__main__` and `builtins`, the
/// loaded modules, and a mark any earlier call would have left in each.
const STATE: &str = "\
import sys, builtins
(sorted(globals()), sorted(dir(builtins)), sorted(sys.modules),
 getattr(builtins, 'leak', None), getattr(sys, 'leak', None))";

/// Leaves a mark everywhere [`STATE`] looks, and in memory a megabyte that a call reading stale
/// memory would find.
const DIRTY: &str = "\
import sys, builtins, json, random
builtins.leak = 'builtins'
sys.leak = 'sys'
secret = 'left-behind-' * 100_000
";

/// What these tests' code imports besides the default list.
fn imports_allowed() -> RunOptions {
    RunOptions {
        policy: Arc::new(ImportPolicy::with_extra(["sys", "builtins", "os", "json"])),
        ..RunOptions::default()
    }
}

fn state_in(sandbox: &Sandbox) -> String {
    completed_value(STATE, run_in(sandbox, STATE, &imports_allowed())).expect("a value")
}

fn state() -> String {
    state_in(sandbox())
}

fn limited(limits: Limits) -> RunOptions {
    RunOptions {
        limits,
        ..imports_allowed()
    }
}

#[test]
fn a_fresh_call_sees_nothing_of_the_calls_before_it_whether_they_completed_or_hit_a_limit() {
    for engine in Engine::ALL {
        let sandbox = engine.sandbox();
        let clean = state_in(sandbox);
        assert!(!clean.contains("left-behind"), "{engine:?}: {clean}");
        let stopped = [
            ("completed", "", imports_allowed()),
            (
                "timeout",
                "while True: pass",
                limited(Limits {
                    timeout: Duration::from_millis(300),
                    ..tight()
                }),
            ),
            (
                "fuel",
                "while True: pass",
                limited(Limits {
                    fuel: 50_000_000,
                    ..tight()
                }),
            ),
            (
                "memory",
                "hog = bytearray(1 << 30)",
                limited(Limits {
                    memory_bytes: 64 << 20,
                    ..tight()
                }),
            ),
        ];
        for (how, tail, options) in stopped {
            for _ in 0..3 {
                let r = run_in(sandbox, &format!("{DIRTY}{tail}"), &options);
                assert_eq!(
                    r.is_failure(),
                    !tail.is_empty(),
                    "{engine:?}, {how}: {r:#?}"
                );
                assert_eq!(
                    state_in(sandbox),
                    clean,
                    "{engine:?}: after a call that ended by {how}"
                );
            }
        }
    }
}

#[test]
fn each_fresh_call_draws_its_own_random_state() {
    let code = "import random; (random.random(), random.getrandbits(64))";
    let draws: Vec<_> = (0..6)
        .map(|_| completed_value(code, run_with(code, &imports_allowed())))
        .collect();
    for (i, a) in draws.iter().enumerate() {
        for b in &draws[i + 1..] {
            assert_ne!(a, b, "two fresh calls drew the same: {draws:?}");
        }
    }
}

#[test]
fn files_written_under_out_are_gone_in_the_next_call() {
    let with_files = RunOptions {
        files: Some(InputFiles::default()),
        ..imports_allowed()
    };
    let write = "open('/out/secret.txt', 'w').write('kept?'); import os; os.listdir('/out')";
    let list = "import os; os.listdir('/out')";
    for _ in 0..3 {
        let r = run_with(write, &with_files);
        assert_eq!(r.files.len(), 1, "{r:#?}");
        let listed = completed_value(list, run_with(list, &with_files));
        assert_eq!(listed.as_deref(), Some("[]"));
        let r = run_with("open('/out/secret.txt')", &RunOptions::default());
        assert!(r.is_failure(), "a call without files found one: {r:#?}");
    }
}

#[test]
fn a_session_starts_clean_after_fresh_calls_and_leaves_nothing_to_them() {
    let clean = state();
    runtime().block_on(async {
        let options = imports_allowed();
        sandbox().run(DIRTY, &options).await.unwrap();
        let mut session = Session::new(sandbox()).await.unwrap();
        let r = session.run(STATE, &options).await.unwrap();
        assert_eq!(r.result.result().map(str::to_owned), Some(clean.clone()));
        session.run(DIRTY, &options).await.unwrap();
        // A stopped call is undone in the session; fresh calls see nothing of it either way.
        let r = session
            .run(
                "builtins.leak = 'stopped'\nwhile True: pass",
                &limited(Limits {
                    fuel: 50_000_000,
                    ..tight()
                }),
            )
            .await
            .unwrap();
        assert!(r.rolled_back, "{r:#?}");
        drop(session);
    });
    assert_eq!(state(), clean);
}

/// A sandbox whose pool has one slot, in the suite's module cache.
fn one_slot() -> Sandbox {
    let options = SandboxOptions {
        cache_dir: Some(common::cache_dir()),
        ..SandboxOptions::default()
    };
    Sandbox::with_pool(options, 1).expect("the sandbox starts")
}

fn completed(r: RunResult) -> Option<String> {
    completed_value("a call past the pool", r)
}

#[test]
fn a_full_pool_makes_further_instances_on_demand_and_refuses_nothing() {
    let sandbox = one_slot();
    runtime().block_on(async {
        let options = RunOptions::default();
        // The session's instance takes the only slot; every fresh call then goes past the pool.
        let mut session = Session::new(&sandbox).await.unwrap();
        session.run("kept = 41", &options).await.unwrap();
        for _ in 0..3 {
            let r = sandbox.run("6 * 7", &options).await.unwrap();
            assert_eq!(completed(r).as_deref(), Some("42"));
        }
        let r = session.run("kept + 1", &options).await.unwrap();
        assert_eq!(r.result.result(), Some("42"), "{r:#?}");
        drop(session);
        // The slot is free again.
        let r = sandbox.run("'pooled'", &options).await.unwrap();
        assert_eq!(completed(r).as_deref(), Some("'pooled'"));
    });
}
