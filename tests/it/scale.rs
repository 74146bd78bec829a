//! Many runs in parallel on one engine, and a second sandbox that loads the cached module. (A
//! thousand runs in a row without growing is a soak check: `tests/long/scale.rs`.)

use crate::common;

use common::{runtime, sandbox};
use safe_python_executor::{Prepared, RunOptions, Sandbox, SandboxOptions};

#[test]
fn parallel_runs_share_one_engine() {
    let handles: Vec<_> = (0..16)
        .map(|i| {
            runtime().spawn(async move {
                let code = format!("import math\nsum(math.isqrt(k) for k in range({i} * 1000))");
                sandbox().run(&code, &RunOptions::default()).await.unwrap()
            })
        })
        .collect();
    for (i, h) in handles.into_iter().enumerate() {
        let r = runtime().block_on(h).unwrap();
        let expected: u64 = (0..i as u64 * 1000).map(|k| k.isqrt()).sum();
        assert_eq!(r.result(), Some(expected.to_string().as_str()), "task {i}");
    }
}

#[test]
fn a_second_sandbox_loads_the_cached_module() {
    sandbox();
    let again = Sandbox::new(SandboxOptions {
        cache_dir: Some(common::cache_dir()),
        ..SandboxOptions::default()
    })
    .unwrap();
    assert!(
        matches!(again.prepared(), Prepared::Loaded(_)),
        "{:?}",
        again.prepared()
    );
}
