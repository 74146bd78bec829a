//! Per-call figures, each beside its target and beside the floor, in one run:
//! `cargo bench --bench speed` for the RustPython engine (issue 16's targets),
//! `cargo bench --bench speed -- --engine cpython` for the CPython engine, and with
//! `--allow @data` for its data-stack template (issue 28's targets).
//! `cargo bench --bench speed -- --record [--note TEXT]` measures all three in turn and writes their
//! figures into `README.md` and `docs/benchmarks.md` ([`support::record`]). Other flags are refused.
//!
//! The floor is an rmcp stdio server whose `run_python` does no work ([`floor`]), so
//! both servers are measured on the same machine, in the same minute, through the same client.
//! Against it, over MCP stdio with the real `safe-python-mcp` (warm module cache, the tests' own
//! under `target/`):
//! - per-call latency (p50, p90) of a fresh `run_python` of trivial code, of a call in a session,
//!   and of the floor, the three interleaved so that load on the machine hits them alike; server
//!   time is a p50 less the floor's. Measured twice: back to back, and each call after 3 ms idle
//!   (as from an assistant that thinks between calls: the servers' threads have parked). Then
//!   fresh and session calls in runs of one kind, back to back;
//! - what a call costs each server: context switches and CPU time per call, in a row of one kind;
//! - throughput with 8 calls in flight on one connection, every call fresh (or, in sessions, 8
//!   sessions), against the floor's;
//! - the fuel a fresh `x = 1` burns, from its reply;
//! - memory: what the fresh runs leave (instances kept for the next fresh calls, on the CPython
//!   engine), the server's RSS and address space when idle, and what each warm instance (an idle
//!   session) adds;
//! - last, fresh and session calls over streamable HTTP from a second server started with
//!   `--http`, as over stdio but without a floor (which is stdio-only): the two compared with each
//!   other.
//!
//! Compute against native CPython is `benches/compare.rs`'s.

#[path = "../../tests/it/common/mod.rs"]
mod common;
mod configurations;
mod floor;
#[path = "../support/mod.rs"]
mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::client::{Client, new_session, run_python, structured, transport};
use common::http::{HttpServer, modern};
use configurations::{Asked, CONFIGURATIONS, Targets, has, name};
use rmcp::ServiceExt;
use safe_python_executor::MAX_KEPT_WRITTEN;
use support::record::{Machine, PerCall};
use support::{load_average, p50_p90, status_mib, verdict};

/// Calls per latency series, and per throughput run.
const CALLS: usize = 400;
const THROUGHPUT_CALLS: usize = 2000;
const IN_FLIGHT: usize = 8;
/// The idle time before each call of the second latency run: long enough for the server's threads
/// to park, as between the calls of an assistant that thinks in between.
const PAUSE: Duration = Duration::from_millis(3);

fn main() -> anyhow::Result<()> {
    if std::env::args().nth(1).as_deref() == Some(floor::FLOOR_ARG) {
        return floor::serve();
    }
    let asked = Asked::parse()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let Some(note) = asked.record else {
        runtime.block_on(bench(&asked.flags))?;
        return Ok(());
    };
    let started = Machine::now()?;
    let mut measured = Vec::new();
    for flags in CONFIGURATIONS {
        let flags: Vec<String> = flags.iter().map(|f| f.to_string()).collect();
        measured.push(runtime.block_on(bench(&flags))?);
    }
    let machine = started.finish(note)?;
    support::record::write_speed(&machine, &measured, env!("CARGO_MANIFEST_DIR"))
}

/// One call of `code` (fresh, or in `session`), which must succeed; how long it took.
async fn timed(client: &Client, code: &str, session: Option<&str>) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let reply = client.call_tool(run_python(code, session)).await?;
    let took = started.elapsed();
    anyhow::ensure!(reply.is_error != Some(true), "{code:?} failed: {reply:?}");
    Ok(took)
}

/// The p50 and p90 of [`CALLS`] calls of trivial code to each of `servers` (fresh, or in a
/// session), interleaved so that load on the machine hits them alike, each after `pause` if given.
async fn interleaved(
    servers: &[(&Client, Option<&str>)],
    pause: Option<Duration>,
) -> anyhow::Result<Vec<(f64, f64)>> {
    let mut times = vec![Vec::with_capacity(CALLS); servers.len()];
    for _ in 0..CALLS {
        for ((server, session), times) in servers.iter().zip(&mut times) {
            if let Some(pause) = pause {
                tokio::time::sleep(pause).await;
            }
            times.push(timed(server, "1 + 1", *session).await?);
        }
    }
    Ok(times.iter_mut().map(|times| p50_p90(times)).collect())
}

