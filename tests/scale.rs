//! Many runs: in parallel on one engine, and a thousand in a row without growing.

mod common;

use common::{run, runtime, sandbox};
use safe_python_executor::{Prepared, RunOptions, Sandbox, SandboxOptions};

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("Linux /proc");
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

#[test]
fn a_thousand_sequential_runs_keep_memory_bounded() {
    let code = "xs = [str(i) for i in range(2000)]\nlen(''.join(xs))";
    for _ in 0..50 {
        assert_eq!(run(code).result(), Some("6890"));
    }
    let before = rss_bytes();
    for i in 0..1000 {
        let r = run(code);
        assert_eq!(r.result(), Some("6890"), "run {i}: {r:?}");
    }
    let after = rss_bytes();
    let growth = after.saturating_sub(before);
    eprintln!("RSS before {} MiB, after {} MiB", before >> 20, after >> 20);
    assert!(
        growth < 64 << 20,
        "RSS grew by {} MiB over 1000 runs",
        growth >> 20
    );
}

#[test]
fn parallel_runs_share_one_engine() {
    let handles: Vec<_> = (0..16)
        .map(|i| {
            runtime().spawn(async move {
                let code = format!("import math\nsum(math.isqrt(k) for k in range({i} * 1000))");
                sandbox().run(&code, &RunOptions::default()).await.unwrap()
            })
        })
        .collect();
    for (i, h) in handles.into_iter().enumerate() {
        let r = runtime().block_on(h).unwrap();
        let expected: u64 = (0..i as u64 * 1000).map(|k| k.isqrt()).sum();
        assert_eq!(r.result(), Some(expected.to_string().as_str()), "task {i}");
    }
}

#[test]
fn a_second_sandbox_loads_the_cached_module() {
    sandbox();
    let again = Sandbox::new(SandboxOptions {
        cache_dir: Some(common::cache_dir()),
        ..SandboxOptions::default()
    })
    .unwrap();
    assert!(
        matches!(again.prepared(), Prepared::Loaded(_)),
        "{:?}",
        again.prepared()
    );
}
