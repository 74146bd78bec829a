//! `sandbox-run`: runs a Python file, `-c` code or stdin in the sandbox, or reads entries
//! interactively into one session (`--repl`, in [`repl`]).
//!
//! The flags ([`SandboxFlags`]) map one to one onto the limits and import policy; the exit code says how the run
//! ended, so scripts can tell a Python error from a limit without parsing output.

mod files;
mod first_run;
mod plots;
mod print;
mod repl;
mod terminal;

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::Parser;

use crate::flags::SandboxFlags;
use crate::outcome::{Outcome, RunResult};
use crate::sandbox::files::InputFiles;
use crate::sandbox::{RunOptions, Sandbox};
use first_run::FirstRunNotice;
use plots::Plots;
use print::{print_plain, terminal_observer};

/// Exit status: the code ran to the end.
pub const EXIT_OK: u8 = 0;
/// Exit status: the code raised an exception it did not catch (including SystemExit).
pub const EXIT_EXCEPTION: u8 = 1;
/// Exit status: bad command line or unreadable input.
pub const EXIT_USAGE: u8 = 2;
/// Exit status: a limit stopped the code.
pub const EXIT_LIMIT: u8 = 3;
/// Exit status: the sandbox itself failed (cache, engine, or a trap that is not a limit).
pub const EXIT_INTERNAL: u8 = 4;

const AFTER_HELP: &str = "\
Exit status:
  0  the code ran to the end
  1  the code raised an uncaught exception (SystemExit and KeyboardInterrupt included)
  2  usage error: bad flags, no code, unreadable file
  3  a limit stopped the code (timeout, fuel, memory, output, stack)
  4  internal error: the sandbox could not start, or the interpreter trapped

The sandbox has no files, no network, no environment variables and no stdin. Code that prints
is streamed live; the value of the last expression (or of a final `x = ...`) is printed after it.
On a terminal, control characters in what the code prints (escape sequences, carriage returns,
bells) are shown as \\xNN instead of acting on the terminal; newline and tab are kept. Into a pipe
or a file, the output is passed on byte for byte.

Examples:
  sandbox-run -c 'print(2**100)'
  sandbox-run --timeout 2 --allow json script.py
  echo 'sum(range(10))' | sandbox-run --json -";

/// Run Python code in a WebAssembly sandbox with hard limits.
#[derive(Debug, Parser)]
#[command(name = "sandbox-run", version, after_help = AFTER_HELP)]
pub struct Args {
    /// Python file to run; `-` reads the code from stdin.
    #[arg(
        value_name = "FILE",
        conflicts_with = "code",
        required_unless_present_any = ["code", "repl"]
    )]
    pub file: Option<PathBuf>,

    /// Run CODE instead of a file.
    #[arg(short = 'c', long = "code", value_name = "CODE")]
    pub code: Option<String>,

    #[command(flatten)]
    pub sandbox: SandboxFlags,

    /// Print one JSON object {stdout, stderr, result, error, limit, stats} instead of streaming.
    #[arg(long)]
    pub json: bool,

    /// Read Python interactively, entry by entry, in one session: what an entry defines the next
    /// can use, and an entry stopped by a limit (or Ctrl-C) is undone. The limits apply to each
    /// entry. On a terminal, lines can be edited, and earlier ones recalled with the arrow keys;
    /// that history is kept in memory only, never written to disk.
    #[arg(long, conflicts_with_all = ["file", "code", "json"])]
    pub repl: bool,

    /// Write the figures the code returns (matplotlib on `--engine cpython`: those shown with
    /// plt.show() or still open at the end) into DIR as plot-1.png, plot-2.png, ..., replacing
    /// files of those names; DIR is created if missing. Without it, stderr says how many there
    /// were.
    #[arg(long, value_name = "DIR")]
    pub plots: Option<PathBuf>,

    /// Put the host file PATH into the sandbox as /data/NAME, read-only (repeatable; NAME may
    /// have folders: `raw/sales.csv`). The code never sees PATH. At most 256 files, 32 MiB each
    /// and 64 MiB in all. With it (or --out), the code can also write files under /out, in
    /// memory.
    #[arg(long = "file", value_name = "NAME=PATH", value_parser = files::parse_file_arg)]
    pub inputs: Vec<(String, PathBuf)>,

    /// Write the files the code wrote under /out into DIR (created if missing), at the same
    /// relative paths, replacing files of those names; a symbolic link or anything but a folder
    /// or a regular file on the way is refused. Without it, stderr lists them.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

impl Args {
    fn read_code(&self) -> anyhow::Result<String> {
        if let Some(code) = &self.code {
            return Ok(code.clone());
        }
        let bytes = match self.file.as_deref() {
            Some(p) if p == Path::new("-") => {
                let mut buf = Vec::new();
                io::stdin()
                    .read_to_end(&mut buf)
                    .context("cannot read the code from stdin")?;
                buf
            }
            Some(p) => std::fs::read(p).with_context(|| format!("cannot read {}", p.display()))?,
            None => bail!("no code: give a FILE, -c CODE, or - to read stdin"),
        };
        String::from_utf8(bytes).context("the code is not valid UTF-8")
    }
}

