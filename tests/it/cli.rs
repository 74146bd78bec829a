//! `sandbox-run` as users run it: the real binary, its flags, output and exit codes.

use crate::common;

use std::io::Write;
use std::process::{Command, Output, Stdio};

use common::spawn::{self, SANDBOX_RUN};
use safe_python_executor::Prepared;

/// `sandbox-run` with `args` and `stdin`, run to its end.
fn sandbox_run(args: &[&str], stdin: Option<&str>) -> Output {
    spawn::output(spawn::sandbox_run(args), stdin)
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[track_caller]
fn assert_status(o: &Output, code: i32) {
    assert_eq!(
        o.status.code(),
        Some(code),
        "stdout: {}\nstderr: {}",
        stdout(o),
        stderr(o)
    );
}

#[track_caller]
fn assert_stderr_has(o: &Output, needle: &str) {
    let stderr = stderr(o);
    assert!(stderr.contains(needle), "{needle:?} is not in {stderr}");
}

#[test]
fn runs_code_from_the_command_line() {
    let o = sandbox_run(&["-c", "print(2**100)"], None);
    assert_status(&o, 0);
    assert_eq!(stdout(&o), "1267650600228229401496703205376\n");
}

#[test]
fn prints_the_result_value_after_the_output() {
    let o = sandbox_run(&["-c", "print('sum:')\nsum(range(10))"], None);
    assert_status(&o, 0);
    assert_eq!(stdout(&o), "sum:\n45\n");
}

#[test]
fn runs_a_file_and_stdin() {
    let dir = common::temp_dir("cli-file");
    let file = dir.path().join("script.py");
    std::fs::write(&file, "import math\nprint(math.factorial(5))\n").unwrap();
    let o = sandbox_run(&[file.to_str().unwrap()], None);
    assert_status(&o, 0);
    assert_eq!(stdout(&o), "120\n");

    let o = sandbox_run(&["-"], Some("print('from stdin')"));
    assert_status(&o, 0);
    assert_eq!(stdout(&o), "from stdin\n");
}

#[test]
fn exceptions_exit_1_with_the_traceback_on_stderr() {
    let o = sandbox_run(&["-c", "print('partial')\n{}['missing']"], None);
    assert_status(&o, 1);
    assert_eq!(stdout(&o), "partial\n");
    assert_stderr_has(&o, "KeyError: 'missing'");
    assert_status(&sandbox_run(&["-c", "raise SystemExit(0)"], None), 1);
}

#[test]
fn limits_exit_3_and_say_which() {
    let o = sandbox_run(
        &[
            "--timeout",
            "0.5",
            "--fuel",
            "1000000000000",
            "-c",
            "while True: pass",
        ],
        None,
    );
    assert_status(&o, 3);
    assert_stderr_has(&o, "limit reached (timeout)");
    let o = sandbox_run(&["--fuel", "100000000", "-c", "while True: pass"], None);
    assert_status(&o, 3);
    assert_stderr_has(&o, "limit reached (fuel)");
    let o = sandbox_run(&["--max-output", "100", "-c", "print('y' * 1000)"], None);
    assert_status(&o, 3);
    assert!(stdout(&o).contains("[output truncated"), "{}", stdout(&o));
    let o = sandbox_run(
        &[
            "--memory",
            "32",
            "-c",
            "x = []\nwhile True: x.append(' ' * 10000)",
        ],
        None,
    );
    assert_status(&o, 3);
    assert_stderr_has(&o, "limit reached (memory)");
}

#[test]
fn usage_errors_exit_2() {
    for args in [
        &[][..],
        &["--timeout", "-1", "-c", "1"],
        &["--memory", "0", "-c", "1"],
        &["--allow", "not a module", "-c", "1"],
        &["--no-such-flag"],
        &["/no/such/file.py"],
        &["-c", "1", "file.py"],
    ] {
        let o = sandbox_run(args, None);
        assert_status(&o, 2);
        assert!(stderr(&o).len() > 10, "{args:?} gave no explanation");
    }
    let o = sandbox_run(&["/no/such/file.py"], None);
    assert!(
        stderr(&o).starts_with("sandbox-run: cannot read /no/such/file.py"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn allow_adds_modules_and_deny_takes_defaults_away() {
    let o = sandbox_run(
        &[
            "--allow",
            "ast",
            "-c",
            "import ast, csv, json\nprint(json.dumps(ast.literal_eval('[1, 2]')))",
        ],
        None,
    );
    assert_status(&o, 0);
    assert_eq!(stdout(&o), "[1, 2]\n");
    // A refusal says how to allow the module.
    let o = sandbox_run(&["-c", "import ast"], None);
    assert_status(&o, 1);
    assert_stderr_has(&o, "import of 'ast' is not allowed in this sandbox");
    assert_stderr_has(&o, "sandbox-run: to allow it, add `--allow ast`");
    // `--deny` (and its variable) narrow the defaults, and win over `--allow`.
    let o = sandbox_run(
        &[
            "--deny",
            "json,pathlib",
            "--allow",
            "json",
            "-c",
            "import json",
        ],
        None,
    );
    assert_status(&o, 1);
    assert_stderr_has(&o, "import of 'json' is not allowed in this sandbox");
    assert_stderr_has(&o, "sandbox-run: json is refused by --deny");
    let mut denying = spawn::sandbox_run(&["-c", "from pathlib import Path"]);
    denying.env("SAFE_PYTHON_DENY", "pathlib");
    let o = spawn::output(denying, None);
    assert_status(&o, 1);
    assert_stderr_has(&o, "import of 'pathlib' is not allowed in this sandbox");
    let o = sandbox_run(&["--deny", "json", "-c", "import csv"], None);
    assert_status(&o, 0);
}

#[test]
fn json_mode_prints_one_object() {
    let o = sandbox_run(&["--json", "-c", "print('out')\nx = 6 * 7"], None);
    assert_status(&o, 0);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("one JSON object");
    assert_eq!(v["stdout"], "out\n");
    assert_eq!(v["stderr"], "");
    assert_eq!(v["result"], "42");
    assert_eq!(v["error"], serde_json::Value::Null);
    assert_eq!(v["limit"], serde_json::Value::Null);
    assert!(v["stats"]["fuel"].as_u64().unwrap() > 0);
    assert!(v["stats"]["memory_peak_bytes"].as_u64().unwrap() > 1 << 20);
    assert!(v["stats"]["wall_ms"].is_u64());

    let o = sandbox_run(
        &[
            "--json",
            "--timeout",
            "0.3",
            "-c",
            "import time\ntime.sleep(60)",
        ],
        None,
    );
    assert_status(&o, 3);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["limit"], "timeout");

    let o = sandbox_run(&["--json", "-c", "1/0"], None);
    assert_status(&o, 1);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["error"]["type"], "ZeroDivisionError");
    assert_eq!(v["error"]["message"], "division by zero");
    assert!(
        v["error"]["traceback"]
            .as_str()
            .unwrap()
            .contains("Traceback")
    );
}

/// Hostile output, result and exception in `--json` and plain mode: what is printed after the run
/// stays within the --max-output budget, each cut field saying how much went.
#[test]
fn printed_results_are_bounded_whatever_the_code_returns() {
    let max_output = 65536;
    let budget = safe_python_executor::RunResult::text_budget(max_output);
    let code = "print('\\x1b' * 60000)\n\
                E = type('E' * 10**6, (Exception,), {})\n\
                raise E('\\x00' * 3000000)";
    let o = sandbox_run(
        &[
            "--json",
            "--max-output",
            &max_output.to_string(),
            "-c",
            code,
        ],
        None,
    );
    assert_status(&o, 1);
    // The JSON keys and stats, and the notices, are all that may come on top.
    assert!(
        o.stdout.len() <= budget + 1024,
        "{} bytes of JSON",
        o.stdout.len()
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("one JSON object");
    for field in [&v["stdout"], &v["error"]["type"], &v["error"]["message"]] {
        let text = field.as_str().unwrap();
        // Cut by the guest (its own bound) or by the host (the reply's), with a notice either way.
        assert!(
            text.contains("bytes) cut here") || text.contains("characters cut]"),
            "{text:?}"
        );
    }
    assert!(
        v["error"]["traceback"]
            .as_str()
            .unwrap()
            .starts_with("Traceback"),
        "{v}"
    );

    let code = "class R:\n    def __repr__(self):\n        return '\\x07' * 10**6\nR()";
    let o = sandbox_run(&["--max-output", &max_output.to_string(), "-c", code], None);
    assert_status(&o, 0);
    assert!(o.stdout.len() <= budget, "{} bytes printed", o.stdout.len());
    assert!(stdout(&o).contains("characters ("), "{}", stdout(&o));
}

#[test]
fn help_documents_exit_codes_and_defaults() {
    let o = sandbox_run(&["--help"], None);
    assert_status(&o, 0);
    // Compare with line wrapping undone.
    let help = stdout(&o).split_whitespace().collect::<Vec<_>>().join(" ");
    for needle in [
        "Exit status:",
        "3 a limit stopped the code",
        "[default: 10]",
        "[default: 256]",
        "--allow",
        "--json",
        "SAFE_PYTHON_CACHE_DIR",
    ] {
        assert!(help.contains(needle), "--help lacks {needle:?}:\n{help}");
    }
    let o = sandbox_run(&["--version"], None);
    assert_status(&o, 0);
    assert!(stdout(&o).starts_with("sandbox-run "));
}

#[test]
fn output_streams_while_the_code_runs() {
    use std::io::{BufRead, BufReader};
    let mut child = spawn::sandbox_run(&[
        "-c",
        "print('first')\nimport time\ntime.sleep(3)\nprint('second')",
    ])
    .stdout(Stdio::piped())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "first");
    assert!(
        child.try_wait().unwrap().is_none(),
        "'first' arrived only after the run ended"
    );
    assert_eq!(lines.next().unwrap().unwrap(), "second");
    assert!(child.wait().unwrap().success());
}

#[test]
fn repl_keeps_state_between_entries_and_undoes_a_stopped_one() {
    let input = "x = 41\ndef f(n):\n    return n + x\n\nf(1)\nx = 0; sum(1 for _ in iter(int, 1))\nprint('x is', x)\n1/0\nf(0)\nexit()\nprint('not reached')\n";
    let o = sandbox_run(&["--repl", "--timeout", "1"], Some(input));
    assert_status(&o, 0);
    // Each entry's value is shown as after -c; the endless entry set x to 0 and was undone.
    assert_eq!(stdout(&o), "41\n42\nx is 41\n41\n");
    let err = stderr(&o);
    assert!(err.contains("limit reached (timeout)"), "{err}");
    assert!(err.contains("the entry was undone"), "{err}");
    assert!(err.contains("ZeroDivisionError"), "{err}");
    assert!(
        !err.contains(">>>"),
        "no prompts when stdin is not a terminal: {err}"
    );
}

#[test]
fn repl_is_refused_with_code_or_json() {
    for extra in [&["-c", "1"][..], &["--json"], &["file.py"]] {
        let args: Vec<&str> = ["--repl"].iter().chain(extra).copied().collect();
        assert_status(&sandbox_run(&args, None), 2);
    }
}

/// Hostile output for a terminal: a clipboard write (OSC 52), a title change, a screen clear, a
/// cursor move, a carriage return that hides text, a bell, a C1 CSI (U+009B) and a raw 0x9b byte,
/// on stdout, on stderr, in a `__repr__` that becomes the result and in an exception's message.
const TERMINAL_ATTACK: &str = r#"import sys
print("clip\x1b]52;c;cm0gLXJmIH4=\x07 title\x1b]0;pwned\x07 clear\x1b[2J\x1b[H hidden\rshown \u009b31m")
sys.stdout.flush()
sys.stderr.write("err\x1b[1A\x1b[2K$ fake prompt\x07\n")
sys.stdout.buffer.write(b"raw\x9b31m\n")
sys.stdout.flush()
class Shown:
    def __repr__(self):
        return "repr\x1b[31m red"
Shown()
"#;

/// The same in an exception's message, which reaches the terminal in the traceback.
const TERMINAL_ERROR: &str = r#"raise ValueError("message\x1b]52;c;Zm9v\x07")"#;

fn shell_quote(arg: &str) -> String {
    format!("'{}'", arg.replace('\'', r"'\''"))
}

/// On a pseudo-terminal (script(1) from util-linux runs the command on one and copies what reaches
/// the terminal to its own stdout), no escape byte gets through: each is shown as `\xNN`.
#[test]
fn a_terminal_is_shown_control_characters_not_sent_them() {
    // The compiled guest must be in the cache already: a first-run notice would style the terminal.
    common::sandbox();
    let bin = shell_quote(SANDBOX_RUN);
    let command = format!(
        "{bin} --allow sys -c {}; {bin} -c {}",
        shell_quote(TERMINAL_ATTACK),
        shell_quote(TERMINAL_ERROR)
    );
    let o = Command::new("script")
        .args(["-qfec", &command, "/dev/null"])
        .env("SAFE_PYTHON_CACHE_DIR", common::cache_dir())
        .stdin(Stdio::null())
        .output()
        .expect("script(1) from util-linux runs the test on a pseudo-terminal");
    let seen = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{seen}");
    for byte in [0x1b, 0x07, 0x9b] {
        assert!(
            !o.stdout.contains(&byte),
            "byte {byte:#04x} reached the terminal: {seen:?}"
        );
    }
    assert!(!seen.contains('\u{9b}'), "a C1 CSI reached the terminal");
    for shown in [
        r"clip\x1b]52;c;cm0gLXJmIH4=\x07 title\x1b]0;pwned\x07 clear\x1b[2J\x1b[H hidden\x0dshown \x9b31m",
        r"err\x1b[1A\x1b[2K$ fake prompt\x07",
        r"raw\x9b31m",
        r"repr\x1b[31m red",
        r"ValueError: message\x1b]52;c;Zm9v\x07",
    ] {
        assert!(seen.contains(shown), "{shown:?} not shown in {seen:?}");
    }
}

/// On a pseudo-terminal the REPL reads with its line editor: a backspace edits the line, the up
/// arrow recalls the previous one for editing, and Ctrl-D leaves. Keys typed ahead of the next
/// prompt are kept, not dropped.
#[test]
fn repl_on_a_terminal_edits_lines_and_recalls_earlier_ones() {
    common::sandbox();
    let command = format!("{} --repl", shell_quote(env!("CARGO_BIN_EXE_sandbox-run")));
    let mut child = Command::new("script")
        .args(["-qfec", &command, "/dev/null"])
        .env("SAFE_PYTHON_CACHE_DIR", common::cache_dir())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("script(1) from util-linux runs the test on a pseudo-terminal");
    // Once the first prompt is drawn, the editor has the terminal: `x = 4`, backspace, `40`;
    // `x + 2`; up arrow, Ctrl-A (start of line), `1 + ` (so `1 + x + 2`); Ctrl-D. All at once.
    let mut out = child.stdout.take().unwrap();
    let mut seen = Vec::new();
    while !seen.windows(4).any(|w| w == b">>> ") {
        let mut chunk = [0; 4096];
        let n = std::io::Read::read(&mut out, &mut chunk).unwrap();
        assert!(n > 0, "no prompt: {:?}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&chunk[..n]);
    }
    let keys = b"x = 4\x7f40\rx + 2\r\x1b[A\x011 + \r\x04";
    child.stdin.take().unwrap().write_all(keys).unwrap();
    std::io::Read::read_to_end(&mut out, &mut seen).unwrap();
    let status = child.wait().unwrap();
    let seen = String::from_utf8_lossy(&seen);
    assert_eq!(status.code(), Some(0), "{seen:?}");
    let values: Vec<&str> = seen
        .lines()
        .map(str::trim)
        .filter(|line| line.parse::<u32>().is_ok())
        .collect();
    assert_eq!(values, ["40", "42", "43"], "{seen:?}");
    assert!(seen.contains(">>> "), "no prompt on a terminal: {seen:?}");
}

/// Into pipes, the same output passes byte for byte.
#[test]
fn piped_output_is_byte_exact() {
    let o = sandbox_run(&["--allow", "sys", "-c", TERMINAL_ATTACK], None);
    assert_status(&o, 0);
    assert_eq!(
        o.stdout,
        [
            "clip\x1b]52;c;cm0gLXJmIH4=\x07 title\x1b]0;pwned\x07 clear\x1b[2J\x1b[H hidden\rshown \u{9b}31m\n".as_bytes(),
            b"raw\x9b31m\n",
            b"repr\x1b[31m red\n",
        ]
        .concat(),
        "{:?}",
        stdout(&o)
    );
    assert_eq!(o.stderr, b"err\x1b[1A\x1b[2K$ fake prompt\x07\n");
    let o = sandbox_run(&["-c", TERMINAL_ERROR], None);
    assert_status(&o, 1);
    let err = stderr(&o);
    assert!(
        err.contains("ValueError: message\x1b]52;c;Zm9v\x07\n"),
        "{err:?}"
    );
}

/// A valid compiled guest planted in a fresh cache directory (written under another cache's key)
/// is refused with a warning on stderr and compiled afresh, never loaded; the next run loads the
/// replacement quietly. This compiles the guest once (tens of seconds).
#[test]
fn a_planted_cache_entry_is_refused_with_a_warning_and_replaced() {
    // The entry this build uses (the shared cache may also hold other builds' entries).
    let entry = match common::sandbox().prepared() {
        Prepared::Loaded(entry) | Prepared::Compiled(entry) => entry,
        other => panic!("the shared cache holds no compiled guest: {other:?}"),
    };
    let dir = common::temp_dir("cli-planted-cache");
    let planted = dir.path().join(entry.file_name().unwrap());
    std::fs::copy(entry, &planted).unwrap();
    let run = || {
        Command::new(SANDBOX_RUN)
            .args(["--cache-dir", dir.path().to_str().unwrap(), "-c", "6 * 7"])
            .output()
            .unwrap()
    };
    let o = run();
    assert_status(&o, 0);
    assert_eq!(stdout(&o), "42\n");
    let err = stderr(&o);
    assert!(
        err.contains("refusing the cached module") && err.contains("MAC does not match"),
        "{err}"
    );
    assert!(err.contains("compiling"), "no fresh compile: {err}");
    let o = run();
    assert_status(&o, 0);
    assert_eq!(stderr(&o), "", "the replacement was not loaded quietly");
}
