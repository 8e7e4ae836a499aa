//! Lowering a tool's JSON Schema for providers that take less than JSON
//! Schema. The declared schema is never changed in place: a [`ToolDecl`]
//! keeps it raw, and these functions give a copy for one provider.
//!
//! - [`for_gemini`]: Gemini's `parameters` takes an OpenAPI 3.0 subset and
//!   refuses `additionalProperties`, `$schema`, `$ref`/`$defs`, `anyOf`,
//!   `const` and `type` arrays (the encoder sends such schemas under
//!   `parametersJsonSchema` instead; this is for endpoints without it).
//! - [`strict_for_openai`]: OpenAI's `strict: true` needs every object closed
//!   (`additionalProperties: false`) with every property required (optional
//!   ones become nullable) and refuses some keywords and formats. A schema
//!   that cannot be made strict without changing what it accepts (a
//!   free-form object) gives `None`: send it non-strict, the default for MCP
//!   tools.
//!
//! [`ToolDecl`]: crate::ToolDecl

use serde_json::{json, Map, Value};

/// Keys Gemini's OpenAPI-subset `Schema` knows.
const GEMINI_KEYS: &[&str] = &[
    "type",
    "format",
    "title",
    "description",
    "nullable",
    "enum",
    "items",
    "properties",
    "required",
    "minItems",
    "maxItems",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "pattern",
    "default",
    "minProperties",
    "maxProperties",
    "propertyOrdering",
];

/// How deep `$ref`s are followed (a recursive schema is cut there).
const MAX_DEPTH: u32 = 16;

/// The schema in Gemini's OpenAPI subset: local `$ref`s inlined (a
/// recursive one becomes `{"type":"object"}` past a depth of 16), `allOf`
/// merged, `anyOf`/`oneOf` reduced to their first non-null branch (a null
/// branch makes it `nullable`), `const` turned into a one-value `enum`,
/// `type: [T, "null"]` into `type: T, nullable: true`, non-string enums and
/// unknown keywords dropped.
pub fn for_gemini(schema: &Value) -> Value {
    lower_gemini(schema, schema, 0)
}

fn resolve<'a>(root: &'a Value, reference: &str) -> Option<&'a Value> {
    let path = reference.strip_prefix("#")?;
    if path.is_empty() {
        return Some(root);
    }
    root.pointer(path)
}

fn lower_gemini(schema: &Value, root: &Value, depth: u32) -> Value {
    let Value::Object(s) = schema else { return json!({}) };
    if depth > MAX_DEPTH {
        return json!({"type": "object"});
    }
    if let Some(r) = s.get("$ref").and_then(Value::as_str) {
        let mut merged = resolve(root, r).and_then(Value::as_object).cloned().unwrap_or_default();
        // Siblings of $ref (a description, say) win over the target's.
        for (k, v) in s.iter().filter(|(k, _)| k.as_str() != "$ref") {
            merged.insert(k.clone(), v.clone());
        }
        return lower_gemini(&Value::Object(merged), root, depth + 1);
    }
    let mut s = s.clone();
    if let Some(Value::Array(all)) = s.remove("allOf") {
        for part in all {
            let lowered = lower_gemini(&part, root, depth + 1);
            merge_into(&mut s, lowered);
        }
    }
    let mut nullable = false;
    for key in ["anyOf", "oneOf"] {
        if let Some(Value::Array(branches)) = s.remove(key) {
            nullable |= branches.iter().any(|b| b.get("type").and_then(Value::as_str) == Some("null"));
            if let Some(first) = branches.iter().find(|b| b.get("type").and_then(Value::as_str) != Some("null")) {
                let lowered = lower_gemini(first, root, depth + 1);
                merge_into(&mut s, lowered);
            }
        }
    }
    if let Some(c) = s.remove("const") {
        s.insert("enum".into(), Value::Array(vec![c]));
    }
    if let Some(Value::Array(types)) = s.get("type").cloned() {
        nullable |= types.iter().any(|t| t == "null");
        match types.iter().find(|t| *t != "null") {
            Some(t) => s.insert("type".into(), t.clone()),
            None => s.remove("type"),
        };
    }
    let mut out = Map::new();
    for (k, v) in s {
        if !GEMINI_KEYS.contains(&k.as_str()) {
            continue;
        }
        let v = match (k.as_str(), v) {
            ("properties", Value::Object(props)) => Value::Object(
                props.iter().map(|(name, sub)| (name.clone(), lower_gemini(sub, root, depth + 1))).collect(),
            ),
            ("items", items) => lower_gemini(&items, root, depth + 1),
            // Gemini enums are strings only.
            ("enum", Value::Array(values)) if values.iter().all(Value::is_string) => Value::Array(values),
            ("enum", _) => continue,
            (_, v) => v,
        };
        out.insert(k, v);
    }
    if let Some(Value::Array(values)) = out.get("enum") {
        if !values.is_empty() {
            out.insert("type".into(), Value::from("string"));
        }
    }
    if let (Some(Value::Array(required)), Some(Value::Object(props))) = (out.get("required"), out.get("properties")) {
        let kept: Vec<Value> =
            required.iter().filter(|r| r.as_str().is_some_and(|n| props.contains_key(n))).cloned().collect();
        out.insert("required".into(), Value::Array(kept));
    }
    if nullable {
        out.insert("nullable".into(), Value::Bool(true));
    }
    Value::Object(out)
}

