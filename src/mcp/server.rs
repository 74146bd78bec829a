//! The server: starts the sandbox in the background, and takes each `run_python` call through its
//! flow (a session if asked for, a worker, live output, the reply), stopping it when the request
//! is cancelled.
//!
//! The tool is a method on rmcp's tool router, which decodes its arguments (a call whose arguments
//! do not decode gets a tool error that says why, per the 2025-11-25 specification, so that the
//! model can correct it), lists it and dispatches to it. Its description depends on the flags, so
//! [`PythonServer::start`] writes it into the router; with upstreams (code mode), `tools/list`
//! adds their tools as they become known ([`super::code_mode`]).

use std::sync::{Arc, Mutex, PoisonError};

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CacheScope, CallToolResult, ContentBlock, Implementation, ListToolsResult, LoggingLevel,
    PaginatedRequestParams, ProtocolVersion, ResultType, ServerCapabilities, ServerConfig,
    SetLevelRequestParams,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, tool, tool_handler, tool_router};
use tokio::sync::{Semaphore, watch};
use tokio_util::sync::CancellationToken;

use super::Args;
use super::code_mode::{self, Catalogue};
use super::progress::{Live, Progress};
use super::schema;
use super::tools::{self, MAX_CODE_BYTES, RUN_PYTHON, RunPythonArgs};
use crate::policy::ImportPolicy;
use crate::sandbox::{RunOptions, Sandbox};
use crate::session::registry::{LeaseRun, SessionRequest, Sessions};
use crate::toolcalls::ToolAccess;
use crate::{Stream, ToolCallRecord};

/// Opens the sandbox and builds the engine's template (see [`Sandbox::template`]), so
/// that no call pays for either; on the loader's own thread, as `initialize` must not wait.
fn open_with_template(
    flags: &crate::flags::SandboxFlags,
    workers: usize,
) -> anyhow::Result<Sandbox> {
    let sandbox = flags.open_sandbox(true, crate::flags::log_compile_notice)?;
    // No more fresh calls run at once than workers: kept instances beyond that would sit idle.
    sandbox.keep_spare_instances(workers);
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(async {
            sandbox.template().await?;
            // Worth it only to a server: it makes every fresh call after it cheaper.
            if let Err(e) = sandbox.warm_up(&flags.run_options()).await {
                tracing::warn!("the warm-up call failed: {e}");
            }
            Ok::<_, crate::sandbox::SandboxError>(())
        })?;
    Ok(sandbox)
}

/// The server: shared by every request handler.
#[derive(Clone)]
pub struct PythonServer(Arc<Inner>);

struct Inner {
    options: RunOptions,
    sandbox: watch::Receiver<Option<Result<Sandbox, String>>>,
    slots: Semaphore,
    sessions: Arc<Sessions>,
    router: ToolRouter<PythonServer>,
    /// The upstreams' tools, when there are upstreams (code mode).
    code_mode: Option<(ToolAccess, Arc<Catalogue>)>,
    /// Set by `logging/setLevel` (clients before 2026-07-28; later ones name a level in each
    /// request's `_meta`, which takes precedence): see [`sends_output_at`].
    log_level: Mutex<Option<LoggingLevel>>,
}