/// Prints the p50 and p90 of [`CALLS`] calls of trivial code each to the floor, fresh and in
/// `session`, interleaved, each after `pause` if given.
async fn latency(
    floor: &Client,
    client: &Client,
    session: &str,
    targets: &Targets,
    pause: Option<Duration>,
) -> anyhow::Result<[(f64, f64); 3]> {
    let [floor_p, fresh_p, session_p] = interleaved(
        &[(floor, None), (client, None), (client, Some(session))],
        pause,
    )
    .await?[..] else {
        unreachable!("one figure per server")
    };
    println!(
        "per call over MCP stdio, `1 + 1` ({CALLS} each, interleaved, {}), p50 / p90:",
        when(pause)
    );
    println!(
        "  floor (rmcp, no work)  {:6.3} / {:6.3} ms",
        floor_p.0, floor_p.1
    );
    let over = fresh_p.0 - floor_p.0;
    println!(
        "  fresh run              {:6.3} / {:6.3} ms: {over:.3} ms over the floor (target <= {} ms: {})",
        fresh_p.0,
        fresh_p.1,
        targets.server_ms,
        verdict(over <= targets.server_ms),
    );
    println!(
        "  session call           {:6.3} / {:6.3} ms: {:.3} ms over the floor",
        session_p.0,
        session_p.1,
        session_p.0 - floor_p.0,
    );
    lead(fresh_p, session_p);
    Ok([floor_p, fresh_p, session_p])
}

/// How calls were spaced.
fn when(pause: Option<Duration>) -> String {
    pause.map_or("back to back".to_owned(), |p| {
        format!("each after {} ms idle", p.as_millis())
    })
}

/// Fresh and session calls' p50 and p90, where there is no floor to set them against, and the
/// sessions' lead.
fn fresh_and_session(fresh: (f64, f64), session: (f64, f64)) -> f64 {
    println!(
        "  fresh run              {:6.3} / {:6.3} ms",
        fresh.0, fresh.1
    );
    println!(
        "  session call           {:6.3} / {:6.3} ms",
        session.0, session.1
    );
    lead(fresh, session)
}

/// Whether session calls stay below fresh ones (issue 28's target, on both transports), and by
/// how much (p50s, in ms; below zero when they trail).
fn lead(fresh: (f64, f64), session: (f64, f64)) -> f64 {
    let lead = fresh.0 - session.0;
    println!(
        "  sessions keep their lead (session p50 < fresh p50, by {lead:.3} ms): {}",
        verdict(lead > 0.0)
    );
    lead
}

/// Calls in runs of one kind, back to back, as a client that only uses a session (or only fresh
/// calls) sends them with no time to think in between: a session's next call then waits for the
/// last one's snapshot, which interleaved calls leave to the call of the other kind that follows.
const RUN: usize = 40;

/// Prints the p50 and p90 of [`CALLS`] fresh calls and as many in `session`, in alternating runs
/// of [`RUN`] of one kind (the first call of each run not counted), back to back.
async fn in_runs(client: &Client, session: &str, transport: &str) -> anyhow::Result<f64> {
    let (mut fresh_t, mut session_t) = (Vec::new(), Vec::new());
    for _ in 0..CALLS / RUN {
        for (session, times) in [(None, &mut fresh_t), (Some(session), &mut session_t)] {
            timed(client, "1 + 1", session).await?;
            for _ in 0..RUN {
                times.push(timed(client, "1 + 1", session).await?);
            }
        }
    }
    let (fresh_p, session_p) = (p50_p90(&mut fresh_t), p50_p90(&mut session_t));
    println!(
        "per call over MCP {transport}, `1 + 1` ({CALLS} each, in runs of {RUN} of one kind, back to back), p50 / p90:"
    );
    Ok(fresh_and_session(fresh_p, session_p))
}

