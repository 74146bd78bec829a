//! `safe-python-mcp --http ADDR:PORT`: the same server over MCP's streamable HTTP transport.
//!
//! rmcp's [`StreamableHttpService`] speaks the protocol: requests of 2026-07-28 clients are served
//! statelessly (that revision has no transport sessions), older clients get an `Mcp-Session-Id`
//! session, closed after rmcp's `SessionConfig::DEFAULT_KEEP_ALIVE` (5 min) without a request. Every request,
//! of every client, is handled by a clone of one [`PythonServer`], so the worker pool, the Python
//! sessions (whose handles work across HTTP requests and clients) and the limits are those of
//! stdio, shared by all.
//!
//! This module owns who may reach that service, and how much of the machine they may hold:
//! - The `Host` of every request, and its `Origin` when a browser sends one, must name the bound
//!   address (or a name added with `--allow-host` / `--allow-origin`): otherwise 403, so that a web
//!   page cannot reach a server on loopback by rebinding its own DNS name to 127.0.0.1.
//! - A bearer token (`--token`), compared in constant time, guards every MCP request when it is
//!   set, and must be set to listen on anything but loopback: the sandbox runs whatever code it is
//!   sent, so an open port on a network would lend the machine's CPU and memory to anyone.
//! - Request bodies, connections, requests in flight and the time a request's head may take are
//!   bounded (the constants below); past them a request is refused, never queued without end.
//! - SIGTERM or Ctrl-C stops accepting, lets the calls in flight finish for up to [`DRAIN`], then
//!   ends what is left and returns.
//!
//! It must never answer MCP on another path, nor let `/healthz` (for probes, open to all) say
//! more than that the process is up.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::header::{AUTHORIZATION, HeaderMap, HeaderValue, RETRY_AFTER, WWW_AUTHENTICATE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::{TaskTracker, task_tracker::TaskTrackerToken};

use super::PythonServer;
use super::tools::MAX_CODE_BYTES;

/// The path of the MCP endpoint.
pub const MCP_PATH: &str = "/mcp";

/// The path that answers `200 ok` to anyone, for liveness and readiness probes.
pub const HEALTH_PATH: &str = "/healthz";

/// Largest request body, in bytes: a `run_python` call of [`MAX_CODE_BYTES`] with room for JSON
/// escapes. Bigger bodies get 413 while they stream in, before they fill the host's memory.
pub const MAX_BODY_BYTES: usize = 4 * MAX_CODE_BYTES;

/// Connections open at once; more wait in the kernel's accept queue. Each holds a file descriptor
/// and buffers, and idle ones are closed after [`HEADER_TIMEOUT`].
pub const MAX_CONNECTIONS: usize = 256;

/// MCP requests in flight at once (a response stream counts until it ends); more get 503. Calls
/// past `--workers` already wait for a worker without holding memory, this bounds the waiting.
pub const MAX_REQUESTS: usize = 128;

/// Time a request's head may take to arrive, and so the longest a connection is kept idle between
/// requests: a client that opens connections and sends nothing cannot hold them.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// After SIGTERM or Ctrl-C, how long the calls in flight may run on before they are stopped.
pub const DRAIN: Duration = Duration::from_secs(10);

/// Shortest token accepted: a guessable token is no guard.
pub const MIN_TOKEN_BYTES: usize = 16;

/// The HTTP transport's flags.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct HttpFlags {
    /// Serve MCP over streamable HTTP at http://ADDR:PORT/mcp instead of stdio (port 0: any free
    /// port; the address is printed on stderr). Anything but a loopback address needs --token.
    #[arg(long, value_name = "ADDR:PORT", env = "SAFE_PYTHON_HTTP")]
    pub http: Option<SocketAddr>,

    /// With --http: the bearer token every MCP request must carry (`Authorization: Bearer TOKEN`),
    /// at least 16 bytes, e.g. from `openssl rand -hex 32`.
    #[arg(
        long,
        value_name = "TOKEN",
        env = "SAFE_PYTHON_TOKEN",
        hide_env_values = true,
        requires = "http"
    )]
    pub token: Option<String>,

    /// With --http: also accept requests whose Host header is HOST[:PORT] (repeatable), such as the
    /// name clients or a reverse proxy use. Without a port, any port.
    #[arg(
        long,
        value_name = "HOST",
        env = "SAFE_PYTHON_ALLOW_HOSTS",
        value_delimiter = ',',
        requires = "http"
    )]
    pub allow_host: Vec<String>,

    /// With --http: also accept requests from web pages of this origin (repeatable), such as
    /// https://app.example.com. Requests without an Origin header (not from a browser) are not
    /// affected.
    #[arg(
        long,
        value_name = "ORIGIN",
        env = "SAFE_PYTHON_ALLOW_ORIGINS",
        value_delimiter = ',',
        requires = "http"
    )]
    pub allow_origin: Vec<String>,
}

