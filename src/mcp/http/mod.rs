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
//! - Request bodies, connections, requests in flight, transport sessions and the time a request's
//!   head may take are bounded (the constants below); past them a request is refused, never queued without end.
//! - SIGTERM or Ctrl-C stops accepting, lets the calls in flight finish for up to [`DRAIN`], then
//!   ends what is left and returns.
//!
//! It must never answer MCP on another path, nor let `/healthz` (for probes, open to all) say
//! more than that the process is up.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::header::{CONTENT_LENGTH, HeaderValue, RETRY_AFTER, WWW_AUTHENTICATE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::{TaskTracker, task_tracker::TaskTrackerToken};

mod access;

pub use self::access::{Access, HttpError, HttpFlags};
use super::PythonServer;
use super::flushes::Flushes;
use super::tools::MAX_CODE_BYTES;
use crate::session::registry::RepliesOut;

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

/// Transport sessions of pre-2026-07-28 clients open at once (each a task and its queues); an
/// `initialize` beyond this gets 503 until one closes (its client's DELETE, or 5 minutes idle).
pub const MAX_TRANSPORT_SESSIONS: usize = 256;

/// Time a request's head may take to arrive, and so the longest a connection is kept idle between
/// requests: a client that opens connections and sends nothing cannot hold them.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// After SIGTERM or Ctrl-C, how long the calls in flight may run on before they are stopped.
pub const DRAIN: Duration = Duration::from_secs(10);

type Reply = Response<BoxBody<Bytes, Infallible>>;

/// What every connection shares: the checks in front of rmcp's service, and the service.
struct Front {
    access: Access,
    mcp: StreamableHttpService<PythonServer, LocalSessionManager>,
    transport_sessions: Arc<LocalSessionManager>,
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
        // Refused before a byte of it is read; a body without a length is cut at the same size
        // by rmcp as it streams in.
        let declared = request.headers().get(CONTENT_LENGTH);
        let declared = declared.and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        if declared.is_some_and(|length| length > MAX_BODY_BYTES as u64) {
            return plain(
                StatusCode::PAYLOAD_TOO_LARGE,
                "Payload Too Large: the body is over 4 MiB\n",
            );
        }
        let Ok(permit) = self.requests.clone().try_acquire_owned() else {
            return busy("Service Unavailable: too many requests in flight\n");
        };
        if opens_a_session(request.headers(), request.method())
            && self.transport_sessions.sessions.read().await.len() >= MAX_TRANSPORT_SESSIONS
        {
            return busy("Service Unavailable: too many MCP sessions open\n");
        }
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

/// Whether the request may start a transport session: a POST outside any session (an
/// `initialize`) by a client that does not speak 2026-07-28, which has none.
fn opens_a_session(headers: &hyper::HeaderMap, method: &Method) -> bool {
    let modern = headers
        .get("mcp-protocol-version")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|version| version >= "2026-07-28");
    method == Method::POST && !modern && !headers.contains_key("mcp-session-id")
}

/// 503, to be retried in a second.
fn busy(text: &'static str) -> Reply {
    let mut reply = plain(StatusCode::SERVICE_UNAVAILABLE, text);
    reply
        .headers_mut()
        .insert(RETRY_AFTER, HeaderValue::from_static("1"));
    reply
}

fn plain(status: StatusCode, text: &'static str) -> Reply {
    let mut reply = Response::new(Full::new(Bytes::from_static(text.as_bytes())).boxed());
    *reply.status_mut() = status;
    reply
}

/// Serves `server` over HTTP as `access` allows until SIGTERM or Ctrl-C, then drains (see the
/// module doc). Each response written tells `replies`, so that sessions record their state once
/// their reply is out.
pub async fn serve(
    server: PythonServer,
    access: Access,
    replies: RepliesOut,
) -> Result<(), HttpError> {
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
        // A stateless call whose first message is its reply (no live output, no progress) is
        // answered as one `application/json` body of known length, not as a server-sent event
        // stream: no stream task, no chunked framing, one write. Calls that send messages
        // before their reply still stream them.
        .with_json_response(true)
        .with_cancellation_token(stop.clone());
    let transport_sessions = Arc::new(LocalSessionManager::default());
    let front = Arc::new(Front {
        access,
        mcp: StreamableHttpService::new(
            move || Ok(server.clone()),
            transport_sessions.clone(),
            config,
        ),
        transport_sessions,
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
        // A response leaves in several writes (the head, then each event of its stream, then the
        // stream's end): with Nagle's algorithm on, a write after the first waits for the
        // client's ACK of it, which a client delays by up to 40 ms. Every write goes out at once.
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!("cannot set TCP_NODELAY: {e}");
        }
        let front = front.clone();
        let service = hyper::service::service_fn(move |request| {
            let front = front.clone();
            async move { Ok::<_, Infallible>(front.route(request).await) }
        });
        let connection = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(HEADER_TIMEOUT)
            .serve_connection(TokioIo::new(Flushes::new(stream, replies.clone())), service);
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
