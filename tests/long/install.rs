//! Every route to an installed server, taken as its user would take it: the published crate,
//! `cargo install` (run exactly as the Dockerfile runs it), the Dockerfile, Smithery's
//! `smithery.yaml`, the MCP bundle and the README's Claude Desktop and Cursor configurations. Each
//! must start the real server with settings its own parser accepts and applies.
//!
//! The `cargo install` and bundle tests make a release build (about 10 minutes on 2 cores the first
//! time; later runs reuse `target/release`). The Smithery and bundle tests need node; the bundle
//! test installs the official packer, `@anthropic-ai/mcpb` 2.x, under `target/mcpb-cli`.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory};
use safe_python_executor::mcp::Args;
use serde_json::{Map, Value, json};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The binary every install route must start.
const SERVER: &str = "safe-python-mcp";

/// The largest bundle Smithery accepts.
const MAX_BUNDLE_BYTES: u64 = 25_000_000;

pub(crate) fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(ROOT).join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn target_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .unwrap()
        .to_owned()
}

#[track_caller]
pub(crate) fn run_ok(command: &mut Command) -> Output {
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("{command:?}: {e}"));
    assert!(
        out.status.success(),
        "{command:?}: {}\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

pub(crate) fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|items| {
            items
                .iter()
                .map(|s| s.as_str().unwrap().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

// ---- the server's parser: what every route's settings must get through ----

/// Parses `args` with the server's own command-line parser.
#[track_caller]
fn server_accepts(args: &[String], context: &str) -> ArgMatches {
    Args::command()
        .try_get_matches_from(std::iter::once(SERVER.to_owned()).chain(args.iter().cloned()))
        .unwrap_or_else(|e| panic!("{context}: the server refuses {args:?}: {e}"))
}

/// The server's argument read from environment variable `var`.
fn server_arg_for_env(var: &str) -> clap::Arg {
    Args::command()
        .get_arguments()
        .find(|a| a.get_env().is_some_and(|e| e == var))
        .unwrap_or_else(|| panic!("the server reads no environment variable {var}"))
        .clone()
}

/// Environment variables as the flags the server reads them as (`--timeout 20` for
/// `SAFE_PYTHON_TIMEOUT=20`); a variable the server does not read fails.
fn env_as_flags<'a>(env: impl IntoIterator<Item = (&'a str, &'a str)>) -> Vec<String> {
    env.into_iter()
        .flat_map(|(var, value)| {
            let flag = server_arg_for_env(var).get_long().unwrap().to_owned();
            [format!("--{flag}"), value.to_owned()]
        })
        .collect()
}

/// A JSON `env` object (or nothing) as variables.
fn json_env(env: &Value) -> impl Iterator<Item = (&str, &str)> {
    env.as_object()
        .into_iter()
        .flatten()
        .map(|(var, value)| (var.as_str(), value.as_str().unwrap()))
}

/// A setting (a number, a string or a list of module names) as the strings it passes.
fn setting_values(value: &Value) -> Vec<String> {
    match value {
        Value::Array(_) => strings(value),
        Value::String(s) => s.split(',').map(str::to_owned).collect(),
        other => vec![other.to_string()],
    }
}

/// The server parsed `value` for its argument `id` from the command line.
#[track_caller]
fn assert_reached(matches: &ArgMatches, id: &str, value: &Value, context: &str) {
    assert_eq!(
        matches.value_source(id),
        Some(ValueSource::CommandLine),
        "{context}: the setting for --{id} did not reach it"
    );
    let got: Vec<String> = matches
        .get_raw(id)
        .unwrap()
        .map(|s| s.to_string_lossy().into_owned())
        .collect();
    let want = setting_values(value);
    let same = got.len() == want.len()
        && got
            .iter()
            .zip(&want)
            .all(|(g, w)| match (g.parse::<f64>(), w.parse::<f64>()) {
                (Ok(g), Ok(w)) => g == w,
                _ => g == w,
            });
    assert!(
        same,
        "{context}: --{id} got {got:?}, the setting was {want:?}"
    );
}

/// An install route's default for a setting is the server's own (no default: none, or empty).
#[track_caller]
fn assert_same_default(arg: &clap::Arg, default: Option<&Value>, context: &str) {
    let server = arg
        .get_default_values()
        .first()
        .map(|d| d.to_string_lossy());
    let empty = |v: &Value| v == &json!("") || v == &json!([]);
    match (server, default) {
        (Some(server), Some(ours)) => assert_eq!(
            server.parse::<f64>().ok(),
            ours.as_f64(),
            "{context}: the default for --{} is {ours}, the server's is {server}",
            arg.get_id()
        ),
        (None, ours) => assert!(
            ours.is_none_or(empty),
            "{context}: --{} has no default, yet {ours:?} is given",
            arg.get_id()
        ),
        (Some(server), None) => panic!(
            "{context}: --{} has no default here; say the server's ({server})",
            arg.get_id()
        ),
    }
}

/// Full configs from a schema's properties: each property's default, lowest and highest value
/// (`bounds` reads them from a property), skipping properties where one is not given.
fn sample_configs(
    properties: &Map<String, Value>,
    bounds: impl Fn(&Value) -> [Option<Value>; 3],
) -> [Value; 3] {
    let mut configs = [json!({}), json!({}), json!({})];
    for (key, property) in properties {
        for (config, value) in configs.iter_mut().zip(bounds(property)) {
            if let Some(value) = value {
                config[key] = value;
            }
        }
    }
    configs
}

// ---- cargo install and the Dockerfile ----

/// The instructions of a Dockerfile, stage by stage: `(INSTRUCTION, rest of the line)`.
fn dockerfile_stages() -> Vec<Vec<(String, String)>> {
    let text = read("Dockerfile").replace("\\\n", " ");
    let mut stages: Vec<Vec<(String, String)>> = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (instruction, rest) = line.split_once(' ').unwrap_or((line, ""));
        let instruction = instruction.to_ascii_uppercase();
        if instruction == "FROM" {
            stages.push(Vec::new());
        }
        stages
            .last_mut()
            .expect("a Dockerfile starts with FROM")
            .push((instruction, rest.trim().to_owned()));
    }
    stages
}

fn instructions<'a>(stage: &'a [(String, String)], name: &str) -> Vec<&'a str> {
    stage
        .iter()
        .filter(|(i, _)| i == name)
        .map(|(_, rest)| rest.as_str())
        .collect()
}

