//! Code mode's upstream client (`safe_python_executor::mcp::upstream`) against real MCP servers:
//! this project's own `safe-python-mcp`, whose one tool is `run_python`, over stdio and over
//! streamable HTTP (`--http`), and a TLS listener whose certificate no one trusts.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use safe_python_executor::mcp::upstream::{
    RESTART_INTERVAL, UpstreamSpec, UpstreamTransport, Upstreams, config,
};
use safe_python_executor::toolcalls::{ToolHost, ToolHostError, ToolOutput};
use serde_json::{Map, Value, json};

use crate::common::cache_dir;
use crate::common::http::HttpServer;
use crate::common::spawn::MCP;

/// `command args` as the upstream `name`, with the suite's module cache.
fn stdio(name: &str, command: &str, args: &[&str]) -> UpstreamSpec {
    let env: BTreeMap<String, String> = [
        (
            "SAFE_PYTHON_CACHE_DIR".to_owned(),
            cache_dir().display().to_string(),
        ),
        ("SAFE_PYTHON_LOG".to_owned(), "warn".to_owned()),
    ]
    .into();
    UpstreamSpec {
        name: name.to_owned(),
        transport: UpstreamTransport::Stdio {
            command: command.to_owned(),
            args: args.iter().map(|a| a.to_string()).collect(),
            env,
            cwd: None,
        },
    }
}

/// `safe-python-mcp` running one call at a time: a call that is not cancelled holds up the next.
fn python(name: &str) -> UpstreamSpec {
    stdio(name, MCP, &["--workers", "1", "--timeout", "60"])
}

fn code(code: &str) -> Map<String, Value> {
    let Value::Object(arguments) = json!({ "code": code }) else {
        unreachable!()
    };
    arguments
}

async fn run(host: &Upstreams, server: &str, source: &str) -> Result<ToolOutput, ToolHostError> {
    host.call(server, "run_python", code(source)).await
}

