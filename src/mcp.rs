//! `safe-python-mcp`: an MCP server over stdio with one tool, `run_python`.
//!
//! stdout carries the protocol and nothing else: user code's output only ever reaches the client
//! inside protocol messages, and logs go to stderr. The guest is compiled or loaded in the
//! background, so `initialize` and `tools/list` are answered at once even on a first start; calls
//! wait for it. Calls run in a bounded pool; each is stopped by its limits or by
//! `notifications/cancelled`, whichever comes first.

// MCP logging (`logging/setLevel`, `notifications/message`) is deprecated by SEP-2577, but current
// clients still use it and we were asked to support it.
#![allow(deprecated)]

use std::process::ExitCode;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use clap::Parser;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    JsonObject, ListToolsResult, LoggingLevel, LoggingMessageNotificationParam,
    PaginatedRequestParams, ProgressNotificationParam, ProgressToken, ServerCapabilities,
    ServerConfig, SetLevelRequestParams, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, Peer, RoleServer, ServerHandler, ServiceExt};
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::time::Instant;

use crate::flags::SandboxFlags;
use crate::outcome::{Outcome, RunReport, RunResult};
use crate::output::Stream;
use crate::sandbox::{RunOptions, Sandbox, SandboxOptions};

/// Name of the one tool.
pub const TOOL: &str = "run_python";

/// Largest `code` argument accepted, in bytes: beyond this the call is refused before it reaches
/// the interpreter (whose parser would spend the whole timeout on it).
pub const MAX_CODE_BYTES: usize = 1 << 20;

/// Output notifications are sent at most this often, coalescing what was printed in between.
const PROGRESS_INTERVAL: Duration = Duration::from_millis(100);

/// Run Python code for an AI assistant in a WebAssembly sandbox, over MCP (stdio).
#[derive(Debug, Parser)]
#[command(
    name = "safe-python-mcp",
    version,
    about,
    after_help = "\
The server speaks MCP over stdin/stdout and logs to stderr (set SAFE_PYTHON_LOG=debug for more).
Every flag can also be set through the environment variable shown with it."
)]
pub struct Args {
    #[command(flatten)]
    pub sandbox: SandboxFlags,

    /// Prepare the compiled sandbox, run a short self-test, print what was checked and exit
    /// (status 0 when it passed): for installers, and to warm the cache before first use.
    #[arg(long)]
    pub check: bool,

    /// Calls that run at once; more wait their turn [default: the number of cores].
    #[arg(long, value_name = "N", env = "SAFE_PYTHON_WORKERS", value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub workers: Option<u16>,
}

/// The arguments of `run_python`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunPythonArgs {
    /// The Python 3 source code to run.
    pub code: String,
}

/// Decodes the arguments of a `run_python` call: anything a client may send is either valid
/// arguments or an `invalid_params` error for it, never a panic.
pub fn parse_arguments(arguments: Option<JsonObject>) -> Result<RunPythonArgs, ErrorData> {
    serde_json::from_value(serde_json::Value::Object(arguments.unwrap_or_default()))
        .map_err(|e| ErrorData::invalid_params(format!("invalid arguments for {TOOL}: {e}"), None))
}

/// The server: shared by every request handler.
#[derive(Clone)]
pub struct PythonServer(Arc<Inner>);

struct Inner {
    options: RunOptions,
    sandbox: watch::Receiver<Option<Result<Sandbox, String>>>,
    slots: Semaphore,
    tool: Tool,
    /// Set by `logging/setLevel`: output then also goes out as log messages.
    log_level: Mutex<Option<LoggingLevel>>,
}

