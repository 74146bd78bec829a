//! The figures of one bench run written into the documents (`--record`), each block between a begin
//! and an end marker and replaced whole, with the date and the machine, so that no figure in them
//! is typed by hand:
//! - `compare`: a summary table in `README.md` and `docs/benchmarks.md` (the same block in both),
//!   and each program's times in `docs/benchmarks.md`;
//! - `speed`: the per-call figures of each engine beside their targets, in both documents.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;

use super::verdict;

/// The summary block's markers, in both documents; `tests/it/readme.rs` checks the block.
pub const SUMMARY: (&str, &str) = (
    "<!-- compare:summary (written by `cargo bench --bench compare -- --record`) -->",
    "<!-- /compare:summary -->",
);
/// The `speed` block's markers, in both documents; `tests/it/readme.rs` checks it too.
pub const SPEED: (&str, &str) = (
    "<!-- speed:summary (written by `cargo bench --bench speed -- --record`) -->",
    "<!-- /speed:summary -->",
);
/// The per-program block's markers, in `docs/benchmarks.md`.
pub const PROGRAMS: (&str, &str) = (
    "<!-- compare:programs (written by `cargo bench --bench compare -- --record`) -->",
    "<!-- /compare:programs -->",
);

/// One program's best times, in milliseconds.
pub struct Row {
    pub program: String,
    pub native_ms: f64,
    pub fuel_ms: f64,
    pub off_ms: f64,
}

/// One engine's figures.
pub struct Summary {
    pub engine: &'static str,
    /// The native interpreter, as `python3 --version` prints it.
    pub python: String,
    /// Geometric means of the programs' ratios to native, with fuel metering and without.
    pub fuel_ratio: f64,
    pub off_ratio: f64,
    /// p50 of a fresh call of `print(1)` and of `x = 1` in a session, in process, fuel on.
    pub fresh_ms: f64,
    pub session_ms: f64,
    /// Median of `sandbox-run -c 'print(1)'` from spawn to exit.
    pub process_ms: f64,
    pub rows: Vec<Row>,
}

/// When and where the figures were measured.
pub struct Machine {
    date: String,
    load_before: String,
    load_after: String,
    note: Option<String>,
}

impl Machine {
    /// The date and the load as a run starts.
    pub fn now() -> anyhow::Result<Self> {
        let days = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_secs()
            / 86_400;
        Ok(Machine {
            date: civil_date(days as i64),
            load_before: load_average(),
            load_after: String::new(),
            note: None,
        })
    }

    /// The load as the run ends, and what the operator adds (how busy the machine was).
    pub fn finish(mut self, note: Option<String>) -> anyhow::Result<Self> {
        self.load_after = load_average();
        self.note = note;
        Ok(self)
    }

    /// Says when, by which `bench`, on what machine (and beside which native Python, if any).
    fn caption(&self, bench: &str, python: Option<&str>) -> String {
        let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
        let native = python.map(|p| format!(", native {p}")).unwrap_or_default();
        let mut caption = format!(
            "Measured on {} by `cargo bench --bench {bench} -- --record`: {} {}, {cores} cores \
             ({}){native}; load average {} at the start, {} at the end.",
            self.date,
            std::env::consts::OS,
            std::env::consts::ARCH,
            cpu_model(),
            self.load_before,
            self.load_after,
        );
        if let Some(note) = &self.note {
            write!(caption, " {note}").unwrap();
        }
        caption
    }
}

/// Replaces the blocks in `README.md` and `docs/benchmarks.md` under `root`.
pub fn write(machine: &Machine, summaries: &[Summary], root: &str) -> anyhow::Result<()> {
    let first = summaries.first().context("no engine was measured")?;
    let caption = machine.caption("compare", Some(&first.python));
    let summary = format!("{caption}\n\n{}", summary_table(summaries));
    let mut programs = format!("{caption}\n");
    for s in summaries {
        programs.push_str(&programs_table(s));
    }
    let root = Path::new(root);
    replace_block(&root.join("README.md"), SUMMARY, &summary)?;
    let docs = root.join("docs/benchmarks.md");
    replace_block(&docs, SUMMARY, &summary)?;
    replace_block(&docs, PROGRAMS, &programs)?;
    println!("recorded in README.md and docs/benchmarks.md");
    Ok(())
}

