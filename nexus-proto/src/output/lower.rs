//! The output schema as each provider's native field takes it.
//!
//! The schema a user writes is what the final value is validated against;
//! the wire carries a lowered copy where the provider accepts only a subset:
//!
//! - OpenAI (Chat and Responses) `strict: true`: every object closed, every
//!   property required, optional ones made nullable
//!   ([`crate::schema::strict_for_openai`]). The model then writes `null`
//!   for an optional property it leaves out; [`undo_nullable`] removes those
//!   before validation, so the value is checked as the user's schema means it.
//! - Anthropic `output_config.format`: every object closed; the numeric,
//!   string-length and array-length constraints it does not take are moved
//!   into the description (as Anthropic's own SDKs do) and checked locally.
//! - Gemini `responseJsonSchema`: the keywords it documents, the rest dropped
//!   (it would ignore them silently), `const` as a one-value `enum`.
//!
//! `None` means the schema cannot be carried without accepting less than
//! it says (an object open to extra properties, a recursive schema where
//! recursion is refused): the strategy is then the output tool.

use serde_json::{json, Map, Value};

use crate::provider::Style;

/// The wire schema for `style`'s native field (see the module docs).
pub fn for_style(style: Style, schema: &Value) -> Option<Value> {
    match style {
        Style::OpenAi | Style::OpenAiResponses => crate::schema::strict_for_openai(schema),
        Style::Anthropic => for_anthropic(schema),
        Style::Gemini => Some(for_gemini(schema)),
    }
}

/// Constraints Anthropic's structured outputs do not take.
const ANTHROPIC_MOVED: &[&str] = &[
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minLength",
    "maxLength",
    "maxItems",
    "uniqueItems",
];

fn for_anthropic(schema: &Value) -> Option<Value> {
    if mentions_root_ref(schema) {
        return None;
    }
    anthropic(schema)
}

fn anthropic(schema: &Value) -> Option<Value> {
    let Value::Object(s) = schema else { return Some(schema.clone()) };
    let mut out = Map::new();
    let mut moved = Vec::new();
    for (k, v) in s {
        let v = match (k.as_str(), v) {
            ("$schema", _) => continue,
            (key, v) if ANTHROPIC_MOVED.contains(&key) => {
                moved.push(format!("{key}: {v}"));
                continue;
            }
            ("minItems", Value::Number(n)) if n.as_u64().is_some_and(|n| n > 1) => {
                moved.push(format!("minItems: {n}"));
                continue;
            }
            ("properties" | "$defs" | "definitions", Value::Object(props)) => {
                let mut m = Map::new();
                for (name, sub) in props {
                    m.insert(name.clone(), anthropic(sub)?);
                }
                Value::Object(m)
            }
            ("items", items) => anthropic(items)?,
            ("anyOf" | "allOf", Value::Array(branches)) => {
                Value::Array(branches.iter().map(anthropic).collect::<Option<Vec<_>>>()?)
            }
            (_, v) => v.clone(),
        };
        out.insert(k.clone(), v);
    }
    if is_object(&out) {
        match out.get("additionalProperties") {
            None | Some(Value::Bool(false)) => {}
            Some(_) => return None,
        }
        if !out.contains_key("properties") {
            // A free-form object: closing it would refuse what it accepts.
            return None;
        }
        out.insert("additionalProperties".into(), Value::Bool(false));
    }
    if !moved.is_empty() {
        let note = format!("{{{}}}", moved.join(", "));
        let description = match out.get("description").and_then(Value::as_str) {
            Some(d) => format!("{d}\n\n{note}"),
            None => note,
        };
        out.insert("description".into(), Value::from(description));
    }
    Some(Value::Object(out))
}

fn is_object(s: &Map<String, Value>) -> bool {
    match s.get("type") {
        Some(Value::String(t)) => t == "object",
        Some(Value::Array(ts)) => ts.iter().any(|t| t == "object"),
        _ => s.contains_key("properties"),
    }
}

