//! Typed final output: a run that ends in a value validating against a JSON
//! Schema, on every upstream.
//!
//! The rule is the machine's, not the driver's. For each upstream a run
//! uses, a pure function ([`decide`]) picks the strategy — the provider's
//! own schema field ([`Strategy::Native`]), a synthetic output tool offered
//! beside the user's tools ([`Strategy::Tool`]), or the schema in the system
//! prompt with the JSON taken from the final text ([`Strategy::Prompted`]) —
//! and the choice is recorded in the run state ([`StrategyRecord`]). A
//! resumed or replayed run therefore keeps its strategy; a failover decides
//! afresh for the new upstream and records that; a provider that refuses
//! the native field with a 400 moves that upstream to tool mode for the rest
//! of the run, recorded too.
//!
//! The final value is validated locally against the schema as written (the
//! wire may carry a lowered copy, see [`lower`]); a value that fails goes
//! back to the model as an ordinary next turn under the spec's retry budget.

use std::fmt;
use std::sync::{Arc, Mutex, OnceLock};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::provider::Style;

pub(crate) mod extract;
pub mod lower;
mod rule;
mod validate;

pub use extract::{extract_json, Extracted};
pub use rule::OutputFormat;
pub(crate) use rule::{
    check_tools, commit, native_refused, on_answer, on_output_call, prepare, Next, OutputRule, OutputState, Shape,
};
pub use validate::SchemaCheck;

/// The default name of the output (and of the output tool).
pub const DEFAULT_OUTPUT_NAME: &str = "final_result";
/// Default validation retries before a run fails with [`OutputError::Invalid`].
pub const DEFAULT_OUTPUT_RETRIES: u32 = 2;

/// What the run's final answer must be.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OutputSpec {
    /// The name sent with the schema (OpenAI's `json_schema.name`) and the
    /// output tool's name in tool mode: `[a-zA-Z0-9_-]`, at most 64 bytes.
    pub name: String,
    /// A JSON Schema (draft 2020-12) whose root is an object.
    pub schema: Value,
    /// What the output is, for the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// How the schema reaches the model.
    #[serde(default)]
    pub mode: OutputMode,
    /// Answers that fail validation the model may replace before the run
    /// fails (each is one more model call).
    #[serde(default = "default_retries")]
    pub retries: u32,
    /// Rules that override the built-in model table for [`OutputMode::Auto`],
    /// first match wins.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub models: Vec<ModelRule>,
    /// The compiled schema, shared by the spec's clones (never serialized).
    #[serde(skip)]
    compiled: CompiledSchema,
    /// The native field's format per style, shared by the spec's clones
    /// (never serialized).
    #[serde(skip)]
    formats: SharedFormats,
}

/// A spec's native formats (its schema lowered for a style), made once for
/// the spec and its clones instead of once per run, as the compiled schema
/// is. Each is kept with what it was made from: a clone whose name,
/// description or schema changed makes its own.
#[derive(Clone, Default)]
struct SharedFormats(Arc<Mutex<Vec<MadeFormat>>>);

/// A format, with the style and the schema it was made for.
type MadeFormat = (Style, Value, Arc<OutputFormat>);

impl PartialEq for SharedFormats {
    fn eq(&self, _: &SharedFormats) -> bool {
        true
    }
}

impl fmt::Debug for SharedFormats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("formats")
    }
}

/// A spec's compiled schema, shared by its clones. A host clones one config
/// into every run it starts, so the schema is compiled (and checked against
/// the draft's meta-schema) once per host rather than once per run. It is
/// kept with the schema it was compiled from: a clone whose `schema` was
/// changed afterwards compiles its own.
#[derive(Clone, Default)]
struct CompiledSchema(Arc<OnceLock<(Value, SchemaCheck)>>);

impl CompiledSchema {
    fn get_or_compile(&self, schema: &Value) -> Result<SchemaCheck, String> {
        if let Some((from, check)) = self.0.get() {
            if from == schema {
                return Ok(check.clone());
            }
            return SchemaCheck::compile(schema);
        }
        let check = SchemaCheck::compile(schema)?;
        // Two clones compiling at once: the first to finish is kept.
        let _ = self.0.set((schema.clone(), check.clone()));
        Ok(check)
    }
}

