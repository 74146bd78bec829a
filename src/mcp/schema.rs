//! The schemas clients are given, in a portable form: rmcp's (schemars'), with each `type` a
//! single name and only the `format`s JSON Schema defines, so that MCP Inspector's `--strict` lint
//! and its validator of replies have nothing to warn of.

use std::sync::Arc;

use rmcp::handler::server::common::{schema_for_input, schema_for_output};
use rmcp::model::JsonObject;
use schemars::Schema;
use schemars::transform::transform_subschemas;

use super::tools::{CallReport, RUN_PYTHON, RunPythonArgs};

/// The input schema clients are given: rmcp's, made portable ([`make_portable`]).
pub fn input_schema() -> Arc<JsonObject> {
    let schema = schema_for_input::<RunPythonArgs>()
        .unwrap_or_else(|e| panic!("the arguments of {RUN_PYTHON} are not an object: {e}"));
    portable(&schema)
}

/// The output schema clients are given: that of the structured content, made portable.
pub fn output_schema() -> Arc<JsonObject> {
    portable(&schema_for_output::<CallReport>())
}

fn portable(schema: &JsonObject) -> Arc<JsonObject> {
    let mut schema = Schema::from(schema.clone());
    make_portable(&mut schema);
    Arc::new(std::mem::take(schema.ensure_object()))
}

/// The `format`s JSON Schema 2020-12 defines. schemars adds its own for integer widths
/// (`"uint64"`), which validators do not know and warn of; `minimum` already says what matters.
const STANDARD_FORMATS: &[&str] = &[
    "date-time",
    "date",
    "time",
    "duration",
    "email",
    "idn-email",
    "hostname",
    "idn-hostname",
    "ipv4",
    "ipv6",
    "uri",
    "uri-reference",
    "iri",
    "iri-reference",
    "uuid",
    "uri-template",
    "json-pointer",
    "relative-json-pointer",
    "regex",
];

/// Drops the `format`s JSON Schema does not define, and rewrites schemars' nullable form,
/// `"type": ["string", "null"]` (an `Option`), as `anyOf` of branches with one `type` each:
/// clients that map tool schemas onto a dialect with a single `type` (the OpenAPI subset of
/// Gemini's function declarations) reject or misread type arrays, and MCP Inspector's `--strict`
/// lint warns of them. The constraints (`pattern`, `minimum`) go in the branches of the types
/// they are for, every one but `null`'s; the description stays outside, where clients look for it.
fn make_portable(schema: &mut Schema) {
    transform_subschemas(&mut make_portable, schema);
    let Some(object) = schema.as_object_mut() else {
        return;
    };
    if object
        .get("format")
        .is_some_and(|format| !STANDARD_FORMATS.iter().any(|known| format == known))
    {
        object.remove("format");
    }
    let Some(types) = object.get("type").and_then(|ty| ty.as_array()).cloned() else {
        return;
    };
    object.remove("type");
    let mut outside = serde_json::Map::new();
    for key in ["title", "description", "default", "examples", "deprecated"] {
        if let Some(value) = object.remove(key) {
            outside.insert(key.to_owned(), value);
        }
    }
    let constraints = std::mem::replace(object, outside);
    let branches = types
        .into_iter()
        .map(|ty| {
            let mut branch = serde_json::Map::new();
            if ty != "null" {
                branch.extend(constraints.clone());
            }
            branch.insert("type".to_owned(), ty);
            serde_json::Value::Object(branch)
        })
        .collect();
    object.insert("anyOf".to_owned(), serde_json::Value::Array(branches));
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_schema_gives_the_form_of_a_session_value() {
        let schema = serde_json::to_value(input_schema()).unwrap();
        assert_eq!(
            schema["properties"]["session"]["anyOf"],
            json!([
                {"type": "string", "pattern": crate::session::registry::SESSION_PATTERN},
                {"type": "null"}
            ]),
            "{schema}"
        );
        assert!(
            schema["properties"]["session"]["description"].is_string(),
            "{schema}"
        );
    }

    #[test]
    fn a_reply_need_not_list_figures() {
        // A reply without figures leaves both fields out (see `tools::run_reply`).
        let schema = serde_json::to_value(output_schema()).unwrap();
        let required = schema["required"].as_array().unwrap();
        assert!(!required.contains(&json!("images")), "{schema}");
        assert!(!required.contains(&json!("images_left_out")), "{schema}");
    }

    #[test]
    fn type_arrays_become_branches_of_one_type_each_and_formats_standard() {
        let mut schema = Schema::from(
            json!({
                "type": "object",
                "properties": {
                    "width": {"description": "w", "type": ["integer", "null"], "format": "uint32", "minimum": 0},
                    "items": {"type": "array", "items": {"type": ["string", "null"]}},
                    "plain": {"type": "string", "format": "date"}
                }
            })
            .as_object()
            .unwrap()
            .clone(),
        );
        make_portable(&mut schema);
        assert_eq!(
            schema.to_value(),
            json!({
                "type": "object",
                "properties": {
                    "width": {"description": "w", "anyOf": [
                        {"type": "integer", "minimum": 0},
                        {"type": "null"}
                    ]},
                    "items": {"type": "array", "items": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
                    "plain": {"type": "string", "format": "date"}
                }
            })
        );
    }
}