impl PythonServer {
    /// Starts preparing the sandbox in the background and returns at once.
    pub fn start(flags: &SandboxFlags, workers: usize) -> Self {
        let (ready, sandbox) = watch::channel(None);
        let cache_dir = flags.cache_dir.clone();
        std::thread::spawn(move || {
            let options = SandboxOptions {
                cache_dir,
                on_compile: Some(Box::new(|path| match path {
                    Some(p) => tracing::info!(
                        "compiling the Python sandbox for first use (about 30 s); caching it at {}",
                        p.display()
                    ),
                    None => tracing::info!("compiling the Python sandbox (no cache directory)"),
                })),
                ..SandboxOptions::default()
            };
            let sandbox = Sandbox::new(options).map_err(|e| format!("{e:#}"));
            match &sandbox {
                Ok(_) => tracing::info!("sandbox ready"),
                Err(e) => tracing::error!("the sandbox cannot start: {e}"),
            }
            let _ = ready.send(Some(sandbox));
        });
        let options = flags.run_options();
        let tool = tool(&options);
        PythonServer(Arc::new(Inner {
            options,
            sandbox,
            slots: Semaphore::new(workers.max(1)),
            tool,
            log_level: Mutex::new(None),
        }))
    }

    async fn sandbox(&self, progress: &Progress) -> Result<Sandbox, ErrorData> {
        let mut ready = self.0.sandbox.clone();
        if ready.borrow().is_none() {
            progress
                .note("preparing the Python sandbox (first start only)")
                .await;
        }
        let ready = ready
            .wait_for(Option::is_some)
            .await
            .map_err(|_| ErrorData::internal_error("the sandbox loader stopped", None))?;
        match ready.as_ref().expect("waited for it") {
            Ok(sandbox) => Ok(sandbox.clone()),
            Err(e) => Err(ErrorData::internal_error(
                format!("the sandbox cannot start: {e}"),
                None,
            )),
        }
    }

    async fn run_python(
        &self,
        args: RunPythonArgs,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        if args.code.len() > MAX_CODE_BYTES {
            return Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                "The code is {} bytes long; the limit is {MAX_CODE_BYTES} bytes.",
                args.code.len()
            ))]));
        }
        let log = *self
            .0
            .log_level
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let progress = Progress {
            peer: context.peer.clone(),
            token: context.meta.get_progress_token(),
            log: log.is_some(),
        };
        let _slot = tokio::select! {
            slot = self.0.slots.acquire() => slot.map_err(|_| ErrorData::internal_error("the server is shutting down", None))?,
            () = context.ct.cancelled() => return Err(cancelled()),
        };
        let sandbox = self.sandbox(&progress).await?;

        let (sender, receiver) = mpsc::unbounded_channel();
        let streaming = progress
            .is_wanted()
            .then(|| tokio::spawn(progress.clone().forward(receiver)));
        let mut options = self.0.options.clone();
        if streaming.is_some() {
            options.observer = Some(Arc::new(move |stream: Stream, bytes: &[u8]| {
                let _ = sender.send((stream, bytes.to_vec()));
            }));
        }
        let result = tokio::select! {
            result = sandbox.run(&args.code, &options) => result,
            () = context.ct.cancelled() => return Err(cancelled()),
        };
        // The observer holds the channel's sender: dropping it lets the forwarder finish, so every
        // output notification is sent before the result.
        drop(options);
        if let Some(forwarder) = streaming {
            let _ = forwarder.await;
        }
        let result = result.map_err(|e| ErrorData::internal_error(format!("{e:#}"), None))?;
        Ok(tool_result(&result))
    }
}

fn cancelled() -> ErrorData {
    ErrorData::internal_error("the call was cancelled", None)
}

