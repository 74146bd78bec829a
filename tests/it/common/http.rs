//! A running `safe-python-mcp --http`: started, its address read from its stderr, signalled, and
//! killed when dropped. For the HTTP tests, the session-store tests' replicas and the benches.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use rmcp::ClientHandler;
use rmcp::model::ProtocolVersion;
use rmcp::service::{ClientLifecycleMode, ClientServiceExt};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

use super::client::Client;
use super::spawn::mcp_server;

/// The 2026-07-28 lifecycle: no `initialize`, each request on its own.
pub fn modern() -> ClientLifecycleMode {
    ClientLifecycleMode::Discover {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
    }
}

pub struct HttpServer {
    pub child: Child,
    pub addr: SocketAddr,
}

impl HttpServer {
    /// Starts the server with `args` (which must include `--http`) and waits for its address.
    pub fn start(args: &[&str]) -> HttpServer {
        Self::start_with(args, &[])
    }

    /// [`HttpServer::start`], with `env` added to its environment.
    pub fn start_with(args: &[&str], env: &[(&str, &str)]) -> HttpServer {
        let mut command = mcp_server(args);
        command.envs(env.iter().copied());
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the server starts");
        let stderr = BufReader::new(child.stderr.take().unwrap());
        let (sender, address) = std::sync::mpsc::channel();
        // Reads stderr to its end, so that the server never blocks on a full pipe.
        std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                if let Some(url) = line.strip_prefix("safe-python-mcp: serving MCP at http://") {
                    let addr = url.trim_end_matches("/mcp").parse().expect("an address");
                    let _ = sender.send(addr);
                } else {
                    eprintln!("server: {line}");
                }
            }
        });
        let mut addr: SocketAddr = address
            .recv_timeout(Duration::from_secs(60))
            .expect("the server prints its address");
        if addr.ip().is_unspecified() {
            addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
        }
        HttpServer { child, addr }
    }

    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    /// An rmcp client over HTTP, with `lifecycle`, sending `token` if any.
    pub async fn client(&self, lifecycle: ClientLifecycleMode, token: Option<&str>) -> Client {
        self.client_with((), lifecycle, token).await
    }

    /// [`HttpServer::client`], with `handler` taking the server's notifications.
    pub async fn client_with<H: ClientHandler>(
        &self,
        handler: H,
        lifecycle: ClientLifecycleMode,
        token: Option<&str>,
    ) -> Client<H> {
        // reqwest has rustls without a provider of its own (see the function).
        safe_python_executor::mcp::upstream::install_crypto_provider();
        let mut config = StreamableHttpClientTransportConfig::with_uri(self.url());
        if let Some(token) = token {
            config = config.auth_header(token);
        }
        let transport = StreamableHttpClientTransport::from_config(config);
        handler
            .serve_with_lifecycle(transport, lifecycle)
            .await
            .expect("the server answers the client's lifecycle")
    }

    /// Waits for the process to end, at most `limit`.
    pub fn wait(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let start = Instant::now();
        while start.elapsed() < limit {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    /// Sends `signal` to the server.
    #[cfg(unix)]
    pub fn signal(&self, signal: libc::c_int) {
        super::signal(self.child.id(), signal);
    }

    #[cfg(unix)]
    pub fn terminate(&self) {
        self.signal(libc::SIGTERM);
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
