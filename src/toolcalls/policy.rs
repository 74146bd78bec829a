//! Which upstream tools sandboxed code may call, and how many calls a run may make.

use globset::{Glob, GlobSet, GlobSetBuilder};

/// What code may call: the tools whose `SERVER.TOOL` matches one of the globs (all of them when
/// there are none), at most `max_calls` times per run.
#[derive(Debug, Clone)]
pub struct ToolPolicy {
    globs: Vec<String>,
    set: GlobSet,
    pub max_calls: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{glob}' is not a tool pattern: {reason}")]
pub struct PolicyError {
    pub glob: String,
    pub reason: String,
}

impl ToolPolicy {
    /// The budget of calls per run when the operator sets none.
    pub const DEFAULT_MAX_CALLS: u32 = 100;

    /// A policy allowing the tools that match `globs` (`SERVER.TOOL`, `*` matching any run of
    /// characters, dots included), or every tool when `globs` is empty.
    pub fn new(globs: &[String], max_calls: u32) -> Result<ToolPolicy, PolicyError> {
        let mut set = GlobSetBuilder::new();
        for glob in globs {
            let parsed = Glob::new(glob).map_err(|e| PolicyError {
                glob: glob.clone(),
                reason: e.kind().to_string(),
            })?;
            set.add(parsed);
        }
        let set = set.build().map_err(|e| PolicyError {
            glob: globs.join(","),
            reason: e.to_string(),
        })?;
        Ok(ToolPolicy {
            globs: globs.to_vec(),
            set,
            max_calls,
        })
    }

    /// Whether code may call `tool` of `server`.
    pub fn allows(&self, server: &str, tool: &str) -> bool {
        self.globs.is_empty() || self.set.is_match(format!("{server}.{tool}"))
    }

    /// The globs, as given (empty: every tool).
    pub fn globs(&self) -> &[String] {
        &self.globs
    }
}

impl Default for ToolPolicy {
    fn default() -> ToolPolicy {
        ToolPolicy::new(&[], ToolPolicy::DEFAULT_MAX_CALLS).expect("no globs always build")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(globs: &[&str]) -> ToolPolicy {
        let globs: Vec<String> = globs.iter().map(|g| g.to_string()).collect();
        ToolPolicy::new(&globs, 10).unwrap()
    }

    #[test]
    fn no_globs_allow_everything() {
        assert!(policy(&[]).allows("everything", "get-env"));
    }

    #[test]
    fn globs_match_server_and_tool() {
        let p = policy(&["github.search_*", "time.*"]);
        assert!(p.allows("github", "search_code"));
        assert!(p.allows("time", "get_current_time"));
        assert!(!p.allows("github", "delete_repo"));
        assert!(!p.allows("everything", "get-env"));
        // A server named like the start of another does not slip through.
        assert!(!p.allows("timex", "anything"));
    }

    #[test]
    fn a_tool_whose_name_has_dots_is_matched_whole() {
        let p = policy(&["fs.read.*"]);
        assert!(p.allows("fs", "read.file"));
        assert!(!p.allows("fs", "write.file"));
    }

    #[test]
    fn a_bad_glob_is_refused_with_its_text() {
        let err = ToolPolicy::new(&["a[".to_owned()], 1).unwrap_err();
        assert_eq!(err.glob, "a[");
    }
}
