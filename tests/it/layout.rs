//! The plan of `src/` kept true: small files, a core that knows nothing of its front ends, the
//! data path's lower modules importing nothing above them, and no two modules importing each other
//! at any level of the tree. Read from the sources themselves, so a change that breaks a rule fails
//! here, naming the file and the rule.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The most lines a source file may have: past it, a file is doing more than one job.
const MAX_LINES: usize = 400;

/// The top-level modules that make up the front ends.
const FRONT_ENDS: &[&str] = &["cli", "mcp", "flags"];

/// A module's path from the crate root (`["sandbox", "host"]`; the root is empty).
type ModPath = Vec<String>;

/// A source file: its path from the crate root, its module, and its code without comments.
struct Source {
    path: String,
    module: ModPath,
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
    let rel = path["src/".len()..].strip_suffix(".rs").unwrap_or(path);
    let mut module: ModPath = rel.split('/').map(str::to_owned).collect();
    if matches!(module.last().map(String::as_str), Some("mod" | "lib")) {
        module.pop();
    }
    // Doc links such as [`crate::session`] are not imports.
    let code = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    Source {
        path: path.to_owned(),
        module,
        lines: text.lines().count(),
        code,
    }
}

/// Each line of `code` with the module it is in: `module`, or an inline module of it (`mod
/// tests { ... }`), found by counting braces outside string and character literals.
fn lines_in_modules(code: &str, module: &ModPath) -> Vec<(ModPath, String)> {
    let mut open: Vec<(String, i64)> = Vec::new();
    let mut depth = 0i64;
    let mut lines = Vec::new();
    for line in statements(code) {
        let line = line.as_str();
        let words: Vec<&str> = line.split_whitespace().collect();
        let at = words.iter().position(|w| *w == "mod");
        if let Some(at) = at.filter(|&at| words.get(at + 2) == Some(&"{")) {
            open.push((words[at + 1].to_owned(), depth));
        }
        let mut path = module.clone();
        path.extend(open.iter().map(|(name, _)| name.clone()));
        lines.push((path, line.to_owned()));
        let mut in_string = false;
        let plain = line
            .replace("'{'", "")
            .replace("'}'", "")
            .replace("\\\"", "");
        for c in plain.chars() {
            match c {
                '"' => in_string = !in_string,
                '{' if !in_string => depth += 1,
                '}' if !in_string => depth -= 1,
                _ => {}
            }
        }
        while open.last().is_some_and(|&(_, opened)| depth <= opened) {
            open.pop();
        }
    }
    lines
}

/// The lines of `code`, with a `use` item that spans lines joined into one.
fn statements(code: &str) -> Vec<String> {
    let mut statements: Vec<String> = Vec::new();
    let mut open = false;
    for line in code.lines() {
        match statements.last_mut() {
            Some(last) if open => {
                last.push(' ');
                last.push_str(line.trim());
            }
            _ => statements.push(line.to_owned()),
        }
        let last = statements.last().expect("pushed");
        let words: Vec<&str> = last.split_whitespace().take(2).collect();
        open = words.contains(&"use") && !last.contains(';');
    }
    statements
}

