//! The release artifacts, installed as users install them: `scripts/dist.sh` builds them all once
//! (three release builds: about 15 minutes on 2 cores), then the wheel goes into a fresh uv tool
//! directory, the npm tarballs into an empty prefix, and each starts the real server and answers
//! `run_python`. The emulated platforms are in `emulated.rs`.

use crate::common;
use crate::common::client::{connect, run_python, text};
use crate::install::{read, run_ok, strings};

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const VERSION: &str = env!("CARGO_PKG_VERSION");

/// PyPI's limit on one file.
const MAX_WHEEL_BYTES: u64 = 100_000_000;
/// Smithery's limit on one bundle.
const MAX_BUNDLE_BYTES: u64 = 25_000_000;
/// From a fresh install to the first `run_python` result (issue 24).
const FIRST_RESULT: Duration = Duration::from_secs(3);

/// The platforms of packaging/targets.tsv that `scripts/dist.sh` builds on this machine, with their
/// Rust targets.
pub fn built_here() -> Vec<(String, String)> {
    read("packaging/targets.tsv")
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| l.split('\t').collect::<Vec<_>>())
        .filter(|cols| cols[3] == "build")
        .map(|cols| (cols[0].to_owned(), cols[1].to_owned()))
        .collect()
}

/// `target/dist`, built by `scripts/dist.sh` once per run of the long checks.
pub fn dist() -> &'static Path {
    static DIST: OnceLock<PathBuf> = OnceLock::new();
    DIST.get_or_init(|| {
        let started = Instant::now();
        run_ok(Command::new("bash").arg(Path::new(ROOT).join("scripts/dist.sh")));
        eprintln!("scripts/dist.sh: {:.0} s", started.elapsed().as_secs_f64());
        Path::new(ROOT).join("target/dist")
    })
}

/// The one file in `target/dist` whose name starts with `prefix` and ends with `suffix`.
fn artifact(prefix: &str, suffix: &str) -> PathBuf {
    let found: Vec<PathBuf> = std::fs::read_dir(dist())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_str().unwrap();
            name.starts_with(prefix) && name.ends_with(suffix)
        })
        .collect();
    let [one] = found.as_slice() else {
        panic!("expected one {prefix}*{suffix} in target/dist, found {found:?}")
    };
    one.clone()
}

/// The archive of `target` unpacked under `into`: its folder, with both binaries and the
/// compiled guest.
pub fn unpacked_archive(target: &str, into: &Path) -> PathBuf {
    let name = format!("safe-python-mcp-{VERSION}-{target}");
    if target.contains("windows") {
        run_ok(
            Command::new("unzip")
                .arg("-q")
                .arg(artifact(&name, ".zip"))
                .arg("-d")
                .arg(into),
        );
    } else {
        run_ok(
            Command::new("tar")
                .arg("-xzf")
                .arg(artifact(&name, ".tar.gz"))
                .arg("-C")
                .arg(into),
        );
    }
    into.join(name)
}

fn size(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap().len()
}

#[test]
fn dist_builds_every_artifact_of_every_platform_built_here_with_their_sums() {
    let dist = dist();
    for (platform, target) in built_here() {
        let wheel_platform = match platform.as_str() {
            "linux-x64" => "manylinux_2_28_x86_64",
            "linux-arm64" => "manylinux_2_28_aarch64",
            "win32-x64" => "win_amd64",
            other => panic!("no wheel tag known for {other}"),
        };
        let wheel = artifact(
            &format!("safe_python_mcp-{VERSION}-py3-none-"),
            &format!("{wheel_platform}.whl"),
        );
        let bundle = artifact(
            &format!("safe-python-executor-{VERSION}-{platform}"),
            ".mcpb",
        );
        let npm = artifact(&format!("safe-python-mcp-{platform}-{VERSION}"), ".tgz");
        let archive = artifact(&format!("safe-python-mcp-{VERSION}-{target}"), "");
        for (path, limit) in [
            (&wheel, MAX_WHEEL_BYTES),
            (&bundle, MAX_BUNDLE_BYTES),
            (&npm, MAX_WHEEL_BYTES),
            (&archive, MAX_WHEEL_BYTES),
        ] {
            eprintln!("{}: {} MB", path.display(), size(path) / 1_000_000);
            assert!(
                size(path) <= limit,
                "{} is over {limit} bytes",
                path.display()
            );
        }
        // The wheel carries both binaries and the compiled guest beside them.
        let listing = run_ok(Command::new("unzip").arg("-l").arg(&wheel));
        let listing = String::from_utf8_lossy(&listing.stdout);
        let exe = if platform.starts_with("win32") {
            ".exe"
        } else {
            ""
        };
        for file in [
            format!("safe-python-mcp{exe}"),
            format!("sandbox-run{exe}"),
            "safe-python-guest.cwasm".into(),
        ] {
            assert!(
                listing.contains(&format!("safe_python_mcp-{VERSION}.data/scripts/{file}")),
                "{} lacks {file}:\n{listing}",
                wheel.display()
            );
        }
    }
    artifact(&format!("safe-python-mcp-{VERSION}"), ".tgz");
    // The Linux binaries run on glibc 2.28, as their wheels' tag says.
    let work = common::temp_dir("glibc");
    for (platform, target) in built_here() {
        if !platform.starts_with("linux") {
            continue;
        }
        let dir = unpacked_archive(&target, work.path());
        for exe in ["safe-python-mcp", "sandbox-run"] {
            let newest = newest_glibc(&dir.join(exe));
            assert!(newest <= (2, 28), "{target} {exe} needs glibc {newest:?}");
        }
    }
    // Every file is summed, and every sum holds.
    let sums = std::fs::read_to_string(dist.join("SHA256SUMS")).unwrap();
    let files = std::fs::read_dir(dist).unwrap().count() - 1;
    assert_eq!(sums.lines().count(), files, "SHA256SUMS:\n{sums}");
    run_ok(
        Command::new("sha256sum")
            .args(["--check", "--strict", "SHA256SUMS"])
            .current_dir(dist),
    );
}

