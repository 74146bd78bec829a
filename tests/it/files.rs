//! Files without a file system (issue 15): input files under `/data`, read-only; what the code
//! writes under `/out`, in memory, returned with the result; on both engines, fresh and in
//! sessions, and nothing of the host's reachable.

use std::sync::Arc;

use safe_python_executor::{
    FileLimits, FilesError, ImportPolicy, InputFiles, Limit, RunOptions, RunResult, Session,
};

use crate::common::{Each, Engine, runtime};

const SALES: &str = "region,units,price\nNorth,120,3.5\nSouth,80,3.5\nNorth,45,6.0\nEast,60,6.0\n";

fn inputs(files: &[(&str, &[u8])]) -> InputFiles {
    let files = files.iter().map(|(p, b)| (p.to_string(), b.to_vec()));
    InputFiles::new(files, FileLimits::default()).expect("valid files")
}

fn options(files: &[(&str, &[u8])], allow: &[&str]) -> RunOptions {
    RunOptions {
        policy: Arc::new(ImportPolicy::with_extra(allow)),
        files: Some(inputs(files)),
        ..RunOptions::default()
    }
}

fn run(engine: Engine, code: &str, options: &RunOptions) -> RunResult {
    runtime()
        .block_on(engine.sandbox().run(code, options))
        .expect("no host fault")
}

#[track_caller]
fn completed(engine: Engine, code: &str, options: &RunOptions) -> RunResult {
    let r = run(engine, code, options);
    assert!(
        !r.is_failure(),
        "{engine:?}: {code:?} did not complete: {r:#?}"
    );
    r
}

const CSV_SUMMARY: &str = r#"
import csv
totals = {}
with open("/data/sales.csv", newline="") as f:
    for row in csv.DictReader(f):
        totals[row["region"]] = totals.get(row["region"], 0) + int(row["units"]) * float(row["price"])
