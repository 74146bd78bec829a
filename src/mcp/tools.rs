//! The two tools as clients see them: their arguments, their descriptions (written for the model
//! that calls them), and their replies (structured content for programs, and a text block that
//! reads well to a model).

use rmcp::ErrorData;
use rmcp::handler::server::common::{schema_for_output, schema_for_type};
use rmcp::model::{CallToolResult, ContentBlock, JsonObject, Tool};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize, de::DeserializeOwned};

use crate::outcome::{Outcome, RunReport, RunResult};
use crate::sandbox::RunOptions;
use crate::sessions::{SessionInfo, SessionLimits, Start};

/// Runs code.
pub const RUN_PYTHON: &str = "run_python";
/// Lists the live sessions.
pub const LIST_SESSIONS: &str = "list_sessions";

/// Largest `code` argument accepted, in bytes: beyond this the call is refused before it reaches
/// the interpreter (whose parser would spend the whole timeout on it).
pub const MAX_CODE_BYTES: usize = 1 << 20;

/// Longest session name, in characters.
pub const MAX_SESSION_NAME_CHARS: usize = 64;

/// The arguments of `run_python`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunPythonArgs {
    /// The Python 3 source code to run.
    pub code: String,
    /// Name of a session to run the code in (any short name, e.g. "analysis"). Calls with the
    /// same session share variables, functions, classes and imports; the first call creates it.
    /// Leave it out to run the code fresh and isolated.
    #[serde(default)]
    pub session: Option<String>,
    /// With `session`: discard that session's state first, so the code runs in an empty one.
    #[serde(default)]
    pub reset: bool,
}

/// The arguments of `list_sessions`: none.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListSessionsArgs {}

/// Decodes the arguments of a `run_python` call: anything a client may send is either valid
/// arguments or an `invalid_params` error for it, never a panic.
pub fn parse_arguments(arguments: Option<JsonObject>) -> Result<RunPythonArgs, ErrorData> {
    let args: RunPythonArgs = decode(RUN_PYTHON, arguments)?;
    match &args.session {
        Some(name) => check_session_name(name)?,
        None if args.reset => {
            return Err(ErrorData::invalid_params(
                "`reset` needs `session`: the name of the session to reset",
                None,
            ));
        }
        None => {}
    }
    Ok(args)
}

/// Decodes the arguments of `tool`.
pub fn decode<T: DeserializeOwned>(
    tool: &str,
    arguments: Option<JsonObject>,
) -> Result<T, ErrorData> {
    serde_json::from_value(serde_json::Value::Object(arguments.unwrap_or_default()))
        .map_err(|e| ErrorData::invalid_params(format!("invalid arguments for {tool}: {e}"), None))
}

fn check_session_name(name: &str) -> Result<(), ErrorData> {
    let chars = name.chars().count();
    if name.trim().is_empty()
        || chars > MAX_SESSION_NAME_CHARS
        || name.chars().any(char::is_control)
    {
        return Err(ErrorData::invalid_params(
            format!(
                "invalid session name {name:?}: use 1 to {MAX_SESSION_NAME_CHARS} characters, not all blank, with no control characters"
            ),
            None,
        ));
    }
    Ok(())
}

