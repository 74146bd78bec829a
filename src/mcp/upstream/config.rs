//! Which upstreams to start and how to reach them: `--upstream NAME=COMMAND|URL` flags and the
//! `{"mcpServers": {...}}` file Claude Desktop and Cursor use, read as they are so that an operator
//! can point us at the file they already have.
//!
//! The environment is passed in as a lookup function rather than read here, so that the parsing
//! is tested without touching the process's environment.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use hyper::http::{HeaderName, HeaderValue};
use serde::Deserialize;
use serde_json::Value;

/// One upstream MCP server, as configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamSpec {
    /// What code calls it by (`tools.NAME`) and what logs and errors call it.
    pub name: String,
    pub transport: UpstreamTransport,
}

/// How to reach an upstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpstreamTransport {
    /// A child process speaking MCP on its stdin/stdout. It inherits the host's environment plus
    /// `env`: credentials stay on the host, the sandbox never sees them.
    Stdio {
        command: String,
        args: Vec<String>,
        env: BTreeMap<String, String>,
        cwd: Option<PathBuf>,
    },
    /// A streamable HTTP endpoint, with headers (typically `Authorization`) sent on every request.
    /// Header names and values are checked when configured, so connecting cannot fail on them.
    Http {
        url: String,
        headers: Vec<(String, String)>,
    },
}

/// Why the upstream configuration cannot be used. Each names the upstream or the flag at fault.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("--upstream '{0}' is not NAME=COMMAND or NAME=URL")]
    NotAssignment(String),
    #[error("'{0}' is not an upstream name: use letters, digits, '_' and '-'")]
    BadName(String),
    #[error("the upstream name '{0}' is configured twice")]
    Duplicate(String),
    #[error("upstream '{server}': {reason}")]
    BadCommand { server: String, reason: String },
    #[error("upstream '{server}': the header {header:?} is not valid: {reason}")]
    BadHeader {
        server: String,
        header: String,
        reason: String,
    },
    #[error("upstream '{server}': the environment variable {var} is not set")]
    MissingVar { server: String, var: String },
    #[error(
        "upstream '{0}' is an SSE server (\"type\": \"sse\"), which is not supported: only stdio and streamable HTTP are"
    )]
    Sse(String),
    #[error("upstream '{server}' in {path}: {reason}")]
    Entry {
        path: PathBuf,
        server: String,
        reason: String,
    },
    #[error("cannot read the upstream config {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the upstream config {path} is not an mcpServers file: {reason}")]
    File { path: PathBuf, reason: String },
}

/// The environment variable that holds the headers of `--upstream NAME=URL`, one `Header: value`
/// a line: headers carry credentials, which have no place on a command line.
pub fn headers_var(name: &str) -> String {
    let suffix: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect();
    format!("SAFE_PYTHON_UPSTREAM_HEADERS_{suffix}")
}

/// Parses one `--upstream NAME=COMMAND` or `--upstream NAME=URL`; `env` looks up the headers of an
/// HTTP upstream.
pub fn parse_flag(
    flag: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<UpstreamSpec, ConfigError> {
    let Some((name, target)) = flag.split_once('=') else {
        return Err(ConfigError::NotAssignment(flag.to_owned()));
    };
    let name = check_name(name.trim())?;
    let target = target.trim();
    let transport = if is_url(target) {
        let headers = match env(&headers_var(&name)) {
            Some(text) => parse_header_lines(&name, &text)?,
            None => Vec::new(),
        };
        UpstreamTransport::Http {
            url: target.to_owned(),
            headers,
        }
    } else {
        let words = shlex::split(target).ok_or_else(|| ConfigError::BadCommand {
            server: name.clone(),
            reason: format!("the command {target:?} has an unclosed quote or a trailing '\\'"),
        })?;
        let mut words = words.into_iter();
        let Some(command) = words.next() else {
            return Err(ConfigError::BadCommand {
                server: name,
                reason: "the command is empty".to_owned(),
            });
        };
        UpstreamTransport::Stdio {
            command,
            args: words.collect(),
            env: BTreeMap::new(),
            cwd: None,
        }
    };
    Ok(UpstreamSpec { name, transport })
}

/// Reads an `{"mcpServers": {...}}` file.
pub fn read_file(
    path: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<UpstreamSpec>, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        source,
    })?;
    parse_file(&text, path, env)
}

