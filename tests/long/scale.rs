//! A thousand runs in a row in one process, whose resident memory must not grow with them.

use crate::common::run;

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
