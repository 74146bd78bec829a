//! The CPython engine's template ([`crate::sandbox::template`]): an instance whose driver is
//! installed, whose `open` says where files live, and which has imported the data stack the
//! server allows ([`template_preloads`]). Importing numpy and pandas takes over a second and
//! matplotlib rebuilds its font list: done once, not in every call.
//!
//! The imports run as turns of the driver, not as a call: no `__main__` is made and no user state
//! exists yet, so the first call of each instance still makes its own and reseeds the random
//! generators. The import policy is the host's at every user import, whatever `sys.modules`
//! holds, so a module the data stack loaded but the allowlist does not name stays refused.

use std::sync::Arc;

use super::driver::{driver_turn, with_driver};
use crate::policy::ImportPolicy;
use crate::sandbox::{Instance, PreloadFailure, Preparation, Sandbox, SandboxError, files};

/// The modules of the data stack `policy` allows, as the template imports them: matplotlib as
/// `matplotlib.pyplot`, so that its font list is built once. Only allowed modules: nothing is
/// loaded that the server's allowlist does not name.
pub fn template_preloads(policy: &ImportPolicy) -> Vec<String> {
    ImportPolicy::DATA_STACK
        .iter()
        .filter(|m| policy.allows(m))
        .map(|&m| match m {
            "matplotlib" => "matplotlib.pyplot".to_owned(),
            m => m.to_owned(),
        })
        .collect()
}

/// The longest failure reason kept: the guest's stderr is not bounded while the template builds.
const MAX_REASON_BYTES: usize = 500;

/// The template's instance, with `preload` imported; or, when a module fails to import, the
/// plain one and the failure.
pub(super) async fn prepare(sandbox: &Sandbox, preload: &[String]) -> Preparation {
    match preloaded_instance(sandbox, preload).await? {
        Ok(instance) => Ok((instance, Ok(preload.to_vec()))),
        Err(failure) => {
            tracing::warn!("{failure}; fresh calls start without the data stack imported");
            Ok((with_open(sandbox).await?, Err(failure)))
        }
    }
}

/// An instance with the driver installed and `preload` imported, or the first module that failed
/// to import.
async fn preloaded_instance(
    sandbox: &Sandbox,
    preload: &[String],
) -> Result<Result<Instance, PreloadFailure>, SandboxError> {
    let mut instance = with_open(sandbox).await?;
    // The turn's imports meet the policy as user code's do: it allows the preloads' packages.
    let packages = preload.iter().filter_map(|m| m.split('.').next());
    let policy = Arc::new(ImportPolicy::with_extra(packages));
    for module in preload {
        // The name becomes Python source: only plain dotted names.
        if !safe_python_protocol::is_module_name(module) {
            return Ok(Err(PreloadFailure {
                module: module.clone(),
                reason: "not a module name".into(),
            }));
        }
        // `__import__` binds no name in the turns' namespace.
        let status =
            driver_turn(&mut instance, &format!("__import__('{module}')\n"), &policy).await?;
        let (_, stderr) = instance.take_output();
        if status != 0 {
            let stderr = String::from_utf8_lossy(&stderr);
            let last = stderr.lines().rev().find(|l| !l.trim().is_empty());
            let mut reason = last
                .unwrap_or("it failed with no message")
                .trim()
                .to_owned();
            if reason.len() > MAX_REASON_BYTES {
                let cut = reason.floor_char_boundary(MAX_REASON_BYTES);
                reason.truncate(cut);
            }
            return Ok(Err(PreloadFailure {
                module: module.clone(),
                reason,
            }));
        }
    }
    Ok(Ok(instance))
}

/// An instance with the driver installed, whose `open` says where files live
/// ([`files::open_shim_turn`]): every instance of the engine starts from it.
async fn with_open(sandbox: &Sandbox) -> Result<Instance, SandboxError> {
    let mut instance = with_driver(sandbox).await?;
    let policy = Arc::new(ImportPolicy::with_extra(files::OPEN_SHIM_IMPORTS));
    let status = driver_turn(&mut instance, &files::open_shim_turn(), &policy).await?;
    let (_, stderr) = instance.take_output();
    if status != 0 {
        let stderr = String::from_utf8_lossy(&stderr);
        let e = wasmtime::format_err!("the file layer did not install: {}", stderr.trim());
        return Err(SandboxError::Setup(e));
    }
    Ok(instance)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_allowed_modules_of_the_data_stack_are_preloaded() {
        assert!(template_preloads(&ImportPolicy::default()).is_empty());
        let numpy = ImportPolicy::with_extra(["numpy", "json"]);
        assert_eq!(template_preloads(&numpy), ["numpy"]);
        let data = ImportPolicy::with_extra([ImportPolicy::DATA_STACK_ALIAS]);
        let all = template_preloads(&data);
        assert!(all.contains(&"matplotlib.pyplot".to_owned()), "{all:?}");
        assert!(!all.contains(&"matplotlib".to_owned()), "{all:?}");
        assert_eq!(all.len(), ImportPolicy::DATA_STACK.len());
        // A submodule allowed alone does not allow its package's import.
        assert!(template_preloads(&ImportPolicy::with_extra(["numpy.linalg"])).is_empty());
    }
}
