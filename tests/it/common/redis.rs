//! A real `redis-server` on loopback for the session-store tests and benches (Debian's package:
//! `.ci/run` installs it), stopped when dropped.

use std::net::TcpListener;
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub struct Redis {
    child: Option<Child>,
    pub port: u16,
    /// Where it keeps its append-only file, when it persists.
    dir: tempfile::TempDir,
    persistent: bool,
    /// Further `redis-server` arguments (TLS, a password).
    extra: Vec<String>,
}

impl Redis {
    /// A server on a free loopback port; `persistent`: it writes every change to its append-only
    /// file before answering, so that a restart keeps them.
    pub fn start(persistent: bool) -> Redis {
        Self::start_with(persistent, &[])
    }

    /// [`Redis::start`] with further `redis-server` arguments (`{port}` stands for its port).
    pub fn start_with(persistent: bool, extra: &[&str]) -> Redis {
        installed();
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let extra = extra.iter().map(|a| a.replace("{port}", &port.to_string()));
        let mut redis = Redis {
            child: None,
            port,
            dir: super::temp_dir("redis"),
            persistent,
            extra: extra.collect(),
        };
        redis.restart();
        redis
    }

    /// The `--session-store` URL of this server.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// Starts the server again on the same port (after [`Redis::stop`]), and waits until it answers.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "already running");
        let appendonly = if self.persistent { "yes" } else { "no" };
        let child = Command::new("redis-server")
            .args([
                "--port",
                &self.port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
            ])
            .args(["--appendonly", appendonly, "--appendfsync", "always"])
            .args(&self.extra)
            .arg("--dir")
            .arg(self.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server runs (Debian's package redis-server; .ci/run installs it)");
        self.child = Some(child);
        let start = Instant::now();
        while self.cli(&["PING"]).stdout != b"PONG\n" {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "redis-server does not answer"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops the server (SIGTERM: it writes what it must and exits) and waits for it.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            super::signal(child.id(), libc::SIGTERM);
            child.wait().unwrap();
        }
    }

    /// `redis-cli` with `args` against this server (over TLS, or with a password, as it was
    /// started: see [`Redis::start_with`]).
    pub fn cli(&self, args: &[&str]) -> Output {
        let tls = self.extra.iter().any(|a| a == "--tls-port");
        let password = self
            .extra
            .iter()
            .skip_while(|a| *a != "--requirepass")
            .nth(1);
        Command::new("redis-cli")
            .args(["-p", &self.port.to_string()])
            .args(if tls {
                &["--tls", "--insecure"][..]
            } else {
                &[]
            })
            .args(
                password
                    .map(|p| ["-a", p.as_str(), "--no-auth-warning"])
                    .iter()
                    .flatten(),
            )
            .args(args)
            .output()
            .expect("redis-cli runs")
    }

    /// `redis-cli` with `args`, which must succeed: its output, trimmed.
    pub fn query(&self, args: &[&str]) -> String {
        let out = self.cli(args);
        assert!(out.status.success(), "redis-cli {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }
}

/// Installs Debian's `redis-server` if it is missing and this machine can (as `.ci/run` does), once
/// per test binary: the README's test command sets up what its tests need.
fn installed() {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        let found = |program: &str| Command::new(program).arg("--version").output().is_ok();
        if found("redis-server") && found("redis-cli") {
            return;
        }
        let script =
            "apt-get update -qq && apt-get install -y -qq --no-install-recommends redis-server";
        let installed = Command::new("sh")
            .args(["-c", script])
            .status()
            .is_ok_and(|s| s.success());
        assert!(
            installed && found("redis-server"),
            "the session-store tests need redis-server and redis-cli: install Redis or Valkey \
             (Debian: apt-get install redis-server; macOS: brew install redis)"
        );
    });
}

impl Drop for Redis {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
