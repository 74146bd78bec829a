//! The CPython engine's template with the data stack imported: calls find it loaded, share
//! nothing through it, and meet the allowlist as before; a module that cannot be imported makes
//! the plain template, with a message that names it.

use std::sync::{Arc, OnceLock};

use crate::common::{self, cache_dir, cpython_artifacts, runtime};
use safe_python_executor::{ImportPolicy, RunOptions, Sandbox, SandboxOptions, Session};

/// The CPython engine with `preload` imported into its template.
fn preloading(preload: Vec<String>) -> Sandbox {
    Sandbox::cpython(
        &cpython_artifacts(),
        preload,
        SandboxOptions {
            cache_dir: Some(cache_dir()),
            ..SandboxOptions::default()
        },
    )
    .expect("the CPython engine starts")
}

/// The engine as a server started with `--allow @data` opens it.
fn data_stack() -> &'static Sandbox {
    static SANDBOX: OnceLock<Sandbox> = OnceLock::new();
    SANDBOX.get_or_init(|| {
        let policy = Arc::new(ImportPolicy::with_extra([ImportPolicy::DATA_STACK_ALIAS]));
        let sandbox = preloading(safe_python_executor::template_preloads(&policy));
        let options = RunOptions {
            policy,
            ..RunOptions::default()
        };
        common::warmed_up(sandbox, &options)
    })
}

fn allowing(modules: &[&str]) -> RunOptions {
    RunOptions {
        policy: Arc::new(ImportPolicy::with_extra(modules)),
        ..RunOptions::default()
    }
}

#[track_caller]
fn value(sandbox: &Sandbox, code: &str, options: &RunOptions) -> Option<String> {
    common::completed_value(code, common::run_in(sandbox, code, options))
}

/// Whether the data stack is already imported when a call starts (`sys` allowed to look).
const LOADED: &str =
    "import sys\n[m in sys.modules for m in ('numpy', 'pandas', 'matplotlib.pyplot')]";

#[test]
fn the_template_holds_the_allowed_data_stack_and_says_so() {
    let sandbox = data_stack();
    let info = runtime()
        .block_on(sandbox.template())
        .expect("the template builds")
        .expect("the CPython engine has one");
    assert_eq!(info.failed, None);
    for module in ["numpy", "pandas", "matplotlib.pyplot", "scipy", "sklearn"] {
        assert!(info.preloaded.iter().any(|m| m == module), "{info:?}");
    }
    assert!(info.bytes > 0, "{info:?}");
    let options = allowing(&["sys", ImportPolicy::DATA_STACK_ALIAS]);
    assert_eq!(
        value(sandbox, LOADED, &options).as_deref(),
        Some("[True, True, True]")
    );
}

#[test]
fn fresh_calls_from_the_data_template_compute_and_share_nothing() {
    let sandbox = data_stack();
    let options = allowing(&[ImportPolicy::DATA_STACK_ALIAS]);
    let frame =
        "import numpy, pandas as pd\npd.DataFrame({'a': [1, 2], 'b': [3.5, 4]}).sum().to_dict()";
    assert_eq!(
        value(sandbox, frame, &options).as_deref(),
        Some("{'a': 3.0, 'b': 7.5}")
    );
    let changed = "import numpy\nnumpy.pi = 3\nnumpy.planted = 1\nnumpy.random.seed(1)";
    common::completed_value(changed, common::run_in(sandbox, changed, &options));
    let seen = "import numpy\n(numpy.pi, hasattr(numpy, 'planted'))";
    assert_eq!(
        value(sandbox, seen, &options).as_deref(),
        Some("(3.141592653589793, False)")
    );
    let draw = "import numpy, random\n(numpy.random.rand(), random.random())";
    let (first, second) = (
        value(sandbox, draw, &allowing(&["numpy", "random"])),
        value(sandbox, draw, &allowing(&["numpy", "random"])),
    );
    assert_ne!(first, second, "each instance seeds its generators afresh");
}

#[test]
fn modules_the_template_loaded_stay_refused_unless_allowed() {
    let sandbox = data_stack();
    let numpy_only = allowing(&["numpy"]);
    assert_eq!(
        value(
            sandbox,
            "import numpy\nint(numpy.arange(4).sum())",
            &numpy_only
        )
        .as_deref(),
        Some("6")
    );
    // pandas and os are in `sys.modules` (the template imported them), and still refused.
    for code in [
        "import pandas",
        "import os",
        "from matplotlib import pyplot",
    ] {
        let refused = common::run_in(sandbox, code, &numpy_only);
        assert_eq!(
            refused.error().map(|e| e.kind.as_str()),
            Some("ImportError"),
            "{code}: {refused:#?}"
        );
    }
}

#[test]
fn a_session_starts_from_the_data_template() {
    let sandbox = data_stack();
    let options = allowing(&["sys", ImportPolicy::DATA_STACK_ALIAS]);
    let mut session = runtime()
        .block_on(Session::new(sandbox))
        .expect("a session starts");
    let mut call = |code: &str| {
        let run = runtime()
            .block_on(session.run(code, &options))
            .expect("no host fault");
        common::completed_value(code, run.result)
    };
    assert_eq!(call(LOADED).as_deref(), Some("[True, True, True]"));
    call("import pandas as pd\ndf = pd.DataFrame({'a': [1, 2]})");
    assert_eq!(call("int(df['a'].sum())").as_deref(), Some("3"));
}

#[test]
fn a_module_that_does_not_import_makes_the_plain_template_and_says_which() {
    let sandbox = preloading(vec!["numpy".into(), "no_such_module_to_preload".into()]);
    let info = runtime()
        .block_on(sandbox.template())
        .expect("the plain template builds")
        .expect("the CPython engine has one");
    let failure = info.failed.expect("the preload failed");
    assert_eq!(failure.module, "no_such_module_to_preload");
    assert!(
        failure.reason.contains("ModuleNotFoundError"),
        "{failure:?}"
    );
    assert!(
        failure.to_string().contains("no_such_module_to_preload"),
        "{failure}"
    );
    assert!(info.preloaded.is_empty(), "{:?}", info.preloaded);
    // Fresh calls still run, from the plain template: numpy imports on demand.
    let options = allowing(&["sys", "numpy"]);
    assert_eq!(
        value(&sandbox, "import sys\n'numpy' in sys.modules", &options).as_deref(),
        Some("False")
    );
    assert_eq!(
        value(&sandbox, "import numpy\nint(numpy.ones(3).sum())", &options).as_deref(),
        Some("3")
    );
}
