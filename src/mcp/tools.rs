//! The tool as clients see it: their arguments, their descriptions (written for the model
//! that calls them), and their replies (structured content for programs, and a text block that
//! reads well to a model).

use std::collections::BTreeMap;

use base64::prelude::{BASE64_STANDARD, Engine as _};
use rmcp::model::{CallToolResult, ContentBlock};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::files::{FileContent, MAX_FILES_REPLY_BYTES, file_blocks};
use crate::outcome::{MAX_IMAGES, Outcome, RunReport, RunResult, left_out_note};
use crate::policy::ImportPolicy;
use crate::sandbox::files::FileLimits;
use crate::sandbox::{About, RunOptions};
use crate::session::registry::{SessionError, SessionLimits, SessionReport, Start, minutes};

/// Runs code.
pub const RUN_PYTHON: &str = "run_python";

/// Largest `code` argument accepted, in bytes: beyond this the call is refused before it reaches
/// the interpreter (whose parser would spend the whole timeout on it).
pub const MAX_CODE_BYTES: usize = 1 << 20;

/// The arguments of `run_python`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunPythonArgs {
    /// The Python 3 source code to run.
    pub code: String,
    /// "new" to start a session, or the handle a reply returned (structuredContent.session.id,
    /// e.g. "s_3f9c…", 32 hex digits) to continue it. Calls in one session share variables,
    /// functions, classes and imports. Leave it out to run the code fresh and isolated.
    #[serde(default)]
    #[schemars(pattern(crate::session::registry::SESSION_PATTERN))]
    pub session: Option<String>,
    /// With a session handle: empty that session first, so the code runs in an empty one.
    #[serde(default)]
    pub reset: bool,
    /// Files for the code to read under /data: a map from a relative path ("sales.csv",
    /// "raw/2024.json") to its content, text as is or {"base64": "..."} for any bytes. Giving
    /// `files`, even {}, also lets the code write files under /out, which come back in the reply.
    /// In a session, files stay for its later calls.
    #[serde(default)]
    pub files: Option<BTreeMap<String, FileContent>>,
}

impl RunPythonArgs {
    /// The one rule the schema does not carry: `reset` needs `session`. Refused in a tool reply,
    /// as rmcp refuses arguments that do not decode, so that the model reads it and corrects
    /// the call.
    pub fn check(&self) -> Result<(), &'static str> {
        match (self.reset, &self.session) {
            (true, None) => Err("`reset` needs `session`: the handle of the session to reset"),
            _ => Ok(()),
        }
    }
}

