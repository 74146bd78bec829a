//! What `cargo install safe-python-executor` would get from a published crate.

use std::process::Command;

#[test]
fn the_published_crate_carries_the_guest_and_not_its_sources() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "package",
            "--list",
            "--allow-dirty",
            "--offline",
            "--manifest-path",
        ])
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"))
        .output()
        .expect("cargo runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let files = String::from_utf8(out.stdout).unwrap();
    let files: Vec<&str> = files.lines().collect();
    for needed in [
        "wasm/safe-python-guest.wasm",
        "build.rs",
        "src/bin/safe-python-mcp.rs",
        "src/bin/sandbox-run.rs",
        "README.md",
    ] {
        assert!(
            files.contains(&needed),
            "the package lacks {needed}: {files:?}"
        );
    }
    for file in &files {
        assert!(
            !file.starts_with("guest/") && !file.starts_with("tests/") && !file.starts_with(".ci/"),
            "the package carries {file}"
        );
    }
}
