//! MCP servers no one here wrote, for code mode's upstreams: `@modelcontextprotocol/server-everything`
//! (npm, run on Node 22 from `scripts/node22.sh`) and `mcp-server-time` (PyPI, in a venv), each
//! installed under `target/upstreams` at a pinned version the first time it is asked for.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
pub const EVERYTHING: &str = "@modelcontextprotocol/server-everything@2026.8.31";
pub const TIME: &str = "mcp-server-time==2026.10.19";

#[track_caller]
fn run(command: &mut Command) -> String {
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("{command:?}: {e}"));
    assert!(
        out.status.success(),
        "{command:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// `node` (22 or newer) and server-everything's entry point.
pub fn everything() -> &'static (PathBuf, PathBuf) {
    static INSTALLED: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        let node = PathBuf::from(run(&mut Command::new(
            Path::new(ROOT).join("scripts/node22.sh"),
        )));
        let prefix = Path::new(ROOT).join("target/upstreams/npm");
        let entry =
            prefix.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
        if !entry.exists() {
            run(Command::new("npm")
                .args([
                    "install",
                    "--no-audit",
                    "--no-fund",
                    "--loglevel=error",
                    "--prefix",
                ])
                .arg(&prefix)
                .arg(EVERYTHING));
        }
        (node, entry)
    })
}

/// server-everything over stdio, as the program and arguments to start it with.
pub fn everything_stdio() -> (PathBuf, Vec<String>) {
    let (node, entry) = everything();
    (
        node.clone(),
        vec![entry.display().to_string(), "stdio".into()],
    )
}

/// server-everything over stdio as an `--upstream` command line.
pub fn everything_command() -> String {
    let (node, args) = everything_stdio();
    format!("{} {}", node.display(), args.join(" "))
}

/// `mcp-server-time`'s executable.
pub fn time_server() -> &'static Path {
    static INSTALLED: OnceLock<PathBuf> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        let venv = Path::new(ROOT).join("target/upstreams/time");
        let bin = venv.join("bin/mcp-server-time");
        if !bin.exists() {
            run(Command::new("python3").args(["-m", "venv"]).arg(&venv));
            run(Command::new(venv.join("bin/pip")).args(["install", "--quiet", TIME]));
        }
        bin
    })
}
