//! The fuzz targets' bodies (`fuzz/src/lib.rs`) in the normal test suite: each replays its committed
//! seeds (`fuzz/seeds/<target>/`, crashes found by fuzzing included as regressions) and then
//! deterministic mutations of them, through the very functions cargo-fuzz drives. The hostile-guest
//! seeds also have their expected outcomes checked here.

#[path = "../../fuzz/src/lib.rs"]
pub mod targets;

use crate::common;

use std::path::Path;

use safe_python_executor::{Limit, Outcome, RunResult};
use serde_json::json;

/// The committed seeds of one target, by file name.
fn seeds(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/seeds")
        .join(target);
    let mut seeds: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&path).unwrap())
        })
        .collect();
    seeds.sort();
    assert!(!seeds.is_empty(), "no seeds in {}", dir.display());
    seeds
}

/// xorshift64: the same mutations on every run, so a failure here reproduces.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// `count` inputs made from the seeds by a few byte flips, insertions, deletions, truncations and
/// splices each, as a fuzzer's first mutations would be.
fn mutations(seeds: &[(String, Vec<u8>)], count: usize) -> Vec<Vec<u8>> {
    let mut rng = Rng(0x5eed_cafe_f00d_d00d);
    (0..count)
        .map(|_| {
            let mut input = seeds[rng.below(seeds.len())].1.clone();
            for _ in 0..1 + rng.below(4) {
                let at = rng.below(input.len() + 1);
                let byte = rng.next() as u8;
                match rng.below(5) {
                    0 if at < input.len() => input[at] ^= 1 << (byte % 8),
                    1 => input.insert(at, byte),
                    2 if at < input.len() => {
                        input.remove(at);
                    }
                    3 => input.truncate(at),
                    _ => {
                        let other = &seeds[rng.below(seeds.len())].1;
                        let from = rng.below(other.len());
                        let to = from + rng.below(other.len() - from + 1);
                        input.splice(at..at, other[from..to].iter().copied());
                    }
                }
            }
            input
        })
        .collect()
}

/// Every seed, then `count` mutations, through `target`.
fn replay(name: &str, count: usize, mut target: impl FnMut(&[u8])) {
    let seeds = seeds(name);
    for (_, seed) in &seeds {
        target(seed);
    }
    for input in mutations(&seeds, count) {
        target(&input);
    }
}

#[test]
fn run_python_args() {
    replay("run_python_args", 5_000, targets::run_python_args);
}

/// The oracle reads the real schema: it knows every argument, their types, and that nothing else
/// is an argument.
#[test]
fn the_argument_oracle_reads_the_tools_schema() {
    let schema = targets::run_python_schema();
    let conforms = |v: serde_json::Value| targets::conforms(&schema, v.as_object().unwrap());
    assert!(conforms(json!({"code": "1"})));
    assert!(conforms(
        json!({"code": "1", "session": "anything", "reset": true})
    ));
    assert!(conforms(
        json!({"code": "1", "session": null, "reset": false})
    ));
    for refused in [
        json!({}),
        json!({"session": "new"}),
        json!({"code": 1}),
        json!({"code": "1", "session": 5}),
        json!({"code": "1", "reset": "yes"}),
        json!({"code": "1", "reset": null}),
        json!({"code": "1", "source": "1"}),
    ] {
        assert!(!conforms(refused.clone()), "{refused}");
    }
}

#[test]
fn decode_report() {
    replay("decode_report", 5_000, targets::decode_report);
}

#[test]
fn json_rpc() {
    let server = targets::fuzz_server(Some(common::cache_dir()));
    replay("json_rpc", 2_000, |data| targets::json_rpc(&server, data));
}

#[test]
fn hostile_guest() {
    replay("hostile_guest", 3_000, |data| {
        targets::hostile_guest(data);
    });
}

fn trapped_with(result: &RunResult, needle: &str) -> bool {
    matches!(&result.outcome, Outcome::Trapped { message } if message.contains(needle))
}

fn completed_with(result: &RunResult, value: &str) -> bool {
    result.outcome
        == Outcome::Completed {
            result: Some(value.to_owned()),
        }
}

fn limit(result: &RunResult, limit: Limit) -> bool {
    result.limit() == Some(limit)
}

/// What the host makes of each hostile guest seed: a protocol breach is a trap naming it, a limit
/// is that limit, and a guest that keeps to the protocol gets exactly what it reported.
#[test]
fn hostile_guest_seeds_end_as_expected() {
    type Expected = fn(&RunResult) -> bool;
    let expected: &[(&str, Expected)] = &[
        ("valid_report", |r| completed_with(r, "42")),
        ("report_twice", |r| trapped_with(r, "reported twice")),
        ("report_out_of_bounds", |r| trapped_with(r, "out of bounds")),
        // Over what the call accepts: the output limit, with a reply saying so (issue 10).
        ("report_too_long", |r| limit(r, Limit::Output)),
        ("report_negative_length", |r| trapped_with(r, "at most")),
        ("report_garbage", |r| trapped_with(r, "malformed report")),
        ("report_chosen_bytes", |r| completed_with(r, "7")),
        // A MemoryError reported without a refused growth is the code's own exception.
        ("report_memory_error", |r| {
            r.limit().is_none() && r.error().is_some_and(|e| e.kind == "MemoryError")
        }),
        ("no_report", |r| trapped_with(r, "without reporting")),
        ("request_read_out_of_bounds", |r| {
            trapped_with(r, "out of bounds")
        }),
        ("request_then_report", |r| completed_with(r, "42")),
        // An oversized name is refused, not a trap; the guest then reports.
        ("import_allowed_too_long", |r| completed_with(r, "42")),
        ("import_allowed_then_report", |r| completed_with(r, "42")),
        ("spin", |r| limit(r, Limit::Fuel)),
        ("recurse", |r| limit(r, Limit::Stack)),
        ("proc_exit", |r| {
            r.error()
                .is_some_and(|e| e.kind == "SystemExit" && e.message == "3")
        }),
        ("unreachable", |r| trapped_with(r, "unreachable")),
        ("grow_past_limit_then_report", |r| completed_with(r, "42")),
        ("grow_past_limit_then_trap", |r| limit(r, Limit::Memory)),
        ("write_stdout", |r| {
            completed_with(r, "42") && r.stdout == "hello"
        }),
        ("write_past_output_limit", |r| limit(r, Limit::Output)),
        ("write_bad_iovec", |r| completed_with(r, "42")),
        ("write_bad_fd", |r| completed_with(r, "42")),
        ("report_then_trap", |r| trapped_with(r, "unreachable")),
    ];
    let seeds = seeds("hostile_guest");
    assert_eq!(
        seeds.len(),
        expected.len(),
        "every hostile guest seed has an expected outcome here"
    );
    let mut wrong = Vec::new();
    for (name, check) in expected {
        let (_, data) = seeds
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("no seed {name}"));
        let result = targets::hostile_guest(data);
        if !check(&result) {
            wrong.push(format!("{name}: {:?}", result.outcome));
        }
    }
    assert!(
        wrong.is_empty(),
        "unexpected outcomes:\n{}",
        wrong.join("\n")
    );
}
