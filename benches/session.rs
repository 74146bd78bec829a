//! What sessions cost: `cargo bench --bench session`.
//!
//! Over MCP (the real server, warm module cache: the tests' own, under `target/`): the per-call latency of trivial code in a
//! session, back to back and with a pause between calls, against the same code run fresh; and the
//! server memory (RSS) an idle session holds. In process: the cost of the snapshot taken after
//! each call and of the rollback after a stopped call, as the session's memory grows.

#[path = "../tests/it/common/mod.rs"]
mod common;
mod support;

use std::time::{Duration, Instant};

use common::client::{new_session, run_python as call, transport};
use rmcp::ServiceExt;
use safe_python_executor::{Limits, RunOptions, Sandbox, SandboxOptions, Session};
use support::{p50_p90, percentile, status_mib};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    over_mcp().await?;
    in_process().await
}

async fn over_mcp() -> anyhow::Result<()> {
    let transport = transport(common::spawn::mcp_server(&["--max-sessions", "64"]));
    let pid = transport
        .id()
        .ok_or_else(|| anyhow::anyhow!("no server pid"))?;
    let client = ().serve(transport).await?;
    client.call_tool(call("None", None)).await?;

    let timed = async |session: Option<&str>, n: usize, pause: Duration| {
        let mut times = Vec::with_capacity(n);
        for _ in 0..n {
            let started = Instant::now();
            let r = client.call_tool(call("1 + 1", session)).await?;
            times.push(started.elapsed());
            anyhow::ensure!(r.is_error == Some(false), "a call failed: {r:?}");
            tokio::time::sleep(pause).await;
        }
        anyhow::Ok(p50_p90(&mut times))
    };
    let pause = Duration::from_millis(20);
    let bench = new_session(&client, "None").await;
    let fresh = timed(None, 300, Duration::ZERO).await?;
    let session = timed(Some(&bench), 300, Duration::ZERO).await?;
    let fresh_paused = timed(None, 100, pause).await?;
    let session_paused = timed(Some(&bench), 100, pause).await?;
    println!("MCP per call, `1 + 1` (p50 / p90), fresh run vs in a session:");
    for (label, fresh, session) in [
        ("back to back", fresh, session),
        ("20 ms apart ", fresh_paused, session_paused),
    ] {
        println!(
            "  {label}  fresh {:.2} / {:.2} ms, session {:.2} / {:.2} ms ({:.2}x at p50)",
            fresh.0,
            fresh.1,
            session.0,
            session.1,
            session.0 / fresh.0
        );
    }

    // Idle sessions: the server's RSS before and after opening them.
    for (label, code, count) in [
        ("x = 1", "x = 1", 16),
        ("list(range(10**5))", "data = list(range(10**5))", 8),
        ("list(range(10**6))", "data = list(range(10**6))", 4),
    ] {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let (anon, rss) = (status_mib(pid, "RssAnon:")?, status_mib(pid, "VmRSS:")?);
        for _ in 0..count {
            new_session(&client, code).await;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        let per = |after: f64, before: f64| (after - before) / count as f64;
        println!(
            "idle session holding {label:<18}: {:>6.1} MiB private, {:>6.1} MiB RSS each ({count} sessions)",
            per(status_mib(pid, "RssAnon:")?, anon),
            per(status_mib(pid, "VmRSS:")?, rss),
        );
    }
    client.cancel().await?;
    Ok(())
}

async fn in_process() -> anyhow::Result<()> {
    let sandbox = Sandbox::new(SandboxOptions::default())?;
    let options = RunOptions::default();
    let stopped = RunOptions {
        limits: Limits {
            max_output_bytes: 1000,
            ..Limits::default()
        },
        ..RunOptions::default()
    };
    let stop = "print('x' * 2000)";
    println!("in process, as the session's memory grows:");
    for (label, state) in [
        ("x = 1", "x = 1"),
        ("10**5 ints", "data = list(range(10**5))"),
        ("10**6 ints", "data = list(range(10**6))"),
    ] {
        let mut session = Session::new(&sandbox).await?;
        session.run(state, &options).await?;
        let (mut saves, mut stops) = (Vec::new(), Vec::new());
        for _ in 0..7 {
            // Touch memory, then time the snapshot of the result.
            session.run("x = 2", &options).await?;
            let started = Instant::now();
            session.save();
            saves.push(started.elapsed());
            let started = Instant::now();
            let run = session.run(stop, &stopped).await?;
            stops.push(started.elapsed());
            anyhow::ensure!(run.rolled_back, "the stopped call was not undone");
        }
        let mut fresh_stops = Vec::new();
        for _ in 0..7 {
            let started = Instant::now();
            sandbox.run(stop, &stopped).await?;
            fresh_stops.push(started.elapsed());
        }
        for v in [&mut saves, &mut stops, &mut fresh_stops] {
            v.sort();
        }
        println!(
            "  {label:<12} memory {:>4} MiB, snapshot {:>5.1} MiB: snapshot {:>6.2} ms, stopped call + rollback {:>6.2} ms (the same call fresh: {:.2} ms)",
            session.memory_bytes() >> 20,
            session.snapshot_bytes() as f64 / (1 << 20) as f64,
            percentile(&saves, 50),
            percentile(&stops, 50),
            percentile(&fresh_stops, 50),
        );
    }
    Ok(())
}
