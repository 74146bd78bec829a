//! What the MCP benches share: durations in milliseconds, percentiles, and a process's memory.
//! A directory module, so that cargo does not take it for a bench of its own.
// Each bench uses part of it.
#![allow(dead_code)]

use std::time::Duration;

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The `p`th percentile of `sorted`, in ms.
pub fn percentile(sorted: &[Duration], p: usize) -> f64 {
    ms(sorted[(sorted.len() * p / 100).min(sorted.len() - 1)])
}

/// A `/proc/<pid>/status` figure, in MiB. `RssAnon` is the process's private memory; `VmRSS` adds
/// the file pages it maps (the compiled guest's image, shared with every instance).
pub fn status_mib(pid: u32, field: &str) -> anyhow::Result<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kib: f64 = status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .ok_or_else(|| anyhow::anyhow!("no {field} for {pid}"))?
        .parse()?;
    Ok(kib / 1024.0)
}

pub mod record;