/// Why the HTTP server does not start.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error(
        "--http {0} is not a loopback address: serving beyond this machine needs a bearer token \
         (--token or SAFE_PYTHON_TOKEN, e.g. from `openssl rand -hex 32`)"
    )]
    TokenRequired(SocketAddr),
    #[error("the token is {0} bytes long: use at least {MIN_TOKEN_BYTES}")]
    TokenTooShort(usize),
    #[error(
        "--http {0} listens on every address, so no Host header names it: name the hosts clients \
         use with --allow-host (e.g. --allow-host mcp.example.com)"
    )]
    HostsRequired(SocketAddr),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// Who may reach the service: checked flags, before anything is bound.
#[derive(Debug)]
pub struct Access {
    addr: SocketAddr,
    /// SHA-256 of the token: comparing digests takes the same time whatever the token's length.
    token: Option<[u8; 32]>,
    hosts: Vec<String>,
    origins: Vec<String>,
}

impl Access {
    pub fn new(flags: &HttpFlags, addr: SocketAddr) -> Result<Self, HttpError> {
        let ip = addr.ip();
        match &flags.token {
            None if !ip.is_loopback() => return Err(HttpError::TokenRequired(addr)),
            Some(token) if token.len() < MIN_TOKEN_BYTES => {
                return Err(HttpError::TokenTooShort(token.len()));
            }
            _ => {}
        }
        if ip.is_unspecified() && flags.allow_host.is_empty() {
            return Err(HttpError::HostsRequired(addr));
        }
        Ok(Access {
            addr,
            token: flags.token.as_ref().map(|t| Sha256::digest(t).into()),
            hosts: flags.allow_host.clone(),
            origins: flags.allow_origin.clone(),
        })
    }

    /// The `Host` values accepted once the listener is at `bound` (whose port 0 is now a port).
    fn hosts(&self, bound: SocketAddr) -> Vec<String> {
        let mut hosts = self.hosts.clone();
        if !bound.ip().is_unspecified() {
            hosts.push(bound.to_string());
        }
        if bound.ip().is_loopback() {
            hosts.push(format!("localhost:{}", bound.port()));
        }
        hosts
    }

    /// The browser origins accepted: the bound address's own, and those added.
    fn origins(&self, bound: SocketAddr) -> Vec<String> {
        let mut origins = self.origins.clone();
        if !bound.ip().is_unspecified() {
            origins.push(format!("http://{bound}"));
        }
        if bound.ip().is_loopback() {
            origins.push(format!("http://localhost:{}", bound.port()));
        }
        origins
    }

