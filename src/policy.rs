//! The import policy: which modules user code may import (the guest asks the host at each import
//! user code makes), and what counts as a module name.

use safe_python_protocol::{PythonError, is_module_name};

/// Which modules user code may import. The standard library's own internal imports are not
/// policed. This is policy, not the security boundary: the WebAssembly sandbox is (see
/// SECURITY.md).
///
/// The guest asks about the module an import hands to user code: `import a.b` binds `a`, so it
/// asks about `a`; `from a.b import x` returns `a.b`, so it asks about `a.b`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportPolicy {
    allowed: Vec<String>,
    /// Refused even when `allowed` covers them (`--deny`), with their submodules.
    denied: Vec<String>,
}

impl ImportPolicy {
    /// The modules user code may import unless the operator says otherwise: every standard-library
    /// module whose effects stay inside the sandbox. The rule, for each one: it only computes (on
    /// values, text, bytes, dates, numbers), or it reads and writes files, which in the sandbox
    /// means only `/data` and `/out`, served from the host's memory. Left out, whatever the
    /// sandbox would make of them: modules whose job is the host (`os`, `sys`, `platform`,
    /// `subprocess`, `socket`, `signal`, `ctypes`, `tempfile`), the import system and
    /// introspection that reaches past the policy (`importlib`, `builtins`, `gc`, `inspect`,
    /// `pickle`, `marshal`, `runpy`, `code`, `traceback`, `warnings`, `logging`), event loops and
    /// threads (`asyncio`, `threading`), databases (`sqlite3`), and `shutil`, whose copies set
    /// file modes, which the sandbox's files do not have. `--allow` adds any of them,
    /// `--deny` takes any of these away. Sorted; the guest's snapshot imports a subset of them
    /// ([`safe_python_protocol::DEFAULT_ALLOWED`], the Python seed server's list) ahead of time.
    pub const DEFAULT_ALLOWED: &'static [&'static str] = &[
        // RustPython's charmap codecs (cp437, which `zipfile` reads names with): its native codec
        // machinery imports this on the caller's behalf. CPython has no such module.
        "_pycodecs",
        "abc",
        "array",
        "base64",
        "binascii",
        "bisect",
        "calendar",
        "cmath",
        "codecs",
        "collections",
        "colorsys",
        "contextlib",
        "copy",
        "csv",
        "dataclasses",
        "datetime",
        "decimal",
        "difflib",
        "enum",
        "fnmatch",
        "fractions",
        "functools",
        "glob",
        "graphlib",
        "gzip",
        "hashlib",
        "heapq",
        "hmac",
        "html",
        "io",
        "ipaddress",
        "itertools",
        "json",
        "keyword",
        "math",
        "numbers",
        "operator",
        "os.path",
        "pathlib",
        "pprint",
        "queue",
        "random",
        "re",
        "reprlib",
        "secrets",
        "shlex",
        "stat",
        "statistics",
        "string",
        "struct",
        "tarfile",
        "textwrap",
        "time",
        "types",
        "typing",
        "unicodedata",
        "uuid",
        "zipfile",
        "zlib",
    ];
    /// The name that stands for [`Self::DATA_STACK`] in an allowlist (`--allow @data`); no
    /// module can be called that.
    pub const DATA_STACK_ALIAS: &'static str = "@data";
    /// The CPython engine's data stack: what "numpy, pandas and plots" takes.
    pub const DATA_STACK: &'static [&'static str] = &[
        "matplotlib",
        "numpy",
        "pandas",
        "scipy",
        "sklearn",
        "statsmodels",
    ];

    /// The default allowlist plus `extra` (top-level or dotted module names, or
    /// [`Self::DATA_STACK_ALIAS`]).
    pub fn with_extra<S: AsRef<str>>(extra: impl IntoIterator<Item = S>) -> Self {
        let mut allowed: Vec<String> = Self::DEFAULT_ALLOWED
            .iter()
            .map(|s| s.to_string())
            .collect();
        for name in expand(extra) {
            if !allowed.contains(&name) {
                allowed.push(name);
            }
        }
        allowed.sort();
        ImportPolicy {
            allowed,
            denied: Vec::new(),
        }
    }

    /// This policy with `names` (and their submodules) refused, whatever allows them: how an
    /// operator narrows the defaults (`--deny`).
    pub fn without<S: AsRef<str>>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        for name in expand(names) {
            if !self.denied.contains(&name) {
                self.denied.push(name);
            }
        }
        self.denied.sort();
        self.allowed.retain(|a| !covers(&self.denied, a));
        self
    }

    /// `name` is allowed when it, or a package it is inside, is on the list, and neither is
    /// denied: allowing `collections` allows `collections.abc`, while allowing `os.path` does not
    /// allow `os`.
    pub fn allows(&self, name: &str) -> bool {
        covers(&self.allowed, name) && !covers(&self.denied, name)
    }

    /// Whether `--deny` (not the allowlist alone) refuses `name`: then `--allow` cannot undo it.
    pub fn denies(&self, name: &str) -> bool {
        covers(&self.denied, name)
    }

    /// The allowed modules, sorted, less the denied ones.
    pub fn allowed(&self) -> &[String] {
        &self.allowed
    }

    /// The module a refused import named, when `error` is the `ImportError` the sandbox raises
    /// for one (worded `import of 'NAME' is not allowed ...` on both engines) and this policy does
    /// refuse `NAME`: what a front end tells its user to allow. The message is the code's to
    /// forge, which can only make a front end name another module this policy refuses.
    pub fn refused_in<'e>(&self, error: &'e PythonError) -> Option<&'e str> {
        let name = error
            .message
            .strip_prefix("import of '")?
            .split_once("' is not allowed in this sandbox")?
            .0;
        let shown = name.len() <= MAX_SHOWN_NAME_BYTES;
        (error.kind == "ImportError" && shown && is_module_name(name) && !self.allows(name))
            .then_some(name)
    }
}

