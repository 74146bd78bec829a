//! The import policy: which modules user code may import (the guest asks the host at each import
//! user code makes), and what counts as a module name.

/// Which modules user code may import. The standard library's own internal imports are not
/// policed. This is policy, not the security boundary: the WebAssembly sandbox is (see README).
///
/// The guest asks about the module an import hands to user code: `import a.b` binds `a`, so it
/// asks about `a`; `from a.b import x` returns `a.b`, so it asks about `a.b`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportPolicy {
    allowed: Vec<String>,
}

impl ImportPolicy {
    /// The Python seed server's allowlist, as the guest preloads it.
    pub const DEFAULT_ALLOWED: &'static [&'static str] = safe_python_protocol::DEFAULT_ALLOWED;
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
        for name in extra {
            let name = name.as_ref().trim();
            let names = match name {
                Self::DATA_STACK_ALIAS => Self::DATA_STACK,
                _ => std::slice::from_ref(&name),
            };
            for &name in names {
                if !name.is_empty() && !allowed.iter().any(|a| a == name) {
                    allowed.push(name.to_owned());
                }
            }
        }
        allowed.sort();
        ImportPolicy { allowed }
    }

    /// `name` is allowed when it, or a package it is inside, is on the list: allowing `collections`
    /// allows `collections.abc`, while allowing `os.path` does not allow `os`.
    pub fn allows(&self, name: &str) -> bool {
        self.allowed.iter().any(|a| {
            name == a
                || (name.len() > a.len()
                    && name.starts_with(a.as_str())
                    && name.as_bytes()[a.len()] == b'.')
        })
    }

    pub fn allowed(&self) -> &[String] {
        &self.allowed
    }
}

impl Default for ImportPolicy {
    fn default() -> Self {
        Self::with_extra(std::iter::empty::<&str>())
    }
}

/// Checks a module name given on a command line or in a configuration.
pub fn validate_module_name(name: &str) -> Result<(), String> {
    if safe_python_protocol::is_module_name(name) {
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
