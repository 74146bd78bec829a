//! Who may reach the HTTP server: its flags, checked before anything is bound, and the bearer
//! token's check. The Host and Origin allowlists built here are enforced by rmcp's service.

use std::net::SocketAddr;

use hyper::header::{AUTHORIZATION, HeaderMap};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Shortest token accepted: a guessable token is no guard.
pub const MIN_TOKEN_BYTES: usize = 16;

/// The HTTP transport's flags.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct HttpFlags {
    /// Serve MCP over streamable HTTP at http://ADDR:PORT/mcp instead of stdio (port 0: any free
    /// port; the address is printed on stderr). Anything but a loopback address needs --token.
    #[arg(long, value_name = "ADDR:PORT", env = "SAFE_PYTHON_HTTP")]
    pub http: Option<SocketAddr>,

    /// With --http: the bearer token every MCP request must carry (`Authorization: Bearer TOKEN`),
    /// at least 16 bytes, e.g. from `openssl rand -hex 32`.
    #[arg(
        long,
        value_name = "TOKEN",
        env = "SAFE_PYTHON_TOKEN",
        hide_env_values = true
    )]
    pub token: Option<String>,

    /// With --http: also accept requests whose Host header is `HOST[:PORT]` (repeatable), such as the
    /// name clients or a reverse proxy use. Without a port, any port.
    #[arg(
        long,
        value_name = "HOST",
        env = "SAFE_PYTHON_ALLOW_HOSTS",
        value_delimiter = ','
    )]
    pub allow_host: Vec<String>,

    /// With --http: also accept requests from web pages of this origin (repeatable), such as
    /// `https://app.example.com`. Requests without an Origin header (not from a browser) are not
    /// affected.
    #[arg(
        long,
        value_name = "ORIGIN",
        env = "SAFE_PYTHON_ALLOW_ORIGINS",
        value_delimiter = ','
    )]
    pub allow_origin: Vec<String>,
}

/// Why the HTTP server does not start.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error(
        "--http {0} is not a loopback address: serving beyond this machine needs a bearer token \
         (--token or SAFE_PYTHON_TOKEN, e.g. from `openssl rand -hex 32`)"
    )]
    TokenRequired(SocketAddr),
    #[error("the token is {0} bytes long: use at least {MIN_TOKEN_BYTES}")]
    TokenTooShort(usize),
    #[error(
        "--http {0} listens on every address, so no Host header names it: name the hosts clients \
         use with --allow-host (e.g. --allow-host mcp.example.com)"
    )]
    HostsRequired(SocketAddr),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// Who may reach the service: checked flags, before anything is bound.
#[derive(Debug)]
pub struct Access {
    pub(super) addr: SocketAddr,
    /// SHA-256 of the token: comparing digests takes the same time whatever the token's length.
    token: Option<[u8; 32]>,
    hosts: Vec<String>,
    origins: Vec<String>,
}

impl Access {
    pub fn new(flags: &HttpFlags, addr: SocketAddr) -> Result<Self, HttpError> {
        let ip = addr.ip();
        match &flags.token {
            None if !ip.is_loopback() => return Err(HttpError::TokenRequired(addr)),
            Some(token) if token.len() < MIN_TOKEN_BYTES => {
                return Err(HttpError::TokenTooShort(token.len()));
            }
            _ => {}
        }
        if ip.is_unspecified() && flags.allow_host.is_empty() {
            return Err(HttpError::HostsRequired(addr));
        }
        Ok(Access {
            addr,
            token: flags.token.as_ref().map(|t| Sha256::digest(t).into()),
            hosts: flags.allow_host.clone(),
            origins: flags.allow_origin.clone(),
        })
    }

    /// The `Host` values accepted once the listener is at `bound` (whose port 0 is now a port).
    pub(super) fn hosts(&self, bound: SocketAddr) -> Vec<String> {
        let mut hosts = self.hosts.clone();
        if !bound.ip().is_unspecified() {
            hosts.push(bound.to_string());
        }
        if bound.ip().is_loopback() {
            hosts.push(format!("localhost:{}", bound.port()));
        }
        hosts
    }

    /// The browser origins accepted: the bound address's own, and those added.
    pub(super) fn origins(&self, bound: SocketAddr) -> Vec<String> {
        let mut origins = self.origins.clone();
        if !bound.ip().is_unspecified() {
            origins.push(format!("http://{bound}"));
        }
        if bound.ip().is_loopback() {
            origins.push(format!("http://localhost:{}", bound.port()));
        }
        origins
    }

    /// Whether `headers` carry the token (always, when there is none).
    pub(super) fn authorized(&self, headers: &HeaderMap) -> bool {
        let Some(expected) = &self.token else {
            return true;
        };
        let presented = headers
            .get(AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map_or("", |(_, token)| token.trim());
        Sha256::digest(presented).ct_eq(expected).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn access(addr: &str, token: Option<&str>, hosts: &[&str]) -> Result<Access, HttpError> {
        let flags = HttpFlags {
            http: Some(addr.parse().unwrap()),
            token: token.map(Into::into),
            allow_host: hosts.iter().map(|h| h.to_string()).collect(),
            allow_origin: vec![],
        };
        Access::new(&flags, flags.http.unwrap())
    }

    #[test]
    fn loopback_accepts_its_own_names_only() {
        let access = access("127.0.0.1:0", None, &[]).unwrap();
        let bound = "127.0.0.1:8123".parse().unwrap();
        assert_eq!(access.hosts(bound), ["127.0.0.1:8123", "localhost:8123"]);
        assert_eq!(
            access.origins(bound),
            ["http://127.0.0.1:8123", "http://localhost:8123"]
        );
        let bound = "[::1]:8123".parse().unwrap();
        assert_eq!(access.hosts(bound), ["[::1]:8123", "localhost:8123"]);
    }

    #[test]
    fn a_wildcard_bind_accepts_only_the_names_given() {
        let access = access("0.0.0.0:8123", Some("0123456789abcdef"), &["mcp.example"]).unwrap();
        let bound = "0.0.0.0:8123".parse().unwrap();
        assert_eq!(access.hosts(bound), ["mcp.example"]);
        assert!(access.origins(bound).is_empty());
    }

    /// A token in the environment of a stdio server (shared with an HTTP one) is no error.
    #[test]
    fn http_flags_without_http_are_ignored() {
        use clap::Parser;
        let args = crate::mcp::Args::try_parse_from(["safe-python-mcp", "--token", "t"]).unwrap();
        assert_eq!(args.http.http, None);
    }

    #[test]
    fn the_token_must_match_exactly() {
        let token = "0123456789abcdef";
        let access = access("127.0.0.1:0", Some(token), &[]).unwrap();
        let with = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(AUTHORIZATION, value.parse().unwrap());
            access.authorized(&headers)
        };
        assert!(with(&format!("Bearer {token}")));
        assert!(with(&format!("bearer {token}")));
        for wrong in [
            "Bearer",
            "Bearer 0123456789abcdeF",
            "Basic 0123456789abcdef",
            token,
        ] {
            assert!(!with(wrong), "{wrong:?} was accepted");
        }
        assert!(!access.authorized(&HeaderMap::new()));
    }
}
