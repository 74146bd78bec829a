//! `safe-python-mcp --http` over real HTTP: rmcp's streamable HTTP client (both lifecycles: the
//! 2026-07-28 stateless one and the `initialize` handshake of older clients) for what clients do,
//! and hand-written HTTP/1.1 over a TCP socket for what the server must refuse.

use std::time::{Duration, Instant};

use rmcp::service::ClientLifecycleMode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::client::{Began, handle_in, new_session, run_python, session_call, structured};
use crate::common::http::{HttpServer as Server, modern};
use crate::common::spawn::mcp_server;

/// A token long enough to be accepted.
const TOKEN: &str = "0123456789abcdef-test-token";

impl Server {
    /// Sends `head` (request line and headers, without the blank line) and `body`, and returns
    /// the response's status and all of its text.
    async fn raw(&self, head: &str, body: &str) -> (u16, String) {
        let mut stream = tokio::net::TcpStream::connect(self.addr).await.unwrap();
        let request = format!("{head}\r\nConnection: close\r\n\r\n{body}");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await.unwrap();
        let response = String::from_utf8_lossy(&response).into_owned();
        let status = response
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no status line in {response:?}"));
        (status, response)
    }

    /// A JSON-RPC `initialize` POSTed with `Host: host` and `extra` headers.
    async fn initialize(&self, host: &str, extra: &str) -> (u16, String) {
        let body = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#;
        let head = format!(
            "POST /mcp HTTP/1.1\r\nHost: {host}\r\nAccept: application/json, text/event-stream\r\n\
             Content-Type: application/json\r\nContent-Length: {}{extra}",
            body.len()
        );
        self.raw(&head, body).await
    }
}

/// Whether a raw `response` has a header line starting `line` (lowercase: header names are not
/// case-sensitive).
fn has_header(response: &str, line: &str) -> bool {
    response
        .to_ascii_lowercase()
        .contains(&format!("\r\n{line}"))
}

fn loopback(extra: &[&str]) -> Server {
    let mut args = vec!["--http", "127.0.0.1:0"];
    args.extend(extra);
    Server::start(&args)
}

#[tokio::test]
async fn both_lifecycles_list_the_tool_and_run_code_over_http() {
    let server = loopback(&[]);
    for lifecycle in [modern(), ClientLifecycleMode::Initialize] {
        let client = server.client(lifecycle.clone(), None).await;
        let tools = client.list_all_tools().await.unwrap();
        assert_eq!(tools.len(), 1, "{lifecycle:?}");
        assert_eq!(tools[0].name, "run_python");
        let reply = client
            .call_tool(run_python("print(6 * 7)", None))
            .await
            .unwrap();
        assert_eq!(reply.is_error, Some(false), "{lifecycle:?}: {reply:?}");
        assert_eq!(structured(&reply)["stdout"], "42\n", "{lifecycle:?}");
        client.cancel().await.unwrap();
    }
}

/// One server for every request: a Python session started in one HTTP request is there in the
/// next, from another client too (whose handle is the only key).
#[tokio::test]
async fn a_session_spans_http_requests_and_clients() {
    let server = loopback(&[]);
    let first = server.client(modern(), None).await;
    let reply = first
        .call_tool(run_python("x = 41", Some("new")))
        .await
        .unwrap();
    let handle = handle_in(&reply).unwrap_or_else(|| panic!("no handle in {reply:?}"));
    let second = server.client(ClientLifecycleMode::Initialize, None).await;
    for client in [&first, &second] {
        let reply = client
            .call_tool(run_python("x += 1; x", Some(&handle)))
            .await
            .unwrap();
        assert_eq!(reply.is_error, Some(false), "{reply:?}");
    }
    let reply = first
        .call_tool(run_python("x", Some(&handle)))
        .await
        .unwrap();
    assert_eq!(structured(&reply)["result"], "43", "{reply:?}");
}

/// A session records each call's state once its reply is out, on whichever connection: calls back
/// to back (while fresh calls on another connection send replies of their own) each start from
/// the last one's state, and a call that hits a limit goes back to it.
#[tokio::test]
async fn session_calls_back_to_back_over_http_lose_nothing() {
    let server = loopback(&["--fuel", "2000000000"]);
    let client = server.client(modern(), None).await;
    let other = server.client(modern(), None).await;
    let session = new_session(&client, "x = 0").await;
    let others = tokio::spawn(async move {
        for _ in 0..40 {
            let reply = other.call_tool(run_python("y = 1", None)).await.unwrap();
            assert_eq!(reply.is_error, Some(false), "{reply:?}");
        }
    });
    for n in 1..=40 {
        let v = session_call(&client, &session, "x += 1; x").await;
        assert_eq!(v["result"], n.to_string(), "{v}");
    }
    others.await.unwrap();
    let v = session_call(&client, &session, "x = -1\nwhile True: pass").await;
    assert_eq!(v["limit"], "fuel", "{v}");
    assert_eq!(v["session"]["rolled_back"], true, "{v}");
    assert_eq!(session_call(&client, &session, "x").await["result"], "40");
}