/// The tool as clients see it. The description is written for the model that will call it: what it
/// is for, what it may import, and what comes back.
fn tool(options: &RunOptions) -> Tool {
    let limits = &options.limits;
    let description = format!(
        "Run Python 3 code in a secure sandbox and get back what it printed and the value of its last expression.\n\
         \n\
         - Use it for calculations, data processing, simulations and checking code: anything computed from data in the code itself.\n\
         - Printed output (stdout and stderr) is returned, so print what you want to see.\n\
         - The value of the last expression, or of a final assignment such as `result = ...`, is returned as its repr.\n\
         - Only these modules can be imported: {}. Any other import fails with ImportError.\n\
         - There are no files, no network, no environment variables and no input(): open() fails.\n\
         - Each call starts fresh: nothing is kept between calls, so define everything you use in the same call.\n\
         - Limits per call: {} s of wall-clock time, {} MiB of memory, {} KiB of output. Code that hits a limit is stopped and the reply says which limit.\n\
         - An uncaught exception comes back as a Python traceback.",
        options.policy.allowed().join(", "),
        limits.timeout.as_secs_f64(),
        limits.memory_bytes >> 20,
        limits.max_output_bytes >> 10,
    );
    let mut tool = Tool::new(
        TOOL,
        description,
        rmcp::handler::server::common::schema_for_type::<RunPythonArgs>(),
    );
    tool.output_schema = Some(rmcp::handler::server::common::schema_for_output::<RunReport>());
    tool
}