/// Prints what a call costs the server it goes to: the context switches of all its threads and
/// the CPU time it used, per call over [`CALLS`] calls of trivial code in a row, for each of
/// `servers` (a client, its server's pid, and the session to call, if any) in turn.
async fn costs(servers: &[(&str, &Client, u32, Option<&str>)]) -> anyhow::Result<()> {
    println!("what a call costs its server, {CALLS} calls of `1 + 1` in a row, back to back:");
    for (name, client, pid, session) in servers {
        timed(client, "1 + 1", *session).await?;
        let before = support::Threads::of(*pid)?;
        for _ in 0..CALLS {
            timed(client, "1 + 1", *session).await?;
        }
        let (switches, cpu) = support::Threads::of(*pid)?.since(&before);
        let switches = switches as f64 / CALLS as f64;
        let cpu = cpu.as_secs_f64() * 1000.0 / CALLS as f64;
        println!("  {name:<22} {switches:5.1} context switches, {cpu:.3} ms of CPU");
    }
    Ok(())
}

/// Prints the p50 and p90 of fresh and session calls over streamable HTTP (2026-07-28 requests
/// from the rmcp client, one connection): interleaved, back to back and each after [`PAUSE`],
/// then in runs. The floor is stdio-only, so this compares the two with each other.
async fn over_http(args: &[&str]) -> anyhow::Result<f64> {
    let mut args = args.to_vec();
    args.extend(["--http", "127.0.0.1:0"]);
    let server = HttpServer::start(&args);
    let client = server.client(modern(), None).await;
    for _ in 0..20 {
        timed(&client, "x = 1", None).await?;
    }
    let session = new_session(&client, "x = 1").await;
    let mut leads = Vec::new();
    for pause in [None, Some(PAUSE)] {
        let [fresh_p, session_p] =
            interleaved(&[(&client, None), (&client, Some(&session))], pause).await?[..]
        else {
            unreachable!("one figure per server")
        };
        println!(
            "per call over MCP streamable HTTP, `1 + 1` ({CALLS} each, interleaved, {}), p50 / p90:",
            when(pause)
        );
        leads.push(fresh_and_session(fresh_p, session_p));
    }
    in_runs(&client, &session, "streamable HTTP").await?;
    client.cancel().await?;
    Ok(leads[0])
}

/// Calls per second with [`IN_FLIGHT`] calls in flight on one connection; `session(i)` is the
/// session of the `i`th caller (`None`: fresh calls).
async fn throughput(
    client: &Client,
    session: impl Fn(usize) -> Option<String>,
) -> anyhow::Result<f64> {
    let left = Arc::new(AtomicUsize::new(THROUGHPUT_CALLS));
    let started = Instant::now();
    let callers = (0..IN_FLIGHT).map(|i| {
        let (peer, left, session) = (client.peer().clone(), left.clone(), session(i));
        tokio::spawn(async move {
            while left
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                .is_ok()
            {
                let reply = peer
                    .call_tool(run_python("x = 1", session.as_deref()))
                    .await?;
                anyhow::ensure!(reply.is_error != Some(true), "a call failed: {reply:?}");
            }
            anyhow::Ok(())
        })
    });
    for caller in callers.collect::<Vec<_>>() {
        caller.await??;
    }
    Ok(THROUGHPUT_CALLS as f64 / started.elapsed().as_secs_f64())
}

