//! `safe-python-mcp`: an MCP server over stdio with one tool, `run_python`.
//!
//! stdout carries the protocol and nothing else: user code's output only ever reaches the client
//! inside protocol messages, and logs go to stderr. The guest is compiled or loaded in the
//! background, so `initialize` and `tools/list` are answered at once even on a first start; calls
//! wait for it. Calls run in a bounded pool; each is stopped by its limits or by
//! `notifications/cancelled`, whichever comes first. Calls with a session handle run in that
//! session ([`crate::sessions`]), one at a time per session.
//!
//! There is no tool that lists sessions: one process serves every conversation of a client, and a
//! listing (even of counts and sizes) would tell one conversation about the others. Each reply
//! describes the caller's own session instead.
//!
//! Every reply stays within the output limit plus [`REPLY_OVERHEAD_BYTES`], and live output within
//! [`MAX_UPDATES`] and [`MAX_UPDATE_BYTES`].

// MCP logging (`logging/setLevel`, `notifications/message`) is deprecated by SEP-2577, but current
// clients still use it and we were asked to support it.
#![allow(deprecated)]

mod progress;
mod tools;

use std::process::ExitCode;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use clap::Parser;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, LoggingLevel, PaginatedRequestParams, ServerCapabilities, ServerConfig,
    SetLevelRequestParams, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use tokio::sync::{Semaphore, watch};
use tokio_util::sync::CancellationToken;

use self::progress::{Live, Progress};
pub use self::progress::{MAX_UPDATE_BYTES, MAX_UPDATES};
use self::tools::SessionCall;
pub use self::tools::{
    MAX_CODE_BYTES, REPLY_OVERHEAD_BYTES, RUN_PYTHON, RunPythonArgs, parse_arguments,
};
use crate::flags::{SandboxFlags, parse_seconds};
use crate::outcome::RunResult;
use crate::sandbox::{RunOptions, Sandbox, SandboxOptions};
use crate::sessions::{LeaseRun, SessionLimits, SessionRequest, Sessions};

/// Run Python code for an AI assistant in a WebAssembly sandbox, over MCP (stdio).
#[derive(Debug, Parser)]
#[command(
    name = "safe-python-mcp",
    version,
    about,
    after_help = "\
The server speaks MCP over stdin/stdout and logs to stderr (set SAFE_PYTHON_LOG=debug for more).
Every flag can also be set through the environment variable shown with it.

Sessions: a call with session \"new\" starts one, and its reply carries the session's handle
(128 random bits, as s_ and 32 hex digits); only calls with that handle reach it. Names such as
\"main\" are refused. Sessions live in the server's memory: they all end when it stops."
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

    /// Sessions open at once. A new one beyond this closes the least recently used idle one, and
    /// is refused while all are running calls. Each holds at most twice the --memory limit (its
    /// memory, and the snapshot that undoes a stopped call) plus 0.4 %.
    #[arg(long, value_name = "N", default_value_t = SessionLimits::DEFAULT_MAX as u16, env = "SAFE_PYTHON_MAX_SESSIONS",
          value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub max_sessions: u16,

    /// A session with no call for this many seconds is closed.
    #[arg(long, value_name = "SECS", default_value_t = SessionLimits::DEFAULT_IDLE.as_secs_f64(),
          value_parser = parse_seconds, env = "SAFE_PYTHON_SESSION_IDLE")]
    pub session_idle: f64,
}

impl Args {
    pub fn session_limits(&self) -> SessionLimits {
        SessionLimits {
            max: self.max_sessions.into(),
            idle: Duration::from_secs_f64(self.session_idle),
        }
    }
}

/// The server: shared by every request handler.
#[derive(Clone)]
pub struct PythonServer(Arc<Inner>);

struct Inner {
    options: RunOptions,
    sandbox: watch::Receiver<Option<Result<Sandbox, String>>>,
    slots: Semaphore,
    sessions: Arc<Sessions>,
    tools: Vec<Tool>,
    /// Set by `logging/setLevel`: output then also goes out as log messages.
    log_level: Mutex<Option<LoggingLevel>>,
}

