//! `safe-python-mcp`: an MCP server over stdio, or streamable HTTP with `--http` ([`http`]), with
//! one tool, `run_python`.
//!
//! On stdio, stdout carries the protocol and nothing else: user code's output only ever reaches the client
//! inside protocol messages, and logs go to stderr. The guest is compiled or loaded in the
//! background, so `initialize` and `tools/list` are answered at once even on a first start; calls
//! wait for it. Calls run in a bounded pool; each is stopped by its limits or by
//! `notifications/cancelled`, whichever comes first. Calls with a session handle run in that
//! session ([`crate::session::registry`]), one at a time per session.
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

mod check;
mod code_mode;
mod files;
mod flushes;
pub mod http;
mod progress;
mod schema;
mod server;
mod stdio;
mod tools;
pub mod upstream;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;

pub use self::progress::{MAX_UPDATE_BYTES, MAX_UPDATES};
pub use self::schema::input_schema;
pub use self::server::PythonServer;
pub use self::tools::{MAX_CODE_BYTES, REPLY_OVERHEAD_BYTES, RUN_PYTHON, RunPythonArgs};
use crate::flags::{SandboxFlags, parse_seconds};
use crate::sandbox::files::FileLimits;
use crate::session::registry::{
    REPLY_WAIT, Remote, RepliesOut, ReplyWatch, SessionLimits, Sessions,
};
use crate::session::store::format::Bounds;
use crate::session::store::{SessionStore, StoreError};

/// Run Python code for an AI assistant in a WebAssembly sandbox, over MCP (stdio or HTTP).
#[derive(Debug, Parser)]
#[command(
    name = "safe-python-mcp",
    version,
    about,
    after_help = "\
The server speaks MCP over stdin/stdout, or with --http over streamable HTTP at /mcp (and answers
probes at /healthz), and logs to stderr (set SAFE_PYTHON_LOG=debug for more). Every flag can also be set through the environment variable shown with it.

Sessions: a call with session \"new\" starts one, and its reply carries the session's handle
(128 random bits, as s_ and 32 hex digits); only calls with that handle reach it. Names such as
\"main\" are refused. Sessions live in the server's memory: they all end when it stops."
)]
pub struct Args {
    #[command(flatten)]
    pub sandbox: SandboxFlags,

    #[command(flatten)]
    pub http: http::HttpFlags,

    #[command(flatten)]
    pub upstream: upstream::UpstreamFlags,

    /// Prepare the compiled sandbox, run a short self-test, print what was checked and exit
    /// (status 0 when it passed): for installers, and to warm the cache before first use.
    #[arg(long)]
    pub check: bool,

    /// Calls that run at once; more wait their turn. The CPython engine keeps as many instances
    /// reset for the next fresh calls [default: the number of cores].
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

    /// Where sessions live: `memory` (this process), or `redis://HOST:PORT[/DB]` or `rediss://`
    /// (TLS) for Redis or Valkey, so that every replica serves every session and sessions
    /// outlive the process. The user name and password come from the URL, or from
    /// SAFE_PYTHON_SESSION_STORE_USERNAME and SAFE_PYTHON_SESSION_STORE_PASSWORD. With a store,
    /// --max-sessions bounds the sessions this process keeps warm, and --session-idle is how
    /// long the store keeps one without a call.
    #[arg(
        long,
        value_name = "URL",
        default_value = MEMORY_STORE,
        env = "SAFE_PYTHON_SESSION_STORE"
    )]
    pub session_store: String,
}

/// `--session-store` for sessions kept in this process.
const MEMORY_STORE: &str = "memory";

impl Args {
    pub fn session_limits(&self) -> SessionLimits {
        SessionLimits {
            max: self.max_sessions.into(),
            idle: Duration::from_secs_f64(self.session_idle),
        }
    }

    /// Whether sessions are kept in a session store rather than in this process.
    pub fn stores_sessions(&self) -> bool {
        self.session_store != MEMORY_STORE
    }

    /// The store `--session-store` names, with its credentials, not connected yet; `None` for
    /// `memory`.
    pub fn session_store(&self) -> Result<Option<SessionStore>, StoreError> {
        if !self.stores_sessions() {
            return Ok(None);
        }
        let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let credentials = (
            env("SAFE_PYTHON_SESSION_STORE_USERNAME"),
            env("SAFE_PYTHON_SESSION_STORE_PASSWORD"),
        );
        let idle = self.session_limits().idle;
        SessionStore::open(&self.session_store, credentials, idle).map(Some)
    }

