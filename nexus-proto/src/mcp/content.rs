//! A `tools/call` result → a [`ToolResult`] the model sees.
//!
//! The transcript carries text, so every content block becomes text: `text`
//! as is, the others as one bracketed line naming what they are (the bytes
//! of images, audio and blobs stay out of the prompt). The blocks as the
//! server sent them, and `structuredContent`, are kept in the result's
//! `metadata` (`{"mcp": {server, tool, content, structuredContent}}`, host
//! data the model never sees) whenever there is more than text, so a host
//! can render them.

use serde_json::{json, Map, Value};

use crate::suspend::ToolResult;

/// Maps a complete `tools/call` result. `output_schema` is the tool's
/// declared `outputSchema`, when it has one: `structuredContent` is checked
/// against it ([`check_schema`]) and a mismatch makes an error result.
pub fn tool_result(server: &str, tool: &str, result: &Value, output_schema: Option<&Value>) -> ToolResult {
    let empty = Vec::new();
    let content = result.get("content").and_then(Value::as_array).unwrap_or(&empty);
    let structured = result.get("structuredContent").filter(|v| !v.is_null());
    let is_error = result.get("isError").and_then(Value::as_bool).unwrap_or(false);

    let mut parts: Vec<String> = content.iter().map(render_block).collect();
    if let Some(s) = structured {
        // Servers SHOULD also send the structured value as text; when none of
        // the text blocks is that copy, the model gets the JSON itself.
        let has_copy = content.iter().any(|b| {
            b.get("type").and_then(Value::as_str) == Some("text")
                && b.get("text").and_then(Value::as_str).and_then(|t| serde_json::from_str::<Value>(t).ok()).as_ref()
                    == Some(s)
        });
        if !has_copy {
            parts.push(s.to_string());
        }
    }
    let mut output = parts.join("\n");
    let mut is_error = is_error;
    if !is_error {
        if let Some(schema) = output_schema {
            let problem = match structured {
                None => Some("no structuredContent, though the tool declares an outputSchema".to_string()),
                Some(s) => check_schema(schema, s).err(),
            };
            if let Some(p) = problem {
                is_error = true;
                output =
                    format!("MCP server {server}: the result of {tool} does not match its outputSchema: {p}\n{output}");
            }
        }
    }
    let only_text = content.iter().all(|b| b.get("type").and_then(Value::as_str) == Some("text"));
    let metadata = (!only_text || structured.is_some()).then(|| {
        let mut mcp = Map::new();
        mcp.insert("server".into(), Value::from(server));
        mcp.insert("tool".into(), Value::from(tool));
        mcp.insert("content".into(), Value::Array(content.clone()));
        if let Some(s) = structured {
            mcp.insert("structuredContent".into(), s.clone());
        }
        json!({ "mcp": mcp })
    });
    ToolResult { output, is_error, metadata }
}

/// One content block as the text the model sees.
fn render_block(block: &Value) -> String {
    let s = |k: &str| block.get(k).and_then(Value::as_str);
    // Decoded size of base64 text: three bytes per four characters, less the padding.
    let b64_len = |v: Option<&str>| {
        v.map(|d| {
            let d = d.trim_end();
            (d.len() / 4 * 3).saturating_sub(d.bytes().rev().take_while(|&b| b == b'=').count())
        })
        .unwrap_or(0)
    };
    match s("type") {
        Some("text") => s("text").unwrap_or_default().to_string(),
        Some("image") => format!("[image: {}, {} bytes]", s("mimeType").unwrap_or("unknown type"), b64_len(s("data"))),
        Some("audio") => format!("[audio: {}, {} bytes]", s("mimeType").unwrap_or("unknown type"), b64_len(s("data"))),
        Some("resource_link") => {
            let mut line =
                format!("[resource link: {} <{}>", s("name").unwrap_or_default(), s("uri").unwrap_or_default());
            if let Some(m) = s("mimeType") {
                line.push_str(&format!(" ({m})"));
            }
            if let Some(d) = s("description") {
                line.push_str(&format!(": {d}"));
            }
            line.push(']');
            line
        }
        Some("resource") => {
            let r = block.get("resource").cloned().unwrap_or(Value::Null);
            let rs = |k: &str| r.get(k).and_then(Value::as_str);
            let uri = rs("uri").unwrap_or_default();
            let mime = rs("mimeType").map(|m| format!(" ({m})")).unwrap_or_default();
            match (rs("text"), rs("blob")) {
                (Some(text), _) => format!("[resource <{uri}>{mime}]\n{text}"),
                (None, blob) => format!("[resource <{uri}>{mime}: {} bytes]", b64_len(blob)),
            }
        }
        Some(other) => format!("[{other} content: {block}]"),
        None => format!("[content: {block}]"),
    }
}