with open("/out/summary.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["region", "revenue"])
    for region in sorted(totals):
        w.writerow([region, totals[region]])
sorted(totals.items())
"#;

#[test]
fn a_csv_is_summarised_with_csv_and_the_summary_comes_back_on_both_engines() {
    for engine in Engine::ALL {
        let r = completed(
            engine,
            CSV_SUMMARY,
            &options(&[("sales.csv", SALES.as_bytes())], &["csv"]),
        );
        assert_eq!(
            r.result(),
            Some("[('East', 360.0), ('North', 690.0), ('South', 280.0)]"),
            "{engine:?}"
        );
        assert_eq!(r.files.len(), 1, "{engine:?}: {:?}", r.files);
        let out = &r.files[0];
        assert_eq!(out.path, "/out/summary.csv");
        assert_eq!(out.media_type, "text/csv");
        assert_eq!(
            String::from_utf8_lossy(&out.data).replace("\r\n", "\n"),
            "region,revenue\nEast,360.0\nNorth,690.0\nSouth,280.0\n"
        );
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(
            json["files"],
            serde_json::json!([{"path": "/out/summary.csv", "size": out.data.len(), "media_type": "text/csv"}])
        );
    }
}

#[test]
fn pathlib_io_folders_and_listing_work_on_data_and_out() {
    let code = r#"
import io, pathlib
data = pathlib.Path("/data")
names = sorted(p.name for p in data.iterdir())
text = (data / "notes" / "a.txt").read_text()
out = pathlib.Path("/out")
(out / "deep" / "er").mkdir(parents=True)
(out / "deep" / "er" / "b.txt").write_text(text.upper())
buf = io.StringIO(); buf.write("x"); (out / "c.bin").write_bytes(bytes(range(3)))
(out / "tmp.txt").write_text("gone")
(out / "tmp.txt").unlink()
(names, text, sorted(str(p) for p in out.rglob("*")))
"#;
    for engine in Engine::ALL {
        let files: &[(&str, &[u8])] = &[("notes/a.txt", b"hi"), ("x.csv", b"1")];
        let r = completed(engine, code, &options(files, &["io", "pathlib"]));
        assert_eq!(
            r.result(),
            Some(
                "(['notes', 'x.csv'], 'hi', ['/out/c.bin', '/out/deep', '/out/deep/er', '/out/deep/er/b.txt'])"
            ),
            "{engine:?}"
        );
        let listed: Vec<_> = r
            .files
            .iter()
            .map(|f| (f.path.as_str(), f.media_type.as_str()))
            .collect();
        assert_eq!(
            listed,
            [
                ("/out/c.bin", "application/octet-stream"),
                ("/out/deep/er/b.txt", "text/plain")
            ]
        );
    }
}

#[test]
fn data_is_read_only_and_every_other_path_says_where_files_live() {
    const DENIED: &[&str] = &["PermissionError"];
    const EITHER: &[&str] = &["PermissionError", "FileNotFoundError"];
    const MISSING: &[&str] = &["FileNotFoundError"];
    let cases = [
        ("open('/data/x.csv', 'w')", DENIED),
        ("open('/data/x.csv', 'a')", DENIED),
        ("open('/etc/passwd')", EITHER),
        ("open('/data/../etc/passwd')", EITHER),
        ("open('/out/../../etc/passwd')", EITHER),
        ("open('/proc/self/environ')", EITHER),
        ("open('notes.txt', 'w')", EITHER),
        ("open('/data/missing.csv')", MISSING),
    ];
    for engine in Engine::ALL {
        for (code, kinds) in cases {
            let r = run(engine, code, &options(&[("x.csv", b"1")], &[]));
            let error = r
                .error()
                .unwrap_or_else(|| panic!("{engine:?} {code}: {r:#?}"));
            assert!(
                kinds.contains(&error.kind.as_str()),
                "{engine:?} {code}: {error:#?}"
            );
            assert!(
                error.message.contains("/data") && error.message.contains("/out"),
                "{engine:?} {code}: {}",
                error.message
            );
        }
    }
}

#[test]
fn symlinks_links_and_escapes_reach_no_host_file() {
    let code = r#"
import os
results = []
for attempt in (
    lambda: os.symlink("/etc/passwd", "/out/p"),
    lambda: os.link("/data/x.csv", "/out/y"),
    lambda: os.rename("/data/x.csv", "/out/y"),
    lambda: os.listdir("/"),
    lambda: os.listdir("/out/.."),
    lambda: os.open("../etc/passwd", os.O_RDONLY, dir_fd=os.open("/out", os.O_RDONLY)),
):
    try:
        attempt()
        results.append("ok")
    except OSError as e:
        results.append(type(e).__name__)
results
"#;
    for engine in Engine::ALL {
        let options = options(&[("x.csv", b"1")], &["os"]);
        let r = completed(engine, code, &options);
        let result = r.result().unwrap();
        assert!(!result.contains("'ok'"), "{engine:?}: {result}");
        assert!(r.files.is_empty(), "{engine:?}: {:?}", r.files);
        // The same in a session, twice: the second call on the state the first left.
        runtime().block_on(async {
            let mut session = Session::new(engine.sandbox()).await.unwrap();
            for _ in 0..2 {
                let r = session.run(code, &options).await.unwrap();
                let result = r.result.result().unwrap_or_default().to_owned();
                assert!(
                    result.starts_with('[') && !result.contains("'ok'"),
                    "{engine:?}: {r:#?}"
                );
            }
        });
    }
}

#[test]
fn without_files_there_is_no_file_system() {
    for engine in Engine::ALL {
        let r = run(engine, "open('/out/x', 'w')", &RunOptions::default());
        assert!(r.error().is_some(), "{engine:?}: {r:#?}");
        assert!(r.files.is_empty());
    }
}

#[test]
fn bad_paths_and_oversized_input_are_refused_with_the_problem_named() {
    let limits = FileLimits::default();
    let check = |files: Vec<(String, Vec<u8>)>| InputFiles::new(files, limits).unwrap_err();
    let one = |path: &str| check(vec![(path.to_owned(), b"x".to_vec())]);
    assert_eq!(
        one("/etc/passwd"),
        FilesError::Absolute("/etc/passwd".into())
    );
    assert_eq!(one("../x.csv"), FilesError::NotPlain("../x.csv".into()));
    assert_eq!(one("a/./b"), FilesError::NotPlain("a/./b".into()));
    assert_eq!(one("a//b"), FilesError::NotPlain("a//b".into()));
    assert_eq!(one("a\\b"), FilesError::NotPlain("a\\b".into()));
    assert_eq!(one(""), FilesError::NotPlain("".into()));
    let deep = vec!["d"; limits.max_depth + 1].join("/");
    assert!(matches!(
        one(&deep),
        FilesError::TooDeep {
            depth: 9,
            max: 8,
            ..
        }
    ));
    assert!(one(&"n".repeat(300)).to_string().contains("300 bytes long"));
    let big = check(vec![("big.bin".into(), vec![0; limits.max_file_bytes + 1])]);
    assert!(matches!(big, FilesError::FileTooLarge { .. }), "{big}");
    assert!(big.to_string().contains("big.bin"), "{big}");
    let many = check(
        (0..=limits.max_files)
            .map(|i| (format!("f{i}.txt"), vec![]))
            .collect(),
    );
    assert_eq!(
        many,
        FilesError::TooMany {
            count: 257,
            max: 256
        }
    );
    let total = check(
        (0..3)
            .map(|i| (format!("f{i}"), vec![0; 30 << 20]))
            .collect(),
    );
    assert!(matches!(total, FilesError::TotalTooLarge { .. }), "{total}");
    let clash = check(vec![("a".into(), vec![]), ("a/b".into(), vec![])]);
    assert_eq!(clash, FilesError::Conflict("a/b".into()));
}

#[test]
fn out_is_bounded_in_entries_depth_and_bytes() {
    let code = r#"
import os
def attempt(f):
    try:
        f()
        return "ok"
    except OSError as e:
        return type(e).__name__ + str(e.errno)
many = 0
try:
    while many < 1000:
        open("/out/f%d" % many, "w").close()
        many += 1
except OSError:
    pass
for i in range(many):
    os.remove("/out/f%d" % i)
deep = attempt(lambda: os.makedirs("/out/" + "/".join(["d"] * 12)))
big = attempt(lambda: open("/out/big", "wb").write(b"x" * (80 << 20)))
(many, deep, big)
"#;
    for engine in Engine::ALL {
        let r = completed(engine, code, &options(&[], &["os"]));
        let result = r.result().unwrap();
        assert!(result.starts_with("(256, 'OSError"), "{engine:?}: {result}");
        assert!(
            result.ends_with("'OSError51')") || result.contains("MemoryError"),
            "{engine:?}: {result}"
        );
    }
}

#[test]
fn files_stay_with_a_session_and_are_rolled_back_with_it() {
    for engine in Engine::ALL {
        runtime().block_on(async {
            let sandbox = engine.sandbox();
            let mut session = Session::new(sandbox).await.unwrap();
            let first = options(&[("a.txt", b"one")], &[]);
            let r = session.run("open('/out/kept.txt', 'w').write('kept')", &first).await.unwrap();
            assert!(!r.result.is_failure(), "{engine:?}: {:#?}", r.result);
            // A later call without files still sees both folders.
            let plain = RunOptions::default();
            let r = session
                .run("(open('/data/a.txt').read(), open('/out/kept.txt').read())", &plain)
                .await
                .unwrap();
            assert_eq!(r.result.result(), Some("('one', 'kept')"), "{engine:?}: {:#?}", r.result);
            // A call that hits a limit is undone, files and all.
            let tight = RunOptions {
                limits: safe_python_executor::Limits {
                    timeout: std::time::Duration::from_secs(2),
                    ..Default::default()
                },
                files: Some(inputs(&[("b.txt", b"two")])),
                ..RunOptions::default()
            };
            let code = "open('/out/kept.txt', 'w').write('lost'); open('/out/new.txt', 'w').write('x')\nwhile True: pass";
            let r = session.run(code, &tight).await.unwrap();
            assert!(r.rolled_back, "{engine:?}");
            assert_eq!(r.result.limit(), Some(Limit::Timeout));
            let code = "import os; (sorted(os.listdir('/data')), sorted(os.listdir('/out')), open('/out/kept.txt').read())";
            let r = session
                .run(code, &RunOptions { policy: Arc::new(ImportPolicy::with_extra(["os"])), ..plain.clone() })
                .await
                .unwrap();
            assert_eq!(
                r.result.result(),
                Some("(['a.txt'], ['kept.txt'], 'kept')"),
                "{engine:?}: {:#?}",
                r.result
            );
            assert_eq!(r.result.files.len(), 1);
        });
    }
}

/// A session whose earlier calls had no files (and whose guest may hold descriptors of its own,
/// such as the CPython engine's standard library) is given files later: they are found, and an
/// error from before said where files would be.
#[test]
fn files_first_given_in_a_later_call_of_a_session_are_found() {
    for engine in Engine::ALL {
        runtime().block_on(async {
            let mut session = Session::new(engine.sandbox()).await.unwrap();
            let plain = RunOptions {
                policy: Arc::new(ImportPolicy::with_extra(["io"])),
                ..RunOptions::default()
            };
            let r = session
                .run("import io\nopen('/data/a.txt')", &plain)
                .await
                .unwrap();
            let e = r
                .result
                .error()
                .unwrap_or_else(|| panic!("{engine:?}: {:#?}", r.result));
            assert!(
                e.message.contains(safe_python_protocol::NO_FILES_HERE),
                "{engine:?}: {}",
                e.message
            );
            let with_files = RunOptions {
                files: Some(inputs(&[("a.txt", b"late")])),
                ..plain.clone()
            };
            let code =
                "held = open('/data/a.txt')\nopen('/out/b.txt', 'w').write('x')\nheld.read()";
            let r = session.run(code, &with_files).await.unwrap();
            assert_eq!(
                r.result.result(),
                Some("'late'"),
                "{engine:?}: {:#?}",
                r.result
            );
            assert_eq!(r.result.files.len(), 1, "{engine:?}");
            let r = session
                .run("open('/out/b.txt').read()", &plain)
                .await
                .unwrap();
            assert_eq!(
                r.result.result(),
                Some("'x'"),
                "{engine:?}: {:#?}",
                r.result
            );
        });
    }
}

#[test]
fn pandas_summarises_the_csv_and_a_chart_comes_back_as_a_png_on_cpython() {
    let code = r#"
import pandas as pd
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
sales = pd.read_csv("/data/sales.csv")
sales["revenue"] = sales.units * sales.price
summary = sales.groupby("region")["revenue"].sum().sort_values(ascending=False)
summary.to_csv("/out/revenue.csv")
summary.plot.bar()
plt.savefig("/out/revenue.png")
plt.close("all")
summary.to_dict()
"#;
    let r = completed(
        Engine::CPython,
        code,
        &options(
            &[("sales.csv", SALES.as_bytes())],
            &["pandas", "matplotlib"],
        ),
    );
    assert_eq!(
        r.result(),
        Some("{'North': 690.0, 'East': 360.0, 'South': 280.0}")
    );
    let listed: Vec<_> = r
        .files
        .iter()
        .map(|f| (f.path.as_str(), f.media_type.as_str()))
        .collect();
    assert_eq!(
        listed,
        [
            ("/out/revenue.csv", "text/csv"),
            ("/out/revenue.png", "image/png")
        ]
    );
    assert!(r.files[1].data.starts_with(b"\x89PNG\r\n\x1a\n"));
    assert_eq!(
        String::from_utf8_lossy(&r.files[0].data),
        "region,revenue\nNorth,690.0\nEast,360.0\nSouth,280.0\n"
    );
}

mod cli {
    use std::process::Output;

    use crate::common::spawn;

    fn sandbox_run(args: &[&str], stdin: Option<&str>) -> Output {
        spawn::output(spawn::sandbox_run(args), stdin)
    }

    fn text(bytes: &[u8]) -> String {
        String::from_utf8_lossy(bytes).into_owned()
    }

    #[test]
    fn file_puts_host_files_in_data_and_out_writes_what_the_code_wrote() {
        let dir = crate::common::temp_dir("files-cli");
        let input = dir.path().join("sales.csv");
        std::fs::write(&input, super::SALES).unwrap();
        let out = dir.path().join("out");
        let code = "import csv, pathlib\nrows = list(csv.DictReader(open('/data/raw/sales.csv')))\npathlib.Path('/out/sub').mkdir()\nopen('/out/sub/n.txt', 'w').write(str(len(rows)))\nlen(rows)";
        let file = format!("raw/sales.csv={}", input.display());
        let o = sandbox_run(
            &[
                "--file",
                &file,
                "--out",
                out.to_str().unwrap(),
                "--allow",
                "csv,pathlib",
                "-c",
                code,
            ],
            None,
        );
        assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
        assert_eq!(text(&o.stdout), "4\n");
        assert!(text(&o.stderr).contains("wrote"), "{}", text(&o.stderr));
        assert_eq!(std::fs::read_to_string(out.join("sub/n.txt")).unwrap(), "4");
    }

    #[test]
    fn out_refuses_symlinks_in_the_host_directory() {
        let dir = crate::common::temp_dir("files-cli-link");
        let out = dir.path().join("out");
        let target = dir.path().join("elsewhere");
        std::fs::create_dir_all(&out).unwrap();
        std::fs::create_dir_all(&target).unwrap();
        std::os::unix::fs::symlink(&target, out.join("sub")).unwrap();
        std::os::unix::fs::symlink(target.join("f.txt"), out.join("f.txt")).unwrap();
        for code in [
            "import pathlib; pathlib.Path('/out/sub').mkdir(); open('/out/sub/x.txt', 'w').write('x')",
            "open('/out/f.txt', 'w').write('x')",
        ] {
            let o = sandbox_run(
                &[
                    "--out",
                    out.to_str().unwrap(),
                    "--allow",
                    "pathlib",
                    "-c",
                    code,
                ],
                None,
            );
            assert_ne!(o.status.code(), Some(0), "{code}");
            assert!(
                text(&o.stderr).contains("cannot write"),
                "{}",
                text(&o.stderr)
            );
            assert_eq!(std::fs::read_dir(&target).unwrap().count(), 0, "{code}");
        }
    }

    #[test]
    fn bad_file_arguments_are_usage_errors() {
        let dir = crate::common::temp_dir("files-cli-bad");
        let input = dir.path().join("x.csv");
        std::fs::write(&input, "1").unwrap();
        for (arg, says) in [
            ("x.csv".to_owned(), "NAME=PATH"),
            (format!("/abs={}", input.display()), "absolute"),
            (
                format!("../up={}", input.display()),
                "not a plain relative path",
            ),
            ("y.csv=/no/such/file".to_owned(), "cannot read"),
        ] {
            let o = sandbox_run(&["--file", &arg, "-c", "1"], None);
            assert_eq!(o.status.code(), Some(2), "{arg}");
            assert!(text(&o.stderr).contains(says), "{arg}: {}", text(&o.stderr));
        }
    }

    #[test]
    fn the_repl_keeps_the_files_for_the_whole_session() {
        let dir = crate::common::temp_dir("files-cli-repl");
        let input = dir.path().join("a.txt");
        std::fs::write(&input, "hello").unwrap();
        let out = dir.path().join("out");
        let file = format!("a.txt={}", input.display());
        let entries = "open('/out/b.txt', 'w').write(open('/data/a.txt').read().upper())\nopen('/out/b.txt').read()\n";
        let o = sandbox_run(
            &["--repl", "--file", &file, "--out", out.to_str().unwrap()],
            Some(entries),
        );
        assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
        assert_eq!(text(&o.stdout), "5\n'HELLO'\n");
        assert_eq!(std::fs::read_to_string(out.join("b.txt")).unwrap(), "HELLO");
    }
}
