//! Tool declarations: what the model is told it may call.

use std::fmt;
use std::ops::Deref;
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{json, Value};

use crate::provider::Style;

/// How a declared tool is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolKind {
    /// The driver runs it and feeds the result back.
    #[default]
    Executed,
    /// Declaration only: the model's calls surface to the caller as one
    /// `tool_call` request and nothing runs locally.
    Relay,
}

/// A tool the model may call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDecl {
    /// The name, already sanitized to `[a-zA-Z0-9_-]`.
    pub name: String,
    /// What the tool does, for the model.
    pub description: String,
    /// JSON Schema of the arguments object.
    pub input_schema: Value,
    /// Executed here or relayed to the caller.
    #[serde(default)]
    pub kind: ToolKind,
}

impl ToolDecl {
    /// An executed tool. The name is sanitized; a `null` schema becomes an empty object schema.
    pub fn new(name: &str, description: impl Into<String>, input_schema: Value) -> ToolDecl {
        ToolDecl {
            name: sanitize_name(name),
            description: description.into(),
            input_schema: normalize_schema(input_schema),
            kind: ToolKind::Executed,
        }
    }

    /// A digest of what the model is shown of this tool — its name,
    /// description and input schema — as `sha256:<hex>` over their
    /// canonical JSON (object keys sorted). Two declarations the model
    /// cannot tell apart digest the same; any change it could see changes
    /// the digest. A run's state keeps its declarations, so a host resuming
    /// it pins its tools by comparing these digests with the tools offered
    /// now. How a tool is served ([`ToolKind`]) is not shown to the model
    /// and is not part of it.
    pub fn digest(&self) -> String {
        let mut o = serde_json::Map::new();
        o.insert("name".into(), Value::from(self.name.as_str()));
        o.insert("description".into(), Value::from(self.description.as_str()));
        o.insert("inputSchema".into(), self.input_schema.clone());
        let mut text = String::new();
        crate::mcp::tools::canonical(&Value::Object(o), &mut text);
        crate::mcp::tools::sha256_label(text.as_bytes())
    }

    /// A declaration-only (relay) tool.
    pub fn relay(name: &str, description: impl Into<String>, input_schema: Value) -> ToolDecl {
        ToolDecl { kind: ToolKind::Relay, ..ToolDecl::new(name, description, input_schema) }
    }

    /// OpenAI Chat Completions shape: `{type:"function", function:{name, description, parameters}}`.
    pub fn to_openai(&self) -> Value {
        json!({
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.input_schema,
            }
        })
    }

    /// Anthropic Messages shape: `{name, description, input_schema}`.
    pub fn to_anthropic(&self) -> Value {
        json!({
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema,
        })
    }

    /// One Gemini function declaration: `{name, description, parameters}`.
    /// Gemini wants all of them wrapped in one `[{functionDeclarations:[…]}]`; see [`gemini_tools`].
    ///
    /// `parameters` takes an OpenAPI subset that refuses some JSON Schema
    /// keywords (`additionalProperties`, `$schema`, `$ref`, …); a schema that
    /// uses them goes under `parametersJsonSchema`, which takes full JSON Schema.
    pub fn to_gemini(&self) -> Value {
        json!({
            "name": self.name,
            "description": self.description,
            self.gemini_parameters_key(): self.input_schema,
        })
    }

    /// The key the schema goes under in a Gemini declaration (see [`to_gemini`](Self::to_gemini)).
    pub(crate) fn gemini_parameters_key(&self) -> &'static str {
        if uses_keywords_outside_openapi(&self.input_schema) {
            "parametersJsonSchema"
        } else {
            "parameters"
        }
    }
}

/// Gemini's `tools` value: ONE element wrapping every declaration.
pub fn gemini_tools(tools: &[ToolDecl]) -> Value {
    json!([{ "functionDeclarations": tools.iter().map(ToolDecl::to_gemini).collect::<Vec<_>>() }])
}

/// Every character outside `[a-zA-Z0-9_-]` becomes `_` (what all three providers accept).
pub fn sanitize_name(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).collect()
}

/// JSON Schema keywords Gemini's OpenAPI-subset `parameters` does not take.
const NON_OPENAPI_KEYWORDS: &[&str] = &[
    "additionalProperties",
    "$schema",
    "$ref",
    "$defs",
    "definitions",
    "const",
    "oneOf",
    "allOf",
    "not",
    "patternProperties",
];

fn uses_keywords_outside_openapi(schema: &Value) -> bool {
    match schema {
        Value::Object(map) => {
            map.keys().any(|k| NON_OPENAPI_KEYWORDS.contains(&k.as_str()))
                || map.values().any(uses_keywords_outside_openapi)
        }
        Value::Array(items) => items.iter().any(uses_keywords_outside_openapi),
        _ => false,
    }
}