    /// Whether `headers` carry the token (always, when there is none).
    fn authorized(&self, headers: &HeaderMap) -> bool {
        let Some(expected) = &self.token else {
            return true;
        };
        let presented = headers
            .get(AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map_or("", |(_, token)| token.trim());
        Sha256::digest(presented).ct_eq(expected).into()
    }
}

type Reply = Response<BoxBody<Bytes, Infallible>>;

/// What every connection shares: the checks in front of rmcp's service, and the service.
struct Front {
    access: Access,
    mcp: StreamableHttpService<PythonServer, LocalSessionManager>,
    requests: Arc<Semaphore>,
    calls: TaskTracker,
}

impl Front {
    async fn route(&self, request: Request<Incoming>) -> Reply {
        match request.uri().path() {
            MCP_PATH => {}
            HEALTH_PATH if request.method() == Method::GET => return plain(StatusCode::OK, "ok\n"),
            _ => {
                return plain(
                    StatusCode::NOT_FOUND,
                    "Not Found: the MCP endpoint is /mcp\n",
                );
            }
        }
        if !self.access.authorized(request.headers()) {
            let mut reply = plain(
                StatusCode::UNAUTHORIZED,
                "Unauthorized: a bearer token is required\n",
            );
            reply
                .headers_mut()
                .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            return reply;
        }
        let Ok(permit) = self.requests.clone().try_acquire_owned() else {
            let mut reply = plain(
                StatusCode::SERVICE_UNAVAILABLE,
                "Service Unavailable: too many requests in flight\n",
            );
            reply
                .headers_mut()
                .insert(RETRY_AFTER, HeaderValue::from_static("1"));
            return reply;
        };
        // A POST is a call (or a message) whose reply SIGTERM waits for; a GET is a stream that
        // only ever waits for server messages, which SIGTERM ends.
        let call = (request.method() == Method::POST).then(|| self.calls.token());
        self.mcp.handle(request).await.map(|body| {
            Held {
                body,
                _permit: permit,
                _call: call,
            }
            .boxed()
        })
    }
}

/// A response body that holds its request's slot, and its call's place in the drain, until it is
/// sent or dropped.
struct Held {
    body: BoxBody<Bytes, Infallible>,
    _permit: OwnedSemaphorePermit,
    _call: Option<TaskTrackerToken>,
}

impl Body for Held {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        std::pin::Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

fn plain(status: StatusCode, text: &'static str) -> Reply {
    let mut reply = Response::new(Full::new(Bytes::from_static(text.as_bytes())).boxed());
    *reply.status_mut() = status;
    reply
}

/// Serves `server` over HTTP as `access` allows until SIGTERM or Ctrl-C, then drains (see the
/// module doc).
pub async fn serve(server: PythonServer, access: Access) -> Result<(), HttpError> {
    let addr = access.addr;
    let bind = |source| HttpError::Bind { addr, source };
    let listener = TcpListener::bind(addr).await.map_err(bind)?;
    let bound = listener.local_addr().map_err(bind)?;
    let stop = CancellationToken::new();
    let config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(access.hosts(bound))
        .with_allowed_origins(access.origins(bound))
        .enforce_origin_validation()
        .with_max_request_body_bytes(MAX_BODY_BYTES)
        .with_cancellation_token(stop.clone());
    let front = Arc::new(Front {
        access,
        mcp: StreamableHttpService::new(
            move || Ok(server.clone()),
            LocalSessionManager::default().into(),
            config,
        ),
        requests: Arc::new(Semaphore::new(MAX_REQUESTS)),
        calls: TaskTracker::new(),
    });
    // Tests and scripts read the address from here (port 0 picks one).
    eprintln!("safe-python-mcp: serving MCP at http://{bound}{MCP_PATH}");

    let connections = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let graceful = GracefulShutdown::new();
    let signal = super::termination();
    tokio::pin!(signal);
    let signal = loop {
        let permit = tokio::select! {
            signal = &mut signal => break signal,
            permit = connections.clone().acquire_owned() => permit.expect("never closed"),
        };
        let stream = tokio::select! {
            signal = &mut signal => break signal,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors, or a connection reset before it was accepted.
                    tracing::warn!("cannot accept a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let front = front.clone();
        let service = hyper::service::service_fn(move |request| {
            let front = front.clone();
            async move { Ok::<_, Infallible>(front.route(request).await) }
        });
        let connection = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(HEADER_TIMEOUT)
            .serve_connection(TokioIo::new(stream), service);
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!("connection ended: {e}");
            }
            drop(permit);
        });
    };

    drop(listener);
    tracing::info!("{signal}: finishing the calls in flight (at most {DRAIN:?})");
    let deadline = tokio::time::Instant::now() + DRAIN;
    // Connections finish the request they are serving and close; idle ones close now.
    let closed = graceful.shutdown();
    front.calls.close();
    if tokio::time::timeout_at(deadline, front.calls.wait())
        .await
        .is_err()
    {
        tracing::warn!("calls still running after {DRAIN:?}: stopping them");
    }
    // Ends the sessions and the streams that only wait for server messages.
    stop.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(1), closed).await;
    Ok(())
}