/// A cache, not part of the spec's value: specs compare by their fields.
impl PartialEq for CompiledSchema {
    fn eq(&self, _: &CompiledSchema) -> bool {
        true
    }
}

impl fmt::Debug for CompiledSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.get().is_some() { "compiled" } else { "not compiled" })
    }
}

fn default_retries() -> u32 {
    DEFAULT_OUTPUT_RETRIES
}

impl OutputSpec {
    /// A spec named [`DEFAULT_OUTPUT_NAME`], mode auto, two retries.
    pub fn new(schema: Value) -> OutputSpec {
        OutputSpec {
            name: DEFAULT_OUTPUT_NAME.to_string(),
            schema,
            description: None,
            mode: OutputMode::Auto,
            retries: DEFAULT_OUTPUT_RETRIES,
            models: Vec::new(),
            compiled: CompiledSchema::default(),
            formats: SharedFormats::default(),
        }
    }

    /// Sets the name.
    pub fn named(mut self, name: impl Into<String>) -> OutputSpec {
        self.name = name.into();
        self
    }

    /// Sets the mode.
    pub fn with_mode(mut self, mode: OutputMode) -> OutputSpec {
        self.mode = mode;
        self
    }

    /// Checks the spec: a usable name and a schema that compiles, with an
    /// object at its root (every provider's tool and strict schemas need one).
    pub fn check(&self) -> Result<(), String> {
        self.compile().map(|_| ())
    }

    /// [`check`](Self::check), keeping the compiled schema: a run validates
    /// with it, so it is compiled once per run at most, and once for all
    /// the runs of one spec and its clones while its schema is unchanged.
    pub(crate) fn compile(&self) -> Result<SchemaCheck, String> {
        let name_ok = !self.name.is_empty()
            && self.name.len() <= 64
            && self.name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !name_ok {
            return Err(format!("output name {:?} must be 1 to 64 of [a-zA-Z0-9_-]", self.name));
        }
        if self.schema.get("type").and_then(Value::as_str) != Some("object") {
            return Err("the output schema's root must be {\"type\": \"object\", ...}".into());
        }
        self.compiled.get_or_compile(&self.schema)
    }

    /// The native field's format for `style`: the schema lowered for it
    /// ([`lower::for_style`]; a schema outside the subset goes as written,
    /// and the provider's 400 moves the run to tool mode).
    pub(crate) fn format_for(&self, style: Style) -> Arc<OutputFormat> {
        let made_from = |(s, schema, f): &&MadeFormat| {
            *s == style && f.name == self.name && f.description == self.description && *schema == self.schema
        };
        let mut formats = self.formats.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, _, format)) = formats.iter().find(made_from) {
            return format.clone();
        }
        let schema = lower::for_style(style, &self.schema).unwrap_or_else(|| self.schema.clone());
        let format = Arc::new(OutputFormat { name: self.name.clone(), description: self.description.clone(), schema });
        // Bounded: a clone that changed its schema makes its own and is kept
        // beside the others only while few.
        if formats.len() < 16 {
            formats.push((style, self.schema.clone(), format.clone()));
        }
        format
    }
}

/// How the output schema reaches the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "fuzzing", derive(arbitrary::Arbitrary))]
pub enum OutputMode {
    /// Per upstream, from the model table ([`decide`]).
    #[default]
    Auto,
    /// Always the provider's own field (a 400 to it still falls back to tool mode).
    Native,
    /// Always the output tool.
    Tool,
    /// Always the schema in the system prompt.
    Prompted,
}

impl OutputMode {
    /// Parses `auto` | `native` | `tool` | `prompted`.
    pub fn parse(s: &str) -> Option<OutputMode> {
        match s {
            "auto" => Some(OutputMode::Auto),
            "native" => Some(OutputMode::Native),
            "tool" => Some(OutputMode::Tool),
            "prompted" => Some(OutputMode::Prompted),
            _ => None,
        }
    }
}

