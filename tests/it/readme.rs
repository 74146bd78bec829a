//! The README and `docs/` show what the code does: every `$ command` line of their ```console
//! blocks is run (with the built binaries on the PATH) and its output compared with the lines that
//! follow it; the chat examples are run as the server runs them; the README stays a front door
//! (at most [`MAX_README_LINES`]); and each block of figures it shows is one dated run's, the same
//! block as `docs/benchmarks.md`'s, as `cargo bench --bench compare -- --record` and
//! `cargo bench --bench speed -- --record` wrote them.

use crate::common;

use std::path::Path;
use std::process::Command;

use common::client::{connect, run_python_with, text};
use serde_json::json;

/// The README is a front door; the rest lives in `docs/`.
const MAX_README_LINES: usize = 300;

/// The blocks `benches/support/record.rs` writes, by bench: between these markers.
const BLOCKS: [(&str, &str, &str); 2] = [
    (
        "compare",
        "<!-- compare:summary (written by `cargo bench --bench compare -- --record`) -->",
        "<!-- /compare:summary -->",
    ),
    (
        "speed",
        "<!-- speed:summary (written by `cargo bench --bench speed -- --record`) -->",
        "<!-- /speed:summary -->",
    ),
];

fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap()
}

/// The README and every page of `docs/`, by path.
fn documents() -> Vec<(String, String)> {
    let mut paths = vec!["README.md".to_owned()];
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs");
    for entry in std::fs::read_dir(docs).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if name.ends_with(".md") {
            paths.push(format!("docs/{name}"));
        }
    }
    paths.sort();
    paths
        .into_iter()
        .map(|p| {
            let text = read(&p);
            (p, text)
        })
        .collect()
}

/// Whether `actual` is what a document shows as `expected`: the same lines, except that a shown
/// line ending in `...` stands for any line that starts with what comes before it (a line too
/// long to show whole).
fn shows(expected: &str, actual: &str) -> bool {
    let (expected, actual): (Vec<&str>, Vec<&str>) =
        (expected.lines().collect(), actual.lines().collect());
    expected.len() == actual.len()
        && expected
            .iter()
            .zip(&actual)
            .all(|(e, a)| match e.strip_suffix("...") {
                Some(start) => a.starts_with(start),
                None => e == a,
            })
}

#[test]
fn the_documents_examples_print_what_the_documents_show() {
    let bin_dir = Path::new(common::spawn::SANDBOX_RUN).parent().unwrap();
    let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap());
    let mut examples: Vec<(String, String, String)> = Vec::new();
    for (doc, text) in documents() {
        for block in common::fenced_blocks(&text, "console") {
            for line in block.lines() {
                match line.strip_prefix("$ ") {
                    Some(command) => {
                        examples.push((doc.clone(), command.to_owned(), String::new()))
                    }
                    None => {
                        let (_, _, output) = examples
                            .last_mut()
                            .expect("a console block starts with `$ `");
                        output.push_str(line);
                        output.push('\n');
                    }
                }
            }
        }
    }
    // The binaries print a notice when they compile a guest: have both compiled already.
    common::sandbox();
    if examples
        .iter()
        .any(|(_, c, _)| c.contains("--engine cpython"))
    {
        common::cpython();
    }
    for (doc, command, expected) in &examples {
        let out = Command::new("sh")
            .args(["-c", &format!("{command} 2>&1")])
            .env("PATH", &path)
            .env("SAFE_PYTHON_CACHE_DIR", common::cache_dir())
            .output()
            .unwrap();
        let printed = String::from_utf8_lossy(&out.stdout);
        assert!(
            shows(expected, &printed),
            "{doc}'s `{command}` prints otherwise:\n{printed}"
        );
    }
    let in_readme = examples.iter().filter(|(d, _, _)| d == "README.md").count();
    assert!(in_readme >= 3, "the README shows its examples");
}

#[test]
fn shown_output_matches_line_by_line_with_cut_lines() {
    assert!(shows("a\nb...\n", "a\nbcd\n"));
    assert!(!shows("a\nb...\n", "a\ncd\n"));
    assert!(!shows("a\n", "a\nb\n"));
    assert!(!shows("a\nb\n", "a\nbc\n"));
}

