//! What `sandbox-run` says on its first run, with a cold cache, when stderr is not a terminal.

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::Stdio;

#[test]
fn a_cold_cache_is_announced_in_plain_lines_naming_the_cache() {
    let cold = common::temp_dir("first-run-cold-cache");
    let cold = cold.path();
    let mut child = common::spawn::sandbox_run(&["-c", "print(1)"])
        .env("SAFE_PYTHON_CACHE_DIR", cold)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Both lines come before the compile starts: read them, then stop the compile.
    let mut lines = BufReader::new(child.stderr.take().unwrap()).split(b'\n');
    let mut line = || String::from_utf8(lines.next().unwrap().unwrap()).unwrap();
    let (cache, preparing) = (line(), line());
    child.kill().unwrap();
    child.wait().unwrap();

    assert!(
        cache.starts_with("sandbox-run: caching the compiled sandbox in ")
            && cache.contains(&cold.display().to_string())
            && cache.contains("SAFE_PYTHON_CACHE_DIR"),
        "{cache}"
    );
    assert!(
        preparing.starts_with("sandbox-run: preparing the Python sandbox for first use"),
        "{preparing}"
    );
    for line in [cache, preparing] {
        assert!(
            !line.contains(['\x1b', '\r']),
            "not a terminal, yet {line:?}"
        );
    }
}
