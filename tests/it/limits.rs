//! Hostile code against every limit: each run must end, within its timeout plus a second, with the
//! limit that stopped it, and leave the host able to run the next piece of code.

use crate::common;

use std::time::{Duration, Instant};

use std::sync::Arc;

use common::{run, run_limited, run_with, tight};
use safe_python_executor::engine::Metering;
use safe_python_executor::{
    ImportPolicy, Limit, Limits, Outcome, RunOptions, RunResult, Sandbox, SandboxOptions,
};

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
        files: None,
        ..RunOptions::default()
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
    let r = assert_limit("'a' * (5 * 10**8)", tight(), Limit::Memory);
    assert_eq!(r.error().map(|e| e.kind.as_str()), Some("MemoryError"));
    // A size no 32-bit address space holds is refused by Python before any memory is asked
    // for: the code's own MemoryError, since the limiter refused nothing.
    let r = run_limited("[0] * 10**9", tight());
    assert_eq!(r.limit(), None, "{r:?}");
    assert_eq!(r.error().map(|e| e.kind.as_str()), Some("MemoryError"));
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

/// A guest that reports `len` bytes: more than any honest guest sends, since the real one cuts
/// each field to the request's bound.
fn guest_reporting(len: u32) -> Vec<u8> {
    wat::parse_str(format!(
        r#"(module
             (import "{module}" "report" (func $report (param i32 i32)))
             (memory (export "memory") 1)
             (func (export "{run}") (call $report (i32.const 0) (i32.const {len}))))"#,
        module = safe_python_protocol::IMPORT_MODULE,
        run = safe_python_protocol::exports::RUN,
    ))
    .expect("the hand-written guest parses")
}

#[test]
fn a_report_over_what_the_call_accepts_is_the_output_limit_not_a_trap() {
    let limits = Limits {
        max_output_bytes: 1000,
        ..Limits::default()
    };
    let accepted = safe_python_protocol::report_limit(1000);
    for len in [accepted + 1, 5 << 20, i32::MAX as u32] {
        let sandbox = safe_python_executor::Sandbox::with_guest(&guest_reporting(len)).unwrap();
        let r = common::runtime()
            .block_on(sandbox.run(
                "",
                &RunOptions {
                    limits: limits.clone(),
                    ..RunOptions::default()
                },
            ))
            .unwrap();
        assert_eq!(r.limit(), Some(Limit::Output), "{len}: {r:?}");
        let e = r.error().unwrap();
        assert_eq!(e.kind, "ReportTooLarge");
        assert!(
            e.message.contains(&format!("({len} bytes)"))
                && e.message.contains(&format!("{accepted} bytes")),
            "{}",
            e.message
        );
    }
}

#[test]
fn every_report_field_is_cut_to_the_calls_bound() {
    let limits = Limits {
        max_output_bytes: 1000,
        ..tight()
    };
    let r = run_limited(
        "raise type('E' * 5000, (Exception,), {})('\\x01' * 10**6)",
        limits.clone(),
    );
    let e = r.error().unwrap_or_else(|| panic!("{r:?}"));
    for field in [&e.kind, &e.message, &e.traceback] {
        let escaped = serde_json::to_string(field).unwrap().len();
        assert!(escaped < 1000 + 100, "{escaped} bytes: {field:.200}");
        // The guest's notice, or the host's where its own bound cut deeper.
        assert!(
            field.contains("more characters cut]") || field.contains("bytes) cut here"),
            "{field:.200}"
        );
    }
    let r = run_limited("'\\x00' * 10**6", limits);
    let result = r.result().unwrap_or_else(|| panic!("{r:?}"));
    assert!(serde_json::to_string(result).unwrap().len() < 1100);
}

#[test]
fn a_memory_error_without_a_refused_growth_is_not_the_memory_limit() {
    let r = run_limited("raise MemoryError('by hand')", tight());
    assert_eq!(r.limit(), None, "{r:?}");
    assert_eq!(r.error().map(|e| e.kind.as_str()), Some("MemoryError"));
}

/// `--fuel off`: no instruction count at all, so a budget that would stop the code does not, and
/// the wall-clock limit alone ends an endless loop.
#[test]
fn without_metering_the_time_limit_alone_stops_compute() {
    let sandbox = Sandbox::new(SandboxOptions {
        cache_dir: Some(common::cache_dir()),
        metering: Metering::Off,
        ..SandboxOptions::default()
    })
    .expect("the unmetered sandbox starts");
    let budget = Limits {
        fuel: 1_000,
        ..Limits::default()
    };
    let options = RunOptions {
        limits: budget.clone(),
        ..RunOptions::default()
    };
    let r = common::run_in(&sandbox, "sum(range(10**6))", &options);
    assert_eq!(r.result(), Some("499999500000"), "{r:#?}");
    assert_eq!(r.stats.fuel, 0, "nothing is counted");
    let options = RunOptions {
        limits: Limits {
            timeout: Duration::from_millis(300),
            ..budget
        },
        ..RunOptions::default()
    };
    let r = common::run_in(&sandbox, "while True: pass", &options);
    assert_eq!(r.limit(), Some(Limit::Timeout), "{r:#?}");
}
