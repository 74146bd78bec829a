//! `sandbox-run --repl`: Python read entry by entry into one session, as in Python's own REPL:
//! what one entry defines, the next can use. The limits apply to each entry, and an entry stopped
//! by a limit or by Ctrl-C is undone, so a runaway loop never costs the session.
//!
//! The session goes through the same life cycle as an MCP session call ([`Sessions`]): the REPL
//! starts it with [`SessionRequest::New`] and keeps its handle, which never leaves the process.
//!
//! On a terminal the lines are read with a line editor (rustyline) whose history lives as long as
//! the REPL: nothing typed is written to disk. Anywhere else stdin is read line by line.

use std::io::{self, BufRead, IsTerminal, Write};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::Context;
use rustyline::error::ReadlineError;
use rustyline::{Config, DefaultEditor};
use tokio::sync::mpsc;

use super::Output;
use super::print::{print_plain, terminal_observer};
use super::{EXIT_OK, open_sandbox};
use crate::flags::SandboxFlags;
use crate::sandbox::RunOptions;
use crate::sandbox::files::InputFiles;
use crate::session::registry::{SessionLimits, SessionRequest, Sessions};

/// Lines the line editor remembers for the up arrow.
const HISTORY_LINES: usize = 1000;

/// `inputs`: the files the first entry brings into the session (`/data` and `/out`).
pub(super) fn run(
    flags: &SandboxFlags,
    mut output: Output,
    mut inputs: Option<InputFiles>,
) -> anyhow::Result<u8> {
    let sandbox = open_sandbox(flags, true)?;
    let mut options = RunOptions {
        observer: Some(terminal_observer()),
        ..flags.run_options()
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        // One session, which does not expire while the REPL waits for input.
        let sessions = Sessions::new(SessionLimits {
            max: 1,
            idle: Duration::MAX,
        });
        let mut request = SessionRequest::New;
        let mut input = Input::new()?;
        if input.interactive() {
            eprintln!(
                "sandbox-run {} REPL: Python ({}) in a WebAssembly sandbox. Ctrl-D or exit() leaves.",
                env!("CARGO_PKG_VERSION"),
                flags.engine.about().interpreter
            );
        }
        let mut entry = Entry::default();
        loop {
            let prompt = if entry.is_empty() { ">>> " } else { "... " };
            let code = match input.read(prompt).await? {
                Line::Text(line) if entry.push(&line) => entry.take(),
                Line::Text(_) => continue,
                Line::Interrupted => {
                    eprintln!("KeyboardInterrupt");
                    entry = Entry::default();
                    continue;
                }
                // End of input: what was typed last still runs, as it would in a file.
                Line::End if !entry.is_empty() => entry.take(),
                Line::End => break,
            };
            if matches!(code.trim(), "exit()" | "quit()" | "exit" | "quit") {
                break;
            }
            let lease = sessions.checkout(request, false, &sandbox).await?;
            request = SessionRequest::Continue(lease.id());
            let interrupted = async {
                if tokio::signal::ctrl_c().await.is_err() {
                    // Without a handler, Ctrl-C keeps its default effect; never cancel here.
                    std::future::pending::<()>().await;
                }
            };
            // Until an entry is kept, each one brings the files (an undone one takes them away).
            options.files = inputs.clone();
            let Some(ran) = lease.run(&code, &options, interrupted).await? else {
                // The next entry waits for the undoing to finish.
                eprintln!("\nKeyboardInterrupt: the entry was stopped and undone");
                continue;
            };
            if !ran.session.rolled_back {
                inputs = None;
            }
            print_plain(&ran.result, &options.policy);
            // A figure or file that cannot be written is reported, and the session goes on.
            if let Err(e) = output.take(&ran.result) {
                eprintln!("sandbox-run: {e:#}");
            }
            if ran.session.rolled_back {
                eprintln!("sandbox-run: the entry was undone: the session is as it was before it");
            }
            if ran.result.error().is_some_and(|e| e.kind == "SystemExit") {
                break;
            }
        }
        Ok(EXIT_OK)
    })
}

/// What reading one line gave.
enum Line {
    Text(String),
    /// Ctrl-C while waiting for the line: the entry typed so far is dropped.
    Interrupted,
    End,
}

/// Where the lines come from.
enum Input {
    /// stdin and stdout are a terminal: a line editor, which writes its prompt to stdout (as
    /// Python's REPL does with readline), shared with the blocking thread that reads each line.
    /// Once Ctrl-D has ended the input it stays ended, as a closed pipe does.
    Editor {
        editor: Arc<Mutex<DefaultEditor>>,
        ended: bool,
    },
    /// Lines of stdin, read on a thread of their own so that Ctrl-C can interrupt the wait;
    /// prompted on stderr when stdin is a terminal but stdout is not.
    Lines {
        lines: mpsc::UnboundedReceiver<String>,
        prompt: bool,
    },
}

impl Input {
    fn new() -> anyhow::Result<Self> {
        let stdin = io::stdin().is_terminal();
        if stdin && io::stdout().is_terminal() {
            let config = Config::builder()
                .max_history_size(HISTORY_LINES)?
                .auto_add_history(true)
                // Output that did not end its line would otherwise be drawn over by the prompt.
                .check_cursor_position(true)
                .build();
            let editor =
                DefaultEditor::with_config(config).context("cannot start the line editor")?;
            return Ok(Input::Editor {
                editor: Arc::new(Mutex::new(editor)),
                ended: false,
            });
        }
        Ok(Input::Lines {
            lines: stdin_lines(),
            prompt: stdin,
        })
    }

    fn interactive(&self) -> bool {
        matches!(
            self,
            Input::Editor { .. } | Input::Lines { prompt: true, .. }
        )
    }