fn result(output: &ToolOutput) -> &Value {
    &output.structured.as_ref().expect("structured content")["result"]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_returns_structured_content() {
    let host = Upstreams::new(vec![python("py")]);
    assert_eq!(host.servers(), ["py"]);
    host.start_in_background();

    let catalogue = host.catalogue(None).await;
    let tools = catalogue[0].tools.as_ref().expect("the upstream's tools");
    assert_eq!(tools[0].server, "py");
    assert_eq!(tools[0].name, "run_python");
    assert_eq!(tools[0].input_schema["required"], json!(["code"]));

    let output = run(&host, "py", "print('hi')\n6 * 7").await.unwrap();
    assert!(!output.is_error, "{output:?}");
    assert_eq!(result(&output), "42");
    assert_eq!(output.structured.as_ref().unwrap()["stdout"], "hi\n");
    assert_eq!(output.content[0]["type"], "text", "{output:?}");

    let failed = run(&host, "py", "1/0").await.unwrap();
    assert!(
        failed.is_error,
        "a Python exception is the tool's error: {failed:?}"
    );

    let unknown = host
        .call("nope", "run_python", code("1"))
        .await
        .unwrap_err();
    assert_eq!(unknown, ToolHostError::NoServer("nope".into()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_call_cancels_it_upstream() {
    let host = Upstreams::new(vec![python("py")]);
    assert_a_dropped_call_is_cancelled(&host, "py").await;
}

/// Drops a 30 s call to `server` (which runs one call at a time) after 2 s, and checks that the
/// next call does not wait for it: it was cancelled upstream.
async fn assert_a_dropped_call_is_cancelled(host: &Upstreams, server: &str) {
    run(host, server, "None").await.expect("a first call");

    let started = Instant::now();
    let slow = tokio::time::timeout(
        Duration::from_secs(2),
        run(host, server, "import time; time.sleep(30)"),
    )
    .await;
    assert!(slow.is_err(), "the slow call finished: {slow:?}");
    assert!(started.elapsed() < Duration::from_secs(5));

    // The upstream runs one call at a time: this one waits for the first unless it was cancelled.
    let next = Instant::now();
    let output = run(host, server, "6 * 7").await.unwrap();
    assert_eq!(result(&output), "42");
    assert!(
        next.elapsed() < Duration::from_secs(15),
        "the dropped call was not cancelled upstream: the next took {:?}",
        next.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_cannot_start_fails_only_its_own_calls() {
    let host = Upstreams::new(vec![
        stdio("missing", "safe-python-no-such-command", &[]),
        stdio(
            "dies",
            "sh",
            &["-c", "echo 'boom: no credentials' >&2; exit 3"],
        ),
        python("py"),
    ]);
    host.start_in_background();

    let missing = run(&host, "missing", "1").await.unwrap_err();
    let ToolHostError::Unavailable { server, reason } = &missing else {
        panic!("{missing:?}")
    };
    assert_eq!(server, "missing");
    assert!(
        reason.contains("'safe-python-no-such-command' was not found"),
        "{reason}"
    );

    let dies = run(&host, "dies", "1").await.unwrap_err();
    let ToolHostError::Unavailable { reason, .. } = &dies else {
        panic!("{dies:?}")
    };
    assert!(reason.contains("boom: no credentials"), "{reason}");

    let output = run(&host, "py", "6 * 7").await.unwrap();
    assert_eq!(result(&output), "42");

    let catalogue = host.catalogue(None).await;
    let names: Vec<&str> = catalogue.iter().map(|s| s.server.as_str()).collect();
    assert_eq!(names, ["missing", "dies", "py"]);
    assert!(
        catalogue[0]
            .tools
            .as_ref()
            .unwrap_err()
            .contains("was not found")
    );
    assert!(catalogue[1].tools.is_err());
    assert_eq!(catalogue[2].tools.as_ref().unwrap()[0].name, "run_python");
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_upstream_fails_its_call_and_the_next_restarts_it() {
    let dir = crate::common::temp_dir("upstream-kill");
    let pid_file = dir.path().join("pid");
    // The shell writes its process id, then becomes the server.
    let script = format!(
        "echo $$ > '{}'; exec '{MCP}' --workers 1 --timeout 60",
        pid_file.display()
    );
    let host = Upstreams::new(vec![stdio("py", "sh", &["-c", &script])]);
    run(&host, "py", "None").await.expect("a first call");
    let pid = || -> i32 {
        std::fs::read_to_string(&pid_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    let first = pid();

    let slow = tokio::spawn(host.call("py", "run_python", code("import time; time.sleep(30)")));
    tokio::time::sleep(Duration::from_secs(1)).await;
    // SAFETY: kill(2) with a process id we started.
    assert_eq!(unsafe { libc::kill(first, libc::SIGKILL) }, 0);
    let lost = tokio::time::timeout(Duration::from_secs(10), slow)
        .await
        .expect("the call ends when its upstream dies")
        .unwrap()
        .unwrap_err();
    let ToolHostError::Failed { server, reason } = &lost else {
        panic!("{lost:?}")
    };
    assert_eq!(server, "py");
    assert!(reason.contains("connection closed"), "{reason}");

    tokio::time::sleep(RESTART_INTERVAL).await;
    let output = run(&host, "py", "6 * 7")
        .await
        .expect("a restarted upstream");
    assert_eq!(result(&output), "42");
    assert_ne!(pid(), first, "the upstream was not restarted");
}

/// A token long enough for `--token`.
const TOKEN: &str = "0123456789abcdef-upstream-token";

/// `safe-python-mcp --http` on a free loopback port, one call at a time, requiring [`TOKEN`].
fn http_server() -> HttpServer {
    HttpServer::start(&[
        "--http",
        "127.0.0.1:0",
        "--workers",
        "1",
        "--timeout",
        "60",
        "--token",
        TOKEN,
    ])
}

/// `--upstream NAME=URL` as the server reads it, with `headers` as the value of its
/// `SAFE_PYTHON_UPSTREAM_HEADERS_NAME` (none: the variable is not set).
fn http(name: &str, url: &str, headers: Option<&str>) -> UpstreamSpec {
    let var = config::headers_var(name);
    let env = |key: &str| (key == var).then(|| headers.map(str::to_owned)).flatten();
    config::parse_flag(&format!("{name}={url}"), &env).expect("a valid --upstream")
}

fn authorized(name: &str, server: &HttpServer) -> UpstreamSpec {
    let spec = http(
        name,
        &server.url(),
        Some(&format!("Authorization: Bearer {TOKEN}")),
    );
    let UpstreamTransport::Http { headers, .. } = &spec.transport else {
        panic!("{spec:?}")
    };
    assert_eq!(headers.len(), 1, "the header from the environment");
    spec
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_upstream_lists_and_calls_its_tools() {
    let server = http_server();
    let host = Upstreams::new(vec![authorized("web", &server)]);
    host.start_in_background();

    let catalogue = host.catalogue(None).await;
    let tools = catalogue[0].tools.as_ref().expect("the upstream's tools");
    assert_eq!(tools[0].server, "web");
    assert_eq!(tools[0].name, "run_python");

    let output = run(&host, "web", "print('hi')\n6 * 7").await.unwrap();
    assert!(!output.is_error, "{output:?}");
    assert_eq!(result(&output), "42");
    assert_eq!(output.structured.as_ref().unwrap()["stdout"], "hi\n");

    let failed = run(&host, "web", "1/0").await.unwrap();
    assert!(failed.is_error, "{failed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_an_http_call_cancels_it_upstream() {
    let server = http_server();
    let host = Upstreams::new(vec![authorized("web", &server)]);
    assert_a_dropped_call_is_cancelled(&host, "web").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_upstream_without_its_token_fails_clearly() {
    let server = http_server();
    let host = Upstreams::new(vec![http("web", &server.url(), None)]);
    let refused = run(&host, "web", "1").await.unwrap_err();
    let ToolHostError::Unavailable {
        server: name,
        reason,
    } = &refused
    else {
        panic!("{refused:?}")
    };
    assert_eq!(name, "web");
    assert!(reason.contains(&server.url()), "{reason}");
    assert!(
        reason.contains("asks for credentials")
            && reason.contains("SAFE_PYTHON_UPSTREAM_HEADERS_WEB"),
        "{reason}"
    );
    assert!(!reason.contains(TOKEN), "{reason}");
}

/// A TLS listener on loopback whose certificate (tests/it/tls/, self-signed, for `localhost` and
/// 127.0.0.1) no platform trusts: it completes handshakes as far as the client lets it.
fn untrusted_tls_listener() -> std::net::SocketAddr {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};

    let cert = CertificateDer::from_pem_slice(include_bytes!("tls/untrusted-cert.pem")).unwrap();
    let key = PrivateKeyDer::from_pem_slice(include_bytes!("tls/untrusted-key.pem")).unwrap();
    let config = std::sync::Arc::new(
        rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)
        .unwrap(),
    );
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    // Lives as long as the test process: a blocked accept has no cheap way out.
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { break };
            let config = config.clone();
            std::thread::spawn(move || {
                let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
                let mut tls = rustls::ServerConnection::new(config).unwrap();
                while tls.is_handshaking() {
                    if tls.complete_io(&mut stream).is_err() {
                        break;
                    }
                }
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_upstream_with_an_untrusted_certificate_is_refused() {
    let addr = untrusted_tls_listener();
    for url in [
        format!("https://localhost:{}/mcp", addr.port()),
        format!("https://{addr}/mcp"),
    ] {
        let host = Upstreams::new(vec![http("tls", &url, None)]);
        let refused = run(&host, "tls", "1").await.unwrap_err();
        let ToolHostError::Unavailable { reason, .. } = &refused else {
            panic!("{refused:?}")
        };
        assert!(reason.contains(&url), "{reason}");
        assert!(reason.contains("certificate"), "{reason}");
    }
}