/// The newest glibc symbol version `exe` needs.
fn newest_glibc(exe: &Path) -> (u32, u32) {
    let out = run_ok(
        Command::new("readelf")
            .args(["--dyn-syms", "--wide"])
            .arg(exe),
    );
    String::from_utf8_lossy(&out.stdout)
        .split("GLIBC_")
        .skip(1)
        .filter_map(|rest| {
            let version: String = rest
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == '.')
                .collect();
            let mut parts = version.split('.').map(|p| p.parse::<u32>().ok());
            Some((parts.next()??, parts.next().flatten().unwrap_or(0)))
        })
        .max()
        .expect("a dynamically linked executable names glibc versions")
}

#[test]
fn cargo_binstall_metadata_names_the_archives_dist_builds() {
    let manifest = read("Cargo.toml");
    let pkg_url = manifest
        .lines()
        .find_map(|l| l.strip_prefix("pkg-url = \""))
        .expect("binstall's pkg-url")
        .trim_end_matches('"');
    for (_, target) in built_here() {
        let suffix = if target.contains("windows") {
            ".zip"
        } else {
            ".tar.gz"
        };
        let file = pkg_url
            .replace("{ repo }/releases/download/v{ version }/", "")
            .replace("{ version }", VERSION)
            .replace("{ target }", &target)
            .replace("{ archive-suffix }", suffix);
        assert!(
            dist().join(&file).is_file(),
            "cargo binstall would look for {file}, which scripts/dist.sh did not build"
        );
    }
}

/// Starts `server` as an MCP client does, calls `run_python`, and returns the reply's text and
/// how long it took from the start of the process.
fn first_result(server: Command) -> (String, Duration) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let started = Instant::now();
    runtime.block_on(async {
        let client = connect((), server).await;
        let reply = client
            .call_tool(run_python("print(2**100)", None))
            .await
            .expect("run_python");
        let elapsed = started.elapsed();
        client.cancel().await.expect("the server stops");
        (text(&reply), elapsed)
    })
}

/// Whether `dir` is empty or missing: a fresh module cache stays so when the shipped guest is used.
pub fn is_empty(dir: &Path) -> bool {
    std::fs::read_dir(dir).map_or(true, |mut d| d.next().is_none())
}

/// A fresh, empty cache for the server, which must stay empty: the shipped guest needs none.
#[track_caller]
fn assert_untouched(cache: &Path) {
    assert!(
        is_empty(cache),
        "the server compiled the guest instead of loading the shipped one into {}",
        cache.display()
    );
}

/// uv (with `uvx`), from PyPI, in a venv under `target/`.
fn uv_bin(name: &str) -> PathBuf {
    let venv = Path::new(ROOT).join("target/uv-tool");
    if !venv.join("bin/uv").exists() {
        run_ok(Command::new("python3").args(["-m", "venv"]).arg(&venv));
        run_ok(Command::new(venv.join("bin/pip")).args(["install", "--quiet", "uv==0.13.9"]));
    }
    venv.join("bin").join(name)
}

