//! The upstream configuration: flags, the `mcpServers` file, environment expansion, errors.

use super::*;

fn vars(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
    move |name| {
        pairs
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| (*v).to_owned())
    }
}

fn no_vars(_: &str) -> Option<String> {
    None
}

fn file(text: &str) -> Result<Vec<UpstreamSpec>, ConfigError> {
    parse_file(
        text,
        Path::new("/etc/mcp/servers.json"),
        &vars(&[("TOKEN", "t0k")]),
    )
}

#[test]
fn a_command_flag_is_split_as_a_shell_would() {
    let spec = parse_flag("git=uvx mcp-server-git --repository '/my repo'", &no_vars).unwrap();
    assert_eq!(spec.name, "git");
    assert_eq!(
        spec.transport,
        UpstreamTransport::Stdio {
            command: "uvx".into(),
            args: vec![
                "mcp-server-git".into(),
                "--repository".into(),
                "/my repo".into()
            ],
            env: BTreeMap::new(),
            cwd: None,
        }
    );
}

#[test]
fn a_url_flag_takes_its_headers_from_the_environment() {
    assert_eq!(
        headers_var("my-api.v2"),
        "SAFE_PYTHON_UPSTREAM_HEADERS_MY_API_V2"
    );
    let env = vars(&[
        (
            "SAFE_PYTHON_UPSTREAM_HEADERS_MY-API",
            "wrong variable: ignored",
        ),
        (
            "SAFE_PYTHON_UPSTREAM_HEADERS_MY_API",
            "Authorization: Bearer abc:def\n\n  X-Team :  core \n",
        ),
    ]);
    let spec = parse_flag("my-api=https://example.com/mcp", &env).unwrap();
    assert_eq!(
        spec.transport,
        UpstreamTransport::Http {
            url: "https://example.com/mcp".into(),
            headers: vec![
                ("Authorization".into(), "Bearer abc:def".into()),
                ("X-Team".into(), "core".into())
            ],
        }
    );
    let plain = parse_flag("web=HTTP://localhost:8000/mcp", &no_vars).unwrap();
    assert!(
        matches!(plain.transport, UpstreamTransport::Http { headers, .. } if headers.is_empty())
    );
}

#[test]
fn bad_flags_say_what_is_wrong() {
    let err = |flag: &str| parse_flag(flag, &no_vars).unwrap_err().to_string();
    assert!(err("just-a-command").contains("NAME=COMMAND"));
    assert!(err("=cmd").contains("not an upstream name"));
    assert!(err("a.b=cmd").contains("'a.b' is not an upstream name"));
    assert!(err("x=").contains("the command is empty"));
    assert!(err("x=cmd 'open").contains("unclosed quote"));
    let env = vars(&[("SAFE_PYTHON_UPSTREAM_HEADERS_X", "no colon here")]);
    let bad = parse_flag("x=http://h/mcp", &env).unwrap_err().to_string();
    assert!(bad.contains("SAFE_PYTHON_UPSTREAM_HEADERS_X"), "{bad}");
}

#[test]
fn the_claude_desktop_file_is_read_as_it_is() {
    let specs = file(
        r#"{
          "globalShortcut": "",
          "mcpServers": {
            "fs": {"command": "npx", "args": ["-y", "@mcp/fs", "/tmp"],
                   "env": {"API_KEY": "${TOKEN}", "B": "x-${env:TOKEN}-y", "C": "plain"},
                   "cwd": "work", "autoApprove": []},
            "remote": {"url": "https://mcp.example.com/mcp",
                       "headers": {"Authorization": "Bearer ${env:TOKEN}"}},
            "cursor_style": {"serverUrl": "http://localhost:9000/mcp", "type": "http"},
            "off": {"command": "nothing", "disabled": true},
            "off-sse": {"url": "http://x/sse", "type": "sse", "disabled": true}
          }
        }"#,
    )
    .unwrap();
    assert_eq!(specs.len(), 3);
    let by_name = |n: &str| &specs.iter().find(|s| s.name == n).unwrap().transport;
    assert_eq!(
        by_name("fs"),
        &UpstreamTransport::Stdio {
            command: "npx".into(),
            args: vec!["-y".into(), "@mcp/fs".into(), "/tmp".into()],
            env: [("API_KEY", "t0k"), ("B", "x-t0k-y"), ("C", "plain")]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
            cwd: Some(PathBuf::from("/etc/mcp/work")),
        }
    );
    assert_eq!(
        by_name("remote"),
        &UpstreamTransport::Http {
            url: "https://mcp.example.com/mcp".into(),
            headers: vec![("Authorization".into(), "Bearer t0k".into())],
        }
    );
    assert!(
        matches!(by_name("cursor_style"), UpstreamTransport::Http { url, .. } if url == "http://localhost:9000/mcp")
    );
}

