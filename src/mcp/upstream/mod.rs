//! Code mode's upstreams: the MCP servers whose tools sandboxed code may call, through the host.
//!
//! [`config`] reads which upstreams there are (flags and the `mcpServers` file clients already
//! use); [`client`] serves them to the sandbox as a [`ToolHost`](crate::toolcalls::ToolHost),
//! each an MCP client that `connect` starts (a child process or streamable HTTP) and whose calls
//! `call` cancels and translates. Credentials (environment, headers) stay on the host: the
//! sandbox sees only tools and their results.

mod call;
pub mod client;
pub mod config;
mod connect;

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;

pub use self::client::{RESTART_INTERVAL, START_TIMEOUT, Upstreams};
pub use self::config::{ConfigError, UpstreamSpec, UpstreamTransport};
pub use crate::tls::install_crypto_provider;
use crate::toolcalls::{ToolAccess, ToolPolicy};

/// The flags that give code access to upstream tools.
#[derive(Debug, Clone, clap::Args)]
pub struct UpstreamFlags {
    /// An MCP server whose tools code may call, as NAME=COMMAND (started as a stdio server; the
    /// command split as a shell would) or NAME=URL (http:// or https://: streamable HTTP, with
    /// headers from SAFE_PYTHON_UPSTREAM_HEADERS_NAME, one `Header: value` a line). Repeatable;
    /// the environment variable takes one a line [default: none].
    #[arg(
        long = "upstream",
        value_name = "NAME=COMMAND|URL",
        value_delimiter = '\n',
        env = "SAFE_PYTHON_UPSTREAM"
    )]
    pub upstream: Vec<String>,

    /// Upstreams from a JSON file in the `{"mcpServers": {...}}` format of Claude Desktop and
    /// Cursor (`command`/`args`/`env`/`cwd`, or `url` with `headers`; `${VAR}` in env and header
    /// values is read from the environment; disabled entries are skipped) [default: none].
    #[arg(long, value_name = "FILE", env = "SAFE_PYTHON_UPSTREAM_CONFIG")]
    pub upstream_config: Option<PathBuf>,

    /// Which upstream tools code may call, as SERVER.TOOL globs (`*` matches anything; comma-separated,
    /// repeatable) [default: all of them].
    #[arg(
        long,
        value_name = "GLOB[,GLOB...]",
        value_delimiter = ',',
        env = "SAFE_PYTHON_TOOLS"
    )]
    pub tools: Vec<String>,

    /// Upstream tool calls one run may make; past it a call raises an error in the code.
    #[arg(long, value_name = "N", default_value_t = ToolPolicy::DEFAULT_MAX_CALLS, env = "SAFE_PYTHON_MAX_TOOL_CALLS",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub max_tool_calls: u32,
}

impl UpstreamFlags {
    /// The configured upstreams (flags first, then the file), names unique across both.
    pub fn specs(&self) -> Result<Vec<UpstreamSpec>, ConfigError> {
        let flags: Vec<String> = self
            .upstream
            .iter()
            .filter(|flag| !flag.trim().is_empty())
            .cloned()
            .collect();
        config::collect(&flags, self.upstream_config.as_deref(), &|var| {
            std::env::var(var).ok()
        })
    }

    /// The policy of `--tools` and `--max-tool-calls`.
    pub fn policy(&self) -> anyhow::Result<ToolPolicy> {
        ToolPolicy::new(&self.tools, self.max_tool_calls).context("--tools")
    }

    /// The upstreams and policy code's tool calls go through, or `None` when no upstream is
    /// configured. Called inside a tokio runtime (as the server's start-up is), it starts the
    /// upstreams in the background; otherwise they start on first use.
    pub fn access(&self) -> anyhow::Result<Option<ToolAccess>> {
        let specs = self.specs()?;
        let policy = self.policy()?;
        if specs.is_empty() {
            return Ok(None);
        }
        let upstreams = Upstreams::new(specs);
        upstreams.start_in_background();
        Ok(Some(ToolAccess {
            host: Arc::new(upstreams),
            policy: Arc::new(policy),
        }))
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        upstream: UpstreamFlags,
    }

    fn parse(args: &[&str]) -> UpstreamFlags {
        Cli::try_parse_from([&["test"], args].concat())
            .unwrap()
            .upstream
    }

    #[test]
    fn no_upstream_means_no_access() {
        let flags = parse(&[]);
        assert_eq!(flags.max_tool_calls, ToolPolicy::DEFAULT_MAX_CALLS);
        assert!(flags.access().unwrap().is_none());
    }

    #[test]
    fn flags_give_specs_and_policy() {
        let flags = parse(&[
            "--upstream",
            "a=server --flag",
            "--upstream=b=http://localhost:1/mcp",
            "--tools",
            "a.*,b.get_*",
            "--max-tool-calls",
            "7",
        ]);
        let specs = flags.specs().unwrap();
        assert_eq!(specs.len(), 2);
        assert_eq!(specs[0].name, "a");
        let policy = flags.policy().unwrap();
        assert_eq!(policy.max_calls, 7);
        assert!(
            policy.allows("a", "x") && policy.allows("b", "get_y") && !policy.allows("b", "put")
        );
        // Outside a runtime nothing starts; the host knows its servers without starting them.
        let access = flags.access().unwrap().unwrap();
        assert_eq!(access.host.servers(), ["a", "b"]);
        assert!(Cli::try_parse_from(["test", "--max-tool-calls", "0"]).is_err());
    }

    #[test]
    fn a_duplicate_name_is_an_error() {
        let flags = parse(&["--upstream", "a=x", "--upstream", "a=y"]);
        let error = flags.access().err().unwrap().to_string();
        assert_eq!(error, "the upstream name 'a' is configured twice");
    }
}
