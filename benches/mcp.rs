//! The MCP server as a client meets it: `cargo bench --bench mcp`.
//!
//! Prints, with a warm module cache (the tests' own, under `target/`), the time from spawning
//! `safe-python-mcp` to the first `run_python` result, and the per-call latency (p50, p90) of
//! trivial code over one connection.

#[path = "../tests/it/common/mod.rs"]
mod common;
mod support;

use std::time::Instant;

use common::client::run_python;
use rmcp::model::CallToolRequestParams;
use support::percentile;

fn call(code: &str) -> CallToolRequestParams {
    run_python(code, None)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let connect = || common::client::connect((), common::spawn::mcp_server(&[]));
    // Warm the cache (and the page cache) once.
    let client = connect().await;
    client.call_tool(call("print(1)")).await?;
    client.cancel().await?;

    let mut starts = Vec::new();
    for _ in 0..9 {
        let started = Instant::now();
        let client = connect().await;
        let r = client.call_tool(call("print(1)")).await?;
        starts.push(started.elapsed());
        anyhow::ensure!(r.is_error == Some(false), "print(1) failed: {r:?}");
        client.cancel().await?;
    }
    starts.sort();
    println!(
        "spawn to first result (warm cache, 9 spawns): p50 {:.1} ms, p90 {:.1} ms",
        percentile(&starts, 50),
        percentile(&starts, 90)
    );

    let client = connect().await;
    let mut calls = Vec::new();
    for _ in 0..500 {
        let started = Instant::now();
        client.call_tool(call("1 + 1")).await?;
        calls.push(started.elapsed());
    }
    calls.sort();
    println!(
        "per call, trivial code (500 calls, one connection): p50 {:.2} ms, p90 {:.2} ms",
        percentile(&calls, 50),
        percentile(&calls, 90)
    );
    client.cancel().await?;
    Ok(())
}
