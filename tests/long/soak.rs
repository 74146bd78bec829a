//! Soak: 2,000 sequential and then 200 concurrent calls through one real `safe-python-mcp`, with the
//! server's resident memory, threads and open file descriptors (from `/proc`) compared before and
//! after. A leak of anything a run allocates (a store, an instance, a task, a pipe) would show as
//! growth proportional to the calls; allocator and runtime warm-up happen before the first reading.
//!
//! Run it alone to see the numbers: `cargo test --test soak -- --nocapture`.

#![cfg(target_os = "linux")]

use crate::common;

use std::sync::Arc;

use common::client::{Client, run_python, structured, transport};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;

const SEQUENTIAL: usize = 2_000;
const CONCURRENT: usize = 200;
/// Calls made before the first reading, so that caches and pools are at their working size.
const WARM_UP: usize = 200;

/// Allowed RSS growth over the measured calls (measured: about 0.5 MiB): a leak of 4 KiB per call
/// would exceed it, and a leaked run instance alone holds several MiB of the interpreter's memory.
const MAX_RSS_GROWTH_KIB: u64 = 8 << 10;
/// tokio's blocking pool (stdio) may start a few threads and let them go 10 s later.
const MAX_THREAD_GROWTH: u64 = 4;

#[derive(Debug, Clone, Copy)]
struct Usage {
    rss_kib: u64,
    threads: u64,
    fds: u64,
}

fn usage(pid: u32) -> Usage {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in /proc/{pid}/status"))
    };
    Usage {
        rss_kib: field("VmRSS:"),
        threads: field("Threads:"),
        fds: std::fs::read_dir(format!("/proc/{pid}/fd"))
            .unwrap()
            .count() as u64,
    }
}

fn call(i: usize) -> CallToolRequestParams {
    run_python(&format!("x = [str(n) for n in range(100)]\n{i} * 2"), None)
}

async fn sequential(client: &Client, calls: std::ops::Range<usize>) {
    for i in calls {
        let r = client.call_tool(call(i)).await.expect("a call");
        assert_eq!(structured(&r)["result"], (i * 2).to_string());
    }
}

async fn concurrent(client: &Arc<Client>, calls: std::ops::Range<usize>) {
    let tasks: Vec<_> = calls
        .map(|i| {
            let client = client.clone();
            tokio::spawn(async move { (i, client.call_tool(call(i)).await) })
        })
        .collect();
    for task in tasks {
        let (i, r) = task.await.unwrap();
        assert_eq!(
            structured(&r.expect("a call"))["result"],
            (i * 2).to_string()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_calls_leak_no_memory_threads_or_fds() {
    let transport = transport(common::spawn::mcp_server(&["--workers", "4"]));
    let pid = transport.id().expect("the server's pid");
    let client = Arc::new(().serve(transport).await.expect("the server starts"));

    sequential(&client, 0..WARM_UP).await;
    concurrent(&client, 0..WARM_UP).await;
    let before = usage(pid);
    let started = std::time::Instant::now();
    sequential(&client, 0..SEQUENTIAL).await;
    concurrent(&client, SEQUENTIAL..SEQUENTIAL + CONCURRENT).await;
    let took = started.elapsed();
    let after = usage(pid);
    println!(
        "soak: {SEQUENTIAL} sequential + {CONCURRENT} concurrent calls in {took:.1?}; \
         before {before:?}, after {after:?}"
    );

    assert!(
        after.rss_kib <= before.rss_kib + MAX_RSS_GROWTH_KIB,
        "RSS grew from {} to {} KiB",
        before.rss_kib,
        after.rss_kib
    );
    assert!(
        after.threads <= before.threads + MAX_THREAD_GROWTH,
        "threads went from {} to {}",
        before.threads,
        after.threads
    );
    assert!(
        after.fds <= before.fds,
        "open fds went from {} to {}",
        before.fds,
        after.fds
    );
    Arc::into_inner(client)
        .expect("every call has finished")
        .cancel()
        .await
        .unwrap();
}
