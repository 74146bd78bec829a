//! A `safe-python-mcp` process spoken to in raw JSON-RPC lines: for what a well-behaved client
//! would never do (malformed lines, closing stdin mid-run, signals).

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

pub struct Raw {
    child: Child,
    stdin: Option<Box<dyn Write + Send>>,
    lines: mpsc::Receiver<String>,
}

impl Raw {
    /// A server with the suite's shared module cache and default flags.
    pub fn start() -> Raw {
        Raw::start_with(&super::cache_dir(), &[])
    }

    pub fn start_with(cache_dir: &Path, args: &[&str]) -> Raw {
        let mut child = super::spawn::mcp_server(args)
            .env("SAFE_PYTHON_CACHE_DIR", cache_dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        Raw::over(child, Box::new(stdin), stdout)
    }

    /// A server whose stdin and stdout are each a Unix socket, as Node's child processes (and
    /// so Electron's, and MCP Inspector's) get them, where Rust and Python make pipes.
    #[cfg(unix)]
    pub fn start_on_sockets() -> Raw {
        use std::os::unix::net::UnixStream;
        let (stdin, server_in) = UnixStream::pair().unwrap();
        let (stdout, server_out) = UnixStream::pair().unwrap();
        let child = super::spawn::mcp_server(&[])
            .stdin(std::os::fd::OwnedFd::from(server_in))
            .stdout(std::os::fd::OwnedFd::from(server_out))
            .spawn()
            .unwrap();
        Raw::over(child, Box::new(stdin), stdout)
    }

    fn over(child: Child, stdin: Box<dyn Write + Send>, stdout: impl Read + Send + 'static) -> Raw {
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Raw {
            stdin: Some(stdin),
            child,
            lines,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the server's stdin and stdout are in non-blocking mode, as its runtime puts them
    /// when it reads and writes them itself (Linux only: read from `/proc`).
    #[cfg(unix)]
    pub fn stdio_nonblocking(&self) -> [bool; 2] {
        [0, 1].map(|fd| {
            let info =
                std::fs::read_to_string(format!("/proc/{}/fdinfo/{fd}", self.pid())).unwrap();
            let flags = info
                .lines()
                .find_map(|line| line.strip_prefix("flags:"))
                .expect("a flags line");
            u32::from_str_radix(flags.trim(), 8).unwrap() & libc::O_NONBLOCK as u32 != 0
        })
    }

    pub fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    /// Sends request `id`: a `run_python` call with `arguments`, asking for progress notifications
    /// under `progress_token` if given.
    pub fn run_python(&mut self, id: u64, arguments: Value, progress_token: Option<&str>) {
        let mut params = json!({ "name": "run_python", "arguments": arguments });
        if let Some(token) = progress_token {
            params["_meta"] = json!({ "progressToken": token });
        }
        let request =
            json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params });
        self.send(&request.to_string());
    }

    /// Closes the server's stdin, as a client that goes away does.
    pub fn close_stdin(&mut self) {
        drop(self.stdin.take());
    }

    /// The next message that `wanted` accepts, skipping the others; every line must be JSON.
    pub fn message(&self, wanted: impl Fn(&Value) -> bool) -> Value {
        // A guard against hangs, not a timing: on a cold cache the first call waits for the guest
        // to compile, which takes minutes on a busy two-core machine.
        let deadline = Instant::now() + Duration::from_secs(300);
        loop {
            let line = self
                .lines
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .expect("a message in time");
            let v: Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("stdout carried a non-JSON line {line:?}: {e}"));
            if wanted(&v) {
                return v;
            }
        }
    }

    /// The next message with this id, skipping notifications.
    pub fn response(&self, id: u64) -> Value {
        self.message(|v| v["id"] == id)
    }

    /// Every line the server wrote until it closed stdout; each must be JSON.
    pub fn rest(&self) -> Vec<Value> {
        self.lines
            .iter()
            .map(|line| {
                serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("stdout carried a non-JSON line {line:?}: {e}"))
            })
            .collect()
    }

    pub fn initialize(&mut self) {
        self.send(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#);
        assert!(self.response(1)["result"]["serverInfo"]["name"] == "safe-python-mcp");
        self.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    }

    /// The exit status, once the server has exited; `None` if it is still running after `within`.
    pub fn wait_exit(&mut self, within: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