/// DNS rebinding: a page whose name resolves to 127.0.0.1 sends its own name as Host, and a
/// cross-origin page its origin: both are refused before anything reaches MCP.
#[tokio::test]
async fn a_foreign_host_or_origin_is_refused() {
    let server = loopback(&[]);
    let port = server.addr.port();
    let own = [format!("127.0.0.1:{port}"), format!("localhost:{port}")];
    for host in &own {
        let (status, response) = server.initialize(host, "").await;
        assert_eq!(status, 200, "Host {host}: {response}");
    }
    for host in [
        "evil.example",
        &format!("evil.example:{port}"),
        "127.0.0.1:1",
    ] {
        let (status, response) = server.initialize(host, "").await;
        assert_eq!(status, 403, "Host {host}: {response}");
    }
    let (status, response) = server
        .initialize(&own[0], &format!("\r\nOrigin: http://localhost:{port}"))
        .await;
    assert_eq!(status, 200, "own origin: {response}");
    for origin in [
        "http://evil.example",
        &format!("http://evil.example:{port}"),
        "null",
    ] {
        let (status, response) = server
            .initialize(&own[0], &format!("\r\nOrigin: {origin}"))
            .await;
        assert_eq!(status, 403, "Origin {origin}: {response}");
    }
    let (status, _) = server
        .raw(&format!("GET /healthz HTTP/1.1\r\nHost: {}", own[0]), "")
        .await;
    assert_eq!(status, 200);
    let (status, _) = server
        .raw(
            &format!("POST / HTTP/1.1\r\nHost: {}\r\nContent-Length: 0", own[0]),
            "",
        )
        .await;
    assert_eq!(status, 404);
}

/// Listening beyond loopback without a token is refused at start, as is a short token, with a
/// message that says what to do.
#[test]
fn a_non_loopback_address_needs_a_token() {
    use crate::common::spawn::output;
    for (args, says) in [
        (
            &["--http", "0.0.0.0:0", "--allow-host", "x"][..],
            "needs a bearer token",
        ),
        (
            &["--http", "127.0.0.1:0", "--token", "short"],
            "use at least 16",
        ),
        (&["--http", "0.0.0.0:0", "--token", TOKEN], "--allow-host"),
    ] {
        let out = output(mcp_server(args), None);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}

/// On every address, with a token: requests without it or with another are 401; a client with it
/// runs code.
#[tokio::test]
async fn the_token_is_required_and_checked() {
    let server = Server::start(&[
        "--http",
        "0.0.0.0:0",
        "--token",
        TOKEN,
        "--allow-host",
        "127.0.0.1",
    ]);
    let host = format!("127.0.0.1:{}", server.addr.port());
    let wrong = format!("{TOKEN}x");
    for auth in [
        "".to_owned(),
        format!("\r\nAuthorization: Bearer {wrong}"),
        format!("\r\nAuthorization: Basic {TOKEN}"),
        "\r\nAuthorization: Bearer".into(),
    ] {
        let (status, response) = server.initialize(&host, &auth).await;
        assert_eq!(status, 401, "{auth:?}: {response}");
        assert!(
            has_header(&response, "www-authenticate: bearer"),
            "{response}"
        );
    }
    let (status, response) = server
        .initialize(&host, &format!("\r\nAuthorization: bearer {TOKEN}"))
        .await;
    assert_eq!(status, 200, "{response}");
    let client = server.client(modern(), Some(TOKEN)).await;
    let reply = client.call_tool(run_python("1 + 1", None)).await.unwrap();
    assert_eq!(structured(&reply)["result"], "2", "{reply:?}");
}

/// Transport sessions of older clients are bounded: the `initialize` past the bound gets 503,
/// while 2026-07-28 clients, which open none, are still served.
#[tokio::test]
async fn transport_sessions_are_bounded() {
    let server = loopback(&[]);
    let host = server.addr.to_string();
    for _ in 0..safe_python_executor::mcp::http::MAX_TRANSPORT_SESSIONS {
        let (status, response) = server.initialize(&host, "").await;
        assert_eq!(status, 200, "{response}");
    }
    let (status, response) = server.initialize(&host, "").await;
    assert_eq!(status, 503, "{response}");
    let client = server.client(modern(), None).await;
    let reply = client.call_tool(run_python("1 + 1", None)).await.unwrap();
    assert_eq!(structured(&reply)["result"], "2", "{reply:?}");
}

/// A body past the limit is refused from its declared length, before it is read.
#[tokio::test]
async fn an_oversized_body_is_refused() {
    let server = loopback(&[]);
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {}\r\nAccept: application/json, text/event-stream\r\n\
         Content-Type: application/json\r\nContent-Length: {}",
        server.addr,
        safe_python_executor::mcp::http::MAX_BODY_BYTES + 1
    );
    let (status, response) = server.raw(&head, "").await;
    assert_eq!(status, 413, "{response}");
}

