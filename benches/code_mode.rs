//! Code mode's cost per tool call, beside a direct call to the same upstream, in one run:
//! `cargo bench --bench code_mode`.
//!
//! The upstream is `@modelcontextprotocol/server-everything` over stdio (installed under
//! `target/upstreams` on first use), and the tool its `echo`. The reference is an MCP client in
//! this process calling it back to back. The sandbox's figure is one run that makes N calls in a
//! loop, less one that makes one (which pays for `import tools` and the first listing), over N-1:
//! a call's whole path from Python to the upstream and back, the upstream's own time included, as
//! in the reference.
//!
//! Target (issue 26): at most 0.5 ms added per call on loopback stdio.

#[path = "../tests/it/common/mod.rs"]
mod common;

use std::sync::Arc;
use std::time::Instant;

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::TokioChildProcess;
use safe_python_executor::mcp::upstream::{UpstreamSpec, UpstreamTransport, Upstreams};
use safe_python_executor::toolcalls::{ToolAccess, ToolHost, ToolPolicy};
use safe_python_executor::{ImportPolicy, RunOptions};
use serde_json::json;

const CALLS: usize = 500;
const TARGET_ADDED_MS: f64 = 0.5;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let (node, args) = common::upstreams::everything_stdio();

    // The reference: an MCP client calling the upstream directly.
    let mut command = tokio::process::Command::new(&node);
    command.args(&args);
    let direct = ().serve(TokioChildProcess::new(command)?).await?;
    let echo = || {
        CallToolRequestParams::new("echo")
            .with_arguments(json!({"message": "x"}).as_object().unwrap().clone())
    };
    for _ in 0..50 {
        direct.call_tool(echo()).await?;
    }
    let started = Instant::now();
    for _ in 0..CALLS {
        direct.call_tool(echo()).await?;
    }
    let direct_ms = started.elapsed().as_secs_f64() * 1e3 / CALLS as f64;
    direct.cancel().await?;

    let upstreams = Arc::new(Upstreams::new(vec![UpstreamSpec {
        name: "demo".into(),
        transport: UpstreamTransport::Stdio {
            command: node.display().to_string(),
            args,
            env: Default::default(),
            cwd: None,
        },
    }]));
    upstreams.catalogue(None).await;
    let options = RunOptions {
        policy: Arc::new(ImportPolicy::default()),
        tools: Some(ToolAccess {
            host: upstreams,
            policy: Arc::new(ToolPolicy::new(&[], CALLS as u32 + 1)?),
        }),
        ..RunOptions::default()
    };
    println!("per tool call, server-everything's echo over stdio, {CALLS} calls:");
    println!("  direct from an MCP client      {direct_ms:.3} ms (the reference)");
    for (engine, sandbox) in [
        ("rustpython", common::sandbox()),
        ("cpython", common::cpython()),
    ] {
        let run = |n: usize| {
            let code =
                format!("import tools\nfor _ in range({n}):\n    tools.demo.echo(message='x')");
            let options = &options;
            async move {
                let r = sandbox.run(&code, options).await?;
                anyhow::ensure!(!r.is_failure(), "{r:?}");
                Ok::<_, anyhow::Error>(r.stats.wall_ms as f64)
            }
        };
        run(CALLS).await?; // warm-up
        let (mut one, mut many) = (f64::MAX, f64::MAX);
        for _ in 0..3 {
            one = one.min(run(1).await?);
            many = many.min(run(CALLS).await?);
        }
        let per_call = (many - one) / (CALLS - 1) as f64;
        let added = per_call - direct_ms;
        println!(
            "  from {engine:<10} code        {per_call:.3} ms: {added:+.3} ms added (target at most {TARGET_ADDED_MS} ms: {})",
            if added <= TARGET_ADDED_MS {
                "met"
            } else {
                "NOT met"
            }
        );
    }
    Ok(())
}
