//! What `sandbox-run` tells its user while it prepares the compiled guest for the first time.
//!
//! Compiling the guest takes about 30 s, once; a silent pause that long looks like a hang, so the
//! user is told what is happening and where the result is cached and, on a terminal, shown a
//! spinner with the time spent so far (indicatif, as uv does). Anywhere else (a pipe, a log, CI) the
//! spinner is hidden and the notice is plain lines, each written once, with no escape codes and no
//! carriage returns. It never writes to stdout, which belongs to the code's output.

use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

use crate::cache::Prepared;
use crate::flags::{COMPILING, cache_notice};

/// How often the spinner turns.
const TICK: Duration = Duration::from_millis(100);

/// The spinner's line: `{prefix}` is the program, `{msg}` what is happening. indicatif colours it
/// only where stderr takes colour (a terminal, `NO_COLOR` unset).
const SPINNER: &str = "{spinner:.cyan} {prefix:.cyan.bold}: {msg}: {elapsed}";

/// The first-run notice of one program, on stderr.
pub struct FirstRunNotice {
    program: &'static str,
    /// Set when the compile starts; hidden when stderr is not a terminal.
    spinner: Arc<OnceLock<ProgressBar>>,
}

impl FirstRunNotice {
    pub fn to_stderr(program: &'static str) -> Self {
        FirstRunNotice {
            program,
            spinner: Arc::default(),
        }
    }

    /// The callback for [`crate::flags::SandboxFlags::open_sandbox`]: says where the compiled
    /// guest goes, then starts the spinner (or, where it is hidden, says what is happening).
    pub fn on_compile(&self) -> impl FnMut(Option<&Path>) + Send + 'static {
        let program = self.program;
        let spinner = Arc::clone(&self.spinner);
        move |entry: Option<&Path>| {
            eprintln!("{program}: {}", cache_notice(entry));
            let style = ProgressStyle::with_template(SPINNER)
                .unwrap_or_else(|_| ProgressStyle::default_spinner());
            let started = ProgressBar::new_spinner()
                .with_style(style)
                .with_prefix(program)
                .with_message(COMPILING);
            if started.is_hidden() {
                eprintln!("{program}: {COMPILING}");
            } else {
                started.enable_steady_tick(TICK);
            }
            let _ = spinner.set(started);
        }
    }

    /// Ends the notice once the sandbox is open: says how long it took and whether the result was
    /// cached (`prepared`), or only stops the spinner when it failed (`None`; the caller reports
    /// the error). Says nothing when nothing was compiled.
    pub fn finish(self, prepared: Option<&Prepared>) {
        let Some(spinner) = self.spinner.get() else {
            return;
        };
        let elapsed = spinner.elapsed();
        spinner.finish_and_clear();
        if let Some(prepared) = prepared {
            eprintln!("{}: {}", self.program, ready(elapsed, prepared));
        }
    }
}

fn ready(elapsed: Duration, prepared: &Prepared) -> String {
    let later = match prepared {
        Prepared::CompiledUncached => "it could not be cached",
        Prepared::Compiled(_) | Prepared::Loaded(_) | Prepared::Shipped(_) => {
            "later runs start in milliseconds"
        }
    };
    format!(
        "Python sandbox ready after {} s; {later}",
        elapsed.as_secs()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn the_spinner_template_is_valid() {
        ProgressStyle::with_template(SPINNER).unwrap();
    }

    #[test]
    fn the_ready_line_says_whether_later_runs_are_quick() {
        let entry = PathBuf::from("/cache/dir/guest-abc.cwasm");
        let cached = ready(Duration::from_millis(31_700), &Prepared::Compiled(entry));
        assert_eq!(
            cached,
            "Python sandbox ready after 31 s; later runs start in milliseconds"
        );
        let uncached = ready(Duration::ZERO, &Prepared::CompiledUncached);
        assert!(uncached.ends_with("it could not be cached"), "{uncached}");
    }
}