/// The tool's description, for the model, with this server's limits and allowlist; `stored`: the
/// sessions are in a session store (they outlive the process, and none is evicted).
pub fn description(
    options: &RunOptions,
    sessions: SessionLimits,
    stored: bool,
    engine: &About,
) -> String {
    let limits = &options.limits;
    let interpreter = engine.described;
    let figures = if engine.draws_figures {
        format!(
            "- Plots come back as PNG images after the text (when matplotlib is among the modules below): every matplotlib figure shown with plt.show() or still open when the code ends is returned, then closed; at most {MAX_IMAGES} per call, and large ones are scaled down. Just draw them; there is no need to save them.\n"
        )
    } else {
        String::new()
    };
    let idle = minutes(sessions.idle.as_secs_f64());
    let max = sessions.max;
    let ending = if stored {
        format!(
            "A session ends after {idle} without a call; a call with its handle then gets an error saying so: start a new session with \"new\". Calls in one session run one at a time."
        )
    } else {
        format!(
            "A session ends after {idle} without a call, when it is the least recently used idle one and a new session needs room (at most {max} are open), or when the server stops; a call with its handle then gets an error saying so: start a new session with \"new\". When all {max} are running calls, a new session is refused until one finishes."
        )
    };
    let file_limits = FileLimits::default();
    format!(
        "Run Python 3 code in a secure sandbox and get back what it printed and the value of its last expression.\n\
         \n\
         - The interpreter is {interpreter}.\n\
         - Use it for calculations, data processing, simulations and checking code: anything computed from data in the code itself.\n\
         - Printed output (stdout and stderr) is returned, so print what you want to see.\n\
         {figures}\
         - The value of the last expression, or of a final assignment such as `result = ...`, is returned as its repr.\n\
         - Only these modules can be imported: {allowed}. Any other import fails with ImportError.\n\
         - Files: give the code files in `files` (a map from a relative path to its text, or to {{\"base64\": ...}} for other bytes); it reads them under /data, read-only, with open(). Giving `files` (even {{}}) also lets it write files under /out: they come back in the reply ({files_reply} MiB at most, small text inline, images as images). At most {max_files} files, {file_mib} MiB each, {total_mib} MiB in all, {depth} folders deep, paths relative with no `..`. Nothing else exists: no host files, no network, no environment variables and no input().\n\
         - Without `session`, each call starts fresh: nothing is kept, so define everything you use in the same call.\n\
         - Sessions keep state between calls like cells of a notebook: variables, functions, classes and imports defined in one call are there in the next. Use them for work in steps, such as loading data once and analysing it in later calls. Pass `session: \"new\"` to start one: the reply gives its handle (`session.id`, like \"s_\" and 32 hex digits). Pass that handle as `session` in later calls to continue it; `reset: true` with the handle empties it first. Handles are private: only the conversation that started a session has its handle, and any other value (a name such as \"main\") is an error.\n\
         - A call that hits a limit is undone: its session goes back to its state from before that call, and the reply says so. An exception does not undo what ran before it.\n\
         - {ending}\n\
         - Limits per call: {timeout} s of wall-clock time, {memory} MiB of memory, {output} KiB of printed output. Code that hits a limit is stopped and the reply says which limit.\n\
         - The reply shows at most {shown} KiB of output, result and traceback together: longer text is cut in the middle, with a note saying how much was cut.\n\
         - An uncaught exception comes back as a Python traceback.",
        allowed = options.policy.allowed().join(", "),
        files_reply = MAX_FILES_REPLY_BYTES >> 20,
        max_files = file_limits.max_files,
        file_mib = file_limits.max_file_bytes >> 20,
        total_mib = file_limits.max_total_bytes >> 20,
        depth = file_limits.max_depth,
        interpreter = interpreter,
        figures = figures,
        timeout = limits.timeout.as_secs_f64(),
        memory = limits.memory_bytes >> 20,
        output = limits.max_output_bytes >> 10,
        shown = RunResult::text_budget(limits.max_output_bytes) >> 10,
    )
}

/// The structured content of a `run_python` reply.
#[derive(Debug, Serialize, JsonSchema)]
pub struct CallReport {
    #[serde(flatten)]
    pub run: RunReport,
    /// Present when the call ran in a session.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionReport>,
}

/// What a `run_python` reply may take, serialised, beyond the output limit (`--max-output`): the
/// JSON keys and stats, the fixed sentences of the text (the limit, the session notes, with the
/// session's id), and the notices of cut fields when the limit is too small to hold them. The text
/// the code produced (output, result, exception) fits the limit itself: the sandbox bounds it to
/// half ([`RunResult::text_budget`]), and the reply carries it twice, as text and as structured
/// content. Figures come on top of it, as image content, within their own bounds
/// ([`crate::outcome::MAX_IMAGES_BYTES`], a third more as base64), and so do files written under
/// `/out` when a call gave `files`: their bytes within [`MAX_FILES_REPLY_BYTES`] (a third more as
/// base64), and their listing, a line per file (at most [`FileLimits::max_out_entries`]). A client
/// can rely on this to size its buffers and timeouts.
pub const REPLY_OVERHEAD_BYTES: usize = 8 << 10;