fn normalize_schema(schema: Value) -> Value {
    if schema.is_null() {
        json!({"type": "object", "properties": {}})
    } else {
        schema
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_covers_what_the_model_sees_and_nothing_else() {
        let a = ToolDecl::new(
            "t",
            "Does t",
            json!({"type": "object", "properties": {"x": {"type": "string"}, "y": {"type": "integer"}}}),
        );
        // Key order is not meaning.
        let same = ToolDecl::new(
            "t",
            "Does t",
            json!({"properties": {"y": {"type": "integer"}, "x": {"type": "string"}}, "type": "object"}),
        );
        assert_eq!(a.digest(), same.digest());
        assert!(a.digest().starts_with("sha256:") && a.digest().len() == 71);
        // How it is served is not shown to the model.
        assert_eq!(a.digest(), ToolDecl::relay("t", "Does t", a.input_schema.clone()).digest());
        let changed = [
            ToolDecl::new("u", "Does t", a.input_schema.clone()),
            ToolDecl::new("t", "Does t!", a.input_schema.clone()),
            ToolDecl::new(
                "t",
                "Does t",
                json!({"type": "object", "properties": {"x": {"type": "string"}, "y": {"type": "number"}}}),
            ),
            ToolDecl::new(
                "t",
                "Does t",
                json!({"type": "object", "properties": {"x": {"type": "string"}, "y": {"type": "integer"}}, "required": ["x"]}),
            ),
            ToolDecl::new(
                "t",
                "Does t",
                json!({"type": "object", "properties": {"x": {"type": "string", "description": "now"}, "y": {"type": "integer"}}}),
            ),
        ];
        for c in &changed {
            assert_ne!(a.digest(), c.digest(), "{c:?}");
        }
    }

    #[test]
    fn sanitize_replaces_everything_outside_the_allowed_set() {
        assert_eq!(sanitize_name("fs.read file/ü"), "fs_read_file__");
        assert_eq!(sanitize_name("ok-Name_9"), "ok-Name_9");
    }

    #[test]
    fn adapter_shapes() {
        let t = ToolDecl::new("add", "adds", json!({"type":"object"}));
        assert_eq!(t.to_openai()["function"]["parameters"]["type"], "object");
        assert_eq!(t.to_anthropic()["input_schema"]["type"], "object");
        let g = gemini_tools(&[t.clone(), t]);
        assert_eq!(g.as_array().unwrap().len(), 1);
        assert_eq!(g[0]["functionDeclarations"].as_array().unwrap().len(), 2);
        assert!(g[0]["functionDeclarations"][0].get("parameters").is_some());
        let strict =
            ToolDecl::new("s", "strict", json!({"type":"object","properties":{},"additionalProperties":false}));
        assert!(strict.to_gemini().get("parametersJsonSchema").is_some());
        assert!(strict.to_gemini().get("parameters").is_none());
    }
}

/// The tool declarations of a run, shared: every run a host starts over the
/// same tools holds one copy of them, and each wire format's JSON for them
/// (the request body's `tools` array, the same every turn) is written once
/// for all those runs instead of once per request.
///
/// Built from a `Vec<ToolDecl>` or an `Arc<[ToolDecl]>`; clones share the
/// declarations and the encodings. The declarations cannot change once
/// shared, so an encoding never goes stale. Serialized as the list of
/// declarations (the encodings are not state).
#[derive(Clone)]
pub struct ToolSet {
    decls: Arc<[ToolDecl]>,
    /// Each style's `tools` array, made on first use.
    encoded: Arc<[OnceLock<Option<Box<RawValue>>>; 4]>,
}

impl ToolSet {
    /// The declarations, shared.
    pub fn decls(&self) -> &Arc<[ToolDecl]> {
        &self.decls
    }

    /// `style`'s JSON for the `tools` key of a request body, written on first use.
    pub(crate) fn encoded(&self, style: Style) -> Option<&RawValue> {
        let slot = match style {
            Style::Anthropic => 0,
            Style::OpenAi => 1,
            Style::Gemini => 2,
            Style::OpenAiResponses => 3,
        };
        self.encoded[slot].get_or_init(|| style.tools_json(&self.decls)).as_deref()
    }
}

impl Deref for ToolSet {
    type Target = [ToolDecl];

    fn deref(&self) -> &[ToolDecl] {
        &self.decls
    }
}

impl From<Arc<[ToolDecl]>> for ToolSet {
    fn from(decls: Arc<[ToolDecl]>) -> ToolSet {
        ToolSet { decls, encoded: Arc::default() }
    }
}

impl From<Vec<ToolDecl>> for ToolSet {
    fn from(decls: Vec<ToolDecl>) -> ToolSet {
        ToolSet::from(Arc::<[ToolDecl]>::from(decls))
    }
}

impl Default for ToolSet {
    fn default() -> ToolSet {
        ToolSet::from(Vec::new())
    }
}

impl PartialEq for ToolSet {
    fn eq(&self, other: &ToolSet) -> bool {
        self.decls == other.decls
    }
}

impl fmt::Debug for ToolSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.decls.fmt(f)
    }
}

impl Serialize for ToolSet {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.decls.serialize(s)
    }
}

impl<'de> Deserialize<'de> for ToolSet {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<ToolSet, D::Error> {
        Vec::<ToolDecl>::deserialize(d).map(ToolSet::from)
    }
}
