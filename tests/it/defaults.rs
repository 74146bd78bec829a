//! The default allowlist as a newcomer meets it: every module on it imports on both engines, a
//! default server reads the files of a call with `csv`, `json`, `io` and `pathlib`, a refused
//! import says how to allow it, and `--deny` narrows the defaults.

use crate::common;

use common::client::{connect, run_python, run_python_with, structured, text};
use common::{Each, Engine};
use safe_python_executor::{ImportPolicy, RunOptions};
use serde_json::json;

/// Imports each default module (a dotted one as `from a.b import *` would take it) and lists
/// those that fail, with why.
fn import_each(modules: &[&str]) -> String {
    format!(
        "failed = []\nfor name in {modules:?}:\n    try:\n        __import__(name, fromlist=['*'] if '.' in name else [])\n    \
         except BaseException as e:\n        failed.append((name, type(e).__name__, str(e)[:200]))\nfailed"
    )
}

#[test]
fn every_default_module_imports_on_both_engines() {
    for engine in Engine::ALL {
        let r = common::run_in(
            engine.sandbox(),
            &import_each(ImportPolicy::DEFAULT_ALLOWED),
            &RunOptions::default(),
        );
        let expected = match engine {
            Engine::RustPython => "[]",
            // RustPython's codec helper: CPython has none, and the policy is not why.
            Engine::CPython => {
                "[('_pycodecs', 'ModuleNotFoundError', \"No module named '_pycodecs'\")]"
            }
        };
        assert_eq!(r.result(), Some(expected), "{engine:?}: {r:#?}");
    }
}

/// A CSV summarised into a JSON file, with the modules a model reaches for first.
const READ_AND_WRITE: &str = "\
import csv, io, json
from pathlib import Path
config = json.loads(Path('/data/config.json').read_text())
rows = list(csv.DictReader(io.StringIO(Path('/data/sales.csv').read_text())))
total = sum(int(r['amount']) for r in rows if r['region'] in config['regions'])
Path('/out/total.json').write_text(json.dumps({'total': total}))
total";

#[tokio::test]
async fn a_default_server_reads_and_writes_files_with_csv_json_io_and_pathlib() {
    for engine in Engine::ALL {
        let mut server = common::spawn::mcp_server(&[]);
        server.args(engine.flags());
        let client = connect((), server).await;
        let files = json!({
            "sales.csv": "region,amount\nnorth,120\nsouth,80\neast,5\n",
            "config.json": "{\"regions\": [\"north\", \"south\"]}",
        });
        let reply = client
            .call_tool(run_python_with(
                json!({"code": READ_AND_WRITE, "files": files}),
            ))
            .await
            .unwrap();
        let v = structured(&reply);
        assert_eq!(v["result"], "200", "{engine:?}: {v}");
        assert_eq!(v["files"][0]["path"], "/out/total.json", "{engine:?}: {v}");
        assert!(text(&reply).contains("{\"total\": 200}"), "{engine:?}");
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn a_refused_import_says_how_to_allow_it_and_deny_narrows_the_defaults() {
    for engine in Engine::ALL {
        let mut server = common::spawn::mcp_server(&["--deny", "json,pathlib"]);
        server.args(engine.flags());
        let client = connect((), server).await;
        let reply = client
            .call_tool(run_python("import sqlite3", None))
            .await
            .unwrap();
        assert_eq!(structured(&reply)["error"]["type"], "ImportError");
        let said = text(&reply);
        assert!(
            said.contains("allow it with `--allow sqlite3`"),
            "{engine:?}: {said}"
        );
        for code in [
            "import json",
            "from pathlib import Path",
            "import json.decoder",
        ] {
            let reply = client.call_tool(run_python(code, None)).await.unwrap();
            assert_eq!(reply.is_error, Some(true), "{engine:?} {code}");
            assert_eq!(
                structured(&reply)["error"]["type"],
                "ImportError",
                "{engine:?} {code}"
            );
            let said = text(&reply);
            assert!(
                said.contains("refuses importing"),
                "{engine:?} {code}: {said}"
            );
            assert!(
                !said.contains("--allow"),
                "--allow cannot undo --deny: {said}"
            );
        }
        // The rest of the defaults stay.
        let reply = client
            .call_tool(run_python("import csv, io\n1", None))
            .await
            .unwrap();
        assert_eq!(structured(&reply)["result"], "1", "{engine:?}");
        client.cancel().await.unwrap();
    }
}