fn merge_into(target: &mut Map<String, Value>, part: Value) {
    let Value::Object(part) = part else { return };
    for (k, v) in part {
        match (target.get_mut(&k), v) {
            (Some(Value::Object(a)), Value::Object(b)) if k == "properties" => a.extend(b),
            (Some(Value::Array(a)), Value::Array(b)) if k == "required" => {
                for x in b {
                    if !a.contains(&x) {
                        a.push(x);
                    }
                }
            }
            (Some(_), _) => {}
            (None, v) => {
                target.insert(k, v);
            }
        }
    }
}

/// Keywords strict mode refuses.
const STRICT_REFUSED: &[&str] = &[
    "patternProperties",
    "unevaluatedProperties",
    "propertyNames",
    "minProperties",
    "maxProperties",
    "allOf",
    "not",
    "if",
    "then",
    "else",
    "dependentRequired",
    "dependentSchemas",
    "contains",
];

/// String formats strict mode takes; others are dropped.
const STRICT_FORMATS: &[&str] = &["date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"];

/// The schema for OpenAI `strict: true`, or `None` when it cannot be made
/// strict without accepting less than it says (an object open to extra
/// properties, a refused keyword, a root that is not an object).
pub fn strict_for_openai(schema: &Value) -> Option<Value> {
    if schema.get("type").and_then(Value::as_str) != Some("object") {
        return None;
    }
    strict(schema, 0)
}

fn strict(schema: &Value, depth: u32) -> Option<Value> {
    let Value::Object(s) = schema else { return Some(schema.clone()) };
    if depth > 32 || s.keys().any(|k| STRICT_REFUSED.contains(&k.as_str())) {
        return None;
    }
    let mut out = Map::new();
    for (k, v) in s {
        let v = match (k.as_str(), v) {
            ("format", Value::String(f)) if !STRICT_FORMATS.contains(&f.as_str()) => continue,
            ("$schema", _) => continue,
            ("properties" | "$defs" | "definitions", Value::Object(props)) => {
                let mut m = Map::new();
                for (name, sub) in props {
                    m.insert(name.clone(), strict(sub, depth + 1)?);
                }
                Value::Object(m)
            }
            ("items", items) => strict(items, depth + 1)?,
            ("anyOf", Value::Array(branches)) => {
                Value::Array(branches.iter().map(|b| strict(b, depth + 1)).collect::<Option<Vec<_>>>()?)
            }
            (_, v) => v.clone(),
        };
        out.insert(k.clone(), v);
    }
    let is_object = match out.get("type") {
        Some(Value::String(t)) => t == "object",
        Some(Value::Array(ts)) => ts.iter().any(|t| t == "object"),
        _ => out.contains_key("properties"),
    };
    if is_object {
        match out.get("additionalProperties") {
            None | Some(Value::Bool(false)) => {}
            Some(_) => return None,
        }
        let props = out.get("properties").and_then(Value::as_object).cloned().unwrap_or_default();
        if props.is_empty()
            && !s.contains_key("properties")
            && s.get("additionalProperties") != Some(&Value::Bool(false))
        {
            // A free-form object: closing it would refuse what it accepts.
            return None;
        }
        let required: Vec<String> = out
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).map(str::to_string).collect())
            .unwrap_or_default();
        let mut new_props = Map::new();
        for (name, sub) in props {
            let sub = if required.contains(&name) { sub } else { nullable(sub) };
            new_props.insert(name, sub);
        }
        let all: Vec<Value> = new_props.keys().map(|k| Value::from(k.as_str())).collect();
        out.insert("properties".into(), Value::Object(new_props));
        out.insert("required".into(), Value::Array(all));
        out.insert("additionalProperties".into(), Value::Bool(false));
    }
    Some(Value::Object(out))
}