/// Parses the text of an `{"mcpServers": {...}}` file read from `path` (which names it in errors
/// and anchors a relative `cwd`). Entries with `"disabled": true` are left out; fields we do not
/// use (`autoApprove`, `timeout`...) are ignored.
pub fn parse_file(
    text: &str,
    path: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<UpstreamSpec>, ConfigError> {
    let file_error = |reason: String| ConfigError::File {
        path: path.to_owned(),
        reason,
    };
    let root: Value = serde_json::from_str(text).map_err(|e| file_error(e.to_string()))?;
    let Some(servers) = root.get("mcpServers") else {
        return Err(file_error("it has no \"mcpServers\" object".to_owned()));
    };
    let Value::Object(servers) = servers else {
        return Err(file_error("\"mcpServers\" is not an object".to_owned()));
    };
    let base = path.parent().unwrap_or(Path::new("."));
    let mut specs = Vec::new();
    for (name, entry) in servers {
        let entry_error = |reason: String| ConfigError::Entry {
            path: path.to_owned(),
            server: name.clone(),
            reason,
        };
        let entry: Entry =
            serde_json::from_value(entry.clone()).map_err(|e| entry_error(e.to_string()))?;
        if entry.disabled {
            continue;
        }
        let name = check_name(name)?;
        if let Some(kind) = entry.kind.as_deref() {
            match kind {
                "sse" => return Err(ConfigError::Sse(name)),
                "stdio" | "http" | "streamable-http" | "streamableHttp" | "streamable_http" => {}
                other => return Err(entry_error(format!("unknown \"type\": {other:?}"))),
            }
        }
        let url = entry.url.or(entry.server_url);
        let transport = match (entry.command, url) {
            (Some(_), Some(_)) => {
                return Err(entry_error(
                    "it has both \"command\" and \"url\": give one".to_owned(),
                ));
            }
            (None, None) => {
                return Err(entry_error(
                    "it has neither \"command\" nor \"url\"".to_owned(),
                ));
            }
            (Some(command), None) => {
                if command.trim().is_empty() {
                    return Err(entry_error("\"command\" is empty".to_owned()));
                }
                let mut vars = BTreeMap::new();
                for (key, value) in entry.env {
                    let value = expand(&name, &value, env)?;
                    vars.insert(key, value);
                }
                UpstreamTransport::Stdio {
                    command,
                    args: entry.args,
                    env: vars,
                    cwd: entry.cwd.map(|cwd| base.join(cwd)),
                }
            }
            (None, Some(url)) => {
                if !is_url(&url) {
                    return Err(entry_error(format!(
                        "the url {url:?} is not http:// or https://"
                    )));
                }
                let mut headers = Vec::new();
                for (header, value) in entry.headers {
                    let value = expand(&name, &value, env)?;
                    headers.push(check_header(&name, header, value)?);
                }
                UpstreamTransport::Http { url, headers }
            }
        };
        specs.push(UpstreamSpec { name, transport });
    }
    Ok(specs)
}

/// All the upstreams of the flags and the file, names unique across both.
pub fn collect(
    flags: &[String],
    file: Option<&Path>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<UpstreamSpec>, ConfigError> {
    let mut specs = Vec::new();
    for flag in flags {
        specs.push(parse_flag(flag, env)?);
    }
    if let Some(path) = file {
        specs.extend(read_file(path, env)?);
    }
    let mut seen = HashSet::new();
    for spec in &specs {
        if !seen.insert(spec.name.as_str()) {
            return Err(ConfigError::Duplicate(spec.name.clone()));
        }
    }
    Ok(specs)
}

/// One entry of `mcpServers`, with the fields Claude Desktop, Cursor and VS Code write.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Entry {
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    cwd: Option<PathBuf>,
    url: Option<String>,
    server_url: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    disabled: bool,
    #[serde(rename = "type")]
    kind: Option<String>,
}

fn is_url(target: &str) -> bool {
    let lower = target.get(..8).unwrap_or(target).to_ascii_lowercase();
    lower.starts_with("http://") || lower.starts_with("https://")
}

/// Names become Python attribute-like keys and environment variable suffixes: keep them plain.
fn check_name(name: &str) -> Result<String, ConfigError> {
    let plain = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if plain {
        Ok(name.to_owned())
    } else {
        Err(ConfigError::BadName(name.to_owned()))
    }
}

fn parse_header_lines(server: &str, text: &str) -> Result<Vec<(String, String)>, ConfigError> {
    let mut headers = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let Some((header, value)) = line.split_once(':') else {
            return Err(ConfigError::BadHeader {
                server: server.to_owned(),
                header: line.chars().take(40).collect(),
                reason: format!("{} lines are `Header: value`", headers_var(server)),
            });
        };
        headers.push(check_header(
            server,
            header.trim().to_owned(),
            value.trim().to_owned(),
        )?);
    }
    Ok(headers)
}

fn check_header(
    server: &str,
    header: String,
    value: String,
) -> Result<(String, String), ConfigError> {
    let bad = |reason: String| ConfigError::BadHeader {
        server: server.to_owned(),
        header: header.clone(),
        reason,
    };
    HeaderName::from_bytes(header.as_bytes()).map_err(|e| bad(e.to_string()))?;
    // The value is a credential: never echo it in the error.
    HeaderValue::from_str(&value).map_err(|e| bad(e.to_string()))?;
    Ok((header, value))
}

/// Expands `${VAR}` and `${env:VAR}` from the host's environment, as Cursor and VS Code do, so a
/// config file can name a secret instead of holding it. A `${` without its `}` stays as it is.
fn expand(
    server: &str,
    value: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<String, ConfigError> {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        let Some(len) = rest[start + 2..].find('}') else {
            break;
        };
        out.push_str(&rest[..start]);
        let inner = &rest[start + 2..start + 2 + len];
        let var = inner.strip_prefix("env:").unwrap_or(inner);
        let found = env(var).ok_or_else(|| ConfigError::MissingVar {
            server: server.to_owned(),
            var: var.to_owned(),
        })?;
        out.push_str(&found);
        rest = &rest[start + 2 + len + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests;
