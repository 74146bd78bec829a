//! What `sandbox-run` tells its user while it prepares the compiled guest for the first time.
//!
//! Compiling the guest takes about 30 s, once; a silent pause that long looks like a hang, so the
//! user is told what is happening, how long it takes and where the result is cached. On a terminal
//! the notice is one coloured line that counts the seconds; anywhere else (a pipe, a log, CI) it is
//! plain lines, each written once, with no colour and no carriage returns. It never writes to
//! stdout, which belongs to the code's output.

use std::io::{self, IsTerminal, Write};
use std::path::Path;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::cache::{CACHE_DIR_ENV, Prepared};
use crate::sandbox::CompileNotice;

/// How often the terminal line is redrawn.
const TICK: Duration = Duration::from_secs(1);

/// Erases the current terminal line and returns to its start.
const CLEAR_LINE: &str = "\r\x1b[2K";

/// The first-run notice of one program, on stderr.
pub struct FirstRunNotice {
    style: Style,
    compiling: Arc<Mutex<Option<Compiling>>>,
}

/// Set when the compile starts; `ticker` redraws the terminal line until told to stop.
struct Compiling {
    started: Instant,
    ticker: Option<(mpsc::Sender<()>, JoinHandle<()>)>,
}

/// Where the notice goes and how it may look there.
#[derive(Debug, Clone, Copy)]
struct Style {
    program: &'static str,
    terminal: bool,
    color: bool,
}

impl FirstRunNotice {
    /// A notice for `program`, styled for whatever stderr is: colour only on a terminal, and not
    /// when `NO_COLOR` is set.
    pub fn to_stderr(program: &'static str) -> Self {
        let terminal = io::stderr().is_terminal();
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        FirstRunNotice {
            style: Style {
                program,
                terminal,
                color: terminal && !no_color,
            },
            compiling: Arc::default(),
        }
    }

    /// The callback for [`crate::SandboxOptions::on_compile`]: announces the compile and, on a
    /// terminal, starts counting the seconds.
    pub fn on_compile(&self) -> CompileNotice {
        let style = self.style;
        let compiling = Arc::clone(&self.compiling);
        Box::new(move |entry: Option<&Path>| {
            eprintln!("{}", style.cache_line(entry));
            let started = Instant::now();
            let ticker = if style.terminal {
                let (stop, stopped) = mpsc::channel::<()>();
                let ticker = std::thread::spawn(move || {
                    loop {
                        eprint!("{CLEAR_LINE}{}", style.preparing(Some(started.elapsed())));
                        let _ = io::stderr().flush();
                        if stopped.recv_timeout(TICK) != Err(RecvTimeoutError::Timeout) {
                            break;
                        }
                    }
                });
                Some((stop, ticker))
            } else {
                eprintln!("{}", style.preparing(None));
                None
            };
            *compiling.lock().unwrap_or_else(PoisonError::into_inner) =
                Some(Compiling { started, ticker });
        })
    }

    /// Ends the notice once `Sandbox::new` has returned: says how long it took and whether the
    /// result was cached (`prepared`), or just ends the line when it failed (`None`; the caller
    /// reports the error). Says nothing when nothing was compiled.
    pub fn finish(self, prepared: Option<&Prepared>) {
        let Some(compiling) = self
            .compiling
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        else {
            return;
        };
        if let Some((stop, ticker)) = compiling.ticker {
            drop(stop);
            let _ = ticker.join();
        }
        let clear = if self.style.terminal { CLEAR_LINE } else { "" };
        match prepared {
            Some(prepared) => eprintln!(
                "{clear}{}",
                self.style.ready(compiling.started.elapsed(), prepared)
            ),
            None if self.style.terminal => eprintln!(),
            None => {}
        }
    }
}

impl Style {
    fn prefix(&self) -> String {
        if self.color {
            format!("\x1b[1;36m{}:\x1b[0m", self.program)
        } else {
            format!("{}:", self.program)
        }
    }

    /// Where the compiled guest will be kept (`entry` is the cache file; `None`: nowhere).
    fn cache_line(&self, entry: Option<&Path>) -> String {
        let prefix = self.prefix();
        match entry.and_then(Path::parent) {
            Some(dir) => format!(
                "{prefix} caching the compiled sandbox in {} (to move it: --cache-dir or {CACHE_DIR_ENV})",
                dir.display()
            ),
            None => format!(
                "{prefix} no usable cache directory, so this happens at every run (choose one with --cache-dir or {CACHE_DIR_ENV})"
            ),
        }
    }

    /// The progress line, with the time spent so far on a terminal.
    fn preparing(&self, elapsed: Option<Duration>) -> String {
        let line = format!(
            "{} preparing the Python sandbox for first use (about 30 s)",
            self.prefix()
        );
        match elapsed {
            Some(elapsed) => format!("{line}: {} s", elapsed.as_secs()),
            None => line,
        }
    }

    fn ready(&self, elapsed: Duration, prepared: &Prepared) -> String {
        let later = match prepared {
            Prepared::CompiledUncached => "it could not be cached",
            Prepared::Compiled(_) | Prepared::Loaded(_) => "later runs start in milliseconds",
        };
        format!(
            "{} Python sandbox ready after {} s; {later}",
            self.prefix(),
            elapsed.as_secs()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    const PLAIN: Style = Style {
        program: "sandbox-run",
        terminal: false,
        color: false,
    };
    const TERMINAL: Style = Style {
        program: "sandbox-run",
        terminal: true,
        color: true,
    };

    #[test]
    fn plain_lines_have_no_escape_codes() {
        let entry = PathBuf::from("/cache/dir/guest-abc.cwasm");
        let lines = [
            PLAIN.cache_line(Some(&entry)),
            PLAIN.cache_line(None),
            PLAIN.preparing(None),
            PLAIN.ready(Duration::from_secs(31), &Prepared::Compiled(entry.clone())),
        ];
        for line in lines {
            assert!(line.starts_with("sandbox-run: "), "{line}");
            assert!(!line.contains(['\x1b', '\r', '\n']), "{line:?}");
        }
    }

    #[test]
    fn a_terminal_gets_colour_and_the_seconds() {
        assert!(TERMINAL.prefix().starts_with("\x1b[1;36m"));
        assert!(
            TERMINAL
                .preparing(Some(Duration::from_millis(12_700)))
                .ends_with("(about 30 s): 12 s")
        );
    }

    #[test]
    fn the_notice_names_the_cache_directory_and_how_to_move_it() {
        let line = PLAIN.cache_line(Some(Path::new("/home/u/.cache/spe/guest-abc.cwasm")));
        assert!(line.contains(" in /home/u/.cache/spe "), "{line}");
        assert!(line.contains("--cache-dir") && line.contains(CACHE_DIR_ENV));
        let uncached = PLAIN.ready(Duration::ZERO, &Prepared::CompiledUncached);
        assert!(uncached.ends_with("it could not be cached"), "{uncached}");
    }
}