/// The `cargo install` the README tells users to run.
fn readme_cargo_install() -> Vec<String> {
    let readme = read("README.md");
    let line = readme
        .lines()
        .find(|l| l.trim_start().starts_with("cargo install "))
        .expect("the README shows `cargo install`");
    let command = line.split('#').next().unwrap();
    command.split_whitespace().map(str::to_owned).collect()
}

/// The Dockerfile's build command, which must be the README's with `--root /usr/local` added.
fn dockerfile_cargo_install() -> Vec<String> {
    let stages = dockerfile_stages();
    let run = instructions(&stages[0], "RUN");
    let [command] = run.as_slice() else {
        panic!("the build stage should run one command, the README's cargo install: {run:?}")
    };
    let words: Vec<String> = command.split_whitespace().map(str::to_owned).collect();
    let mut expected = readme_cargo_install();
    expected.extend(["--root".to_owned(), "/usr/local".to_owned()]);
    assert_eq!(
        words, expected,
        "the Dockerfile builds otherwise than the README says"
    );
    words
}

/// The `bin/` directory of a fresh root where the Dockerfile's `cargo install` was run (with
/// `--root` pointing here instead, and the release build kept in `target/release`).
fn installed_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let root = target_dir().join("install-test");
        let _ = std::fs::remove_dir_all(&root);
        let mut words = dockerfile_cargo_install();
        let at = words.iter().position(|w| w == "--root").unwrap();
        words[at + 1] = root.display().to_string();
        run_ok(
            cargo()
                .args(&words[1..])
                .arg("--target-dir")
                .arg(target_dir())
                .current_dir(ROOT),
        );
        root.join("bin")
    })
}

