//! What sessions cost: `cargo bench --bench session`.
//!
//! Over MCP (the real server, warm module cache): the per-call latency of trivial code in a
//! session, back to back and with a pause between calls, against the same code run fresh; and the
//! server memory (RSS) an idle session holds. In process: the cost of the snapshot taken after
//! each call and of the rollback after a stopped call, as the session's memory grows.

use std::time::{Duration, Instant};

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::TokioChildProcess;
use safe_python_executor::{Limits, RunOptions, Sandbox, SandboxOptions, Session};
use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_safe-python-mcp");

fn call(code: &str, session: Option<&str>) -> CallToolRequestParams {
    let mut args = json!({ "code": code });
    if let Some(s) = session {
        args["session"] = Value::from(s);
    }
    CallToolRequestParams::new("run_python").with_arguments(args.as_object().unwrap().clone())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn percentile(sorted: &[Duration], p: usize) -> f64 {
    ms(sorted[(sorted.len() * p / 100).min(sorted.len() - 1)])
}

fn rss_kib(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .ok_or_else(|| anyhow::anyhow!("no VmRSS"))?;
    Ok(line.split_whitespace().nth(1).unwrap_or("0").parse()?)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    over_mcp().await?;
    in_process().await
}

async fn over_mcp() -> anyhow::Result<()> {
    let mut command = tokio::process::Command::new(BIN);
    command
        .env("SAFE_PYTHON_LOG", "warn")
        .args(["--max-sessions", "64"]);
    let transport = TokioChildProcess::new(command)?;
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
        times.sort();
        anyhow::Ok((percentile(&times, 50), percentile(&times, 90)))
    };
    let fresh = timed(None, 300, Duration::ZERO).await?;
    let back_to_back = timed(Some("bench"), 300, Duration::ZERO).await?;
    let paused = timed(Some("bench"), 100, Duration::from_millis(20)).await?;
    println!("MCP per call, `1 + 1` (p50 / p90):");
    println!(
        "  fresh run                     {:.2} / {:.2} ms",
        fresh.0, fresh.1
    );
    println!(
        "  in a session, back to back    {:.2} / {:.2} ms  ({:.2}x fresh at p50)",
        back_to_back.0,
        back_to_back.1,
        back_to_back.0 / fresh.0
    );
    println!(
        "  in a session, 20 ms apart     {:.2} / {:.2} ms  ({:.2}x fresh at p50)",
        paused.0,
        paused.1,
        paused.0 / fresh.0
    );

    // Idle sessions: the server's RSS before and after opening them.
    for (label, code, count) in [
        ("small state (x = 1)", "x = 1", 16),
        ("10 MB of state", "data = bytearray(10 * 2**20)", 8),
    ] {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let before = rss_kib(pid)?;
        for i in 0..count {
            client
                .call_tool(call(code, Some(&format!("{label}-{i}"))))
                .await?;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        let after = rss_kib(pid)?;
        println!(
            "idle session, {label}: {:.1} MiB of server RSS each ({count} sessions: {:.0} -> {:.0} MiB)",
            (after.saturating_sub(before)) as f64 / 1024.0 / count as f64,
            before as f64 / 1024.0,
            after as f64 / 1024.0
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
        ("fresh state", "x = 1"),
        ("+10 MB", "data = bytearray(10 * 2**20)"),
        ("+100 MB", "data = bytearray(100 * 2**20)"),
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