/// A connection that sends nothing is closed once a request's head is overdue.
#[tokio::test]
async fn an_idle_connection_is_closed() {
    let server = loopback(&[]);
    let mut stream = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let limit = safe_python_executor::mcp::http::HEADER_TIMEOUT + Duration::from_secs(5);
    let mut byte = [0];
    let read = tokio::time::timeout(limit, stream.read(&mut byte)).await;
    assert!(
        matches!(read, Ok(Ok(0)) | Ok(Err(_))),
        "still open after {limit:?}: {read:?}"
    );
}

/// SIGTERM lets a call in flight finish (and new connections are refused meanwhile), then the
/// server exits 0.
#[cfg(unix)]
#[tokio::test]
async fn sigterm_drains_the_calls_in_flight() {
    let mut server = loopback(&[]);
    let began = Began::default();
    let client = server.client_with(began.clone(), modern(), None).await;
    client.call_tool(run_python("None", None)).await.unwrap(); // the sandbox is ready
    let code = format!(
        "{}import time; time.sleep(2); print('done')",
        Began::mark("sleep")
    );
    let call = tokio::spawn(async move { client.call_tool(run_python(&code, None)).await });
    began.wait("sleep").await;
    server.terminate();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        tokio::net::TcpStream::connect(server.addr).await.is_err(),
        "still accepting"
    );
    let reply = call.await.unwrap().expect("the call finishes");
    assert_eq!(
        structured(&reply)["stdout"],
        "began sleep\ndone\n",
        "{reply:?}"
    );
    let status = server
        .wait(Duration::from_secs(5))
        .expect("the server exits after the call");
    assert_eq!(status.code(), Some(0));
}

/// A call that would outlast the drain is stopped when it ends, and the server still exits 0.
#[cfg(unix)]
#[tokio::test]
async fn sigterm_stops_what_outlasts_the_drain() {
    let mut server = loopback(&["--timeout", "60", "--fuel", "10000000000000"]);
    let began = Began::default();
    let client = server.client_with(began.clone(), modern(), None).await;
    client.call_tool(run_python("None", None)).await.unwrap();
    let code = format!("{}while True: pass", Began::mark("loop"));
    let call = tokio::spawn(async move { client.call_tool(run_python(&code, None)).await });
    began.wait("loop").await;
    let start = Instant::now();
    server.terminate();
    let drain = safe_python_executor::mcp::http::DRAIN;
    let status = server
        .wait(drain + Duration::from_secs(5))
        .expect("the server exits after the drain");
    assert_eq!(status.code(), Some(0));
    assert!(start.elapsed() >= drain, "exited before the drain ended");
    assert!(
        call.await.unwrap().is_err(),
        "the stopped call has no reply"
    );
}

/// A 2026-07-28 call whose reply is its only message comes back as one JSON body of known length
/// (no event stream to frame and end); one that sends live output first still streams it.
#[tokio::test]
async fn a_plain_reply_is_json_and_live_output_streams() {
    let server = &loopback(&[]);
    let call = |code: &str, meta: &str| {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"run_python","arguments":{{"code":"{code}"}},"_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{{}},"io.modelcontextprotocol/clientInfo":{{"name":"raw","version":"1"}}{meta}}}}}}}"#
        );
        let head = format!(
            "POST /mcp HTTP/1.1\r\nHost: {}\r\nAccept: application/json, text/event-stream\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\nMCP-Protocol-Version: 2026-07-28\r\n\
             Mcp-Method: tools/call\r\nMcp-Name: run_python",
            server.addr,
            body.len()
        );
        async move { server.raw(&head, &body).await }
    };
    let (status, response) = call("x = 6 * 7; x", "").await;
    assert_eq!(status, 200, "{response}");
    assert!(
        has_header(&response, "content-type: application/json"),
        "{response}"
    );
    assert!(has_header(&response, "content-length:"), "{response}");
    assert!(response.contains(r#""result":"42""#), "{response}");
    let live = "print('hi', flush=True); import time; time.sleep(0.5)";
    let (status, response) = call(live, r#","progressToken":"p""#).await;
    assert_eq!(status, 200, "{response}");
    assert!(
        has_header(&response, "content-type: text/event-stream"),
        "{response}"
    );
    let progress = response.find("notifications/progress").expect(&response);
    let reply = response.find(r#""stdout":"hi\n""#).expect(&response);
    assert!(progress < reply, "{response}");
}