/// The largest crate crates.io accepts.
const MAX_CRATE_BYTES: u64 = 10 * 1024 * 1024;

fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
}

/// `cargo package` of the workspace, as `cargo publish` makes it, then `cargo install` of the
/// packaged crate, as from crates.io once it is published: the protocol crate comes from its own
/// package (crates.io does not have it yet either), nothing else from this checkout. The release
/// build shares `target/` with the other install tests.
#[test]
fn the_published_crate_fits_crates_io_installs_and_gives_a_working_server() {
    let version = env!("CARGO_PKG_VERSION");
    let out = target_dir().join("package-test");
    let _ = std::fs::remove_dir_all(&out);
    // Not verified by cargo: the install below builds the packaged crate for real.
    run_ok(
        cargo()
            .args([
                "package",
                "--workspace",
                "--no-verify",
                "--locked",
                "--allow-dirty",
            ])
            .arg("--target-dir")
            .arg(&out)
            .current_dir(ROOT),
    );
    let size = std::fs::metadata(out.join(format!("package/safe-python-executor-{version}.crate")))
        .unwrap()
        .len();
    eprintln!("safe-python-executor-{version}.crate: {size} bytes");
    assert!(
        size < MAX_CRATE_BYTES,
        "the crate is {size} bytes; crates.io refuses more than {MAX_CRATE_BYTES}"
    );

    // Unpacked outside this workspace (cargo would take it for a member otherwise), as cargo
    // install unpacks a downloaded crate.
    let unpacked = tempfile::Builder::new()
        .prefix("safe-python-executor-published-")
        .tempdir()
        .unwrap();
    for name in ["safe-python-executor", "safe-python-protocol"] {
        run_ok(
            Command::new("tar")
                .arg("-xzf")
                .arg(out.join(format!("package/{name}-{version}.crate")))
                .arg("-C")
                .arg(unpacked.path()),
        );
    }
    let crate_dir = unpacked
        .path()
        .join(format!("safe-python-executor-{version}"));
    let protocol = unpacked
        .path()
        .join(format!("safe-python-protocol-{version}"));
    for needed in [
        "wasm/safe-python-guest.pack.lzma",
        "wasm/MANIFEST",
        "build.rs",
        "build/guest_pack.rs",
        "src/bin/safe-python-mcp.rs",
        "src/bin/sandbox-run.rs",
        "README.md",
        "Cargo.lock",
    ] {
        assert!(
            crate_dir.join(needed).is_file(),
            "the package lacks {needed}"
        );
    }
    for absent in ["guest", "tests", ".ci", "wasm/safe-python-guest.wasm"] {
        assert!(
            !crate_dir.join(absent).exists(),
            "the package carries {absent}"
        );
    }

    // The lock file pins the protocol crate's crates.io checksum: take it from the path instead,
    // which locks without a source (nothing else in the lock file changes, so --locked holds).
    let lock_path = crate_dir.join("Cargo.lock");
    let lock = std::fs::read_to_string(&lock_path).unwrap();
    let entry = "name = \"safe-python-protocol\"\n";
    let at = lock
        .find(entry)
        .expect("the lock file has the protocol crate")
        + entry.len();
    let (head, tail) = lock.split_at(at);
    let tail: String = tail
        .lines()
        .enumerate()
        .filter(|(i, l)| !(*i < 3 && (l.starts_with("source = ") || l.starts_with("checksum = "))))
        .map(|(_, l)| format!("{l}\n"))
        .collect();
    std::fs::write(&lock_path, format!("{head}{tail}")).unwrap();

    let root = target_dir().join("install-packaged-test");
    let _ = std::fs::remove_dir_all(&root);
    run_ok(
        cargo()
            .args(["install", "--locked", "--path"])
            .arg(&crate_dir)
            .arg("--root")
            .arg(&root)
            .arg("--target-dir")
            .arg(target_dir())
            .arg("--config")
            .arg(format!(
                "patch.crates-io.safe-python-protocol.path={:?}",
                protocol.display().to_string()
            ))
            .current_dir(unpacked.path()),
    );
    let out = run_ok(
        Command::new(root.join("bin").join(SERVER))
            .arg("--check")
            .env("SAFE_PYTHON_CACHE_DIR", common::cache_dir()),
    );
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn cargo_install_installs_both_binaries_and_they_run() {
    let bin = installed_bin();
    for name in [SERVER, "sandbox-run"] {
        let size = std::fs::metadata(bin.join(name))
            .unwrap_or_else(|e| panic!("cargo install did not install {name}: {e}"))
            .len();
        eprintln!("installed {name}: {size} bytes");
        let version = run_ok(Command::new(bin.join(name)).arg("--version"));
        assert_eq!(
            String::from_utf8_lossy(&version.stdout),
            format!("{name} {}\n", env!("CARGO_PKG_VERSION"))
        );
    }
    let out = run_ok(
        Command::new(bin.join("sandbox-run"))
            .args(["-c", "print(2**100)"])
            .env("SAFE_PYTHON_CACHE_DIR", common::cache_dir()),
    );
    assert_eq!(out.stdout, b"1267650600228229401496703205376\n");
}

#[test]
fn the_dockerfile_builds_as_the_readme_says_and_starts_the_server_it_built() {
    let stages = dockerfile_stages();
    let [build, runtime] = stages.as_slice() else {
        panic!("the Dockerfile should have two stages, build and run")
    };
    // The build image carries the crate's minimum Rust; both are the same Debian release, so the
    // binary finds the glibc it was linked against.
    let cargo_toml = read("Cargo.toml");
    let rust_version = cargo_toml
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = \""))
        .and_then(|v| v.strip_suffix('"'))
        .unwrap();
    let build_image = instructions(build, "FROM")[0];
    let suite = build_image
        .strip_prefix(&format!("rust:{rust_version}-slim-"))
        .and_then(|rest| rest.strip_suffix(" AS build"))
        .unwrap_or_else(|| {
            panic!("the build stage is not rust:{rust_version}-slim-*: {build_image}")
        });
    assert_eq!(
        instructions(runtime, "FROM"),
        [format!("debian:{suite}-slim")]
    );

    // What is copied out of the build is what `cargo install` installed, and it is what runs.
    dockerfile_cargo_install();
    assert_eq!(
        instructions(runtime, "COPY"),
        [format!(
            "--from=build /usr/local/bin/{SERVER} /usr/local/bin/{SERVER}"
        )]
    );
    assert_eq!(instructions(runtime, "CMD"), [format!("[\"{SERVER}\"]")]);
    // Each variable the image sets is read: by a server flag, or (the cache directory) by the
    // library itself, where both front ends find it.
    for env in instructions(runtime, "ENV") {
        let (var, _) = env.split_once('=').unwrap();
        if var != safe_python_executor::cache::CACHE_DIR_ENV {
            server_arg_for_env(var);
        }
    }

    // The README's docker commands build and run this image.
    let readme = read("README.md");
    assert!(readme.contains(&format!("docker build -t {SERVER} .")));
    assert!(readme.contains(&format!("docker run -i --rm {SERVER}")));

    // The build runs the Dockerfile's `cargo install` (installed_bin); the image then runs its
    // commands with the installed binary on the PATH.
    let bin = installed_bin();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    for command in instructions(runtime, "RUN") {
        run_ok(
            Command::new("sh")
                .args(["-c", command])
                .env("PATH", &path)
                .env("SAFE_PYTHON_CACHE_DIR", common::cache_dir()),
        );
    }
}