/// The reply to `run_python`: the output first, then the result or the traceback, then a sentence
/// for a hit limit or for an import `policy` refused (how to allow it), then what happened to the
/// session. `result` comes bounded from the sandbox, so the reply is within the output limit plus
/// [`REPLY_OVERHEAD_BYTES`].
pub fn run_reply(
    result: &RunResult,
    session: Option<SessionReport>,
    policy: &ImportPolicy,
) -> CallToolResult {
    let mut text = String::new();
    for (header, stream) in [("", &result.stdout), ("[stderr]\n", &result.stderr)] {
        if !stream.is_empty() {
            text.push_str(header);
            text.push_str(stream);
            if !text.ends_with('\n') {
                text.push('\n');
            }
        }
    }
    match &result.outcome {
        Outcome::Completed {
            result: Some(value),
        } => text.push_str(&format!("Result: {value}\n")),
        Outcome::Completed { result: None } if text.is_empty() && result.images.is_empty() => {
            text.push_str("(no output and no result)\n")
        }
        Outcome::Completed { result: None } => {}
        Outcome::Raised(error)
        | Outcome::LimitReached {
            error: Some(error), ..
        } => text.push_str(&error.traceback),
        Outcome::LimitReached { error: None, .. } => {}
        Outcome::Trapped { message } => {
            text.push_str(&format!("The interpreter failed: {message}\n"))
        }
    }
    if let Some(limit) = result.limit() {
        text.push_str(&format!(
            "Limit reached ({}): {}\n",
            limit.as_str(),
            limit.explain()
        ));
    }
    if let Outcome::Raised(error) = &result.outcome
        && let Some(module) = policy.refused_in(error)
    {
        text.push_str(&if policy.denies(module) {
            format!("This server's operator refuses importing {module} (`--deny`): use the allowed modules.\n")
        } else {
            format!("This server does not allow importing {module}: whoever runs it can allow it with `--allow {module}` (or SAFE_PYTHON_ALLOW). Otherwise, use the allowed modules.\n")
        });
    }
    // Said in words too, for clients that show the model only the text.
    match result.images.len() {
        0 => {}
        1 => text.push_str("1 figure follows as an image.\n"),
        n => text.push_str(&format!("{n} figures follow as images.\n")),
    }
    if let Some(note) = left_out_note(result.images_left_out) {
        text.push_str(&note);
        text.push('\n');
    }
    let (files, files_note) = file_blocks(&result.files);
    text.push_str(&files_note);
    if let Some(s) = &session {
        text.push_str(&session_note(s));
    }
    let report = CallReport {
        run: result.report(),
        session,
    };
    let structured = serde_json::to_value(report).expect("a report always serialises");
    // The figures follow the text, which says what drew them.
    let content = std::iter::once(ContentBlock::text(text))
        .chain(result.images.iter().map(|image| {
            ContentBlock::image(BASE64_STANDARD.encode(&image.data), image.mime.clone())
        }))
        .chain(files)
        .collect();
    let mut reply = if result.is_failure() {
        CallToolResult::error(content)
    } else {
        CallToolResult::success(content)
    };
    reply.structured_content = Some(structured);
    reply
}

/// What the call did to its session, in words: clients that show the model only the text still
/// give it the handle of a session it started.
fn session_note(s: &SessionReport) -> String {
    let id = &s.id;
    let mut note = match s.started {
        Some(Start::New) => {
            format!("Session started: {id}. Pass session: \"{id}\" to run later code in it.\n")
        }
        Some(Start::Reset) => format!("Session {id} was emptied before this call.\n"),
        None => String::new(),
    };
    if let Some(reason) = &s.not_stored {
        note.push_str(&format!(
            "Session {id} is as it was before this call: the session store could not keep what \
             this call did ({reason}).\n"
        ));
    } else if s.rolled_back {
        note.push_str(&format!(
            "Session {id} was restored to its state from before this call: nothing this call did was kept.\n"
        ));
    }
    note
}

