//! The tool as `tools/list` gives it to clients of the real server: a title, truthful behaviour
//! annotations (Claude's extension directory refuses tools without them), and schemas in the
//! portable form that MCP Inspector accepts: no `type` arrays (its `--strict` lint), no formats
//! of schemars' own (its validator). Inspector itself runs in `scripts/inspector.sh`; this is the
//! quick check that needs no Node.

use serde_json::Value;

use crate::common;
use common::spawn::mcp_server;

/// The paths in `schema` where `type` is not a single name, or `format` is schemars' own for an
/// integer's width (`uint64`), which validators warn of. The maps of named schemas (`properties`,
/// `$defs`) hold schemas, not keywords: a property may be called `type`.
fn unportable(schema: &Value, path: &str, found: &mut Vec<String>) {
    let Some(object) = schema.as_object() else {
        return;
    };
    if let Some(ty) = object.get("type")
        && !ty.is_string()
    {
        found.push(format!("{path}: type {ty}"));
    }
    if let Some(format) = object.get("format").and_then(Value::as_str)
        && (format.starts_with("int") || format.starts_with("uint"))
    {
        found.push(format!("{path}: format {format}"));
    }
    for (key, value) in object {
        match (key.as_str(), value) {
            ("properties" | "patternProperties" | "$defs", Value::Object(named)) => {
                for (name, schema) in named {
                    unportable(schema, &format!("{path}.{key}.{name}"), found);
                }
            }
            (_, Value::Array(items)) => {
                for (i, item) in items.iter().enumerate() {
                    unportable(item, &format!("{path}.{key}[{i}]"), found);
                }
            }
            _ => unportable(value, &format!("{path}.{key}"), found),
        }
    }
}

#[tokio::test]
async fn the_tool_has_a_title_annotations_and_portable_schemas() {
    let client = common::client::connect((), mcp_server(&[])).await;
    let tools = client.list_all_tools().await.unwrap();
    let tool = serde_json::to_value(&tools[0]).unwrap();
    assert_eq!(tool["name"], "run_python");
    assert_eq!(tool["title"], "Run Python", "{tool}");
    let annotations = &tool["annotations"];
    assert_eq!(annotations["title"], "Run Python", "{annotations}");
    // Sessions are state that later calls see, so not read-only and not idempotent; nothing
    // outside the sandbox changes, so not destructive; no network, so a closed world.
    for (hint, value) in [
        ("readOnlyHint", false),
        ("destructiveHint", false),
        ("idempotentHint", false),
        ("openWorldHint", false),
    ] {
        assert_eq!(annotations[hint], value, "{hint}: {annotations}");
    }
    let mut found = Vec::new();
    unportable(&tool["inputSchema"], "inputSchema", &mut found);
    unportable(&tool["outputSchema"], "outputSchema", &mut found);
    assert!(found.is_empty(), "not portable: {found:#?}");
    // The nullable fields are still nullable, as anyOf branches.
    assert_eq!(
        tool["outputSchema"]["properties"]["result"]["anyOf"],
        serde_json::json!([{"type": "string"}, {"type": "null"}]),
        "{tool}"
    );
    client.cancel().await.unwrap();
}