/// An optional property in strict mode: required, but null allowed.
fn nullable(schema: Value) -> Value {
    match schema {
        Value::Object(mut s) => {
            // An enum lists every value it takes: null must join it.
            if let Some(Value::Array(values)) = s.get_mut("enum") {
                if !values.iter().any(Value::is_null) {
                    values.push(Value::Null);
                }
            }
            match s.get("type").cloned() {
                Some(Value::String(t)) if t != "null" => {
                    s.insert("type".into(), json!([t, "null"]));
                    Value::Object(s)
                }
                Some(Value::Array(mut ts)) => {
                    if !ts.iter().any(|t| t == "null") {
                        ts.push(Value::from("null"));
                    }
                    s.insert("type".into(), Value::Array(ts));
                    Value::Object(s)
                }
                _ => json!({"anyOf": [Value::Object(s), {"type": "null"}]}),
            }
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gemini_lowering_removes_what_gemini_refuses() {
        let raw = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "additionalProperties": false,
            "$defs": {"unit": {"type": "string", "enum": ["c", "f"]}},
            "properties": {
                "city": {"type": ["string", "null"], "description": "City"},
                "unit": {"$ref": "#/$defs/unit"},
                "mode": {"const": "fast"},
                "when": {"anyOf": [{"type": "string", "format": "date-time"}, {"type": "null"}]},
                "n": {"type": "integer", "enum": [1, 2]},
                "tags": {"type": "array", "items": {"oneOf": [{"type": "string"}, {"type": "number"}]}}
            },
            "required": ["city", "ghost"]
        });
        let g = for_gemini(&raw);
        assert_eq!(
            g,
            json!({
                "type": "object",
                "properties": {
                    "city": {"type": "string", "nullable": true, "description": "City"},
                    "unit": {"type": "string", "enum": ["c", "f"]},
                    "mode": {"type": "string", "enum": ["fast"]},
                    "when": {"type": "string", "format": "date-time", "nullable": true},
                    "n": {"type": "integer"},
                    "tags": {"type": "array", "items": {"type": "string"}}
                },
                "required": ["city"]
            })
        );
        let recursive = json!({"type":"object","properties":{"child":{"$ref":"#"}}});
        let g = for_gemini(&recursive);
        assert!(g.to_string().len() < 10_000, "a recursive schema is cut");
    }

    #[test]
    fn strict_closes_objects_and_makes_optional_fields_nullable() {
        let raw = json!({"type":"object","properties":{"url":{"type":"string","format":"uri"},"n":{"type":"integer"}},"required":["n"]});
        assert_eq!(
            strict_for_openai(&raw).unwrap(),
            json!({"type":"object","properties":{"url":{"type":["string","null"]},"n":{"type":"integer"}},
                "required":["n","url"],"additionalProperties":false})
        );
        assert_eq!(strict_for_openai(&json!({"type":"object"})), None, "free-form stays non-strict");
        assert_eq!(
            strict_for_openai(
                &json!({"type":"object","properties":{"a":{"type":"object","additionalProperties":true}}})
            ),
            None
        );
        assert_eq!(strict_for_openai(&json!({"type":"object","properties":{},"patternProperties":{}})), None);
    }
}