/// The README's `uvx` client configuration: its command's arguments.
fn readme_uvx_args() -> Vec<String> {
    common::fenced_blocks(&read("README.md"), "json")
        .iter()
        .filter_map(|block| serde_json::from_str::<serde_json::Value>(block).ok())
        .flat_map(|config| {
            let servers = config["mcpServers"]
                .as_object()
                .cloned()
                .unwrap_or_default();
            servers.into_values()
        })
        .find(|server| server["command"] == "uvx")
        .map(|server| strings(&server["args"]))
        .expect("the README shows a uvx configuration")
}

/// uv's state for one test, all fresh, with `target/dist` as the only package index: the
/// README's commands then install the wheels built here as they will install the published ones.
fn fresh_uv(command: &mut Command, home: &Path) {
    command
        .env("UV_TOOL_DIR", home.join("tools"))
        .env("UV_TOOL_BIN_DIR", home.join("bin"))
        .env("UV_CACHE_DIR", home.join("uv-cache"))
        .env("UV_FIND_LINKS", dist())
        .env("UV_NO_INDEX", "1")
        .env("UV_PYTHON_PREFERENCE", "only-system")
        .env("SAFE_PYTHON_CACHE_DIR", home.join("module-cache"));
}

#[test]
fn the_readmes_uvx_config_installs_the_wheel_and_answers_its_first_call_within_3_s() {
    let home = common::temp_dir("uv-install");
    let home = home.path();

    // As the client starts it: `uvx safe-python-mcp`, nothing installed, every cache empty. The
    // time runs from the client's spawn, so it includes uv installing the wheel.
    let mut server = Command::new(uv_bin("uvx"));
    server.args(readme_uvx_args());
    fresh_uv(&mut server, home);
    let (reply, elapsed) = first_result(server);
    assert!(reply.contains("1267650600228229401496703205376"), "{reply}");
    eprintln!(
        "first run_python result after a fresh install: {:.2} s (uvx safe-python-mcp: install, \
         start, first call)",
        elapsed.as_secs_f64()
    );
    assert_untouched(&home.join("module-cache"));
    assert!(
        elapsed <= FIRST_RESULT,
        "the first result took {elapsed:?}, over {FIRST_RESULT:?}"
    );

    // `uv tool install` puts both binaries on the PATH.
    let mut install = Command::new(uv_bin("uv"));
    install.args(["tool", "install", "safe-python-mcp"]);
    fresh_uv(&mut install, home);
    run_ok(&mut install);
    let mut cli = Command::new(home.join("bin/sandbox-run"));
    fresh_uv(&mut cli, home);
    let out = run_ok(cli.args(["-c", "print(6 * 7)"]));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "42");

    // And the CLI without installing: `uvx --from safe-python-mcp sandbox-run`.
    let mut uvx = Command::new(uv_bin("uvx"));
    uvx.args([
        "--from",
        "safe-python-mcp",
        "sandbox-run",
        "-c",
        "print(6 * 7)",
    ]);
    fresh_uv(&mut uvx, home);
    let out = run_ok(&mut uvx);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "42");
    assert_untouched(&home.join("module-cache"));
}

#[test]
fn the_npm_packages_install_into_an_empty_prefix_and_npx_starts_the_server() {
    let prefix = common::temp_dir("npm-install");
    let prefix = prefix.path();
    let platform = artifact(&format!("safe-python-mcp-linux-x64-{VERSION}"), ".tgz");
    let main = dist().join(format!("safe-python-mcp-{VERSION}.tgz"));
    run_ok(
        Command::new("npm")
            // --offline: the other platforms' packages are not published yet; npm skips them as
            // optional dependencies it cannot fetch, as it skips those of other platforms.
            .args([
                "install",
                "--offline",
                "--no-audit",
                "--no-fund",
                "--prefix",
            ])
            .arg(prefix)
            .arg(&platform)
            .arg(&main),
    );
    let cache = prefix.join("module-cache");
    let mut server = Command::new("npx");
    server
        .arg("--prefix")
        .arg(prefix)
        .arg("safe-python-mcp")
        .env("SAFE_PYTHON_CACHE_DIR", &cache);
    let (reply, elapsed) = first_result(server);
    assert!(reply.contains("1267650600228229401496703205376"), "{reply}");
    eprintln!(
        "first run_python result through npx: {:.2} s",
        elapsed.as_secs_f64()
    );
    assert_untouched(&cache);

    let out = run_ok(
        Command::new("npx")
            .arg("--prefix")
            .arg(prefix)
            .args(["sandbox-run", "-c", "print(6 * 7)"])
            .env("SAFE_PYTHON_CACHE_DIR", &cache),
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "42");
}