/// Both tools, described for the model with this server's limits and allowlist.
pub fn tools(options: &RunOptions, sessions: SessionLimits) -> Vec<Tool> {
    let limits = &options.limits;
    let idle = minutes(sessions.idle.as_secs_f64());
    let run = format!(
        "Run Python 3 code in a secure sandbox and get back what it printed and the value of its last expression.\n\
         \n\
         - Use it for calculations, data processing, simulations and checking code: anything computed from data in the code itself.\n\
         - Printed output (stdout and stderr) is returned, so print what you want to see.\n\
         - The value of the last expression, or of a final assignment such as `result = ...`, is returned as its repr.\n\
         - Only these modules can be imported: {allowed}. Any other import fails with ImportError.\n\
         - There are no files, no network, no environment variables and no input(): open() fails.\n\
         - Without `session`, each call starts fresh: nothing is kept, so define everything you use in the same call.\n\
         - With `session` (a name you choose, e.g. \"main\"), calls share state like cells of a notebook: variables, functions, classes and imports defined in one call are there in the next. Use it for work in steps, such as loading data once and analysing it in later calls. `reset: true` empties the session first.\n\
         - A call that hits a limit is undone: its session goes back to its state from before that call, and the reply says so. An exception does not undo what ran before it.\n\
         - Sessions end after {idle} without a call, when more than {max} are open (the least recently used goes first), or when the server stops; the reply says when a session had ended and started again empty. {LIST_SESSIONS} shows the open ones.\n\
         - Limits per call: {timeout} s of wall-clock time, {memory} MiB of memory, {output} KiB of printed output. Code that hits a limit is stopped and the reply says which limit.\n\
         - The reply shows at most {shown} KiB of output, result and traceback together: longer text is cut in the middle, with a note saying how much was cut.\n\
         - An uncaught exception comes back as a Python traceback.",
        allowed = options.policy.allowed().join(", "),
        max = sessions.max,
        timeout = limits.timeout.as_secs_f64(),
        memory = limits.memory_bytes >> 20,
        output = limits.max_output_bytes >> 10,
        shown = RunResult::text_budget(limits.max_output_bytes) >> 10,
    );
    let mut run_python = Tool::new(RUN_PYTHON, run, schema_for_type::<RunPythonArgs>());
    run_python.output_schema = Some(schema_for_output::<CallReport>());
    let list = format!(
        "List the open sessions of {RUN_PYTHON}: their names, how many calls each has had, how long each has been idle and the memory it holds. \
         At most {} sessions stay open; one idle for {idle} is closed.",
        sessions.max
    );
    let mut list_sessions = Tool::new(LIST_SESSIONS, list, schema_for_type::<ListSessionsArgs>());
    list_sessions.output_schema = Some(schema_for_output::<SessionsReport>());
    vec![run_python, list_sessions]
}

fn minutes(secs: f64) -> String {
    if secs >= 60.0 {
        format!("{} min", (secs / 60.0 * 10.0).round() / 10.0)
    } else {
        format!("{secs} s")
    }
}

/// The structured content of a `run_python` reply.
#[derive(Debug, Serialize, JsonSchema)]
pub struct CallReport {
    #[serde(flatten)]
    pub run: RunReport,
    /// Present when the call named a session.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionReport>,
}

/// What a call did to its session.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct SessionReport {
    /// The session's name.
    pub id: String,
    /// Which call of the session this was, counting from 1.
    pub call: u64,
    /// Set when this call found the session empty, and why: `new` (first use of the name), `reset`
    /// (asked for), `evicted` (it had been closed to make room for newer sessions) or `expired`
    /// (it had been closed after the idle timeout). Earlier definitions are then gone.
    pub started: Option<Start>,
    /// The call hit a limit and was undone: the session is as it was before the call.
    pub rolled_back: bool,
}

/// A session call as the reply describes it (see [`SessionReport`]).
pub struct SessionCall<'a> {
    pub id: &'a str,
    pub started: Option<Start>,
    pub call: u64,
    pub rolled_back: bool,
}

/// What a `run_python` reply may take, serialised, beyond the output limit (`--max-output`): the
/// JSON keys and stats, the fixed sentences of the text (the limit, the session notes, with the
/// session's id), and the notices of cut fields when the limit is too small to hold them. The text
/// the code produced (output, result, exception) fits the limit itself: the sandbox bounds it to
/// half ([`RunResult::text_budget`]), and the reply carries it twice, as text and as structured
/// content. A client can rely on this to size its buffers and timeouts.
pub const REPLY_OVERHEAD_BYTES: usize = 8 << 10;

