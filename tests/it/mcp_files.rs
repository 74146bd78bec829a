//! `run_python`'s `files` over the real MCP server: input under `/data` as text or base64, what
//! the code writes under `/out` back as inline text, images and embedded resources within the
//! reply's cap, bad input refused as `invalid_params` naming the problem, and files kept in a
//! session.

use crate::common;

use base64::prelude::{BASE64_STANDARD, Engine as _};
use common::client::{Client, connect, run_python_with, structured, text};
use rmcp::model::{ContentBlock as RawContent, ResourceContents};
use serde_json::{Value, json};

/// A PNG of one pixel: what an image written under `/out` must begin with to come back as one.
const PIXEL_PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";

async fn server() -> Client {
    let command = common::spawn::mcp_server(&[]);
    let client = connect((), command).await;
    client
        .call_tool(run_python_with(json!({"code": "None"})))
        .await
        .unwrap();
    client
}

fn call(code: &str, files: Value) -> rmcp::model::CallToolRequestParams {
    run_python_with(json!({ "code": code, "files": files }))
}

#[tokio::test]
async fn a_csv_is_summarised_and_the_written_files_come_back() {
    let client = server().await;
    let code = "import csv\n\
        rows = list(csv.DictReader(open('/data/sales.csv')))\n\
        total = sum(int(r['amount']) for r in rows)\n\
        with open('/out/summary.txt', 'w') as f: f.write(f'total {total}')\n\
        open('/out/pixel.png', 'wb').write(open('/data/pixel.png', 'rb').read())\n\
        open('/out/blob.bin', 'wb').write(bytes(range(256)))\n\
        open('/out/fake.png', 'wb').write(b'not a png')\n\
        total";
    let files = json!({
        "sales.csv": "region,amount\nnorth,120\nsouth,80\n",
        "pixel.png": {"base64": PIXEL_PNG},
    });
    let reply = client.call_tool(call(code, files)).await.unwrap();
    let v = structured(&reply);
    assert_eq!(v["result"], "200", "{v}");
    let listed: Vec<(&str, &str)> = v["files"]
        .as_array()
        .expect("files listed")
        .iter()
        .map(|f| {
            (
                f["path"].as_str().unwrap(),
                f["media_type"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        listed,
        [
            ("/out/blob.bin", "application/octet-stream"),
            ("/out/fake.png", "image/png"),
            ("/out/pixel.png", "image/png"),
            ("/out/summary.txt", "text/plain"),
        ]
    );
    assert!(text(&reply).contains("4 files written under /out follow."));
    let blocks: Vec<&RawContent> = reply.content.iter().collect();
    // The text, then the files in path order.
    let kinds: Vec<String> = blocks[1..].iter().map(|b| kind(b)).collect();
    assert_eq!(
        kinds,
        [
            "blob sandbox:///out/blob.bin",
            "blob sandbox:///out/fake.png",
            "image image/png",
            "text --- /out/summary.txt (text/plain) ---\ntotal 200",
        ],
        "{blocks:#?}"
    );
    let RawContent::Resource(blob) = blocks[1] else {
        unreachable!()
    };
    let ResourceContents::BlobResourceContents { blob, .. } = &blob.resource else {
        unreachable!()
    };
    assert_eq!(
        BASE64_STANDARD.decode(blob).unwrap(),
        (0..=255u8).collect::<Vec<u8>>()
    );
}

fn kind(block: &RawContent) -> String {
    match block {
        RawContent::Text(t) => format!("text {}", t.text),
        RawContent::Image(i) => format!("image {}", i.mime_type),
        RawContent::Resource(r) => match &r.resource {
            ResourceContents::BlobResourceContents { uri, .. } => format!("blob {uri}"),
            ResourceContents::TextResourceContents { uri, .. } => format!("text resource {uri}"),
            other => format!("{other:?}"),
        },
        other => format!("{other:?}"),
    }
}

#[tokio::test]
async fn bad_files_are_invalid_params_that_name_the_problem() {
    let client = server().await;
    let many: serde_json::Map<String, Value> = (0..300)
        .map(|i| (format!("f{i}.txt"), json!("x")))
        .collect();
    for (files, named) in [
        (json!({"../etc/passwd": "x"}), "../etc/passwd"),
        (json!({"/etc/passwd": "x"}), "absolute"),
        (json!({"a.bin": {"base64": "not base64!"}}), "a.bin"),
        (
            json!({"a/b/c/d/e/f/g/h/i/j.txt": "x"}),
            "a/b/c/d/e/f/g/h/i/j.txt",
        ),
        (Value::Object(many), "at most 256"),
    ] {
        let err = client
            .call_tool(call("1", files.clone()))
            .await
            .expect_err("refused");
        let rmcp::ServiceError::McpError(e) = &err else {
            panic!("{files}: {err:?}")
        };
        assert_eq!(
            e.code,
            rmcp::model::ErrorCode::INVALID_PARAMS,
            "{files}: {e:?}"
        );
        assert!(e.message.contains(named), "{files}: {}", e.message);
    }
    // The server still answers.
    let reply = client.call_tool(call("6 * 7", json!({}))).await.unwrap();
    assert_eq!(structured(&reply)["result"], "42");
}

#[tokio::test]
async fn files_over_the_replys_cap_are_named_not_sent() {
    let client = server().await;
    let code = "open('/out/big.bin', 'wb').write(b'\\1' * (9 << 20))\n\
        open('/out/small.txt', 'w').write('kept')";
    let reply = client.call_tool(call(code, json!({}))).await.unwrap();
    let said = text(&reply);
    assert!(said.contains("Left out of this reply"), "{said}");
    assert!(said.contains("/out/big.bin (9437184 bytes)"), "{said}");
    assert!(said.contains("--- /out/small.txt"), "{said}");
    let sent = serde_json::to_string(&reply).unwrap().len();
    assert!(sent < 64 << 10, "the reply is {sent} bytes");
}

#[tokio::test]
async fn without_files_open_is_refused_and_nothing_is_listed() {
    let client = server().await;
    let reply = client
        .call_tool(run_python_with(
            json!({"code": "open('/out/x.txt', 'w').write('x')"}),
        ))
        .await
        .unwrap();
    assert_eq!(reply.is_error, Some(true));
    let v = structured(&reply);
    assert!(v.get("files").is_none(), "{v}");
    // There is no /out without files, and the error says how to get one.
    assert_eq!(v["error"]["type"], "FileNotFoundError", "{v}");
    let message = v["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(safe_python_protocol::NO_FILES_HERE),
        "{message}"
    );
}

#[tokio::test]
async fn a_sessions_files_stay_for_its_later_calls() {
    let client = server().await;
    let first = client
        .call_tool(run_python_with(json!({
            "code": "open('/out/n.txt', 'w').write('1')",
            "session": "new",
            "files": {"in.txt": "from the client"},
        })))
        .await
        .unwrap();
    let id = structured(&first)["session"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let later = client
        .call_tool(run_python_with(json!({
            "code": "open('/data/in.txt').read() + ' / ' + open('/out/n.txt').read()",
            "session": id,
        })))
        .await
        .unwrap();
    assert_eq!(
        structured(&later)["result"],
        "'from the client / 1'",
        "{later:?}"
    );
}
