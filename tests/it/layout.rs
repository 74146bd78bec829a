//! The plan of `src/` kept true: small files, a core that knows nothing of its front ends, and the
//! data path's lower modules importing nothing above them. Read from the sources themselves, so a
//! change that breaks a rule fails here, naming the file and the rule.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The most lines a source file may have: past it, a file is doing more than one job.
const MAX_LINES: usize = 400;

/// The top-level modules that make up the front ends.
const FRONT_ENDS: &[&str] = &["cli", "mcp", "flags", "first_run"];

/// A source file: its path from the crate root, its top-level module, and its code without comments.
struct Source {
    path: String,
    module: String,
    lines: usize,
    code: String,
}

fn sources() -> Vec<Source> {
    fn walk(dir: &Path, files: &mut Vec<PathBuf>) {
        for entry in fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, files);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    walk(&root.join("src"), &mut files);
    files.sort();
    files
        .into_iter()
        .map(|file| {
            let path = file.strip_prefix(root).unwrap().to_string_lossy();
            source(
                &path.replace('\\', "/"),
                &fs::read_to_string(&file).unwrap(),
            )
        })
        .collect()
}

/// The source at `path` (from the crate root) whose text is `text`.
fn source(path: &str, text: &str) -> Source {
    let first = path["src/".len()..].split('/').next().unwrap();
    // Doc links such as [`crate::session`] are not imports.
    let code = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    Source {
        path: path.to_owned(),
        module: first.strip_suffix(".rs").unwrap_or(first).to_owned(),
        lines: text.lines().count(),
        code,
    }
}

/// The crate's top-level modules that `code` names through `crate::`, including in a
/// `crate::{a, b::c}` list.
fn imports(code: &str, modules: &BTreeSet<String>) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        let names: Vec<&str> = match rest.strip_prefix('{') {
            Some(list) => list[..list.find('}').unwrap_or(list.len())]
                .split(',')
                .collect(),
            None => vec![rest],
        };
        for name in names {
            let name: String = name
                .trim_start()
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if modules.contains(&name) {
                found.insert(name);
            }
        }
    }
    found
}

/// Each top-level module and the top-level modules it imports (itself left out).
fn graph(sources: &[Source]) -> BTreeMap<String, BTreeSet<String>> {
    let modules: BTreeSet<String> = sources.iter().map(|s| s.module.clone()).collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for source in sources {
        let mut used = imports(&source.code, &modules);
        used.remove(&source.module);
        graph.entry(source.module.clone()).or_default().extend(used);
    }
    graph
}

/// A rule on what a module may import.
struct Rule {
    says: &'static str,
    /// Whether the rule is about this top-level module.
    applies: fn(&str) -> bool,
    /// The modules it must not import; empty for "none of ours".
    forbidden: &'static [&'static str],
}

const RULES: [Rule; 4] = [
    Rule {
        says: "the core imports no front end",
        applies: |m| !FRONT_ENDS.contains(&m) && m != "bin" && m != "lib",
        forbidden: FRONT_ENDS,
    },
    Rule {
        says: "the budget and the import policy import nothing of ours",
        applies: |m| m == "limits" || m == "policy",
        forbidden: &[],
    },
    Rule {
        says: "how a call ended is told without the sandbox or sessions",
        applies: |m| m == "outcome",
        forbidden: &["sandbox", "session"],
    },
    Rule {
        says: "the sandbox knows nothing of sessions",
        applies: |m| m == "sandbox",
        forbidden: &["session"],
    },
];

/// Every way the sources break the plan, one sentence each.
fn violations(sources: &[Source]) -> Vec<String> {
    let mut found = Vec::new();
    for source in sources {
        if source.lines > MAX_LINES {
            found.push(format!(
                "{} has {} lines (at most {MAX_LINES})",
                source.path, source.lines
            ));
        }
    }
    let graph = graph(sources);
    for rule in RULES {
        for (module, used) in graph.iter().filter(|(m, _)| (rule.applies)(m)) {
            let bad: Vec<&String> = used
                .iter()
                .filter(|u| rule.forbidden.is_empty() || rule.forbidden.contains(&u.as_str()))
                .collect();
            if !bad.is_empty() {
                found.push(format!("{}, but `{module}` imports {bad:?}", rule.says));
            }
        }
    }
    if let Some(circle) = circle(&graph) {
        found.push(format!("modules import each other: {}", circle.join(" → ")));
    }
    found
}

/// An import circle among the top-level modules, if there is one.
fn circle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        module: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|m| m == module) {
            let mut circle = path[at..].to_vec();
            circle.push(module.to_owned());
            return Some(circle);
        }
        if done.contains(module) {
            return None;
        }
        path.push(module.to_owned());
        for next in graph.get(module).into_iter().flatten() {
            if let Some(circle) = visit(next, graph, path, done) {
                return Some(circle);
            }
        }
        path.pop();
        done.insert(module.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|m| visit(m, graph, &mut Vec::new(), &mut done))
}

#[test]
fn the_sources_follow_the_plan() {
    let sources = sources();
    assert!(sources.iter().any(|s| s.path == "src/sandbox/mod.rs"));
    let violations = violations(&sources);
    assert!(violations.is_empty(), "{}", violations.join("\n"));
}

#[test]
fn each_rule_catches_its_breach() {
    let modules = [
        "src/cli.rs",
        "src/limits.rs",
        "src/output.rs",
        "src/policy.rs",
        "src/sandbox/mod.rs",
        "src/session/mod.rs",
    ];
    let clean: Vec<Source> = modules.iter().map(|p| source(p, "")).collect();
    assert_eq!(violations(&clean), Vec::<String>::new());
    for (path, code, rule) in [
        ("src/output.rs", "use crate::cli::Args;", "no front end"),
        (
            "src/limits.rs",
            "use crate::{output::Stream};",
            "nothing of ours",
        ),
        (
            "src/outcome/classify.rs",
            "crate::sandbox::Sandbox",
            "without the sandbox",
        ),
        (
            "src/sandbox/host.rs",
            "use crate::{output, session::Session};",
            "nothing of sessions",
        ),
        ("src/session/mod.rs", "use crate::cli;", "no front end"),
        (
            "src/output.rs",
            &"\n".repeat(MAX_LINES + 1),
            "lines (at most",
        ),
    ] {
        let mut broken: Vec<Source> = modules.iter().map(|p| source(p, "")).collect();
        broken.push(source(path, code));
        let found = violations(&broken);
        assert!(found.iter().any(|v| v.contains(rule)), "{path}: {found:?}");
    }
    let mut circular: Vec<Source> = modules.iter().map(|p| source(p, "")).collect();
    circular.push(source("src/session/snapshot.rs", "use crate::output;"));
    circular.push(source("src/output.rs", "use crate::session;"));
    let found = violations(&circular);
    assert!(
        found.iter().any(|v| v.contains("import each other")),
        "{found:?}"
    );
    let documented = source(
        "src/sandbox/mod.rs",
        "//! Sessions ([`crate::session`]) use it.",
    );
    let session = BTreeSet::from(["session".to_owned()]);
    assert!(
        imports(&documented.code, &session).is_empty(),
        "a doc link is no import"
    );
}
