//! `safe-python-mcp --http` beside stdio, in one run: `cargo bench --bench http`.
//!
//! Calls per second and latency (p50, p90) of `x = 1` fresh calls with 8 calls in flight:
//! - over stdio (one connection, the rmcp client in this process): the reference;
//! - over HTTP with keep-alive connections, 1 and 8 of them, from Node's `fetch` (undici, what
//!   TypeScript MCP clients use; `benches/support/http_fetch.mjs`) and from the MCP Python SDK's
//!   client (`benches/support/http_sdk.py`, installed from PyPI into a virtual environment under
//!   `target/` on first use).
//!
//! Each HTTP run also prints the CPU time per call of the client (as it measures itself) and of the
//! server (from `/proc`, warm-up calls included): the clients run on the same cores as the server,
//! and each does its calls on one thread, so its CPU time per call bounds what it can reach.
//!
//! Targets (issue 27): at 8 connections, HTTP reaches at least 80 % of stdio's calls per second,
//! with p90 within twice p50, for both clients. A client that cannot run here (no `node`, no
//! `python3`) is reported as skipped.

#[path = "../tests/it/common/mod.rs"]
mod common;
mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::client::{Client, run_python, transport};
use common::http::HttpServer;
use rmcp::ServiceExt;
use support::percentile;

const CALLS: usize = 2000;
const CONNECTIONS: usize = 8;
/// Calls each client makes before it measures.
const WARM_UP: usize = 20;
/// The pinned Python SDK.
const PYTHON_SDK: &str = "mcp==2.3.0";

const TARGET_SHARE: f64 = 0.8;
const TARGET_P90_OVER_P50: f64 = 2.0;

/// What one client measured.
#[derive(serde::Deserialize)]
struct Figures {
    per_s: f64,
    p50: f64,
    p90: f64,
    max: f64,
    /// The client's own CPU time per call, in ms (not measured over stdio).
    #[serde(default)]
    cpu: Option<f64>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "HTTP beside stdio, `x = 1` fresh calls (load average before: {})",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    let stdio = stdio().await?;
    println!(
        "  stdio, {CONNECTIONS} in flight on one connection:  {:7.0} calls/s, p50 {:6.2} ms, p90 {:6.2} ms, max {:6.1} ms",
        stdio.per_s, stdio.p50, stdio.p90, stdio.max
    );
    let server = HttpServer::start(&["--http", "127.0.0.1:0"]);
    let url = server.url();
    let here = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/support");
    let mut node = Command::new("node");
    node.arg(here.join("http_fetch.mjs"));
    let clients: [(&str, anyhow::Result<Command>); 2] = [
        ("Node fetch", Ok(node)),
        (
            "Python SDK",
            python_sdk().map(|mut python| {
                python.arg(here.join("http_sdk.py"));
                python
            }),
        ),
    ];
    for (name, command) in clients {
        let mut command = match command {
            Ok(command) => command,
            Err(e) => {
                println!("  {name}: skipped ({e:#})");
                continue;
            }
        };
        for connections in [1, CONNECTIONS] {
            let calls = if connections == 1 { CALLS / 4 } else { CALLS };
            let server_cpu = support::cpu_time(server.child.id());
            let figures = match client(&mut command, &url, connections, calls) {
                Ok(figures) => figures,
                Err(e) => {
                    println!("  {name}: skipped ({e:#})");
                    break;
                }
            };
            print!(
                "  {name}, {connections} keep-alive connection(s): {:7.0} calls/s, p50 {:6.2} ms, p90 {:6.2} ms, max {:6.1} ms",
                figures.per_s, figures.p50, figures.p90, figures.max
            );
            if connections == CONNECTIONS {
                let share = figures.per_s / stdio.per_s;
                let steady = figures.p90 <= TARGET_P90_OVER_P50 * figures.p50;
                print!(
                    "; {:.0} % of stdio (target >= {:.0} %: {}), p90/p50 {:.2} (target <= {TARGET_P90_OVER_P50}: {})",
                    share * 100.0,
                    TARGET_SHARE * 100.0,
                    verdict(share >= TARGET_SHARE),
                    figures.p90 / figures.p50,
                    verdict(steady)
                );
            }
            println!();
            // Where the time goes: the client runs on the same cores as the server, and one
            // client process does its calls on one thread.
            if let (Some(client), Ok(before), Ok(after)) = (
                figures.cpu,
                server_cpu,
                support::cpu_time(server.child.id()),
            ) {
                let server = (after - before).as_secs_f64() * 1000.0 / (calls + WARM_UP) as f64;
                println!(
                    "    CPU per call: client {client:.2} ms (alone on one core: at most {:.0} calls/s), server {server:.2} ms",
                    1000.0 / client
                );
            }
        }
    }
    Ok(())
}

fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "NOT met" }
}

/// Throughput and latency over stdio, [`CONNECTIONS`] calls in flight on one connection.
async fn stdio() -> anyhow::Result<Figures> {
    let client: Client = ().serve(transport(common::spawn::mcp_server(&[]))).await?;
    for _ in 0..WARM_UP {
        client.call_tool(run_python("x = 1", None)).await?;
    }
    let left = Arc::new(AtomicUsize::new(CALLS));
    let started = Instant::now();
    let callers = (0..CONNECTIONS).map(|_| {
        let (peer, left) = (client.peer().clone(), left.clone());
        tokio::spawn(async move {
            let mut times = Vec::new();
            while left
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                .is_ok()
            {
                let call = Instant::now();
                let reply = peer.call_tool(run_python("x = 1", None)).await?;
                times.push(call.elapsed());
                anyhow::ensure!(reply.is_error != Some(true), "a call failed: {reply:?}");
            }
            anyhow::Ok(times)
        })
    });
    let mut times: Vec<Duration> = Vec::new();
    for caller in callers.collect::<Vec<_>>() {
        times.extend(caller.await??);
    }
    let per_s = CALLS as f64 / started.elapsed().as_secs_f64();
    client.cancel().await?;
    times.sort();
    Ok(Figures {
        per_s,
        p50: percentile(&times, 50),
        p90: percentile(&times, 90),
        max: percentile(&times, 100),
        cpu: None,
    })
}

/// Runs a client script against `url` and reads its figures.
fn client(
    command: &mut Command,
    url: &str,
    connections: usize,
    calls: usize,
) -> anyhow::Result<Figures> {
    let out = Command::new(command.get_program())
        .args(command.get_args())
        .args([url, &connections.to_string(), &calls.to_string()])
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(serde_json::from_slice(&out.stdout)?)
}

/// A Python with the pinned MCP SDK: a virtual environment under `target/`, made on first use.
fn python_sdk() -> anyhow::Result<Command> {
    let venv = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("bench-python-sdk");
    let python = venv.join("bin/python");
    let has_sdk = |python: &Path| {
        Command::new(python)
            .args([
                "-c",
                &format!(
                    "import importlib.metadata as m; assert m.version('mcp') == '{}'",
                    &PYTHON_SDK[5..]
                ),
            ])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !has_sdk(&python) {
        eprintln!("installing {PYTHON_SDK} into {}", venv.display());
        let made = Command::new("python3")
            .arg("-m")
            .arg("venv")
            .arg(&venv)
            .status()?;
        anyhow::ensure!(made.success(), "python3 -m venv failed");
        let installed = Command::new(&python)
            .args(["-m", "pip", "install", "--quiet", PYTHON_SDK])
            .status()?;
        anyhow::ensure!(installed.success(), "pip install {PYTHON_SDK} failed");
    }
    Ok(Command::new(python))
}
