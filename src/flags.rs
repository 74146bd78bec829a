//! The sandbox flags both binaries share (`sandbox-run` and `safe-python-mcp`), each also settable
//! through an environment variable, and their mapping onto [`Limits`] and [`ImportPolicy`].

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::cache::CACHE_DIR_ENV;
use crate::limits::Limits;
use crate::policy::{ImportPolicy, validate_module_name};
use crate::sandbox::RunOptions;

/// Limits, allowed modules and the cache directory.
#[derive(Debug, Clone, clap::Args)]
pub struct SandboxFlags {
    /// Also allow importing these modules (comma-separated, repeatable; an empty value adds none),
    /// on top of: collections, datetime, itertools, math, queue, random, re, stat, statistics,
    /// time, unicodedata. A package allows its submodules. A dotted name allows what an import of
    /// it hands over: `--allow os.path` allows `from os.path import join`, but `import os.path`
    /// binds `os` and needs `--allow os`.
    #[arg(long, value_name = "MOD[,MOD...]", value_delimiter = ',', env = "SAFE_PYTHON_ALLOW", value_parser = parse_module)]
    pub allow: Vec<String>,

    /// Wall-clock limit in seconds, sleeping included.
    #[arg(long, value_name = "SECS", default_value_t = Limits::DEFAULT_TIMEOUT.as_secs_f64(), value_parser = parse_seconds, env = "SAFE_PYTHON_TIMEOUT")]
    pub timeout: f64,

    /// Memory limit in MiB (32 to 4096; the interpreter itself takes about 29).
    #[arg(long, value_name = "MIB", default_value_t = (Limits::DEFAULT_MEMORY_BYTES >> 20) as u64,
          value_parser = clap::value_parser!(u64).range(32..=4096), env = "SAFE_PYTHON_MEMORY")]
    pub memory: u64,

    /// Instruction budget in fuel units (about 4 billion per second of compute).
    #[arg(long, value_name = "N", default_value_t = Limits::DEFAULT_FUEL, value_parser = clap::value_parser!(u64).range(1..), env = "SAFE_PYTHON_FUEL")]
    pub fuel: u64,

    /// Limit on stdout and stderr together, in bytes; past it the output is cut and the run stopped.
    /// Output, result and exception as reported share half of it (measured as JSON), each longer
    /// one cut in the middle with a notice, so that a reply stays within it.
    #[arg(long, value_name = "BYTES", default_value_t = Limits::DEFAULT_MAX_OUTPUT_BYTES as u64,
          value_parser = clap::value_parser!(u64).range(1..=(1 << 30)), env = "SAFE_PYTHON_MAX_OUTPUT")]
    pub max_output: u64,

    /// Where the compiled sandbox is cached [default: the user cache directory].
    #[arg(long, value_name = "DIR", env = CACHE_DIR_ENV)]
    pub cache_dir: Option<PathBuf>,
}

impl SandboxFlags {
    pub fn limits(&self) -> Limits {
        Limits {
            timeout: Duration::from_secs_f64(self.timeout),
            fuel: self.fuel,
            memory_bytes: (self.memory as usize) << 20,
            max_output_bytes: self.max_output as usize,
        }
    }

    pub fn policy(&self) -> ImportPolicy {
        ImportPolicy::with_extra(&self.allow)
    }

    /// Limits and policy as one run's options, with no output observer.
    pub fn run_options(&self) -> RunOptions {
        RunOptions {
            limits: self.limits(),
            policy: Arc::new(self.policy()),
            observer: None,
        }
    }
}

/// An empty name is accepted and allows nothing ([`ImportPolicy::with_extra`] skips it): installers
/// that always pass the setting (an MCP bundle's `SAFE_PYTHON_ALLOW=${user_config...}`) may leave it
/// blank.
fn parse_module(s: &str) -> Result<String, String> {
    let s = s.trim();
    if !s.is_empty() {
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
    fn an_empty_allow_adds_nothing() {
        let flags = Flags::try_parse_from(["prog", "--allow", "", "--allow", "json,,heapq"])
            .unwrap()
            .sandbox;
        assert_eq!(
            flags.policy().allowed(),
            ImportPolicy::with_extra(["json", "heapq"]).allowed()
        );
        assert!(Flags::try_parse_from(["prog", "--allow", "json,os;rm"]).is_err());
    }
}
