//! The README's examples print what the README shows: every `$ command` line of its ```console
//! blocks is run (with the built binaries on the PATH) and its output compared with the lines that
//! follow it.

use crate::common;

use std::process::Command;

#[test]
fn readme_examples_print_what_the_readme_shows() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let bin_dir = std::path::Path::new(common::spawn::SANDBOX_RUN)
        .parent()
        .unwrap();
    let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap());
    let mut examples: Vec<(String, String)> = Vec::new();
    for block in common::fenced_blocks(&readme, "console") {
        for line in block.lines() {
            match line.strip_prefix("$ ") {
                Some(command) => examples.push((command.to_owned(), String::new())),
                None => {
                    let (_, output) = examples
                        .last_mut()
                        .expect("a console block starts with `$ `");
                    output.push_str(line);
                    output.push('\n');
                }
            }
        }
    }
    // The binaries print a notice when they compile a guest: have both compiled already.
    common::sandbox();
    if examples.iter().any(|(c, _)| c.contains("--engine cpython")) {
        common::cpython();
    }
    for (command, expected) in &examples {
        let out = Command::new("sh")
            .args(["-c", &format!("{command} 2>&1")])
            .env("PATH", &path)
            .env("SAFE_PYTHON_CACHE_DIR", common::cache_dir())
            .output()
            .unwrap();
        assert_eq!(
            &String::from_utf8_lossy(&out.stdout),
            expected,
            "the README's `{command}` prints otherwise"
        );
    }
    assert!(examples.len() >= 3, "the README shows its examples");
}

/// The chat example of the CPython section: its code, run as the server runs it with the data
/// stack allowed, prints the text the README shows.
#[test]
fn the_readme_chat_example_prints_what_the_readme_shows() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let chat = &readme[readme
        .find("In a chat, it looks like this")
        .expect("the chat example")..];
    let code = common::fenced_blocks(chat, "python").remove(0);
    let shown = common::fenced_blocks(chat, "text").remove(0);
    let options = safe_python_executor::RunOptions {
        policy: std::sync::Arc::new(safe_python_executor::ImportPolicy::with_extra(["@data"])),
        ..Default::default()
    };
    let r = common::run_in(common::cpython(), &code, &options);
    assert!(!r.is_failure(), "{r:#?}");
    assert_eq!(r.stdout, shown);
}