/// The paths `line` names from `crate::`, `super::` or `self::` (or, with `bare`, from any name),
/// each as its segments from that start, lists (`{a, b::c}`) expanded; with the start's module.
fn paths(line: &str, from: &ModPath, bare: bool) -> Vec<(ModPath, Vec<String>)> {
    fn ident(s: &str) -> (&str, &str) {
        let end = s
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(s.len());
        (&s[..end], &s[end..])
    }
    /// The paths of `rest`, which follows `prefix::`.
    fn tree(rest: &str, prefix: Vec<String>, found: &mut Vec<Vec<String>>) {
        let rest = rest.trim_start();
        if let Some(list) = rest.strip_prefix('{') {
            let mut depth = 0;
            let mut start = 0;
            for (i, c) in list.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        tree(&list[start..i], prefix.clone(), found);
                        return;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        tree(&list[start..i], prefix.clone(), found);
                        start = i + 1;
                    }
                    _ => {}
                }
            }
            // A list cut off where the line ends.
            tree(&list[start..], prefix, found);
            return;
        }
        let (name, after) = ident(rest);
        let mut path = prefix;
        if !name.is_empty() {
            path.push(name.to_owned());
        }
        match after.strip_prefix("::") {
            Some(more) => tree(more, path, found),
            None => found.push(path),
        }
    }
    let mut found = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find(|c: char| c.is_alphabetic() || c == '_') {
        let before = rest[..at].chars().last();
        let here = &rest[at..];
        let (word, after) = ident(here);
        rest = after;
        // Only the start of a path: not `b` of `a::b`, not a field or a method.
        if before.is_some_and(|c| c == ':' || c == '.') || !after.starts_with("::") {
            continue;
        }
        let mut start = match word {
            "crate" => Vec::new(),
            "self" => from.clone(),
            "super" => from[..from.len().saturating_sub(1)].to_vec(),
            _ if bare => from.clone(),
            _ => continue,
        };
        let mut segments = Vec::new();
        let named = match word {
            "crate" | "self" | "super" => &after[2..],
            _ => here,
        };
        tree(named, Vec::new(), &mut segments);
        if bare {
            rest = "";
        }
        // `super::super::x`
        for mut path in segments {
            while path.first().is_some_and(|s| s == "super") {
                path.remove(0);
                start.pop();
            }
            found.push((start.clone(), path));
        }
    }
    found
}

/// The crate's modules, and for each the names its own `use` items bind to a module below it
/// (`pub use artifacts::Mismatch` in `cpython` binds `Mismatch` to `cpython::artifacts`).
struct Tree {
    modules: BTreeSet<ModPath>,
    bound: BTreeMap<(ModPath, String), ModPath>,
}

impl Tree {
    fn new(sources: &[Source]) -> Tree {
        let lines: Vec<Vec<(ModPath, String)>> = sources
            .iter()
            .map(|s| lines_in_modules(&s.code, &s.module))
            .collect();
        // Inline modules (`mod tests { ... }`) included.
        let inline = lines.iter().flatten().map(|(m, _)| m.clone());
        let modules = sources
            .iter()
            .map(|s| s.module.clone())
            .chain(inline)
            .collect();
        let mut tree = Tree {
            modules,
            bound: BTreeMap::new(),
        };
        for (module, line) in lines.into_iter().flatten() {
            let line = line.as_str();
            let words: Vec<&str> = line.split_whitespace().take(2).collect();
            let Some(rest) = line.trim_start().split_once("use ").map(|(_, r)| r) else {
                continue;
            };
            if !(words.first() == Some(&"use") || words.get(1) == Some(&"use")) {
                continue;
            }
            for (start, path) in paths(rest, &module, true) {
                let (Some(item), Some(target)) = (path.last(), tree.module_of(&start, &path))
                else {
                    continue;
                };
                if target.starts_with(&module) && target != module {
                    tree.bound.insert((module.clone(), item.clone()), target);
                }
            }
        }
        tree
    }

    /// The deepest module `path` (from `start`) reaches, through the names modules bind.
    fn module_of(&self, start: &ModPath, path: &[String]) -> Option<ModPath> {
        let mut at = start.clone();
        for segment in path {
            let mut next = at.clone();
            next.push(segment.clone());
            if self.modules.contains(&next) {
                at = next;
            } else if let Some(bound) = self.bound.get(&(at.clone(), segment.clone())) {
                at = bound.clone();
            } else {
                break;
            }
        }
        (at != *start || path.is_empty()).then_some(at)
    }
}