fn summary_table(summaries: &[Summary]) -> String {
    let programs = first_len(summaries);
    let compute = format!(
        "compute: run time against native CPython, geometric mean of {programs} programs, fuel metering on (the default)"
    );
    let rows: [(&str, Cell<Summary>); 5] = [
        (&compute, &|s| format!("{:.2}x", s.fuel_ratio)),
        ("the same with `--fuel off`", &|s| {
            format!("{:.2}x", s.off_ratio)
        }),
        ("a fresh call of `print(1)`, in process, p50", &|s| {
            format!("{:.2} ms", s.fresh_ms)
        }),
        ("a call of `x = 1` in a session, in process, p50", &|s| {
            format!("{:.2} ms", s.session_ms)
        }),
        (
            "`sandbox-run -c 'print(1)'`, process start to exit, median",
            &|s| format!("{:.0} ms", s.process_ms),
        ),
    ];
    table("", summaries, |s| s.engine, &rows)
}

/// How a row of a table shows one column's figure.
type Cell<'a, T> = &'a dyn Fn(&T) -> String;

/// A Markdown table: `corner` above the rows' labels, a column per item of `columns` headed by
/// `head`, and a row per label and figure.
fn table<T>(corner: &str, columns: &[T], head: fn(&T) -> &str, rows: &[(&str, Cell<T>)]) -> String {
    let mut t = String::from("|");
    if !corner.is_empty() {
        write!(t, " {corner}").unwrap();
    }
    for column in columns {
        write!(t, " | {}", head(column)).unwrap();
    }
    t.push_str(" |\n|---");
    t.push_str(&"|---".repeat(columns.len()));
    t.push_str("|\n");
    for (what, figure) in rows {
        write!(t, "| {what}").unwrap();
        for column in columns {
            write!(t, " | {}", figure(column)).unwrap();
        }
        t.push_str(" |\n");
    }
    t
}

/// One configuration's `speed` figures: `1 + 1` over MCP stdio, p50 in ms, server time over the
/// floor's p50.
pub struct PerCall {
    /// The engine, and template if not the plain one.
    pub name: String,
    /// Server time of a fresh call, and fresh calls per second at 8 in flight, targeted.
    pub target_ms: f64,
    pub target_per_s: f64,
    /// The floor's own p50, back to back.
    pub floor_ms: f64,
    /// A fresh call over the floor, back to back and after idle time; a session call, back to back.
    pub fresh_ms: f64,
    pub fresh_idle_ms: f64,
    pub session_ms: f64,
    /// Fresh p50 less session p50: interleaved, in runs of one kind, and interleaved over HTTP.
    pub lead_ms: f64,
    pub lead_in_runs_ms: f64,
    pub http_lead_ms: f64,
    /// Calls per second at 8 in flight: fresh, in 8 sessions, and the floor's.
    pub fresh_per_s: f64,
    pub sessions_per_s: f64,
    pub floor_per_s: f64,
    /// What each warm instance (an idle session) adds, in MiB: RSS and private memory.
    pub warm_mib: (f64, f64),
}

/// Replaces the `speed` block in `README.md` and `docs/benchmarks.md` under `root`.
pub fn write_speed(machine: &Machine, measured: &[PerCall], root: &str) -> anyhow::Result<()> {
    let block = format!(
        "{}\n\n{}",
        machine.caption("speed", None),
        speed_table(measured)
    );
    let root = Path::new(root);
    replace_block(&root.join("README.md"), SPEED, &block)?;
    replace_block(&root.join("docs/benchmarks.md"), SPEED, &block)?;
    println!("recorded in README.md and docs/benchmarks.md");
    Ok(())
}