    async fn read(&mut self, prompt: &'static str) -> anyhow::Result<Line> {
        match self {
            Input::Editor { ended: true, .. } => Ok(Line::End),
            Input::Editor { editor, ended } => {
                let editor = Arc::clone(editor);
                let read = tokio::task::spawn_blocking(move || {
                    editor
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .readline(prompt)
                })
                .await?;
                match read {
                    Ok(line) => Ok(Line::Text(line)),
                    Err(ReadlineError::Interrupted) => Ok(Line::Interrupted),
                    Err(ReadlineError::Eof) => {
                        *ended = true;
                        Ok(Line::End)
                    }
                    Err(e) => Err(e).context("cannot read from the terminal"),
                }
            }
            Input::Lines {
                lines,
                prompt: show,
            } => {
                if *show {
                    eprint!("{prompt}");
                    let _ = io::stderr().flush();
                }
                tokio::select! {
                    line = lines.recv() => Ok(line.map_or(Line::End, Line::Text)),
                    _ = tokio::signal::ctrl_c() => {
                        eprintln!();
                        Ok(Line::Interrupted)
                    }
                }
            }
        }
    }
}

/// Lines of stdin, read on a thread of their own.
fn stdin_lines() -> mpsc::UnboundedReceiver<String> {
    let (sender, receiver) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in io::stdin().lock().lines().map_while(Result::ok) {
            if sender.send(line).is_err() {
                break;
            }
        }
    });
    receiver
}

/// The lines of one entry, and whether they make a whole one yet: an open bracket, string or
/// trailing backslash continues it, and a line ending in `:` (or a decorator) opens a block that
/// a blank line ends, as in Python's REPL.
#[derive(Debug, Default)]
struct Entry {
    lines: Vec<String>,
    block: bool,
}

impl Entry {
    fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// Adds a line; true when the entry is complete.
    fn push(&mut self, line: &str) -> bool {
        let blank = line.trim().is_empty();
        if self.lines.is_empty() && blank {
            return false;
        }
        let open = self.scan().open;
        if self.block && blank && !open {
            return true;
        }
        self.lines.push(line.to_owned());
        let scan = self.scan();
        if scan.open {
            return false;
        }
        if scan.last == Some(':') || line.trim_start().starts_with('@') {
            self.block = true;
        }
        !self.block
    }

    fn take(&mut self) -> String {
        let code = self.lines.join("\n");
        *self = Entry::default();
        code
    }

    fn scan(&self) -> Scan {
        scan(&self.lines.join("\n"))
    }
}

#[derive(Debug, PartialEq, Eq)]
struct Scan {
    /// Inside brackets or a string, or after a trailing backslash.
    open: bool,
    /// The last character that is not blank or in a comment.
    last: Option<char>,
}

fn scan(text: &str) -> Scan {
    let mut depth = 0i32;
    let mut string: Option<(char, bool)> = None;
    let mut last = None;
    let mut chars = text.chars().peekable();
    let mut escaped = false;
    while let Some(c) = chars.next() {
        if let Some((quote, triple)) = string {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == quote && !triple {
                string = None;
            } else if c == quote && chars.peek() == Some(&quote) {
                chars.next();
                if chars.peek() == Some(&quote) {
                    chars.next();
                    string = None;
                }
            } else if c == '\n' && !triple {
                // An unterminated one-line string: Python will say so; do not wait for more.
                string = None;
            }
            last = Some(c);
            continue;
        }
        match c {
            '#' => {
                while chars.peek().is_some_and(|&n| n != '\n') {
                    chars.next();
                }
                continue;
            }
            '\'' | '"' => {
                let triple = chars.peek() == Some(&c) && {
                    let mut ahead = chars.clone();
                    ahead.next();
                    ahead.peek() == Some(&c)
                };
                if triple {
                    chars.next();
                    chars.next();
                } else if chars.peek() == Some(&c) {
                    // An empty string.
                    chars.next();
                    last = Some(c);
                    continue;
                }
                string = Some((c, triple));
            }
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth -= 1,
            _ => {}
        }
        if !c.is_whitespace() {
            last = Some(c);
        }
    }
    let backslash = text.trim_end_matches([' ', '\t']).ends_with('\\') && string.is_none();
    Scan {
        open: depth > 0 || string.is_some() || backslash,
        last,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(input: &str) -> Vec<String> {
        let mut entry = Entry::default();
        let mut out = Vec::new();
        for line in input.lines() {
            if entry.push(line) {
                out.push(entry.take());
            }
        }
        if !entry.is_empty() {
            out.push(entry.take());
        }
        out
    }

    #[test]
    fn entries_end_where_python_would_run_them() {
        assert_eq!(entries("x = 1\n\nx + 1"), ["x = 1", "x + 1"]);
        assert_eq!(
            entries("def f(a):\n    return a\n\nf(2)"),
            ["def f(a):\n    return a", "f(2)"]
        );
        assert_eq!(
            entries("values = [1,\n  2]  # two\nlen(values)"),
            ["values = [1,\n  2]  # two", "len(values)"]
        );
        assert_eq!(
            entries("s = '''a\n\nb'''\nx = 1 \\\n  + 2\ny = 3  # not a block:"),
            [
                "s = '''a\n\nb'''",
                "x = 1 \\\n  + 2",
                "y = 3  # not a block:"
            ]
        );
        assert_eq!(
            entries("@decorator\ndef g(): pass\n\nd = {'a': ':'}"),
            ["@decorator\ndef g(): pass", "d = {'a': ':'}"]
        );
        assert_eq!(entries("e = ''\nq = \"(\""), ["e = ''", "q = \"(\""]);
        assert_eq!(
            entries("for i in range(2):\n    print(i)"),
            ["for i in range(2):\n    print(i)"]
        );
    }
}
