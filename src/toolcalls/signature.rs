//! One-line Python signatures of upstream tools, built from their input schemas: what the
//! `run_python` description lists, so the model can write calls without fetching every schema.

use serde_json::Value;

/// The Python identifier code uses for a tool or server name: `-`, `.` and anything else that
/// cannot be in an identifier become `_`, and a name starting with a digit gets a leading `_`.
pub fn identifier(name: &str) -> String {
    let mut id: String = name
        .chars()
        .map(|c| {
            if c == '_' || c.is_alphanumeric() {
                c
            } else {
                '_'
            }
        })
        .collect();
    if id.is_empty() || id.starts_with(|c: char| c.is_ascii_digit()) {
        id.insert(0, '_');
    }
    id
}

/// `tools.SERVER.TOOL(arg: type, opt: type = ...)` for a tool with this input schema. Required
/// properties come first, optional ones show `= ...` (or their default when it is short).
pub fn python_signature(server: &str, tool: &str, schema: &Value) -> String {
    let properties = schema.get("properties").and_then(Value::as_object);
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut params: Vec<(bool, String)> = Vec::new();
    for (name, prop) in properties.into_iter().flatten() {
        let is_required = required.contains(&name.as_str());
        let mut param = format!("{name}: {}", python_type(prop));
        if !is_required {
            match prop.get("default").map(Value::to_string) {
                Some(d) if d.len() <= 20 => param.push_str(&format!(" = {}", python_literal(&d))),
                _ => param.push_str(" = ..."),
            }
        }
        params.push((is_required, param));
    }
    // Required first, each group in the order serde_json keeps an object's keys (sorted).
    params.sort_by_key(|(is_required, _)| !is_required);
    let params: Vec<String> = params.into_iter().map(|(_, p)| p).collect();
    format!(
        "tools.{}.{}({})",
        identifier(server),
        identifier(tool),
        params.join(", ")
    )
}

/// The Python type a JSON Schema describes, as a short annotation.
fn python_type(schema: &Value) -> String {
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        let shown: Vec<String> = values
            .iter()
            .take(4)
            .map(|v| python_literal(&v.to_string()))
            .collect();
        let more = if values.len() > 4 { ", ..." } else { "" };
        return format!("Literal[{}{more}]", shown.join(", "));
    }
    let one = |t: &str| match t {
        "string" => "str".to_owned(),
        "integer" => "int".to_owned(),
        "number" => "float".to_owned(),
        "boolean" => "bool".to_owned(),
        "null" => "None".to_owned(),
        "array" => match schema.get("items") {
            Some(items) if items.is_object() => format!("list[{}]", python_type(items)),
            _ => "list".to_owned(),
        },
        "object" => "dict".to_owned(),
        _ => "Any".to_owned(),
    };
    match schema.get("type") {
        Some(Value::String(t)) => one(t),
        Some(Value::Array(ts)) => {
            let names: Vec<String> = ts.iter().filter_map(Value::as_str).map(one).collect();
            if names.is_empty() {
                "Any".to_owned()
            } else {
                names.join(" | ")
            }
        }
        _ => "Any".to_owned(),
    }
}

/// A JSON literal as Python spells it.
fn python_literal(json: &str) -> String {
    match json {
        "true" => "True".to_owned(),
        "false" => "False".to_owned(),
        "null" => "None".to_owned(),
        other => other.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_become_identifiers() {
        assert_eq!(identifier("get-env"), "get_env");
        assert_eq!(identifier("fs.read"), "fs_read");
        assert_eq!(identifier("2fa"), "_2fa");
        assert_eq!(identifier(""), "_");
    }

    #[test]
    fn required_first_then_optional_with_defaults() {
        let schema = json!({
            "type": "object",
            "properties": {
                "limit": {"type": "integer", "default": 10},
                "query": {"type": "string"},
                "tags": {"type": "array", "items": {"type": "string"}},
                "flag": {"type": "boolean", "default": false},
                "mode": {"enum": ["a", "b"]}
            },
            "required": ["query"]
        });
        assert_eq!(
            python_signature("git-hub", "search.repos", &schema),
            "tools.git_hub.search_repos(query: str, flag: bool = False, limit: int = 10, \
             mode: Literal[\"a\", \"b\"] = ..., tags: list[str] = ...)"
        );
    }

    #[test]
    fn a_schema_without_properties_takes_no_arguments() {
        assert_eq!(
            python_signature("s", "t", &json!({"type": "object"})),
            "tools.s.t()"
        );
    }
}