/// Whether a `$ref` anywhere points at the root (`#`): a recursive schema.
fn mentions_root_ref(schema: &Value) -> bool {
    match schema {
        Value::Object(s) => s.iter().any(|(k, v)| (k == "$ref" && v == "#") || mentions_root_ref(v)),
        Value::Array(items) => items.iter().any(mentions_root_ref),
        _ => false,
    }
}

/// Keywords Gemini's `responseJsonSchema` documents.
const GEMINI_JSON_KEYS: &[&str] = &[
    "$id",
    "$defs",
    "$ref",
    "$anchor",
    "type",
    "format",
    "title",
    "description",
    "enum",
    "items",
    "prefixItems",
    "minItems",
    "maxItems",
    "minimum",
    "maximum",
    "anyOf",
    "oneOf",
    "properties",
    "additionalProperties",
    "required",
    "propertyOrdering",
];

fn for_gemini(schema: &Value) -> Value {
    let Value::Object(s) = schema else { return schema.clone() };
    let mut out = Map::new();
    for (k, v) in s {
        let (k, v) = match (k.as_str(), v) {
            ("const", c) => ("enum", Value::Array(vec![c.clone()])),
            (key, _) if !GEMINI_JSON_KEYS.contains(&key) => continue,
            ("properties" | "$defs", Value::Object(props)) => {
                (k.as_str(), Value::Object(props.iter().map(|(n, sub)| (n.clone(), for_gemini(sub))).collect()))
            }
            ("items" | "additionalProperties", sub @ Value::Object(_)) => (k.as_str(), for_gemini(sub)),
            ("anyOf" | "oneOf" | "prefixItems", Value::Array(branches)) => {
                (k.as_str(), Value::Array(branches.iter().map(for_gemini).collect()))
            }
            (key, v) => (key, v.clone()),
        };
        if !(k == "enum" && out.contains_key("enum")) {
            out.insert(k.to_string(), v);
        }
    }
    Value::Object(out)
}

/// Undoes the strict-mode nullable rewrite on a value written against the
/// lowered schema: a property the original schema left optional, whose
/// value is `null` where the original does not accept `null`, is removed.
/// Walks `properties`, `items`, local `$ref`s and the `anyOf` branch whose
/// properties hold the object's keys.
pub fn undo_nullable(value: &mut Value, original: &Value) {
    undo(value, original, original, 0);
}

fn undo(value: &mut Value, schema: &Value, root: &Value, depth: u32) {
    if depth > 32 {
        return;
    }
    let Value::Object(s) = schema else { return };
    if let Some(target) = s.get("$ref").and_then(Value::as_str).and_then(|r| resolve(root, r)) {
        undo(value, target, root, depth + 1);
    }
    if let Some(Value::Array(branches)) = s.get("anyOf").or_else(|| s.get("oneOf")) {
        if let Some(branch) = branches.iter().find(|b| branch_fits(value, b, root)) {
            undo(value, branch, root, depth + 1);
        }
    }
    match value {
        Value::Object(fields) => {
            let Some(props) = s.get("properties").and_then(Value::as_object) else { return };
            let required: Vec<&str> =
                s.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).collect();
            fields.retain(|name, v| {
                let optional = !required.contains(&name.as_str());
                !(optional && v.is_null() && props.get(name).is_some_and(|p| !accepts_null(p, root, 0)))
            });
            for (name, v) in fields.iter_mut() {
                if let Some(sub) = props.get(name) {
                    undo(v, sub, root, depth + 1);
                }
            }
        }
        Value::Array(items) => {
            if let Some(sub) = s.get("items") {
                for v in items {
                    undo(v, sub, root, depth + 1);
                }
            }
        }
        _ => {}
    }
}

fn resolve<'a>(root: &'a Value, reference: &str) -> Option<&'a Value> {
    let path = reference.strip_prefix('#')?;
    if path.is_empty() {
        Some(root)
    } else {
        root.pointer(path)
    }
}