/// The reply to `run_python`: the output first, then the result or the traceback, then a sentence
/// for a hit limit, then what happened to the session. `result` comes bounded from the sandbox, so
/// the reply is within the output limit plus [`REPLY_OVERHEAD_BYTES`].
pub fn run_reply(
    result: &RunResult,
    session: Option<SessionCall<'_>>,
    limits: SessionLimits,
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
        Outcome::Completed { result: None } if text.is_empty() => {
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
    if let Some(s) = &session {
        if let Some(note) = start_note(s.id, s.started, limits) {
            text.push_str(&note);
        }
        if s.rolled_back {
            text.push_str(&format!(
                "Session '{}' was restored to its state from before this call: nothing this call did was kept.\n",
                s.id
            ));
        }
    }
    let report = CallReport {
        run: result.report(),
        session: session.map(|s| SessionReport {
            id: s.id.to_owned(),
            call: s.call,
            started: s.started,
            rolled_back: s.rolled_back,
        }),
    };
    let structured = serde_json::to_value(report).expect("a report always serialises");
    let mut reply = if result.is_failure() {
        CallToolResult::error(vec![ContentBlock::text(text)])
    } else {
        CallToolResult::success(vec![ContentBlock::text(text)])
    };
    reply.structured_content = Some(structured);
    reply
}

/// A sentence when the session had ended before this call, so that a `NameError` for something
/// defined earlier is not a mystery.
fn start_note(id: &str, started: Option<Start>, limits: SessionLimits) -> Option<String> {
    let why = match started? {
        Start::New | Start::Reset => return None,
        Start::Evicted => format!(
            "it was closed to make room, as more than {} sessions were open and it was the least recently used",
            limits.max
        ),
        Start::Expired => format!(
            "it was closed after {} without a call",
            minutes(limits.idle.as_secs_f64())
        ),
    };
    Some(format!(
        "Note: session '{id}' had ended ({why}). This call ran in a new, empty session: anything defined before is gone.\n"
    ))
}

/// The structured content of a `list_sessions` reply.
#[derive(Debug, Serialize, JsonSchema)]
pub struct SessionsReport {
    /// The open sessions, most recently used first.
    pub sessions: Vec<SessionInfo>,
    /// Sessions that may be open at once.
    pub max_sessions: usize,
    /// A session with no call for this many seconds is closed.
    pub idle_timeout_seconds: f64,
}

pub fn sessions_reply(sessions: Vec<SessionInfo>, limits: SessionLimits) -> CallToolResult {
    let mut text = if sessions.is_empty() {
        "No open sessions.\n".to_owned()
    } else {
        format!(
            "{} open session(s) of at most {}:\n",
            sessions.len(),
            limits.max
        )
    };
    for s in &sessions {
        match (s.calls, s.memory_bytes) {
            (Some(calls), Some(memory)) => text.push_str(&format!(
                "- {}: {calls} call(s), idle {:.0} s, {} MiB of memory\n",
                s.id,
                s.idle_seconds,
                memory >> 20
            )),
            _ => text.push_str(&format!("- {}: running a call now\n", s.id)),
        }
    }
    let report = SessionsReport {
        sessions,
        max_sessions: limits.max,
        idle_timeout_seconds: limits.idle.as_secs_f64(),
    };
    let mut reply = CallToolResult::success(vec![ContentBlock::text(text)]);
    reply.structured_content =
        Some(serde_json::to_value(report).expect("a report always serialises"));
    reply
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn args(v: serde_json::Value) -> Result<RunPythonArgs, ErrorData> {
        parse_arguments(Some(v.as_object().unwrap().clone()))
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
        };
        result.bound(max_output);
        let id = "\"".repeat(MAX_SESSION_NAME_CHARS);
        let session = SessionCall {
            id: &id,
            started: Some(Start::Expired),
            call: u64::MAX,
            rolled_back: true,
        };
        run_reply(&result, Some(session), SessionLimits::default())
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
    fn session_names_and_reset_are_checked() {
        assert!(args(json!({"code": "1", "session": "analysis 2"})).is_ok());
        assert!(args(json!({"code": "1", "session": "main", "reset": true})).is_ok());
        for bad in [
            json!({"code": "1", "session": ""}),
            json!({"code": "1", "session": "   "}),
            json!({"code": "1", "session": "a\nb"}),
            json!({"code": "1", "session": "x".repeat(65)}),
            json!({"code": "1", "session": 5}),
            json!({"code": "1", "reset": true}),
        ] {
            assert!(args(bad.clone()).is_err(), "{bad} was accepted");
        }
    }
}