// ---- Smithery ----

#[test]
fn smithery_publishes_the_bundle_and_reads_only_its_name() {
    // Smithery takes a stdio server as an MCP bundle (`smithery mcp publish BUNDLE -n NAME`) and
    // reads smithery.yaml for the server's name only: anything else there would be ignored.
    let yaml: Value = serde_yaml_ng::from_str(&read("smithery.yaml")).unwrap();
    let keys: Vec<&String> = yaml.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["name"], "smithery.yaml should hold the name alone");
    assert_eq!(yaml["name"], bundle_manifest()["name"]);

    // The README's publish command takes the bundle pack-mcpb.sh writes, under that name.
    let readme = read("README.md");
    let publish = readme
        .lines()
        .find(|l| l.contains("@smithery/cli mcp publish"))
        .expect("the README shows how to publish to Smithery");
    let name = yaml["name"].as_str().unwrap();
    assert!(
        publish.contains(&format!("/{name}"))
            && publish.contains("target/mcpb/safe-python-executor-"),
        "{publish}"
    );
}

// ---- the MCP bundle ----

fn bundle_manifest() -> Value {
    serde_json::from_str(&read("packaging/mcpb/manifest.json")).unwrap()
}

/// The bundle's `mcp_config` with `${__dirname}` and `${user_config.*}` replaced, as a client does
/// (a setting the user left alone has its default): `(command, args, env)`.
fn resolve_mcp_config(
    manifest: &Value,
    dirname: &str,
    user_config: &Value,
) -> (String, Vec<String>, Vec<(String, String)>) {
    let config = &manifest["server"]["mcp_config"];
    let resolve = |s: &str| {
        let mut s = s.replace("${__dirname}", dirname);
        for (key, entry) in manifest["user_config"].as_object().unwrap() {
            let value = match user_config.get(key).unwrap_or(&entry["default"]) {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            s = s.replace(&format!("${{user_config.{key}}}"), &value);
        }
        assert!(!s.contains("${"), "unresolved variable in {s}");
        s
    };
    let env = config["env"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), resolve(v.as_str().unwrap())))
        .collect();
    let args = strings(&config["args"])
        .iter()
        .map(|a| resolve(a))
        .collect();
    (resolve(config["command"].as_str().unwrap()), args, env)
}