/// Whether `value` looks like it was written for `branch`: for objects,
/// every key is one of the branch's properties and its required ones are there.
fn branch_fits(value: &Value, branch: &Value, root: &Value) -> bool {
    let branch = match branch.get("$ref").and_then(Value::as_str).and_then(|r| resolve(root, r)) {
        Some(target) => target,
        None => branch,
    };
    match value {
        Value::Object(fields) => {
            let Some(props) = branch.get("properties").and_then(Value::as_object) else { return false };
            let required = branch.get("required").and_then(Value::as_array).into_iter().flatten();
            fields.keys().all(|k| props.contains_key(k))
                && required.filter_map(Value::as_str).all(|r| fields.contains_key(r))
        }
        Value::Array(_) => branch.get("type") == Some(&json!("array")),
        _ => false,
    }
}

/// Whether the schema accepts `null` as written (conservatively: a type
/// naming null, an empty schema, a null branch, an enum or const of null).
fn accepts_null(schema: &Value, root: &Value, depth: u32) -> bool {
    let Value::Object(s) = schema else { return schema == &Value::Bool(true) };
    if depth > 32 {
        return false;
    }
    if let Some(target) = s.get("$ref").and_then(Value::as_str).and_then(|r| resolve(root, r)) {
        return accepts_null(target, root, depth + 1);
    }
    if let Some(Value::Array(branches)) = s.get("anyOf").or_else(|| s.get("oneOf")) {
        return branches.iter().any(|b| accepts_null(b, root, depth + 1));
    }
    if let Some(c) = s.get("const") {
        return c.is_null();
    }
    if let Some(Value::Array(values)) = s.get("enum") {
        return values.iter().any(Value::is_null);
    }
    match s.get("type") {
        Some(Value::String(t)) => t == "null",
        Some(Value::Array(ts)) => ts.iter().any(|t| t == "null"),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ticket() -> Value {
        json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {
                "title": {"type": "string", "maxLength": 80},
                "priority": {"type": "integer", "minimum": 1, "maximum": 5},
                "labels": {"type": "array", "items": {"type": "string"}, "minItems": 2},
                "owner": {"$ref": "#/$defs/person"}
            },
            "required": ["title", "priority"],
            "$defs": {"person": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}}
        })
    }

    #[test]
    fn anthropic_closes_objects_and_moves_constraints_into_descriptions() {
        let w = for_style(Style::Anthropic, &ticket()).unwrap();
        assert_eq!(w["additionalProperties"], json!(false));
        assert_eq!(w["$defs"]["person"]["additionalProperties"], json!(false));
        assert_eq!(w["properties"]["priority"], json!({"type": "integer", "description": "{maximum: 5, minimum: 1}"}));
        assert_eq!(w["properties"]["labels"]["description"], json!("{minItems: 2}"));
        assert!(w.get("$schema").is_none());
        assert_eq!(for_style(Style::Anthropic, &json!({"type": "object", "additionalProperties": true})), None);
        let recursive = json!({"type": "object", "properties": {"next": {"$ref": "#"}}});
        assert_eq!(for_style(Style::Anthropic, &recursive), None);
    }

    #[test]
    fn gemini_keeps_its_keywords_only() {
        let w = for_style(
            Style::Gemini,
            &json!({"$schema": "x", "type": "object", "properties": {
            "a": {"const": "x", "pattern": "^x$"}, "b": {"type": "string", "minLength": 1}}}),
        )
        .unwrap();
        assert_eq!(w, json!({"type": "object", "properties": {"a": {"enum": ["x"]}, "b": {"type": "string"}}}));
    }

    #[test]
    fn undo_removes_the_nulls_strict_mode_asked_for() {
        let original = ticket();
        let mut v = json!({"title": "t", "priority": 1, "labels": null, "owner": {"name": "n"}});
        undo_nullable(&mut v, &original);
        assert_eq!(v, json!({"title": "t", "priority": 1, "owner": {"name": "n"}}));
        let nullable = json!({"type": "object", "properties": {"a": {"type": ["string", "null"]}}});
        let mut v = json!({"a": null});
        undo_nullable(&mut v, &nullable);
        assert_eq!(v, json!({"a": null}), "a null the original accepts stays");
    }
}