fn speed_table(measured: &[PerCall]) -> String {
    let lead = |lead: f64| format!("{lead:+.2} ms ({})", verdict(lead > 0.0));
    let rows: [(&str, Cell<PerCall>); 7] = [
        (
            "the floor (an rmcp server that does no work), back to back",
            &|m| format!("{:.2} ms", m.floor_ms),
        ),
        (
            "a fresh call over the floor: back to back; each after 3 ms idle (target)",
            &|m| {
                format!(
                    "{:.2} ms; {:.2} ms (<= {}: {}; {})",
                    m.fresh_ms,
                    m.fresh_idle_ms,
                    m.target_ms,
                    verdict(m.fresh_ms <= m.target_ms),
                    verdict(m.fresh_idle_ms <= m.target_ms)
                )
            },
        ),
        ("a call in a session over the floor, back to back", &|m| {
            format!("{:.2} ms", m.session_ms)
        }),
        (
            "a session call's lead on a fresh one (target: ahead): interleaved; in runs of 40 of one kind; interleaved over HTTP",
            &|m| {
                format!(
                    "{}; {}; {}",
                    lead(m.lead_ms),
                    lead(m.lead_in_runs_ms),
                    lead(m.http_lead_ms)
                )
            },
        ),
        ("fresh calls/s, 8 in flight (target)", &|m| {
            format!(
                "{:.0} (>= {:.0}: {})",
                m.fresh_per_s,
                m.target_per_s,
                verdict(m.fresh_per_s >= m.target_per_s)
            )
        }),
        ("calls/s in 8 sessions; the floor's", &|m| {
            format!("{:.0}; {:.0}", m.sessions_per_s, m.floor_per_s)
        }),
        (
            "memory per warm instance (an idle session): RSS, private",
            &|m| format!("{:.1} MiB, {:.1} MiB", m.warm_mib.0, m.warm_mib.1),
        ),
    ];
    table("`1 + 1` over MCP stdio, p50", measured, |m| &m.name, &rows)
}

fn first_len(summaries: &[Summary]) -> usize {
    summaries.first().map_or(0, |s| s.rows.len())
}

fn programs_table(s: &Summary) -> String {
    let mut t = format!(
        "\n{}:\n\n| program | native | fuel on | ratio | `--fuel off` | ratio |\n|---|---|---|---|---|---|\n",
        s.engine
    );
    for r in &s.rows {
        writeln!(
            t,
            "| `{}` | {:.1} ms | {:.1} ms | {:.2}x | {:.1} ms | {:.2}x |",
            r.program,
            r.native_ms,
            r.fuel_ms,
            r.fuel_ms / r.native_ms,
            r.off_ms,
            r.off_ms / r.native_ms
        )
        .unwrap();
    }
    t
}

/// Replaces what lies between `markers` in `file` with `body`.
fn replace_block(file: &Path, (begin, end): (&str, &str), body: &str) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(file).with_context(|| file.display().to_string())?;
    let start = text
        .find(begin)
        .with_context(|| format!("{} has no {begin}", file.display()))?
        + begin.len();
    let stop = text[start..]
        .find(end)
        .with_context(|| format!("{} has no {end}", file.display()))?
        + start;
    let updated = format!("{}\n{}\n{}", &text[..start], body.trim_end(), &text[stop..]);
    std::fs::write(file, updated)?;
    Ok(())
}

/// The first `/proc/loadavg` figure (Linux), else `unknown`.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "unknown".into())
}

/// The CPU's model name (Linux), else `unknown CPU`.
fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, model)| model.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into())
}

/// `YYYY-MM-DD` of a day counted from 1970-01-01 (Howard Hinnant's civil-from-days).
fn civil_date(days: i64) -> String {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}
