//! Hostile code against every limit: each run must end, within its timeout plus a second, with the
//! limit that stopped it, and leave the host able to run the next piece of code.

use crate::common;

use std::time::{Duration, Instant};

use std::sync::Arc;

use common::{run, run_limited, run_with, tight};
use safe_python_executor::{ImportPolicy, Limit, Limits, Outcome, RunOptions, RunResult};

#[track_caller]
fn assert_limit(code: &str, limits: Limits, expected: Limit) -> RunResult {
    assert_limit_allowing(code, limits, &[], expected)
}

#[track_caller]
fn assert_limit_allowing(code: &str, limits: Limits, allow: &[&str], expected: Limit) -> RunResult {
    common::sandbox(); // a first use may compile the guest: not part of the run's time
    let started = Instant::now();
    let options = RunOptions {
        limits: limits.clone(),
        policy: Arc::new(ImportPolicy::with_extra(allow)),
        observer: None,
    };
    let r = run_with(code, &options);
    let took = started.elapsed();
    assert_eq!(r.limit(), Some(expected), "{code:?}: {r:#?}");
    assert!(
        took < limits.timeout + Duration::from_secs(1),
        "{code:?} took {took:?}"
    );
    // The host survives: the next run works.
    assert_eq!(run("6 * 7").result(), Some("42"));
    r
}

#[test]
fn an_infinite_loop_runs_out_of_fuel() {
    let r = assert_limit("while True: pass", tight(), Limit::Fuel);
    assert!(r.stats.fuel >= tight().fuel, "{:?}", r.stats);
}

#[test]
fn an_infinite_loop_times_out_when_fuel_is_plentiful() {
    let limits = Limits {
        timeout: Duration::from_millis(700),
        fuel: u64::MAX / 2,
        ..tight()
    };
    let r = assert_limit("while True: pass", limits, Limit::Timeout);
    assert!(r.stats.wall_ms >= 700, "{:?}", r.stats);
}

#[test]
fn sleeping_is_stopped_by_the_timeout() {
    let limits = Limits {
        timeout: Duration::from_secs(1),
        ..tight()
    };
    assert_limit(
        "import time\nprint('going to sleep')\ntime.sleep(3600)",
        limits.clone(),
        Limit::Timeout,
    );
    let r = assert_limit(
        "import time\nprint('going to sleep')\ntime.sleep(3600)",
        limits,
        Limit::Timeout,
    );
    assert_eq!(
        r.stdout, "going to sleep\n",
        "output before the timeout is kept"
    );
}

#[test]
fn a_huge_allocation_hits_the_memory_limit() {
    let r = assert_limit("[0] * 10**9", tight(), Limit::Memory);
    assert_eq!(r.error().map(|e| e.kind.as_str()), Some("MemoryError"));
    assert_limit("'a' * (5 * 10**8)", tight(), Limit::Memory);
}

#[test]
fn a_list_that_grows_forever_hits_the_memory_limit() {
    let r = assert_limit(
        "x = []\nwhile True:\n    x.append([0] * 10000)",
        tight(),
        Limit::Memory,
    );
    assert!(
        r.stats.memory_peak_bytes <= tight().memory_bytes as u64,
        "{:?}",
        r.stats
    );
    assert!(
        r.stats.memory_peak_bytes > (tight().memory_bytes / 2) as u64,
        "{:?}",
        r.stats
    );
}

#[test]
fn deep_recursion_past_a_raised_limit_overflows_the_stack() {
    assert_limit_allowing(
        "import sys\nsys.setrecursionlimit(10**6)\ndef f(n):\n    return f(n + 1) + 1\nf(0)",
        tight(),
        &["sys"],
        Limit::Stack,
    );
}

#[test]
fn an_output_flood_is_cut_with_a_notice() {
    let limits = tight();
    let r = assert_limit(
        "while True:\n    print('flood' * 100)",
        limits.clone(),
        Limit::Output,
    );
    assert!(
        r.stdout.len() <= limits.max_output_bytes + 200,
        "{} bytes",
        r.stdout.len()
    );
    assert!(r.stdout.starts_with("floodflood"));
    assert!(
        r.stdout
            .ends_with("output limit was reached and the run was stopped]\n"),
        "{}",
        &r.stdout[r.stdout.len() - 200..]
    );
    let r = assert_limit("print('x' * 10**6)", limits, Limit::Output);
    assert!(r.stdout.contains("[output truncated"));
}

#[test]
fn a_memory_limit_below_the_interpreters_needs_is_a_memory_outcome() {
    let limits = Limits {
        memory_bytes: 1 << 20,
        ..tight()
    };
    assert_limit("1", limits, Limit::Memory);
}

#[test]
fn a_huge_result_repr_is_clipped() {
    let r = run_limited("list(range(10**5))", tight());
    let result = r.result().expect("completes");
    assert!(
        result.len() < tight().max_output_bytes + 100,
        "{} bytes",
        result.len()
    );
    assert!(
        result.ends_with("more characters cut]"),
        "{}",
        &result[result.len() - 60..]
    );
}

#[test]
fn limits_are_per_run() {
    // A run that used up its fuel does not eat into the next one's.
    assert_limit("while True: pass", tight(), Limit::Fuel);
    let r = run_limited("sum(range(10**5))", tight());
    assert_eq!(
        r.outcome,
        Outcome::Completed {
            result: Some("4999950000".into())
        }
    );
}
