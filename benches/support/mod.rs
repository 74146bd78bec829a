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

/// Sorts `times` and gives their p50 and p90, in ms.
pub fn p50_p90(times: &mut [Duration]) -> (f64, f64) {
    times.sort();
    (percentile(times, 50), percentile(times, 90))
}

/// How a figure compares with its target, as every bench prints it.
pub fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "NOT met" }
}

/// The machine's load averages over 1, 5 and 15 minutes, as `/proc/loadavg` gives them (empty
/// where there is none): printed before a run, since the figures depend on it.
pub fn load_average() -> String {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    load.split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
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

/// What each live thread of a process has spent so far, by thread id: context switches, voluntary
/// or not (each a thread that slept or was put aside, most of them a thread woken to hand work
/// on), and nanoseconds on a CPU (`schedstat`; [`cpu_time`] counts clock ticks of 10 ms, too
/// coarse for a few hundred calls of a tenth of a millisecond).
pub struct Threads(std::collections::HashMap<String, (u64, u64)>);

impl Threads {
    pub fn of(pid: u32) -> anyhow::Result<Threads> {
        let mut threads = std::collections::HashMap::new();
        for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
            let task = task?.path();
            // A thread that ended since the listing has taken its files with it.
            let (Ok(status), Ok(schedstat)) = (
                std::fs::read_to_string(task.join("status")),
                std::fs::read_to_string(task.join("schedstat")),
            ) else {
                continue;
            };
            let mut switches = 0;
            for line in status.lines() {
                if let Some(n) = line
                    .strip_prefix("voluntary_ctxt_switches:")
                    .or_else(|| line.strip_prefix("nonvoluntary_ctxt_switches:"))
                {
                    switches += n.trim().parse::<u64>()?;
                }
            }
            let on_cpu = schedstat.split_whitespace().next().unwrap_or("0").parse()?;
            let id = task.file_name().unwrap_or_default().to_string_lossy();
            threads.insert(id.into_owned(), (switches, on_cpu));
        }
        Ok(Threads(threads))
    }

    /// The context switches and CPU time since `earlier`, of the threads alive now: a thread
    /// that ended in between is left out.
    pub fn since(&self, earlier: &Threads) -> (u64, Duration) {
        let (mut switches, mut nanos) = (0, 0);
        for (id, (s, n)) in &self.0 {
            let (s0, n0) = earlier.0.get(id).copied().unwrap_or_default();
            switches += s.saturating_sub(s0);
            nanos += n.saturating_sub(n0);
        }
        (switches, Duration::from_nanos(nanos))
    }
}

/// The CPU time (user and system, all threads) process `pid` has used so far, from
/// `/proc/<pid>/stat`.
pub fn cpu_time(pid: u32) -> anyhow::Result<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The command name, in parentheses, may hold spaces: fields are counted after it, from the
    // state (field 3), so utime and stime (fields 14 and 15) are the 12th and 13th.
    let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let field = |i: usize| -> anyhow::Result<u64> {
        Ok(fields
            .get(i)
            .ok_or_else(|| anyhow::anyhow!("short /proc/{pid}/stat"))?
            .parse()?)
    };
    // SAFETY: sysconf reads a constant of the system.
    let ticks_per_s = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    anyhow::ensure!(ticks_per_s > 0, "no clock tick rate");
    Ok(Duration::from_secs_f64(
        (field(11)? + field(12)?) as f64 / ticks_per_s as f64,
    ))
}
