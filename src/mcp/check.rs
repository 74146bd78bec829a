//! `safe-python-mcp --check`: a short self-test of the sandbox, for installers and to warm the
//! compiled-code cache before first use.

use std::time::Duration;

use crate::cache::Prepared;
use crate::flags::{COMPILING, SandboxFlags, cache_notice};
use crate::outcome::RunResult;
use crate::sandbox::TemplateInfo;
use crate::session::Session;

/// `--check` with `--session-store`: the store answers.
pub(super) async fn session_store(args: &super::Args) -> anyhow::Result<()> {
    let Some(store) = args.session_store()? else {
        return Ok(());
    };
    let took = store.ping().await?;
    println!(
        "ok: the session store at {} answers ({:.1} ms)",
        store.shown(),
        took.as_secs_f64() * 1000.0
    );
    Ok(())
}

/// `--check`: the sandbox starts, runs code, refuses an import, stops an endless loop, and keeps a
/// session's state through a stopped call.
pub(super) async fn self_test(flags: &SandboxFlags) -> anyhow::Result<()> {
    // The one step that downloads an engine, when it is not installed yet.
    if let Some(dir) = flags.install_engine()? {
        println!(
            "ok: the {} engine is installed in {}",
            flags.engine.about().name,
            dir.display()
        );
    }
    let sandbox = flags.open_sandbox(true, |entry| {
        eprintln!("safe-python-mcp: {COMPILING}");
        eprintln!("safe-python-mcp: {}", cache_notice(entry));
    })?;
    if let Some(template) = sandbox.template().await? {
        println!("{}", describe_template(&template));
    }
    let mut options = flags.run_options();
    type Check = (&'static str, &'static str, fn(&RunResult) -> bool);
    let checks: [Check; 3] = [
        ("runs code", "print(2**100)", |r| {
            r.stdout == "1267650600228229401496703205376\n"
        }),
        (
            "refuses imports outside the allowlist",
            "import socket",
            |r| r.error().is_some_and(|e| e.kind == "ImportError"),
        ),
        ("stops an endless loop", "while True: pass", |r| {
            r.limit().is_some()
        }),
    ];
    options.limits.timeout = options.limits.timeout.min(Duration::from_secs(1));
    for (what, code, passed) in checks {
        let result = sandbox.run(code, &options).await?;
        anyhow::ensure!(
            passed(&result),
            "the sandbox did not pass \"{what}\": {}",
            serde_json::to_string(&result)?
        );
        println!("ok: {what} ({} ms)", result.stats.wall_ms);
    }
    let mut session = Session::new(&sandbox).await?;
    let mut kept = Vec::new();
    for code in ["x = 41", "x = 0\nwhile True: pass", "x + 1"] {
        let run = session.run(code, &options).await?;
        kept.push((run.result.result().map(str::to_owned), run.rolled_back));
    }
    anyhow::ensure!(
        kept[1].1 && kept[2].0.as_deref() == Some("42"),
        "the sandbox did not pass \"undoes a stopped call in a session\": {kept:?}"
    );
    println!("ok: undoes a stopped call in a session");
    let cache = match sandbox.prepared() {
        Prepared::Loaded(p) | Prepared::Compiled(p) | Prepared::Shipped(p) => {
            p.display().to_string()
        }
        Prepared::CompiledUncached => "none".into(),
    };
    println!("safe-python-mcp: self-test passed (compiled sandbox: {cache})");
    Ok(())
}

/// The engine's template in one line: what it imported, or which module it could not
/// and why, then its memory and build time.
fn describe_template(template: &TemplateInfo) -> String {
    let held = format!(
        "{:.1} MB held, built in {} ms",
        template.bytes as f64 / 1e6,
        template.build_time.as_millis()
    );
    match (&template.failed, template.preloaded.as_slice()) {
        (Some(failure), _) => format!(
            "warning: {failure}; fresh calls start without the data stack imported (template: {held})"
        ),
        (None, []) => format!("ok: fresh calls start from the template ({held})"),
        (None, modules) => format!(
            "ok: fresh calls start with {} imported (template: {held})",
            modules.join(", ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::PreloadFailure;

    #[test]
    fn the_template_line_names_a_module_that_failed_and_why() {
        let failed = TemplateInfo {
            preloaded: Vec::new(),
            failed: Some(PreloadFailure {
                module: "numpy".into(),
                reason: "ImportError: no".into(),
            }),
            bytes: 2_500_000,
            build_time: Duration::from_millis(40),
        };
        let line = describe_template(&failed);
        assert!(
            line.starts_with("warning: cannot preload `numpy`: ImportError: no;"),
            "{line}"
        );
        assert!(line.contains("2.5 MB held, built in 40 ms"), "{line}");
        let loaded = TemplateInfo {
            preloaded: vec!["numpy".into(), "pandas".into()],
            failed: None,
            ..failed
        };
        let line = describe_template(&loaded);
        assert!(
            line.starts_with("ok: fresh calls start with numpy, pandas imported"),
            "{line}"
        );
    }
}