/// How one upstream is asked for the output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Strategy {
    /// The provider's own schema field: Chat `response_format`, Responses
    /// `text.format`, Anthropic `output_config.format`, Gemini
    /// `generationConfig.responseJsonSchema`.
    Native,
    /// A synthetic tool taking the output as its arguments.
    Tool,
    /// The schema in the system prompt; the JSON is read from the final text.
    Prompted,
}

impl Strategy {
    /// `native` | `tool` | `prompted`.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::Native => "native",
            Strategy::Tool => "tool",
            Strategy::Prompted => "prompted",
        }
    }
}

/// An entry of the model table: models of `style` (any style when `None`)
/// whose id starts with `prefix` use `strategy` in [`OutputMode::Auto`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelRule {
    /// The wire format the rule is for (any when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub style: Option<Style>,
    /// A model id prefix (`""` matches every model).
    pub prefix: String,
    /// The strategy those models use.
    pub strategy: Strategy,
}

/// Which strategy an upstream used, from which turn on, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StrategyRecord {
    /// The upstream (0 the primary).
    pub upstream: usize,
    /// The strategy.
    pub strategy: Strategy,
    /// The 1-based turn it was first used for.
    pub turn: u32,
    /// Why: `mode`, `model table`, `override`, or the provider's refusal.
    pub reason: String,
}

/// Built-in model table for [`OutputMode::Auto`]: models that take a schema
/// together with tools use it natively; those that refuse the pair (Gemini
/// before 3) or have no schema field (older Claude and GPT models) use the
/// output tool. First match wins; the style's fallback is after the table.
const MODEL_TABLE: &[(Style, &str, Strategy)] = &[
    (Style::Gemini, "gemini-3", Strategy::Native),
    (Style::Gemini, "gemini-", Strategy::Tool),
    (Style::Anthropic, "claude-3", Strategy::Tool),
    (Style::Anthropic, "claude-opus-4-0", Strategy::Tool),
    (Style::Anthropic, "claude-opus-4-1", Strategy::Tool),
    (Style::Anthropic, "claude-sonnet-4-0", Strategy::Tool),
    (Style::Anthropic, "claude-opus-4-2", Strategy::Tool),
    (Style::Anthropic, "claude-sonnet-4-2", Strategy::Tool),
    (Style::OpenAi, "gpt-3.5", Strategy::Tool),
    (Style::OpenAi, "gpt-4-", Strategy::Tool),
    (Style::OpenAiResponses, "gpt-3.5", Strategy::Tool),
    (Style::OpenAiResponses, "gpt-4-", Strategy::Tool),
];

/// The strategy for one upstream, and why. Pure: the same spec, style and
/// model always give the same answer.
///
/// A fixed mode is used as given. In auto mode the spec's own rules come
/// first, then the built-in table; past both, OpenAI (Chat and Responses)
/// and Anthropic are native, Gemini is tool mode (only Gemini 3 takes a
/// response schema together with function tools). Native needs a schema
/// the provider's subset can carry without accepting less: one OpenAI strict
/// mode or Anthropic cannot take (a free-form object) goes by tool instead.
pub fn decide(spec: &OutputSpec, style: Style, model: &str) -> (Strategy, &'static str) {
    let fixed = match spec.mode {
        OutputMode::Native => Some(Strategy::Native),
        OutputMode::Tool => Some(Strategy::Tool),
        OutputMode::Prompted => Some(Strategy::Prompted),
        OutputMode::Auto => None,
    };
    if let Some(s) = fixed {
        return (s, "mode");
    }
    let overridden =
        spec.models.iter().find(|r| r.style.is_none_or(|s| s == style) && model.starts_with(r.prefix.as_str()));
    if let Some(rule) = overridden {
        return (rule.strategy, "override");
    }
    let listed = MODEL_TABLE.iter().find(|(s, prefix, _)| *s == style && model.starts_with(prefix));
    let strategy = match listed {
        Some((_, _, strategy)) => *strategy,
        None if style == Style::Gemini => Strategy::Tool,
        None => Strategy::Native,
    };
    if strategy == Strategy::Native && lower::for_style(style, &spec.schema).is_none() {
        return (Strategy::Tool, "schema outside the native subset");
    }
    (strategy, "model table")
}

