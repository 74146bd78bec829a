//! What a session store costs, beside sessions in memory, in one run: `cargo bench --bench store`.
//!
//! For each engine, a server over stdio with its sessions in memory and one with them in a real
//! `redis-server` on loopback (Debian's package, as the tests use): the p50 and p90 of `x = 1`
//! calls in a session, back to back, and the bytes the store holds for the session after `x = 1`.
//! Then the same calls alternating between two replicas, so that each call reads the state the
//! other wrote: what a call costs when its session moved.
//!
//! Targets (issue 27): at most 3 ms added at p50 by the store on loopback, and at most 1 MB stored
//! after `x = 1` on the RustPython engine. The CPython engine's figures are reported too.

#[path = "../tests/it/common/mod.rs"]
mod common;
mod support;

use std::time::{Duration, Instant};

use common::client::{Client, run_python, structured, transport};
use common::redis::Redis;
use rmcp::ServiceExt;
use support::{p50_p90, verdict};

const CALLS: usize = 300;
const TARGET_ADDED_MS: f64 = 3.0;
const TARGET_STORED_BYTES: u64 = 1 << 20;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let redis = Redis::start(false);
    let url = redis.url();
    println!("Sessions in a store beside sessions in memory, `x = 1` calls in one session:");
    for (engine, args) in [
        ("RustPython", vec![]),
        ("CPython", {
            common::cpython_artifacts();
            vec!["--engine", "cpython"]
        }),
    ] {
        let memory = server(&args, None).await?;
        let (id, _) = start(&memory).await?;
        let in_memory = timed(&[&memory], &id).await?;

        let stored = server(&args, Some(&url)).await?;
        let (id, bytes) = start(&stored).await?;
        let in_store = timed(&[&stored], &id).await?;
        let other = server(&args, Some(&url)).await?;
        let moving = timed(&[&stored, &other], &id).await?;

        let added = in_store.0 - in_memory.0;
        println!(
            "  {engine:10}  memory p50 {:.2} / p90 {:.2} ms;  store p50 {:.2} / p90 {:.2} ms \
             (+{added:.2} ms, target <= {TARGET_ADDED_MS} ms: {});  moving between 2 replicas p50 \
             {:.2} / p90 {:.2} ms;  stored after `x = 1`: {} bytes{}",
            in_memory.0,
            in_memory.1,
            in_store.0,
            in_store.1,
            verdict(added <= TARGET_ADDED_MS),
            moving.0,
            moving.1,
            bytes,
            if engine == "RustPython" {
                format!(
                    " (target <= {TARGET_STORED_BYTES}: {})",
                    verdict(bytes <= TARGET_STORED_BYTES)
                )
            } else {
                String::new()
            },
        );
    }
    Ok(())
}

/// A server over stdio with `args`, its sessions in `store` if given, ready (its sandbox warm).
async fn server(args: &[&str], store: Option<&str>) -> anyhow::Result<Client> {
    let mut args = args.to_vec();
    if let Some(url) = store {
        args.extend(["--session-store", url]);
    }
    let client = ().serve(transport(common::spawn::mcp_server(&args))).await?;
    client.call_tool(run_python("None", None)).await?;
    Ok(client)
}

/// Starts a session with `x = 1`: its handle, and the bytes stored (0 in memory).
async fn start(client: &Client) -> anyhow::Result<(String, u64)> {
    let reply = client.call_tool(run_python("x = 1", Some("new"))).await?;
    anyhow::ensure!(reply.is_error == Some(false), "{reply:?}");
    let session = &structured(&reply)["session"];
    let id = session["id"].as_str().unwrap_or_default().to_owned();
    Ok((id, session["stored_bytes"].as_u64().unwrap_or(0)))
}

/// p50 and p90, in ms, of [`CALLS`] `x = 1` calls in session `id`, going round `clients`.
async fn timed(clients: &[&Client], id: &str) -> anyhow::Result<(f64, f64)> {
    let mut times: Vec<Duration> = Vec::with_capacity(CALLS);
    for i in 0..CALLS {
        let started = Instant::now();
        let reply = clients[i % clients.len()]
            .call_tool(run_python("x = 1", Some(id)))
            .await?;
        times.push(started.elapsed());
        anyhow::ensure!(reply.is_error == Some(false), "a call failed: {reply:?}");
    }
    Ok(p50_p90(&mut times))
}