/// The reply: structured content for programs, and a text block that reads well to a model (the
/// output first, then the result or the traceback, then a sentence if a limit was hit).
fn tool_result(result: &RunResult) -> CallToolResult {
    let mut text = String::new();
    if !result.stdout.is_empty() {
        text.push_str(&result.stdout);
        if !text.ends_with('\n') {
            text.push('\n');
        }
    }
    if !result.stderr.is_empty() {
        text.push_str("[stderr]\n");
        text.push_str(&result.stderr);
        if !text.ends_with('\n') {
            text.push('\n');
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
    let structured = serde_json::to_value(result.report()).expect("a report always serialises");
    let mut reply = if result.is_failure() {
        CallToolResult::error(vec![ContentBlock::text(text)])
    } else {
        CallToolResult::success(vec![ContentBlock::text(text)])
    };
    reply.structured_content = Some(structured);
    reply
}

/// Where a call's live output goes: progress notifications (when the client sent a token) and log
/// messages (when the client set a log level).
#[derive(Clone)]
struct Progress {
    peer: Peer<RoleServer>,
    token: Option<ProgressToken>,
    log: bool,
}

impl Progress {
    fn is_wanted(&self) -> bool {
        self.token.is_some() || self.log
    }

    async fn note(&self, message: &str) {
        if let Some(token) = &self.token {
            let _ = self
                .peer
                .notify_progress(
                    ProgressNotificationParam::new(token.clone(), 0.0).with_message(message),
                )
                .await;
        }
    }

    /// Sends output as it arrives: the first chunk at once, then at most one notification per
    /// [`PROGRESS_INTERVAL`] with everything printed in between, in order. Ends when the run drops
    /// its sender, after sending what is left.
    async fn forward(self, mut receiver: mpsc::UnboundedReceiver<(Stream, Vec<u8>)>) {
        let mut pending = Pending::default();
        let mut sent_bytes = 0usize;
        let mut next_send = Instant::now();
        let mut open = true;
        while open {
            match receiver.recv().await {
                Some((stream, bytes)) => pending.push(stream, &bytes),
                None => break,
            }
            loop {
                match tokio::time::timeout_at(next_send, receiver.recv()).await {
                    Ok(Some((stream, bytes))) => pending.push(stream, &bytes),
                    Ok(None) => {
                        open = false;
                        break;
                    }
                    Err(_deadline) => break,
                }
            }
            for (stream, text) in pending.take() {
                sent_bytes += text.len();
                self.send(stream, &text, sent_bytes).await;
            }
            next_send = Instant::now() + PROGRESS_INTERVAL;
        }
        for (stream, text) in pending.take_all() {
            sent_bytes += text.len();
            self.send(stream, &text, sent_bytes).await;
        }
    }

    async fn send(&self, stream: Stream, text: &str, progress: usize) {
        let logger = match stream {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        };
        if let Some(token) = &self.token {
            let message = match stream {
                Stream::Stdout => text.to_owned(),
                Stream::Stderr => format!("[stderr] {text}"),
            };
            let _ = self
                .peer
                .notify_progress(
                    ProgressNotificationParam::new(token.clone(), progress as f64)
                        .with_message(message),
                )
                .await;
        }
        if self.log {
            let mut param = LoggingMessageNotificationParam::new(
                LoggingLevel::Info,
                serde_json::Value::String(text.to_owned()),
            );
            param.logger = Some(logger.to_owned());
            let _ = self.peer.notify_logging_message(param).await;
        }
    }
}

/// Output waiting to be sent, in order, as runs of one stream. A UTF-8 sequence cut between two
/// writes waits for its end rather than being sent broken.
#[derive(Default)]
struct Pending {
    runs: Vec<(Stream, Vec<u8>)>,
}

impl Pending {
    fn push(&mut self, stream: Stream, bytes: &[u8]) {
        match self.runs.last_mut() {
            Some((s, buf)) if *s == stream => buf.extend_from_slice(bytes),
            _ => self.runs.push((stream, bytes.to_vec())),
        }
    }

    /// Everything complete: all runs, less an unfinished UTF-8 sequence at the end of the last.
    fn take(&mut self) -> Vec<(Stream, String)> {
        let tail = self.runs.last_mut().and_then(|(stream, buf)| {
            let tail = buf.split_off(buf.len() - incomplete_utf8_tail(buf));
            (!tail.is_empty()).then_some((*stream, tail))
        });
        let out = self
            .take_all()
            .into_iter()
            .filter(|(_, text)| !text.is_empty())
            .collect();
        self.runs.extend(tail);
        out
    }

    fn take_all(&mut self) -> Vec<(Stream, String)> {
        self.runs
            .drain(..)
            .map(|(s, b)| (s, String::from_utf8_lossy(&b).into_owned()))
            .collect()
    }
}

/// How many bytes at the end of `bytes` are the start of a UTF-8 sequence that is not finished.
fn incomplete_utf8_tail(bytes: &[u8]) -> usize {
    match std::str::from_utf8(bytes) {
        Err(e) if e.error_len().is_none() => bytes.len() - e.valid_up_to(),
        _ => 0,
    }
}

impl ServerHandler for PythonServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().enable_logging().build())
            .with_server_info(Implementation::new("safe-python-mcp", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Runs Python code in a WebAssembly sandbox on this machine. Call run_python to compute, \
                 test or check anything expressible in plain Python with the standard modules it lists.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(vec![self.0.tool.clone()]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if request.name != TOOL {
            return Err(ErrorData::invalid_params(
                format!("unknown tool '{}': the only tool is '{TOOL}'", request.name),
                None,
            ));
        }
        let args = parse_arguments(request.arguments)?;
        Ok(self.run_python(args, context).await?.into())
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        *self
            .0
            .log_level
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(request.level);
        Ok(())
    }
}

/// The whole program.
pub fn main() -> ExitCode {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("SAFE_PYTHON_LOG")
                .unwrap_or_else(|_| "info".into()),
        )
        .init();
    let workers = args
        .workers
        .map(usize::from)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()));
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("safe-python-mcp: cannot start: {e}");
            return ExitCode::FAILURE;
        }
    };
    if args.check {
        return match runtime.block_on(self_test(&args.sandbox)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("safe-python-mcp: self-test failed: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    let served = runtime.block_on(serve(PythonServer::start(&args.sandbox, workers)));
    // After a signal, a blocking read of stdin is still pending in tokio's blocking pool, and
    // dropping the runtime would wait for it: leave it, the process is exiting.
    runtime.shutdown_background();
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `--check`: the sandbox starts, runs code, refuses an import and stops an endless loop.
async fn self_test(flags: &SandboxFlags) -> anyhow::Result<()> {
    let sandbox = Sandbox::new(SandboxOptions {
        cache_dir: flags.cache_dir.clone(),
        on_compile: Some(Box::new(|path| {
            eprintln!("safe-python-mcp: compiling the Python sandbox for first use (about 30 s)");
            if let Some(p) = path {
                eprintln!("safe-python-mcp: caching it at {}", p.display());
            }
        })),
        ..SandboxOptions::default()
    })?;
    let mut options = flags.run_options();
    type Check = (&'static str, &'static str, fn(&RunResult) -> bool);
    let checks: [Check; 3] = [
        ("runs code", "print(2**100)", |r| {
            r.stdout == "1267650600228229401496703205376\n"
        }),
        (
            "refuses imports outside the allowlist",
            "import socket",
            |r| r.error().is_some_and(|e| e.kind == "ImportError"),
        ),
        ("stops an endless loop", "while True: pass", |r| {
            r.limit().is_some()
        }),
    ];
    options.limits.timeout = options.limits.timeout.min(Duration::from_secs(1));
    for (what, code, passed) in checks {
        let result = sandbox.run(code, &options).await?;
        anyhow::ensure!(
            passed(&result),
            "the sandbox did not pass \"{what}\": {}",
            serde_json::to_string(&result)?
        );
        println!("ok: {what} ({} ms)", result.stats.wall_ms);
    }
    let cache = match sandbox.prepared() {
        crate::cache::Prepared::Loaded(p) | crate::cache::Prepared::Compiled(p) => {
            p.display().to_string()
        }
        crate::cache::Prepared::CompiledUncached => "none".into(),
    };
    println!("safe-python-mcp: self-test passed (compiled sandbox: {cache})");
    Ok(())
}

/// Serves one client on stdio until it closes stdin (in-flight calls get rmcp's 5 s to finish) or
/// the process is asked to stop (SIGTERM, or SIGINT / Ctrl-C): then runs in progress are dropped,
/// which stops them, and the server exits 0 at once. A client that closes stdin before it has
/// initialized is no failure either.
async fn serve(server: PythonServer) -> anyhow::Result<()> {
    let session = async {
        let service = match server.serve(rmcp::transport::stdio()).await {
            Ok(service) => service,
            Err(rmcp::service::ServerInitializeError::ConnectionClosed(_)) => {
                tracing::info!("the client closed stdin before initializing");
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        };
        service.waiting().await?;
        Ok(())
    };
    tokio::select! {
        ended = session => ended,
        signal = termination() => {
            tracing::info!("{signal}: stopping the runs in progress and exiting");
            Ok(())
        }
    }
}

/// Resolves with the signal's name when the process is asked to stop; never, if the handlers
/// cannot be installed (the signals then keep their default effect).
async fn termination() -> &'static str {
    let signal = async {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let mut term = signal(SignalKind::terminate())?;
            tokio::select! {
                _ = term.recv() => Ok("SIGTERM"),
                interrupted = tokio::signal::ctrl_c() => interrupted.map(|()| "SIGINT"),
            }
        }
        #[cfg(not(unix))]
        tokio::signal::ctrl_c().await.map(|()| "Ctrl-C")
    };
    match signal.await {
        Ok(name) => name,
        Err(e) => {
            tracing::warn!("cannot handle termination signals: {e}");
            std::future::pending().await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf8_split_between_writes_is_held_back() {
        let mut p = Pending::default();
        let snowman = "☃".as_bytes();
        p.push(Stream::Stdout, b"a");
        p.push(Stream::Stdout, &snowman[..1]);
        assert_eq!(p.take(), vec![(Stream::Stdout, "a".to_owned())]);
        p.push(Stream::Stdout, &snowman[1..]);
        p.push(Stream::Stderr, b"e");
        assert_eq!(
            p.take(),
            vec![
                (Stream::Stdout, "☃".to_owned()),
                (Stream::Stderr, "e".to_owned())
            ]
        );
        assert!(p.take().is_empty());
    }
}