/// Why a run with an output spec did not end in a value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum OutputError {
    /// Every answer failed validation and the retries are spent.
    #[error("the output did not validate after {attempts} attempts: {}", errors.join("; "))]
    Invalid {
        /// Answers given (the first plus the retries).
        attempts: u32,
        /// The last answer's raw text (or output tool arguments).
        raw: String,
        /// The last answer's validation errors.
        errors: Vec<String>,
    },
    /// The model refused (a `refusal` part, `stop_reason: refusal`, a safety block).
    #[error("the model refused to give the output: {message}")]
    Refused {
        /// The refusal text, or the provider's stop reason.
        message: String,
    },
    /// The output token cap cut the answer off before its JSON was complete.
    #[error("the output was cut off at the token limit ({} bytes written)", raw.len())]
    Truncated {
        /// What the model wrote before the cut.
        raw: String,
    },
}

/// The native field's value for each style, as its API defines it. Each
/// provider's encoder and body writer put it in the body (and so merge a
/// caller's params into it the same way).
pub(crate) mod wire {
    use serde::Serialize;
    use serde_json::{Map, Value};

    use super::OutputFormat;

    /// OpenAI Chat `response_format`:
    /// `{type: "json_schema", json_schema: {name, description?, schema, strict: true}}`.
    pub(crate) fn chat_response_format(o: &OutputFormat) -> Value {
        let mut js = Map::new();
        js.insert("name".into(), Value::from(o.name.as_str()));
        if let Some(d) = &o.description {
            js.insert("description".into(), Value::from(d.as_str()));
        }
        js.insert("schema".into(), o.schema.clone());
        js.insert("strict".into(), Value::Bool(true));
        serde_json::json!({ "type": "json_schema", "json_schema": js })
    }

    /// OpenAI Responses `text`: `{format: {type: "json_schema", name, description?, schema, strict: true}}`.
    pub(crate) fn responses_text(o: &OutputFormat) -> Value {
        let mut f = Map::new();
        f.insert("type".into(), Value::from("json_schema"));
        f.insert("name".into(), Value::from(o.name.as_str()));
        if let Some(d) = &o.description {
            f.insert("description".into(), Value::from(d.as_str()));
        }
        f.insert("schema".into(), o.schema.clone());
        f.insert("strict".into(), Value::Bool(true));
        serde_json::json!({ "format": f })
    }

    /// Anthropic `output_config`: `{format: {type: "json_schema", schema}}`.
    pub(crate) fn anthropic_output_config(o: &OutputFormat) -> Value {
        serde_json::json!({ "format": { "type": "json_schema", "schema": o.schema } })
    }

    /// A native field written from the format without building its tree
    /// (the schema is not copied per request): the same bytes as the
    /// builder above of the same name, each struct's fields in key order.
    #[derive(Clone, Copy)]
    pub(crate) enum View<'a> {
        /// Chat `response_format`.
        ChatResponseFormat(&'a OutputFormat),
        /// Responses `text`.
        ResponsesText(&'a OutputFormat),
        /// Anthropic `output_config`.
        AnthropicOutputConfig(&'a OutputFormat),
    }

    impl View<'_> {
        /// The field as a tree, for a caller param to merge into.
        pub(crate) fn to_value(self) -> Value {
            match self {
                View::ChatResponseFormat(o) => chat_response_format(o),
                View::ResponsesText(o) => responses_text(o),
                View::AnthropicOutputConfig(o) => anthropic_output_config(o),
            }
        }
    }

    #[derive(Serialize)]
    struct Named<'a> {
        #[serde(skip_serializing_if = "Option::is_none")]
        description: Option<&'a str>,
        name: &'a str,
        schema: &'a Value,
        strict: bool,
        #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
        kind: Option<&'static str>,
    }