impl PythonServer {
    /// Starts preparing the sandbox (and listing the upstreams' tools, when `tools` has some) in
    /// the background and returns at once. Needs a tokio runtime.
    pub fn start(args: &Args, tools: Option<ToolAccess>, sessions: Arc<Sessions>) -> Self {
        let (ready, sandbox) = watch::channel(None);
        let flags = args.sandbox.clone();
        let workers = args
            .workers
            .map(usize::from)
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()));
        std::thread::spawn(move || {
            let sandbox = open_with_template(&flags, workers).map_err(|e| format!("{e:#}"));
            match &sandbox {
                Ok(_) => tracing::info!("sandbox ready"),
                Err(e) => tracing::error!("the sandbox cannot start: {e}"),
            }
            let _ = ready.send(Some(sandbox));
        });
        let mut options = args.sandbox.run_options();
        if tools.is_some() {
            // Calls run concurrently under asyncio: with upstreams, it is allowed unless denied.
            let mut allow = args.sandbox.allow.clone();
            allow.push("asyncio".into());
            options.policy = Arc::new(ImportPolicy::with_extra(&allow).without(&args.sandbox.deny));
        }
        options.tools = tools.clone();
        let code_mode = tools.map(|access| {
            let catalogue = Catalogue::start(&access);
            (access, catalogue)
        });
        let session_limits = args.session_limits();
        let mut router = Self::tool_router();
        if let Some(route) = router.map.get_mut(RUN_PYTHON) {
            route.attr.description = Some(
                tools::description(
                    &options,
                    session_limits,
                    args.stores_sessions(),
                    args.sandbox.engine.about(),
                )
                .into(),
            );
        }
        PythonServer(Arc::new(Inner {
            router,
            code_mode,
            options,
            sandbox,
            slots: Semaphore::new(workers),
            sessions,
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
}

/// The tool. Its annotations, for clients that ask before they call a tool:
/// - not read-only: a call in a session changes that session, which later calls see;
/// - not destructive: nothing outside the sandbox is ever changed (no files, no network), and the
///   only state a call can change or `reset` empty is the caller's own session, scratch memory
///   that the model itself started and that ends with the server anyway;
/// - not idempotent: a fresh call is, but the same call twice in a session need not be (`n += 1`);
/// - closed world: the code reaches nothing outside the sandbox, no network above all.
#[tool_router]
impl PythonServer {
    /// Runs Python code (the description clients see is [`tools::description`]).
    #[tool(
        title = "Run Python",
        annotations(
            title = "Run Python",
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = false,
            open_world_hint = false
        ),
        input_schema = schema::input_schema(),
        output_schema = schema::output_schema()
    )]
    async fn run_python(
        &self,
        Parameters(args): Parameters<RunPythonArgs>,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        if let Err(refusal) = args.check() {
            return Ok(CallToolResult::error(vec![ContentBlock::text(refusal)]));
        }
        if args.code.len() > MAX_CODE_BYTES {
            return Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                "The code is {} bytes long; the limit is {MAX_CODE_BYTES} bytes.",
                args.code.len()
            ))]));
        }
        let files = super::files::input_files(args.files)?;
        let level = context.meta.log_level().or_else(|| {
            *self
                .0
                .log_level
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
        });
        let progress = Progress {
            peer: context.peer.clone(),
            token: context.meta.get_progress_token(),
            log: sends_output_at(level),
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
        // Each tool call shows in the live output as a line of its own, as it finishes.
        options.on_tool_call = options.observer.clone().map(|observer| {
            Arc::new(move |call: &ToolCallRecord| {
                let line = format!(
                    "[tool call] {}.{}: {} in {} ms\n",
                    call.server,
                    call.tool,
                    if call.ok { "ok" } else { "failed" },
                    call.ms
                );
                observer(Stream::Stderr, line.as_bytes());
            }) as crate::toolcalls::ToolCallObserver
        });
        options.files = files;
        let (result, session) = match lease {
            None => (
                until_cancelled(ct, sandbox.run(&args.code, &options)).await?,
                None,
            ),
            Some(lease) => match lease.run(&args.code, &options, ct.cancelled()).await {
                Ok(None) => return Err(cancelled()),
                Ok(Some(LeaseRun { result, session })) => (Ok(result), Some(session)),
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
        Ok(tools::run_reply(&result, session, &options.policy))
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

/// Whether output goes out as log messages (at level `info`) for a client that asked for `level`:
/// only when it asked, and for `info` or `debug`. Logging is deprecated in 2026-07-28: live output
/// goes out as progress notifications, which need no asking beyond a progress token.
fn sends_output_at(level: Option<LoggingLevel>) -> bool {
    matches!(level, Some(LoggingLevel::Debug | LoggingLevel::Info))
}

#[tool_handler(router = self.0.router)]
impl ServerHandler for PythonServer {
    fn get_info(&self) -> ServerConfig {
        let capabilities = if self.0.code_mode.is_some() {
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .enable_logging()
                .build()
        } else {
            ServerCapabilities::builder()
                .enable_tools()
                .enable_logging()
                .build()
        };
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new("safe-python-mcp", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Runs Python code in a WebAssembly sandbox on this machine. Call run_python to compute, \
                 test or check anything expressible in plain Python with the standard modules it lists; \
                 pass session \"new\" to start a session that keeps state between calls, then the handle its reply returns.",
            )
    }

    /// The router's tools, with the upstreams' tools in `run_python`'s description (code mode).
    /// A client that lists before the upstreams are known is told when they are.
    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let supports_cache_hints = context
            .protocol_version()
            .is_some_and(|version| version >= ProtocolVersion::V_2026_07_28);
        let mut tools = self.0.router.list_all();
        if let Some((access, catalogue)) = &self.0.code_mode {
            let known = catalogue.known();
            if known.is_none() {
                catalogue.tell_when_known(context.peer.clone()).await;
            }
            for tool in tools.iter_mut().filter(|t| t.name == RUN_PYTHON) {
                let upstreams = code_mode::description(access, known.as_deref().map(Vec::as_slice));
                let base = tool.description.as_deref().unwrap_or_default();
                tool.description = Some(format!("{base}\n{upstreams}").into());
                // The code now reaches the upstreams, which may reach anything.
                if let Some(annotations) = tool.annotations.as_mut() {
                    annotations.open_world_hint = Some(true);
                }
            }
        }
        Ok(ListToolsResult {
            result_type: Some(ResultType::COMPLETE),
            tools,
            meta: None,
            next_cursor: None,
            // Listed again after a change: the upstreams' tools arrive after the first listing.
            ttl_ms: supports_cache_hints.then_some(0),
            cache_scope: supports_cache_hints.then_some(CacheScope::Public),
        })
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