    /// The sessions, in this process or in the store `--session-store` names; those in this
    /// process record their state after each reply when `replies` can tell (a store gets it before).
    pub fn sessions(&self, replies: Option<ReplyWatch>) -> Result<Arc<Sessions>, StoreError> {
        let limits = self.session_limits();
        let Some(store) = self.session_store()? else {
            return Ok(match replies {
                Some(replies) => Sessions::after_replies(limits, replies),
                None => Sessions::new(limits),
            });
        };
        let store = Arc::new(store);
        // Said at start, not at the first session call: a store that cannot be reached.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let store = store.clone();
            runtime.spawn(async move {
                match store.ping().await {
                    Ok(_) => {
                        tracing::info!(store = store.shown(), "sessions are kept in the store")
                    }
                    Err(e) => tracing::warn!("{e}; session calls fail until it answers"),
                }
            });
        }
        let call = self.sandbox.run_options().limits;
        Ok(Sessions::stored(
            limits,
            Remote {
                store,
                // A call waits for a worker after it has its session: room for that too.
                lease: call.timeout * 2 + Duration::from_secs(30),
                wait: call.timeout + Duration::from_secs(5),
                bounds: Bounds {
                    memory_bytes: call.memory_bytes,
                    files: FileLimits::default(),
                },
                writer: format!(
                    "safe-python-executor {} ({})",
                    env!("CARGO_PKG_VERSION"),
                    self.sandbox.engine.about().interpreter
                ),
            },
        ))
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
    // Checked before anything starts: a server that may not listen where it was asked says so at once.
    let access = match args
        .http
        .http
        .map(|addr| http::Access::new(&args.http, addr))
        .transpose()
    {
        Ok(access) => access,
        Err(e) => {
            eprintln!("safe-python-mcp: {e}");
            return ExitCode::from(2);
        }
    };
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
        let checked = async {
            check::self_test(&args.sandbox).await?;
            check::session_store(&args).await
        };
        return match runtime.block_on(checked) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("safe-python-mcp: self-test failed: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    // The server starts its background work (the upstreams) on this runtime.
    let _entered = runtime.enter();
    let tools = match args.upstream.access() {
        Ok(tools) => tools,
        Err(e) => {
            eprintln!("safe-python-mcp: {e:#}");
            return ExitCode::from(2);
        }
    };
    // Both transports flush each reply on its own, so sessions can tell when it is out.
    let replies = RepliesOut::default();
    let sessions = match args.sessions(Some(replies.watch(REPLY_WAIT))) {
        Ok(sessions) => sessions,
        Err(e) => {
            eprintln!("safe-python-mcp: {e}");
            return ExitCode::from(2);
        }
    };
    let server = PythonServer::start(&args, tools, sessions);
    let served = match access {
        None => runtime.block_on(stdio::serve(server, replies)),
        Some(access) => runtime
            .block_on(http::serve(server, access, replies))
            .map_err(Into::into),
    };
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

    /// A store's URL is checked at start (exit 2 with the reason), never shown with its password,
    /// and not connected to: a store that is down fails session calls, not the start.
    #[tokio::test]
    async fn a_session_store_url_is_checked_and_its_password_never_shown() {
        let sessions = |url: &str| {
            Args::try_parse_from(["safe-python-mcp", "--session-store", url])
                .unwrap()
                .sessions(None)
        };
        assert!(
            !Args::try_parse_from(["safe-python-mcp"])
                .unwrap()
                .stores_sessions()
        );
        for bad in [
            "",
            "valkey:6379",
            "http://h:1",
            "redis://",
            "redis://h:99999",
        ] {
            let e = sessions(bad)
                .err()
                .unwrap_or_else(|| panic!("{bad:?} was accepted"));
            assert!(e.to_string().contains("session store URL"), "{bad:?}: {e}");
        }
        let store = SessionStore::open(
            "rediss://user:hunter2-secret@127.0.0.1:1/2",
            (None, Some("other".into())),
            Duration::from_secs(60),
        )
        .unwrap();
        assert_eq!(store.shown(), "rediss://127.0.0.1:1/2");
        assert!(!format!("{store:?}").contains("hunter2"));
        // Nothing listens on port 1: opening does not connect.
        sessions("redis://127.0.0.1:1/0").unwrap();
    }
}