/// The longest module name a front end repeats in its advice (a reply's overhead stays bounded).
const MAX_SHOWN_NAME_BYTES: usize = 100;

/// Whether `name` is one of `list` or inside a package on it.
fn covers(list: &[String], name: &str) -> bool {
    list.iter().any(|a| {
        name == a
            || (name.len() > a.len()
                && name.starts_with(a.as_str())
                && name.as_bytes()[a.len()] == b'.')
    })
}

/// Module names as given, trimmed, with [`ImportPolicy::DATA_STACK_ALIAS`] expanded and empty ones
/// (an installer's blank setting) skipped.
fn expand<S: AsRef<str>>(names: impl IntoIterator<Item = S>) -> Vec<String> {
    let mut out = Vec::new();
    for name in names {
        match name.as_ref().trim() {
            "" => {}
            ImportPolicy::DATA_STACK_ALIAS => {
                out.extend(ImportPolicy::DATA_STACK.iter().map(|m| m.to_string()))
            }
            name => out.push(name.to_owned()),
        }
    }
    out
}

impl Default for ImportPolicy {
    fn default() -> Self {
        Self::with_extra(std::iter::empty::<&str>())
    }
}

/// Checks a module name given on a command line or in a configuration.
pub fn validate_module_name(name: &str) -> Result<(), String> {
    if is_module_name(name) {
        Ok(())
    } else {
        Err(format!("'{name}' is not a Python module name"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn submodules_of_allowed_packages_are_allowed() {
        let policy = ImportPolicy::with_extra(["os.path"]);
        assert!(policy.allows("collections"));
        assert!(policy.allows("collections.abc"));
        assert!(!policy.allows("collectionsx"));
        assert!(policy.allows("os.path"));
        assert!(!policy.allows("os"));
        assert!(!policy.allows("subprocess"));
    }

    #[test]
    fn the_data_stack_alias_allows_each_of_its_modules() {
        let policy = ImportPolicy::with_extra(["numpy", ImportPolicy::DATA_STACK_ALIAS]);
        for module in ImportPolicy::DATA_STACK {
            assert!(policy.allows(module), "{module}");
        }
        assert!(policy.allows("sklearn.linear_model"));
        assert!(!policy.allows("@data"));
        let numpys = policy.allowed().iter().filter(|m| *m == "numpy").count();
        assert_eq!(numpys, 1);
    }

    #[test]
    fn extra_modules_are_added_once_and_sorted() {
        let policy = ImportPolicy::with_extra(["json", "math", " json "]);
        assert_eq!(policy.allowed().iter().filter(|a| *a == "json").count(), 1);
        assert!(policy.allowed().windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn the_defaults_hold_the_seed_list_and_leave_out_what_reaches_past_the_sandbox() {
        let defaults = ImportPolicy::default();
        for module in safe_python_protocol::DEFAULT_ALLOWED {
            assert!(defaults.allows(module), "{module}");
        }
        for module in [
            "csv", "json", "io", "pathlib", "decimal", "hashlib", "zlib", "difflib",
        ] {
            assert!(defaults.allows(module), "{module}");
        }
        for module in [
            "os",
            "sys",
            "subprocess",
            "socket",
            "ctypes",
            "importlib",
            "builtins",
            "gc",
            "inspect",
            "pickle",
            "marshal",
            "asyncio",
            "threading",
            "sqlite3",
            "tempfile",
        ] {
            assert!(!defaults.allows(module), "{module}");
        }
        let list = ImportPolicy::DEFAULT_ALLOWED;
        assert!(list.windows(2).all(|w| w[0] < w[1]), "sorted, once each");
        assert!(list.iter().all(|m| validate_module_name(m).is_ok()));
    }

    #[test]
    fn denied_modules_and_their_submodules_are_refused_whatever_allows_them() {
        let policy = ImportPolicy::with_extra(["os", "sqlite3"]).without([
            "json",
            " os ",
            "collections.abc",
            "",
        ]);
        assert!(!policy.allows("json") && !policy.allows("json.decoder"));
        assert!(
            !policy.allows("os") && !policy.allows("os.path"),
            "a denied package takes its submodules"
        );
        assert!(policy.allows("collections") && !policy.allows("collections.abc"));
        assert!(policy.allows("sqlite3") && policy.allows("csv"));
        assert!(policy.denies("os.path") && !policy.denies("socket"));
        assert!(
            !policy
                .allowed()
                .iter()
                .any(|m| m == "json" || m == "os" || m == "os.path")
        );
        let data = ImportPolicy::with_extra(["@data"]).without(["@data"]);
        assert!(ImportPolicy::DATA_STACK.iter().all(|m| !data.allows(m)));
    }

    #[test]
    fn a_refusal_names_the_module_to_allow_only_when_the_policy_refuses_it() {
        let policy = ImportPolicy::default();
        let error = |kind: &str, message: String| PythonError {
            kind: kind.into(),
            message,
            traceback: String::new(),
        };
        let refusal = |name: &str| {
            error(
                "ImportError",
                format!("import of '{name}' is not allowed in this sandbox (allowed: json)"),
            )
        };
        assert_eq!(policy.refused_in(&refusal("sqlite3")), Some("sqlite3"));
        assert_eq!(
            policy.refused_in(&refusal("os.path")),
            None,
            "allowed: not the reason"
        );
        assert_eq!(policy.refused_in(&refusal("a b")), None);
        assert_eq!(policy.refused_in(&refusal(&"a".repeat(101))), None);
        let audit = error(
            "ImportError",
            "import of 'socket' is not allowed in this sandbox".into(),
        );
        assert_eq!(policy.refused_in(&audit), Some("socket"));
        let other = error(
            "ValueError",
            "import of 'socket' is not allowed in this sandbox".into(),
        );
        assert_eq!(policy.refused_in(&other), None);
    }

    #[test]
    fn module_names_are_validated() {
        assert!(validate_module_name("json").is_ok());
        assert!(validate_module_name("os.path").is_ok());
        assert!(validate_module_name("").is_err());
        assert!(validate_module_name("a..b").is_err());
        assert!(validate_module_name("1abc").is_err());
        assert!(validate_module_name("os;rm").is_err());
        assert!(validate_module_name(&"a".repeat(5000)).is_err());
        assert!(validate_module_name("os\0").is_err());
    }
}
