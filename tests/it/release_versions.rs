//! One version for everything a release ships: the crate's (Cargo.toml) is the protocol crate's and
//! its requirement on it, the MCP bundle's, the npm main package's and the exact version it takes
//! its platform packages at; the PyPI package takes it from Cargo (maturin). And the npm platform
//! packages are the release targets, packaging/targets.tsv. Read from the files themselves, so a
//! bump that misses one fails here, naming it.

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

use serde_json::Value;

const VERSION: &str = env!("CARGO_PKG_VERSION");

fn read(path: &str) -> String {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    fs::read_to_string(&file).unwrap_or_else(|e| panic!("cannot read {}: {e}", file.display()))
}

fn json(path: &str) -> Value {
    serde_json::from_str(&read(path)).unwrap_or_else(|e| panic!("{path} does not parse: {e}"))
}

/// The raw value of `key` in the TOML table `[table]`, for a value on one line: enough for these
/// files, without a TOML parser.
fn toml_value<'a>(text: &'a str, table: &str, key: &str) -> Option<&'a str> {
    let header = format!("[{table}]");
    text.lines()
        .skip_while(|line| line.trim() != header)
        .skip(1)
        .take_while(|line| !line.starts_with('['))
        .filter_map(|line| line.split_once('='))
        .find(|(k, _)| k.trim() == key)
        .map(|(_, value)| value.trim())
}

/// The string `key = "..."` of an inline table `{ key = "...", ... }`.
fn inline_string<'a>(table: &'a str, key: &str) -> Option<&'a str> {
    let start = table.find(&format!(" {key} = \""))? + key.len() + 5;
    table[start..].split('"').next()
}

/// The string at `key` of a JSON file.
fn json_string(path: &str, key: &str) -> Option<String> {
    json(path)[key].as_str().map(str::to_owned)
}

/// The platform packages of the npm main package, and the versions it takes them at.
fn npm_platform_packages() -> Vec<(String, Option<String>)> {
    let main = json("packaging/npm/main/package.json");
    let deps = main["optionalDependencies"].as_object().expect(
        "packaging/npm/main/package.json has no optionalDependencies (the platform packages)",
    );
    deps.iter()
        .map(|(name, version)| (name.clone(), version.as_str().map(str::to_owned)))
        .collect()
}

#[test]
fn every_release_file_has_the_crate_version() {
    let cargo = read("Cargo.toml");
    let protocol = read("protocol/Cargo.toml");
    let mut found = vec![
        (
            "protocol/Cargo.toml: version".to_owned(),
            toml_value(&protocol, "package", "version").map(|v| v.trim_matches('"').to_owned()),
        ),
        (
            "Cargo.toml: the requirement on safe-python-protocol".to_owned(),
            toml_value(&cargo, "dependencies", "safe-python-protocol")
                .and_then(|dep| inline_string(dep, "version"))
                .map(str::to_owned),
        ),
        (
            "packaging/mcpb/manifest.json: version".to_owned(),
            json_string("packaging/mcpb/manifest.json", "version"),
        ),
        (
            "packaging/npm/main/package.json: version".to_owned(),
            json_string("packaging/npm/main/package.json", "version"),
        ),
    ];
    for (name, version) in npm_platform_packages() {
        found.push((
            format!("packaging/npm/main/package.json: optionalDependencies {name}"),
            version,
        ));
    }
    let wrong: Vec<String> = found
        .iter()
        .filter(|(_, version)| version.as_deref() != Some(VERSION))
        .map(|(place, version)| format!("{place} is {version:?}"))
        .collect();
    assert!(
        wrong.is_empty(),
        "the crate's version is {VERSION}, but:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_npm_platform_packages_are_the_release_targets() {
    let targets: BTreeSet<String> = read("packaging/targets.tsv")
        .lines()
        .filter(|line| !line.trim().is_empty() && !line.starts_with('#'))
        .map(|line| format!("@safe-python-mcp/{}", line.split('\t').next().unwrap()))
        .collect();
    let packages: BTreeSet<String> = npm_platform_packages()
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    assert_eq!(
        packages, targets,
        "packaging/npm/main/package.json's optionalDependencies are not packaging/targets.tsv's platforms"
    );
}

#[test]
fn the_pypi_package_takes_the_crate_version() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("pyproject.toml");
    assert!(
        file.exists(),
        "pyproject.toml is missing: it makes the PyPI package safe-python-mcp (maturin, \
         `dynamic = [\"version\"]`)"
    );
    let pyproject = read("pyproject.toml");
    let dynamic = toml_value(&pyproject, "project", "dynamic");
    assert!(
        dynamic.is_some_and(|d| d.contains("\"version\"")),
        "pyproject.toml's [project] must have `dynamic = [\"version\"]`, so that maturin takes the \
         version from Cargo.toml; it has dynamic = {dynamic:?}"
    );
    let literal = toml_value(&pyproject, "project", "version");
    assert_eq!(
        literal, None,
        "pyproject.toml's [project] must not state a version: maturin takes it from Cargo.toml"
    );
}