/// For each module, the imports among its children: `parent → (child → children it imports)`.
/// A file imports the child of a common parent that holds what it names.
fn graphs(sources: &[Source]) -> BTreeMap<ModPath, BTreeMap<String, BTreeSet<String>>> {
    let tree = Tree::new(sources);
    let mut graphs: BTreeMap<ModPath, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for source in sources {
        if let Some((last, parent)) = source.module.split_last() {
            let graph = graphs.entry(parent.to_vec()).or_default();
            graph.entry(last.clone()).or_default();
        }
        for (module, line) in lines_in_modules(&source.code, &source.module) {
            for (start, path) in paths(&line, &module, false) {
                let Some(target) = tree.module_of(&start, &path) else {
                    continue;
                };
                let common = module.iter().zip(&target).take_while(|(a, b)| a == b);
                let common = common.count();
                if let (Some(from), Some(to)) = (module.get(common), target.get(common)) {
                    let graph = graphs.entry(module[..common].to_vec()).or_default();
                    graph.entry(from.clone()).or_default().insert(to.clone());
                }
            }
        }
    }
    graphs
}

/// A rule on what a top-level module may import.
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
        applies: |m| !FRONT_ENDS.contains(&m) && m != "bin",
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
    let graphs = graphs(sources);
    let top = graphs.get(&Vec::new()).cloned().unwrap_or_default();
    for rule in RULES {
        for (module, used) in top.iter().filter(|(m, _)| (rule.applies)(m)) {
            let bad: Vec<&String> = used
                .iter()
                .filter(|u| rule.forbidden.is_empty() || rule.forbidden.contains(&u.as_str()))
                .collect();
            if !bad.is_empty() {
                found.push(format!("{}, but `{module}` imports {bad:?}", rule.says));
            }
        }
    }
    for (parent, graph) in &graphs {
        if let Some(circle) = circle(graph) {
            let named: Vec<String> = circle
                .iter()
                .map(|m| {
                    parent
                        .iter()
                        .chain([m])
                        .cloned()
                        .collect::<Vec<_>>()
                        .join("::")
                })
                .collect();
            found.push(format!("modules import each other: {}", named.join(" → ")));
        }
    }
    found
}

/// An import circle among the modules of `graph`, if there is one.
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
    let with = |extra: &[(&str, &str)]| {
        let mut sources: Vec<Source> = modules.iter().map(|p| source(p, "")).collect();
        sources.extend(extra.iter().map(|(path, code)| source(path, code)));
        violations(&sources)
    };
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
        let found = with(&[(path, code)]);
        assert!(found.iter().any(|v| v.contains(rule)), "{path}: {found:?}");
    }
    let circle = |found: Vec<String>, names: &str| {
        assert!(
            found
                .iter()
                .any(|v| v.contains("import each other") && v.contains(names)),
            "{names}: {found:?}"
        );
    };
    circle(
        with(&[
            ("src/session/snapshot.rs", "use crate::output;"),
            ("src/output.rs", "use crate::session;"),
        ]),
        "output → session → output",
    );
    // Below the top, through `super::`, a list, a name the parent re-exports, and a test module.
    let nested = [
        ("src/sandbox/pool.rs", "use super::{cow, host::State};"),
        ("src/sandbox/cow.rs", "fn f() -> super::Instance {}"),
        (
            "src/sandbox/instance.rs",
            "use super::super::sandbox::pool;",
        ),
        (
            "src/sandbox/mod.rs",
            "mod cow;\npub(crate) use instance::Instance;",
        ),
    ];
    circle(
        with(&nested),
        "sandbox::cow → sandbox::instance → sandbox::pool",
    );
    let tested = [
        (
            "src/cache/mod.rs",
            "mod tests {\n    use super::trust;\n}\n",
        ),
        ("src/cache/trust.rs", "use super::tests;"),
    ];
    circle(with(&tested), "cache::tests → cache::trust → cache::tests");
    // A child naming its parent, or a parent its child, is no circle.
    let family = [
        ("src/sandbox/host.rs", "use super::SandboxError;"),
        ("src/sandbox/mod.rs", "use host::HostState;"),
    ];
    assert_eq!(with(&family), Vec::<String>::new());
    let documented = source(
        "src/sandbox/mod.rs",
        "//! Sessions ([`crate::session`]) use it.",
    );
    let graphs = graphs(&[documented, source("src/session/mod.rs", "")]);
    assert!(
        graphs.values().all(|g| g.values().all(BTreeSet::is_empty)),
        "a doc link is no import: {graphs:?}"
    );
}