/// Measures the server started with `flags` and prints each figure; returns those the documents
/// show.
async fn bench(flags: &[String]) -> anyhow::Result<PerCall> {
    let targets = Targets::of(flags);
    if has(flags, "--engine", "cpython") {
        common::cpython_artifacts();
    }
    println!(
        "issue {}'s figures, server flags {flags:?} (load average before: {})",
        targets.issue,
        load_average()
    );
    let floor = transport(floor::command()?);
    let floor_pid = floor.id().ok_or_else(|| anyhow::anyhow!("no floor pid"))?;
    let floor = ().serve(floor).await?;
    let mut args = vec!["--max-sessions", "64"];
    args.extend(flags.iter().map(String::as_str));
    let server = transport(common::spawn::mcp_server(&args));
    let pid = server
        .id()
        .ok_or_else(|| anyhow::anyhow!("no server pid"))?;
    let client = ().serve(server).await?;
    // The first call waits for the sandbox to load; a few more warm both servers up.
    for _ in 0..20 {
        timed(&floor, "x = 1", None).await?;
        timed(&client, "x = 1", None).await?;
    }
    let session = new_session(&client, "x = 1").await;

    // (b) Latency, the three interleaved: back to back, then each call after a pause, as a client
    // that thinks between calls sends them (the threads that serve it have gone idle).
    let [floor_p, fresh_p, session_p] = latency(&floor, &client, &session, &targets, None).await?;
    let [idle_floor, idle_fresh, _] =
        latency(&floor, &client, &session, &targets, Some(PAUSE)).await?;
    let lead_in_runs = in_runs(&client, &session, "stdio").await?;
    costs(&[
        ("floor (rmcp, no work)", &floor, floor_pid, None),
        ("fresh run", &client, pid, None),
        ("session call", &client, pid, Some(&session)),
    ])
    .await?;

    // (c) Throughput.
    let floor_rate = throughput(&floor, |_| None).await?;
    let before = status_mib(pid, "RssAnon:")?;
    let fresh_rate = throughput(&client, |_| None).await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let kept = status_mib(pid, "RssAnon:")? - before;
    let mut sessions = Vec::new();
    for _ in 0..IN_FLIGHT {
        sessions.push(new_session(&client, "x = 1").await);
    }
    let session_rate = throughput(&client, |i| Some(sessions[i].clone())).await?;
    println!(
        "throughput, {IN_FLIGHT} calls in flight on one stdio connection ({THROUGHPUT_CALLS} calls of `x = 1`):"
    );
    println!("  floor                  {floor_rate:7.0} calls/s");
    println!(
        "  fresh runs             {fresh_rate:7.0} calls/s (target >= {}: {})",
        targets.calls_per_s,
        verdict(fresh_rate >= targets.calls_per_s)
    );
    println!("  in 8 sessions          {session_rate:7.0} calls/s");
    // The CPython engine keeps up to --workers (the cores, here) instances for fresh calls.
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    println!(
        "  private memory after the fresh runs: {kept:+.1} MiB (the CPython engine keeps at most \
         {workers} instances, {} MiB of their own each)",
        MAX_KEPT_WRITTEN >> 20
    );

    // (d) Fuel.
    let reply = client.call_tool(run_python("x = 1", None)).await?;
    let fuel = structured(&reply)["stats"]["fuel"].as_u64().unwrap_or(0);
    let reply = client
        .call_tool(run_python("x = 1", Some(&session)))
        .await?;
    let session_fuel = structured(&reply)["stats"]["fuel"].as_u64().unwrap_or(0);
    print!("fuel of `x = 1`: fresh {fuel}, in a session {session_fuel}");
    match targets.fuel {
        Some(target) => println!(" (target <= {target}: {})", verdict(fuel <= target)),
        None => println!(),
    }

    // (e) Memory.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (anon, rss) = (status_mib(pid, "RssAnon:")?, status_mib(pid, "VmRSS:")?);
    let floor_rss = status_mib(floor_pid, "VmRSS:")?;
    println!(
        "memory: idle server (with {} sessions open) {rss:.1} MiB RSS, {anon:.1} MiB private, {:.0} GiB of address space; the floor {floor_rss:.1} MiB RSS",
        IN_FLIGHT + 1,
        status_mib(pid, "VmSize:")? / 1024.0,
    );
    const WARM: usize = 16;
    for _ in 0..WARM {
        new_session(&client, "x = 1").await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let per = |after: f64, before: f64| (after - before) / WARM as f64;
    let warm = (
        per(status_mib(pid, "VmRSS:")?, rss),
        per(status_mib(pid, "RssAnon:")?, anon),
    );
    println!(
        "  per warm instance (an idle session after `x = 1`, {WARM} of them): {:.2} MiB RSS, {:.2} MiB private",
        warm.0, warm.1
    );
    floor.cancel().await?;
    client.cancel().await?;

    // (f) Sessions over HTTP.
    let http_lead = over_http(&args).await?;
    Ok(PerCall {
        name: name(flags),
        target_ms: targets.server_ms,
        target_per_s: targets.calls_per_s,
        floor_ms: floor_p.0,
        fresh_ms: fresh_p.0 - floor_p.0,
        fresh_idle_ms: idle_fresh.0 - idle_floor.0,
        session_ms: session_p.0 - floor_p.0,
        lead_ms: fresh_p.0 - session_p.0,
        lead_in_runs_ms: lead_in_runs,
        http_lead_ms: http_lead,
        fresh_per_s: fresh_rate,
        sessions_per_s: session_rate,
        floor_per_s: floor_rate,
        warm_mib: warm,
    })
}