#[test]
fn bad_files_say_what_is_wrong() {
    let err = |text: &str| file(text).unwrap_err().to_string();
    assert!(err("{").contains("is not an mcpServers file"));
    assert!(err(r#"{"servers": {}}"#).contains("no \"mcpServers\""));
    let sse = err(r#"{"mcpServers": {"old": {"url": "http://x/sse", "type": "sse"}}}"#);
    assert!(
        sse.contains("'old' is an SSE server") && sse.contains("streamable HTTP"),
        "{sse}"
    );
    let missing = err(r#"{"mcpServers": {"a": {"command": "x", "env": {"K": "${NOPE}"}}}}"#);
    assert!(
        missing.contains("NOPE is not set") && missing.contains("'a'"),
        "{missing}"
    );
    let missing =
        err(r#"{"mcpServers": {"a": {"url": "http://h", "headers": {"K": "${env:GONE}"}}}}"#);
    assert!(missing.contains("GONE is not set"), "{missing}");
    assert!(err(r#"{"mcpServers": {"a": {}}}"#).contains("neither"));
    assert!(err(r#"{"mcpServers": {"a": {"command": "x", "url": "http://h"}}}"#).contains("both"));
    assert!(err(r#"{"mcpServers": {"a": {"url": "ftp://h"}}}"#).contains("not http"));
    assert!(err(r#"{"mcpServers": {"a": {"command": "x", "args": "y"}}}"#).contains("'a'"));
    assert!(
        err(r#"{"mcpServers": {"a b": {"command": "x"}}}"#)
            .contains("'a b' is not an upstream name")
    );
    let header = err(r#"{"mcpServers": {"a": {"url": "http://h", "headers": {"Bad Name": "v"}}}}"#);
    assert!(header.contains("\"Bad Name\" is not valid"), "{header}");
    let secret = err(r#"{"mcpServers": {"a": {"url": "http://h", "headers": {"K": "se\ncret"}}}}"#);
    assert!(!secret.contains("se\ncret"), "{secret}");
}

#[test]
fn names_are_unique_across_flags_and_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("servers.json");
    std::fs::write(
        &path,
        r#"{"mcpServers": {"git": {"command": "g"}, "b": {"command": "b"}}}"#,
    )
    .unwrap();
    let flags = |f: &[&str]| f.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let both = collect(&flags(&["a=x"]), Some(&path), &no_vars).unwrap();
    let names: Vec<_> = both.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["a", "b", "git"]);
    let dup = collect(&flags(&["git=x"]), Some(&path), &no_vars).unwrap_err();
    assert_eq!(
        dup.to_string(),
        "the upstream name 'git' is configured twice"
    );
    let dup = collect(&flags(&["a=x", "a=http://h"]), None, &no_vars).unwrap_err();
    assert!(matches!(dup, ConfigError::Duplicate(name) if name == "a"));
    let missing = collect(&[], Some(&dir.path().join("nope.json")), &no_vars).unwrap_err();
    assert!(
        missing
            .to_string()
            .starts_with("cannot read the upstream config"),
        "{missing}"
    );
}