/// The README's chat: the code it shows, with the CSV it shows in `files`, sent to a server with
/// the default settings, replies with the text it shows.
#[tokio::test]
async fn the_readme_chat_example_replies_what_the_readme_shows() {
    let readme = read("README.md");
    let chat = &readme[readme
        .find("## What it looks like in a chat")
        .expect("the chat example")..];
    let csv = common::fenced_blocks(chat, "csv").remove(0);
    let code = common::fenced_blocks(chat, "python").remove(0);
    let shown = common::fenced_blocks(chat, "text").remove(0);
    let client = connect((), common::spawn::mcp_server(&[])).await;
    let reply = client
        .call_tool(run_python_with(
            json!({"code": code, "files": {"sales.csv": csv}}),
        ))
        .await
        .unwrap();
    assert_eq!(text(&reply), shown);
    client.cancel().await.unwrap();
}

/// The chat example of the CPython engine's page: its code, run as the server runs it with the
/// data stack allowed, prints the text the page shows.
#[test]
fn the_cpython_chat_example_prints_what_the_page_shows() {
    let page = read("docs/cpython.md");
    let chat = &page[page
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

#[test]
fn the_readme_is_a_front_door() {
    let lines = read("README.md").lines().count();
    assert!(
        lines <= MAX_README_LINES,
        "the README has {lines} lines: move the details into docs/"
    );
}

/// The block of figures between `begin` and `end` in `text`, which must hold exactly one.
fn block(text: &str, doc: &str, (begin, end): (&str, &str)) -> String {
    assert_eq!(text.matches(begin).count(), 1, "{doc}: one {begin}");
    let start = text.find(begin).unwrap() + begin.len();
    let stop = text[start..]
        .find(end)
        .unwrap_or_else(|| panic!("{doc}: {begin} ends"));
    text[start..start + stop].trim().to_owned()
}

#[test]
fn the_figures_are_one_dated_run_the_same_in_the_readme_and_the_benchmarks_page() {
    for (bench, begin, end) in BLOCKS {
        let readme = block(&read("README.md"), "README.md", (begin, end));
        let page = block(
            &read("docs/benchmarks.md"),
            "docs/benchmarks.md",
            (begin, end),
        );
        assert_eq!(
            readme, page,
            "the README's {bench} figures are not the benchmarks page's"
        );
        one_dated_run(&readme, bench);
    }
}

/// A block as `--record` writes it: a caption that says when, how and where, then a table whose
/// rows all hold figures.
fn one_dated_run(block: &str, bench: &str) {
    let caption = block.lines().next().unwrap_or_default();
    let date = caption
        .strip_prefix("Measured on ")
        .and_then(|rest| rest.get(..10))
        .unwrap_or_else(|| panic!("the figures are not dated: {caption}"));
    let parts: Vec<&str> = date.split('-').collect();
    assert!(
        parts.len() == 3 && parts.iter().all(|p| p.chars().all(|c| c.is_ascii_digit())),
        "{date} is not a date"
    );
    assert!(
        caption.contains(&format!("by `cargo bench --bench {bench} -- --record`"))
            && caption.contains("cores"),
        "the caption says how and where: {caption}"
    );
    let rows: Vec<&str> = block.lines().filter(|l| l.starts_with('|')).collect();
    assert!(
        rows.len() >= 7,
        "a header, a rule and five rows of figures: {block}"
    );
    let columns = rows[0].matches('|').count();
    assert!(
        rows.iter().all(|r| r.matches('|').count() == columns),
        "every row has the header's columns"
    );
    // Every cell after a row's label starts with a figure (a lead may be negative).
    let figure = |cell: &str| {
        let cell = cell.trim();
        cell.is_empty() || cell.starts_with(|c: char| c.is_ascii_digit() || c == '+' || c == '-')
    };
    assert!(
        rows[2..].iter().all(|r| r.split('|').skip(2).all(figure)),
        "each row holds figures: {block}"
    );
}