impl PythonServer {
    /// Starts preparing the sandbox in the background and returns at once.
    pub fn start(args: &Args) -> Self {
        let (ready, sandbox) = watch::channel(None);
        let cache_dir = args.sandbox.cache_dir.clone();
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
            };
            let sandbox = Sandbox::new(options).map_err(|e| format!("{e:#}"));
            match &sandbox {
                Ok(_) => tracing::info!("sandbox ready"),
                Err(e) => tracing::error!("the sandbox cannot start: {e}"),
            }
            let _ = ready.send(Some(sandbox));
        });
        let workers = args
            .workers
            .map(usize::from)
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()));
        let options = args.sandbox.run_options();
        let session_limits = args.session_limits();
        PythonServer(Arc::new(Inner {
            tools: tools::tools(&options, session_limits),
            options,
            sandbox,
            slots: Semaphore::new(workers),
            sessions: Sessions::new(session_limits),
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
        let ct = &context.ct;
        let sandbox = self.sandbox(&progress).await?;
        // A session first (calls to one session queue here, holding no worker), then a worker.
        let lease = match &args.session {
            Some(value) => {
                let checkout = async {
                    let request = SessionRequest::parse(value)?;
                    self.0
                        .sessions
                        .checkout(request, args.reset, &sandbox)
                        .await
                };
                match until_cancelled(ct, checkout).await? {
                    Ok(lease) => Some(lease),
                    Err(e) if e.is_refusal() => return Ok(tools::session_refused(&e)),
                    Err(e) => return Err(internal(e)),
                }
            }
            None => None,
        };
        let slot = until_cancelled(ct, self.0.slots.acquire())
            .await?
            .map_err(|_| ErrorData::internal_error("the server is shutting down", None))?;

        let live = progress
            .is_wanted()
            .then(|| Live::start(progress.clone(), ct.clone()));
        let mut options = self.0.options.clone();
        options.observer = live.as_ref().map(Live::observer);
        let (result, session) = match lease {
            None => (
                until_cancelled(ct, sandbox.run(&args.code, &options)).await?,
                None,
            ),
            Some(lease) => match lease.run(&args.code, &options, ct.cancelled()).await {
                Ok(None) => return Err(cancelled()),
                Ok(Some(LeaseRun { id, started, run })) => (
                    Ok(run.result),
                    Some(SessionCall {
                        id: id.to_string(),
                        started,
                        call: run.call,
                        rolled_back: run.rolled_back,
                    }),
                ),
                Err(e) => (Err(e), None),
            },
        };
        // The run is over: its worker is free for the next call while the live output that is
        // left goes out (bounded, and cut short if the call is cancelled), before the reply.
        drop(slot);
        if let Some(live) = live {
            live.finish().await;
        }
        let result = result.map_err(internal)?;
        Ok(tools::run_reply(&result, session))
    }
}

/// Awaits `future` unless the request is cancelled first.
async fn until_cancelled<T>(
    ct: &CancellationToken,
    future: impl Future<Output = T>,
) -> Result<T, ErrorData> {
    tokio::select! {
        out = future => Ok(out),
        () = ct.cancelled() => Err(cancelled()),
    }
}

fn cancelled() -> ErrorData {
    ErrorData::internal_error("the call was cancelled", None)
}

fn internal(e: impl std::fmt::Display) -> ErrorData {
    ErrorData::internal_error(format!("{e:#}"), None)
}

impl ServerHandler for PythonServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().enable_logging().build())
            .with_server_info(Implementation::new("safe-python-mcp", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Runs Python code in a WebAssembly sandbox on this machine. Call run_python to compute, \
                 test or check anything expressible in plain Python with the standard modules it lists; \
                 pass session \"new\" to start a session that keeps state between calls, then the handle its reply returns.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.0.tools.clone()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let reply = match request.name.as_ref() {
            RUN_PYTHON => {
                let args = parse_arguments(request.arguments)?;
                self.run_python(args, context).await?
            }
            other => {
                return Err(ErrorData::invalid_params(
                    format!("unknown tool '{other}': the only tool is '{RUN_PYTHON}'"),
                    None,
                ));
            }
        };
        Ok(reply.into())
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
    let served = runtime.block_on(serve(PythonServer::start(&args)));
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

/// `--check`: the sandbox starts, runs code, refuses an import, stops an endless loop, and keeps a
/// session's state through a stopped call.
async fn self_test(flags: &SandboxFlags) -> anyhow::Result<()> {
    let sandbox = Sandbox::new(SandboxOptions {
        cache_dir: flags.cache_dir.clone(),
        on_compile: Some(Box::new(|path| {
            eprintln!("safe-python-mcp: compiling the Python sandbox for first use (about 30 s)");
            if let Some(p) = path {
                eprintln!("safe-python-mcp: caching it at {}", p.display());
            }
        })),
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
    let mut session = crate::session::Session::new(&sandbox).await?;
    let mut kept = Vec::new();
    for code in ["x = 41", "x = 0\nwhile True: pass", "x + 1"] {
        let run = session.run(code, &options).await?;
        kept.push((run.result.result().map(str::to_owned), run.rolled_back));
    }
    anyhow::ensure!(
        kept[1].1 && kept[2].0.as_deref() == Some("42"),
        "the sandbox did not pass \"undoes a stopped call in a session\": {kept:?}"
    );
    println!("ok: undoes a stopped call in a session");
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
    use clap::CommandFactory;

    #[test]
    fn the_command_line_definition_is_consistent() {
        Args::command().debug_assert();
    }

    #[test]
    fn session_flags_map_onto_session_limits() {
        let args = Args::try_parse_from(["safe-python-mcp"]).unwrap();
        assert_eq!(args.session_limits(), SessionLimits::default());
        let args = Args::try_parse_from([
            "safe-python-mcp",
            "--max-sessions",
            "3",
            "--session-idle",
            "1.5",
        ])
        .unwrap();
        assert_eq!(
            args.session_limits(),
            SessionLimits {
                max: 3,
                idle: Duration::from_millis(1500),
            }
        );
        for bad in [
            ["--max-sessions", "0"],
            ["--session-idle", "0"],
            ["--session-idle", "x"],
        ] {
            assert!(
                Args::try_parse_from(["safe-python-mcp"].into_iter().chain(bad)).is_err(),
                "{bad:?} was accepted"
            );
        }
    }
}