/// The whole program: parse, run, report, and turn the outcome into an exit status.
pub fn main() -> ExitCode {
    let args = match Args::try_parse() {
        Ok(args) => args,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { EXIT_USAGE } else { EXIT_OK });
        }
    };
    // Warnings (an untrusted cache, say) go to stderr; SAFE_PYTHON_LOG=debug shows more.
    tracing_subscriber::fmt()
        .with_writer(io::stderr)
        .with_ansi(false)
        .without_time()
        .with_target(false)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("SAFE_PYTHON_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .init();
    let inputs = match files::read_inputs(&args.inputs, args.out.is_some()) {
        Ok(inputs) => inputs,
        Err(e) => {
            eprintln!("sandbox-run: {e:#}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let status = if args.repl {
        let output = Output {
            plots: Plots::new(args.plots.clone()),
            out: args.out.clone(),
        };
        repl::run(&args.sandbox, output, inputs)
    } else {
        match args.read_code() {
            Ok(code) => run(&args, &code, inputs),
            Err(e) => {
                eprintln!("sandbox-run: {e:#}");
                return ExitCode::from(EXIT_USAGE);
            }
        }
    };
    match status {
        Ok(status) => ExitCode::from(status),
        Err(e) => {
            eprintln!("sandbox-run: {e:#}");
            ExitCode::from(EXIT_INTERNAL)
        }
    }
}

/// The sandbox, from the cache or compiled (with a progress notice, as that takes a while);
/// `preload` as for [`SandboxFlags::open_sandbox`].
fn open_sandbox(flags: &SandboxFlags, preload: bool) -> anyhow::Result<Sandbox> {
    let notice = FirstRunNotice::to_stderr("sandbox-run");
    let sandbox = flags.open_sandbox(preload, notice.on_compile());
    notice.finish(sandbox.as_ref().ok().map(Sandbox::prepared));
    Ok(sandbox?)
}

fn run(args: &Args, code: &str, inputs: Option<InputFiles>) -> anyhow::Result<u8> {
    let sandbox = open_sandbox(&args.sandbox, false)?;
    let options = RunOptions {
        observer: (!args.json).then(terminal_observer),
        files: inputs,
        ..args.sandbox.run_options()
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()?;
    let result = runtime.block_on(sandbox.run(code, &options))?;
    if args.json {
        // As for streamed output, a closed pipe is the reader's choice, not a failure.
        let _ = writeln!(io::stdout(), "{}", serde_json::to_string(&result)?);
    } else {
        print_plain(&result, &options.policy);
    }
    let mut output = Output {
        plots: Plots::new(args.plots.clone()),
        out: args.out.clone(),
    };
    output.take(&result)?;
    Ok(exit_status(&result))
}

/// Where the figures and the written files of a run go.
pub(super) struct Output {
    plots: Plots,
    out: Option<PathBuf>,
}

impl Output {
    /// Writes `result`'s figures and files, or says on stderr how to get them.
    pub(super) fn take(&mut self, result: &RunResult) -> anyhow::Result<()> {
        self.plots.take(result)?;
        match &self.out {
            Some(dir) => files::write_out(dir, result),
            None => {
                for file in &result.files {
                    eprintln!(
                        "sandbox-run: the code wrote {} ({} bytes); add --out DIR to keep it",
                        file.path,
                        file.data.len()
                    );
                }
                Ok(())
            }
        }
    }
}

pub fn exit_status(result: &RunResult) -> u8 {
    match result.outcome {
        Outcome::Completed { .. } => EXIT_OK,
        Outcome::Raised(_) => EXIT_EXCEPTION,
        Outcome::LimitReached { .. } => EXIT_LIMIT,
        Outcome::Trapped { .. } => EXIT_INTERNAL,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Metering;
    use clap::CommandFactory;
    use std::time::Duration;

    #[test]
    fn the_command_line_definition_is_consistent() {
        Args::command().debug_assert();
    }

    #[test]
    fn flags_map_onto_limits() {
        let args = Args::try_parse_from([
            "sandbox-run",
            "--timeout",
            "1.5",
            "--memory",
            "64",
            "--fuel",
            "7",
            "--max-output",
            "99",
            "--allow",
            "json,os.path",
            "--allow",
            "heapq",
            "-c",
            "1",
        ])
        .unwrap();
        let limits = args.sandbox.limits();
        assert_eq!(limits.timeout, Duration::from_millis(1500));
        assert_eq!(limits.memory_bytes, 64 << 20);
        assert_eq!(limits.fuel, 7);
        assert_eq!(args.sandbox.metering(), Metering::Fuel);
        assert_eq!(limits.max_output_bytes, 99);
        assert_eq!(args.sandbox.allow, ["json", "os.path", "heapq"]);
    }

    #[test]
    fn fuel_off_turns_metering_off() {
        let args = Args::try_parse_from(["sandbox-run", "--fuel", "off", "-c", "1"]).unwrap();
        assert_eq!(args.sandbox.metering(), Metering::Off);
        let args = Args::try_parse_from(["sandbox-run", "-c", "1"]).unwrap();
        assert_eq!(args.sandbox.metering(), Metering::Fuel);
        assert_eq!(
            args.sandbox.limits().fuel,
            crate::limits::Limits::DEFAULT_FUEL
        );
    }

    #[test]
    fn bad_values_are_usage_errors() {
        for bad in [
            &["--timeout", "0"][..],
            &["--timeout", "nan"],
            &["--memory", "0"],
            &["--memory", "31"],
            &["--memory", "5000"],
            &["--fuel", "0"],
            &["--fuel", "-3"],
            &["--fuel", "none"],
            &["--allow", "os;rm"],
            &["--max-output", "-1"],
        ] {
            let argv = ["sandbox-run"]
                .into_iter()
                .chain(bad.iter().copied())
                .chain(["-c", "1"]);
            assert!(Args::try_parse_from(argv).is_err(), "{bad:?} was accepted");
        }
        assert!(
            Args::try_parse_from(["sandbox-run"]).is_err(),
            "no code was accepted"
        );
        assert!(
            Args::try_parse_from(["sandbox-run", "-c", "1", "file.py"]).is_err(),
            "FILE and -c together"
        );
    }
}