/// A [`SessionError`] that is the caller's to fix, as a tool error: it says how to start a session.
pub fn session_refused(e: &SessionError) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(format!("{e}\n"))])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Decodes as the tool router does, then checks.
    fn args(v: serde_json::Value) -> Result<RunPythonArgs, String> {
        let args: RunPythonArgs =
            rmcp::handler::server::tool::parse_json_object(v.as_object().unwrap().clone())
                .map_err(|e| e.message.into_owned())?;
        args.check()?;
        Ok(args)
    }

    /// The longest reason a session store's failure can give (its causes are cut to this).
    fn huge_reason() -> String {
        let cause = "\u{1b}\"".repeat(1000);
        let e = crate::session::store::StoreError::Unavailable {
            store: "redis://h:1/0".into(),
            cause: crate::session::store::bounded(&cause),
        };
        e.to_string()
    }

    /// The worst a run can hand back: every field huge and full of control characters, a limit
    /// reached, and a session with the longest notes.
    fn worst_reply(max_output: usize) -> CallToolResult {
        let huge = "\u{1b}[2J\"\\".repeat(1 << 20);
        let mut result = RunResult {
            outcome: Outcome::LimitReached {
                limit: crate::outcome::Limit::Memory,
                error: Some(crate::outcome::PythonError {
                    kind: huge.clone(),
                    message: huge.clone(),
                    traceback: huge.clone(),
                }),
            },
            stdout: huge.clone(),
            stderr: huge,
            stats: crate::outcome::Stats {
                fuel: u64::MAX,
                wall_ms: u64::MAX,
                memory_peak_bytes: u64::MAX,
            },
            images: Vec::new(),
            images_left_out: 0,
            files: Vec::new(),
            tool_calls: Vec::new(),
        };
        result.bound(max_output);
        let session = SessionReport {
            id: format!("s_{}", "f".repeat(32)).parse().unwrap(),
            call: u64::MAX,
            started: Some(Start::New),
            rolled_back: true,
            stored_bytes: Some(u64::MAX),
            not_stored: Some(huge_reason()),
        };
        run_reply(&result, Some(session), &ImportPolicy::default())
    }

    #[test]
    fn a_reply_stays_within_the_output_limit_plus_the_overhead() {
        for max_output in [1, 100, 4096, 65536, 1 << 20] {
            let sent = serde_json::to_string(&worst_reply(max_output))
                .unwrap()
                .len();
            assert!(
                sent <= max_output + REPLY_OVERHEAD_BYTES,
                "{sent} bytes for --max-output {max_output}"
            );
        }
    }

    #[test]
    fn figures_follow_the_text_as_images_and_are_listed_without_their_bytes() {
        let png = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR\0\0\x02\x80\0\0\x01\xe0".to_vec();
        let result = RunResult {
            outcome: Outcome::Completed { result: None },
            stdout: String::new(),
            stderr: String::new(),
            stats: crate::outcome::Stats::default(),
            images: vec![crate::outcome::Image {
                mime: "image/png".into(),
                data: png.clone(),
            }],
            images_left_out: 2,
            files: Vec::new(),
            tool_calls: Vec::new(),
        };
        let reply =
            serde_json::to_value(run_reply(&result, None, &ImportPolicy::default())).unwrap();
        let content = reply["content"].as_array().unwrap();
        assert_eq!(content.len(), 2, "{reply}");
        let text = content[0]["text"].as_str().unwrap();
        assert!(
            text.starts_with("1 figure follows as an image.\n"),
            "{text}"
        );
        assert!(text.contains("2 figures were left out"), "{text}");
        assert_eq!(content[1]["type"], "image");
        assert_eq!(content[1]["mimeType"], "image/png");
        assert_eq!(content[1]["data"], BASE64_STANDARD.encode(&png));
        let listed = &reply["structuredContent"];
        assert_eq!(
            listed["images"],
            json!([{"mime": "image/png", "bytes": 24, "width": 640, "height": 480}])
        );
        assert_eq!(listed["images_left_out"], 2);
    }

    #[test]
    fn session_arguments_are_decoded_and_checked_by_the_sessions() {
        // Any string reaches the sessions, which answer in a tool reply.
        assert!(args(json!({"code": "1", "session": "new"})).is_ok());
        assert!(args(json!({"code": "1", "session": "main", "reset": true})).is_ok());
        for bad in [
            json!({"code": "1", "session": 5}),
            json!({"code": "1", "reset": true}),
            json!({"code": "1", "session": "new", "reset": "yes"}),
        ] {
            assert!(args(bad.clone()).is_err(), "{bad} was accepted");
        }
    }
}