    fn named<'a>(o: &'a OutputFormat, kind: Option<&'static str>) -> Named<'a> {
        Named { description: o.description.as_deref(), name: &o.name, schema: &o.schema, strict: true, kind }
    }

    #[derive(Serialize)]
    struct ChatFormat<'a> {
        json_schema: Named<'a>,
        #[serde(rename = "type")]
        kind: &'static str,
    }

    #[derive(Serialize)]
    struct Format<T> {
        format: T,
    }

    #[derive(Serialize)]
    struct AnthropicFormat<'a> {
        schema: &'a Value,
        #[serde(rename = "type")]
        kind: &'static str,
    }

    impl Serialize for View<'_> {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            match *self {
                View::ChatResponseFormat(o) => {
                    ChatFormat { json_schema: named(o, None), kind: "json_schema" }.serialize(s)
                }
                View::ResponsesText(o) => Format { format: named(o, Some("json_schema")) }.serialize(s),
                View::AnthropicOutputConfig(o) => {
                    Format { format: AnthropicFormat { schema: &o.schema, kind: "json_schema" } }.serialize(s)
                }
            }
        }
    }

    /// Gemini `generationConfig` keys: `responseMimeType: "application/json"`
    /// and `responseJsonSchema`, added to `config`.
    pub(crate) fn gemini_generation_config(o: &OutputFormat, config: &mut Map<String, Value>) {
        config.insert("responseMimeType".into(), Value::from("application/json"));
        config.insert("responseJsonSchema".into(), o.schema.clone());
    }
}

#[cfg(all(test, feature = "json-schema"))]
mod compiled_schema_tests {
    use serde_json::json;

    use super::OutputSpec;

    #[test]
    fn clones_share_the_compiled_schema_until_one_changes_it() {
        let spec = OutputSpec::new(json!({"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}));
        let clone = spec.clone();
        assert!(clone.compiled.0.get().is_none());
        let first = spec.compile().unwrap();
        assert!(clone.compiled.0.get().is_some(), "a clone made before the compile shares it");
        assert!(clone.compile().unwrap().errors(&json!({"n": 1})).is_empty());
        assert!(!first.errors(&json!({"n": "one"})).is_empty());

        let mut changed = spec.clone();
        changed.schema = json!({"type":"object","properties":{"s":{"type":"string"}},"required":["s"]});
        let own = changed.compile().unwrap();
        assert!(!own.errors(&json!({"n": 1})).is_empty(), "checked against its own schema, not the shared one");
        assert!(own.errors(&json!({"s": "x"})).is_empty());
        assert!(spec.compile().unwrap().errors(&json!({"n": 1})).is_empty(), "the others keep theirs");
        assert_eq!(spec, clone, "the cache is not part of the spec's value");
    }

    #[test]
    fn clones_share_each_style_s_format_until_one_changes_what_it_is_made_from() {
        use std::sync::Arc;

        use crate::provider::Style;

        let spec = OutputSpec::new(json!({"type":"object","properties":{"n":{"type":"integer"}}}));
        let clone = spec.clone();
        let chat = spec.format_for(Style::OpenAi);
        assert!(Arc::ptr_eq(&chat, &clone.format_for(Style::OpenAi)), "made once for the spec and its clones");
        assert_eq!(chat.schema["required"], json!(["n"]), "lowered for OpenAI strict");
        let gemini = clone.format_for(Style::Gemini);
        assert!(!Arc::ptr_eq(&chat, &gemini), "one per style");
        assert_eq!(gemini.schema.get("additionalProperties"), None);

        let mut renamed = spec.clone();
        renamed.name = "verdict".into();
        assert_eq!(renamed.format_for(Style::OpenAi).name, "verdict", "a changed name makes its own");
        let mut changed = spec.clone();
        changed.schema = json!({"type":"object","properties":{"s":{"type":"string"}}});
        assert_eq!(changed.format_for(Style::OpenAi).schema["required"], json!(["s"]), "a changed schema too");
        assert!(Arc::ptr_eq(&chat, &spec.format_for(Style::OpenAi)), "the others keep theirs");
    }
}