/// A user_config entry's default, lowest and highest allowed value.
fn user_config_bounds(entry: &Value) -> [Option<Value>; 3] {
    ["default", "min", "max"].map(|k| entry.get(k).cloned())
}

#[test]
fn the_bundle_manifest_passes_every_setting_to_a_server_flag() {
    let manifest = bundle_manifest();
    assert_eq!(manifest["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(manifest["server"]["type"], "binary");
    let entry_point = manifest["server"]["entry_point"].as_str().unwrap();
    assert_eq!(entry_point, format!("server/{SERVER}"));
    assert_eq!(
        manifest["server"]["mcp_config"]["command"],
        format!("${{__dirname}}/{entry_point}")
    );
    let user_config = manifest["user_config"].as_object().unwrap();

    // Each environment variable is the server's, set from a user_config entry whose default is
    // the server's own.
    let env = manifest["server"]["mcp_config"]["env"].as_object().unwrap();
    let mut settings = Vec::new();
    for (var, value) in env {
        let arg = server_arg_for_env(var);
        let key = value
            .as_str()
            .and_then(|v| v.strip_prefix("${user_config."))
            .and_then(|v| v.strip_suffix('}'))
            .unwrap_or_else(|| panic!("{var} is not set from a user_config entry: {value}"));
        let entry = &user_config[key];
        assert_same_default(&arg, entry.get("default"), "the bundle manifest");
        settings.push((key.to_owned(), arg));
    }
    assert_eq!(
        settings.len(),
        user_config.len(),
        "a user_config entry is unused"
    );

    // With the defaults, the lowest and the highest values, what the client passes through the
    // environment is accepted by the server's parser as the flags those variables stand for.
    let mut configs = sample_configs(user_config, user_config_bounds).to_vec();
    configs.push(json!({"allow": "json,os.path,_thread", "timeout": 0.25}));
    for config in &configs {
        let context = format!("the bundle with {config}");
        let (_, args, env) = resolve_mcp_config(&manifest, "/bundle", config);
        assert!(
            args.is_empty(),
            "{context}: settings go through the environment"
        );
        let flags = env_as_flags(
            env.iter()
                .map(|(var, value)| (var.as_str(), value.as_str())),
        );
        let matches = server_accepts(&flags, &context);
        for (key, arg) in &settings {
            if let Some(value) = config.get(key) {
                assert_reached(&matches, arg.get_id().as_str(), value, &context);
            }
        }
    }
}

/// The official packer's CLI, installed under `target/` on first use.
fn mcpb_cli() -> PathBuf {
    let dir = target_dir().join("mcpb-cli");
    let bin = dir.join("node_modules/.bin/mcpb");
    let version = std::fs::read_to_string(dir.join("node_modules/@anthropic-ai/mcpb/package.json"))
        .ok()
        .and_then(|p| serde_json::from_str::<Value>(&p).ok())
        .and_then(|p| p["version"].as_str().map(str::to_owned));
    if !bin.exists() || !version.is_some_and(|v| v.starts_with("2.")) {
        std::fs::create_dir_all(&dir).unwrap();
        run_ok(
            Command::new("npm")
                .args(["install", "--no-audit", "--no-fund", "--prefix"])
                .arg(&dir)
                .arg("@anthropic-ai/mcpb@2"),
        );
    }
    bin
}

#[test]
fn the_bundle_validates_fits_smitherys_limit_and_starts_the_server() {
    let mcpb = mcpb_cli();
    let work = common::temp_dir("mcpb-test");
    let work = work.path();

    // The validator is real: it refuses a broken manifest.
    let mut broken = bundle_manifest();
    broken["server"]["type"] = json!("rust");
    let broken_path = work.join("broken.json");
    std::fs::write(&broken_path, broken.to_string()).unwrap();
    let refused = Command::new(&mcpb)
        .arg("validate")
        .arg(&broken_path)
        .output()
        .unwrap();
    assert!(
        !refused.status.success(),
        "mcpb validate accepted server.type \"rust\""
    );
    run_ok(
        Command::new(&mcpb)
            .arg("validate")
            .arg(Path::new(ROOT).join("packaging/mcpb/manifest.json")),
    );

    // Named per platform and architecture as MCPB names them (Node's `process.platform` and
    // `process.arch`), so that one release carries a bundle for each.
    let platform = match std::env::consts::OS {
        "macos" => "darwin",
        "windows" => "win32",
        other => other,
    };
    let arch = match std::env::consts::ARCH {
        "x86_64" => "x64",
        "aarch64" => "arm64",
        other => other,
    };
    let bundle = Path::new(ROOT).join(format!(
        "target/mcpb/safe-python-executor-{}-{platform}-{arch}.mcpb",
        env!("CARGO_PKG_VERSION")
    ));
    let _ = std::fs::remove_file(&bundle);
    run_ok(
        Command::new("bash")
            .arg(Path::new(ROOT).join("scripts/pack-mcpb.sh"))
            .arg(installed_bin().join(SERVER))
            .env("MCPB", &mcpb),
    );
    let size = std::fs::metadata(&bundle).unwrap().len();
    eprintln!("bundle: {size} bytes");
    assert!(
        size <= MAX_BUNDLE_BYTES,
        "the bundle is {size} bytes, over Smithery's {MAX_BUNDLE_BYTES}"
    );

    // Installed as a client installs it: unpacked, then started with its mcp_config.
    let unpacked = work.join("unpacked");
    run_ok(
        Command::new(&mcpb)
            .arg("unpack")
            .arg(&bundle)
            .arg(&unpacked),
    );
    run_ok(
        Command::new(&mcpb)
            .arg("validate")
            .arg(unpacked.join("manifest.json")),
    );
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(unpacked.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["compatibility"]["platforms"], json!([platform]));
    for config in [json!({}), json!({"allow": "json,heapq", "timeout": 30})] {
        let (command, args, env) =
            resolve_mcp_config(&manifest, unpacked.to_str().unwrap(), &config);
        run_ok(
            Command::new(command)
                .args(args)
                .arg("--check")
                .env_clear()
                .envs(env)
                .env("SAFE_PYTHON_CACHE_DIR", common::cache_dir()),
        );
    }

    // The tools the manifest lists (shown before install, and checked by directories) are the
    // ones the bundled server serves.
    let (command, args, env) =
        resolve_mcp_config(&manifest, unpacked.to_str().unwrap(), &json!({}));
    let mut server = Command::new(command);
    server
        .args(args)
        .env_clear()
        .envs(env)
        .env("SAFE_PYTHON_CACHE_DIR", common::cache_dir());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let served: Vec<String> = runtime.block_on(async {
        let client = common::client::connect((), server).await;
        let tools = client.list_all_tools().await.expect("tools/list");
        client.cancel().await.expect("the server stops");
        tools.into_iter().map(|t| t.name.into_owned()).collect()
    });
    let listed: Vec<String> = manifest["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(listed, served, "the manifest's tools are not the server's");
}

#[test]
fn the_bundles_privacy_policy_is_the_readmes_privacy_section() {
    let manifest = bundle_manifest();
    let repository = manifest["repository"]["url"].as_str().unwrap();
    let policies = strings(&manifest["privacy_policies"]);
    assert!(!policies.is_empty(), "the bundle names no privacy policy");
    let readme = read("README.md");
    for policy in policies {
        let anchor = policy
            .strip_prefix(&format!("{repository}#"))
            .unwrap_or_else(|| panic!("{policy} is not a section of the repository's README"));
        assert!(
            readme.lines().any(|l| l
                .strip_prefix("## ")
                .is_some_and(|h| h.to_lowercase().replace(' ', "-") == anchor)),
            "the README has no section #{anchor}"
        );
    }
}

// ---- the README's client configurations ----

#[test]
fn readme_client_configs_start_the_server_with_flags_it_accepts() {
    let mut launchers = Vec::new();
    for block in common::fenced_blocks(&read("README.md"), "json") {
        let config: Value = serde_json::from_str(&block)
            .unwrap_or_else(|e| panic!("a JSON block of the README does not parse: {e}\n{block}"));
        for (name, server) in config["mcpServers"].as_object().into_iter().flatten() {
            let context = format!("README server {name:?}");
            let command = server["command"].as_str().unwrap();
            let (launcher, mut args) = server_args(command, strings(&server["args"]), &context);
            launchers.push(launcher);
            args.extend(env_as_flags(json_env(&server["env"])));
            server_accepts(&args, &context);
        }
    }
    for launcher in ["uvx", "npx", "a path"] {
        assert!(
            launchers.contains(&launcher),
            "the README shows no config that starts the server through {launcher}: {launchers:?}"
        );
    }
}

/// How a README config starts the server (`uvx` or `npx` with the package, or the binary's path)
/// and the arguments that reach the server.
#[track_caller]
fn server_args(command: &str, args: Vec<String>, context: &str) -> (&'static str, Vec<String>) {
    let (launcher, package) = match command {
        "uvx" => ("uvx", &["safe-python-mcp"][..]),
        "npx" => ("npx", &["-y", "safe-python-mcp"][..]),
        path => {
            assert_eq!(Path::new(path).file_name().unwrap(), SERVER, "{context}");
            ("a path", &[][..])
        }
    };
    assert!(
        args.iter()
            .map(String::as_str)
            .take(package.len())
            .eq(package.iter().copied()),
        "{context}: {command} should be given {package:?} first, not {args:?}"
    );
    (launcher, args[package.len()..].to_vec())
}