/// Checks `value` against a JSON Schema subset: `type` (a name or a list;
/// `integer` is a number without a fraction), `enum`, `const`,
/// `properties`, `required`, `additionalProperties` (`false` or a schema),
/// `items` (one schema), `anyOf` / `oneOf` (at least one branch matches) and
/// `allOf`. Other keywords (`$ref`, formats, ranges, patterns) are not
/// checked: a value they would refuse passes. `Err` names the first mismatch
/// by its JSON pointer.
pub fn check_schema(schema: &Value, value: &Value) -> Result<(), String> {
    check_at(schema, value, "", 0)
}

fn check_at(schema: &Value, value: &Value, at: &str, depth: u32) -> Result<(), String> {
    let Value::Object(s) = schema else {
        return if schema == &Value::Bool(false) { Err(format!("{at}: no value allowed")) } else { Ok(()) };
    };
    if depth > 64 {
        return Ok(());
    }
    let here = || if at.is_empty() { "/".to_string() } else { at.to_string() };
    if let Some(t) = s.get("type") {
        let names: Vec<&str> = match t {
            Value::String(n) => vec![n.as_str()],
            Value::Array(ns) => ns.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        if !names.is_empty() && !names.iter().any(|n| type_matches(n, value)) {
            return Err(format!("{}: expected {}, found {}", here(), names.join(" or "), type_name(value)));
        }
    }
    if let Some(Value::Array(options)) = s.get("enum") {
        if !options.contains(value) {
            return Err(format!("{}: not one of the enum values", here()));
        }
    }
    if let Some(c) = s.get("const") {
        if c != value {
            return Err(format!("{}: not the const value", here()));
        }
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(Value::Array(branches)) = s.get(key) {
            if !branches.iter().any(|b| check_at(b, value, at, depth + 1).is_ok()) {
                return Err(format!("{}: matches no branch of {key}", here()));
            }
        }
    }
    if let Some(Value::Array(all)) = s.get("allOf") {
        for b in all {
            check_at(b, value, at, depth + 1)?;
        }
    }
    if let Value::Object(obj) = value {
        if let Some(Value::Array(required)) = s.get("required") {
            for r in required.iter().filter_map(Value::as_str) {
                if !obj.contains_key(r) {
                    return Err(format!("{}: missing required property {r:?}", here()));
                }
            }
        }
        let props = s.get("properties").and_then(Value::as_object);
        for (k, v) in obj {
            let path = format!("{at}/{}", k.replace('~', "~0").replace('/', "~1"));
            match props.and_then(|p| p.get(k)) {
                Some(sub) => check_at(sub, v, &path, depth + 1)?,
                None => match s.get("additionalProperties") {
                    Some(Value::Bool(false)) => return Err(format!("{path}: property not allowed")),
                    Some(sub @ Value::Object(_)) => check_at(sub, v, &path, depth + 1)?,
                    _ => {}
                },
            }
        }
    }
    if let (Value::Array(items), Some(item_schema)) = (value, s.get("items")) {
        for (i, v) in items.iter().enumerate() {
            check_at(item_schema, v, &format!("{at}/{i}"), depth + 1)?;
        }
    }
    Ok(())
}

fn type_matches(name: &str, v: &Value) -> bool {
    match name {
        "null" => v.is_null(),
        "boolean" => v.is_boolean(),
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "number" => v.is_number(),
        "integer" => v.as_i64().is_some() || v.as_u64().is_some() || v.as_f64().is_some_and(|f| f.fract() == 0.0),
        _ => true,
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_subset() {
        let schema = json!({"type":"object","properties":{"n":{"type":"integer"},"tags":{"type":"array","items":{"type":"string"}}},"required":["n"],"additionalProperties":false});
        assert!(check_schema(&schema, &json!({"n": 3, "tags": ["a"]})).is_ok());
        assert!(check_schema(&schema, &json!({"n": 3.0})).is_ok());
        assert_eq!(check_schema(&schema, &json!({"n": 3.5})).unwrap_err(), "/n: expected integer, found number");
        assert_eq!(check_schema(&schema, &json!({})).unwrap_err(), "/: missing required property \"n\"");
        assert_eq!(check_schema(&schema, &json!({"n":1,"x":1})).unwrap_err(), "/x: property not allowed");
        assert_eq!(
            check_schema(&schema, &json!({"n":1,"tags":[1]})).unwrap_err(),
            "/tags/0: expected string, found number"
        );
    }
}
