//! OpenAI Chat Completions request → Anthropic / Gemini / OpenAI Responses request.
//!
//! The body is read into the neutral transcript and encoded by the
//! provider modules; the settings the transcript does not carry are then
//! added to the encoded body. The mapping is tabled in [`super`].

use std::fmt;

use serde_json::{json, Map, Number, Value};

use super::conversation::{read_messages, read_tools};
use super::{TranslateError, TranslatedRequest};
use crate::message::Message;
use crate::provider::{ModelCall, Style};
use crate::tool::ToolDecl;

/// Translates an OpenAI Chat Completions request body for `style`.
///
/// For [`Style::OpenAi`] the body is passed through; because a [`Value`]
/// does not keep key order, use [`openai_request_bytes_to`] to forward the
/// caller's exact bytes.
pub fn openai_request_to(style: Style, request: &Value) -> Result<TranslatedRequest, TranslateError> {
    let obj = request.as_object().ok_or_else(not_an_object)?;
    if style == Style::OpenAi {
        let (model, stream, include_usage) = passthrough_fields(obj)?;
        let body = serde_json::to_vec(request).map_err(|e| TranslateError::invalid("", e.to_string()))?;
        return Ok(TranslatedRequest { style, model, stream, include_usage, body });
    }
    translate(style, obj, obj.get("tools").cloned())
}

/// [`openai_request_to`] on raw body bytes. Malformed JSON is a 400; for
/// [`Style::OpenAi`] the bytes are forwarded exactly as given.
pub fn openai_request_bytes_to(style: Style, body: &[u8]) -> Result<TranslatedRequest, TranslateError> {
    if style == Style::OpenAi {
        if let Some(head) = passthrough_head(body) {
            let (model, stream, include_usage) = passthrough_fields(&head)?;
            return Ok(TranslatedRequest { style, model, stream, include_usage, body: body.to_vec() });
        }
    }
    // The common shape is read without a tree; anything else is read as one.
    if style != Style::OpenAi {
        if let Some(translated) = super::chat_borrowed::translate(style, body) {
            return translated;
        }
    }
    let value: Value = crate::json::from_bytes(body)
        .map_err(|e| TranslateError::invalid_json(format!("We could not parse the JSON body of your request: {e}")))?;
    let Value::Object(mut obj) = value else {
        return Err(not_an_object());
    };
    if style == Style::OpenAi {
        let (model, stream, include_usage) = passthrough_fields(&obj)?;
        return Ok(TranslatedRequest { style, model, stream, include_usage, body: body.to_vec() });
    }
    // The body is ours: its tools move into their declarations.
    let tools = obj.remove("tools");
    translate(style, &obj, tools)
}

/// The keys a passed-through body is read for, without building the rest:
/// serde_json checks the whole body while it skips the other keys, so a
/// body read here is one the full parse accepts, with the same three values.
/// `None` (a body that is not an object, malformed, or repeats one of these
/// keys) leaves it to the full parse, whose errors and last-key-wins reading
/// are the contract.
fn passthrough_head(body: &[u8]) -> Option<Map<String, Value>> {
    #[derive(serde::Deserialize)]
    struct Head {
        model: Option<Value>,
        stream: Option<Value>,
        stream_options: Option<Value>,
    }
    // A derived struct also reads an array as its fields in order.
    if body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return None;
    }
    // Nearly every string here is skipped, and serde_json checks no skipped
    // string's UTF-8: a whole-body check first (`json::from_bytes`) saves
    // nothing, and costs more the longer the body.
    let head: Head = serde_json::from_slice(body).ok()?;
    let mut obj = Map::new();
    for (key, value) in [("model", head.model), ("stream", head.stream), ("stream_options", head.stream_options)] {
        if let Some(v) = value {
            obj.insert(key.to_string(), v);
        }
    }
    Some(obj)
}

/// Whether an OpenAI upstream can hold its answer to `schema` (`strict:
/// true`) without the schema changing: it is already in the strict subset
/// (lowering leaves it as it is). A schema from a dialect whose answers keep
/// to it (Anthropic `output_config`, Gemini `responseJsonSchema`) goes strict
/// then; any other goes as written, since the strict rewrite (optional
/// properties made required and nullable) would change the answer's shape.
fn holds_as_strict(schema: &Value) -> bool {
    crate::output::lower::for_style(Style::OpenAi, schema).is_some_and(|lowered| lowered == *schema)
}

fn not_an_object() -> TranslateError {
    TranslateError::not_an_object("the request body must be a JSON object")
}

/// What a passed-through request says about how to read its answer.
fn passthrough_fields(obj: &Map<String, Value>) -> Result<(String, bool, bool), TranslateError> {
    let model = model_name(obj)?.to_string();
    let stream = opt_bool(obj.get("stream"), "stream")?.unwrap_or(false);
    let include_usage = include_usage(obj)?;
    Ok((model, stream, include_usage))
}

fn model_name(obj: &Map<String, Value>) -> Result<&str, TranslateError> {
    match obj.get("model") {
        Some(Value::String(m)) if !m.is_empty() => Ok(m),
        Some(Value::String(_)) | None | Some(Value::Null) => {
            Err(TranslateError::invalid("model", "you must provide a model parameter"))
        }
        Some(_) => Err(TranslateError::invalid("model", "`model` must be a string")),
    }
}

fn include_usage(obj: &Map<String, Value>) -> Result<bool, TranslateError> {
    let Some(options) = obj.get("stream_options").filter(|v| !v.is_null()) else {
        return Ok(false);
    };
    let options = options.as_object().ok_or_else(|| TranslateError::invalid("stream_options", "must be an object"))?;
    for (key, value) in options {
        match key.as_str() {
            "include_usage" => {
                opt_bool(Some(value), "stream_options.include_usage")?;
            }
            "include_obfuscation" => {
                opt_bool(Some(value), "stream_options.include_obfuscation")?;
            }
            _ if value.is_null() => {}
            _ => return Err(unknown(&format!("stream_options.{key}"))),
        }
    }
    Ok(opt_bool(options.get("include_usage"), "stream_options.include_usage")?.unwrap_or(false))
}

// ---------------------------------------------------------------- settings

/// `tool_choice`, read.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Choice {
    Auto,
    Required,
    None,
    Named(String),
}

/// `response_format`, read.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Format {
    Text,
    JsonObject,
    JsonSchema(Value),
}

/// Everything in the request besides the conversation and the tools: what
/// every surface's decoder fills in and every upstream's encoder writes.
#[derive(Debug, Default)]
pub(super) struct Settings {
    pub(super) model: String,
    pub(super) max_tokens: Option<u32>,
    pub(super) temperature: Option<Number>,
    pub(super) top_p: Option<Number>,
    /// Gemini `topK` / Anthropic `top_k` (OpenAI has none).
    pub(super) top_k: Option<Number>,
    pub(super) stop: Vec<String>,
    pub(super) stream: bool,
    pub(super) include_usage: bool,
    pub(super) format: Option<Format>,
    pub(super) seed: Option<Number>,
    pub(super) presence_penalty: Option<Number>,
    pub(super) frequency_penalty: Option<Number>,
    /// The end-user identifier and the key it came under.
    pub(super) user: Option<(&'static str, String)>,
    pub(super) effort: Option<String>,
    /// A thinking budget in tokens (Anthropic `budget_tokens`, Gemini `thinkingBudget`).
    pub(super) thinking_budget: Option<u32>,
    pub(super) choice: Option<Choice>,
    pub(super) parallel: Option<bool>,
    /// Settings a Responses upstream takes under the same name and meaning.
    pub(super) same_name: Vec<(String, Value)>,
}

/// One request in neutral form: the settings, the system prompt, the
/// transcript and the declared tools (with which of them asked for `strict`).
/// Each surface's decoder makes one; [`encode_neutral`] writes it for any upstream.
#[derive(Debug, Default)]
pub(super) struct Neutral {
    pub(super) settings: Settings,
    pub(super) system: Option<String>,
    pub(super) messages: Vec<Message>,
    pub(super) tools: Vec<ToolDecl>,
    pub(super) strict: Vec<bool>,
    /// A Chat request's `response_format.json_schema` (its name, `strict`
    /// and description carry over to a Responses upstream).
    pub(super) json_schema: Option<Value>,
}

/// Chat Completions settings the Responses API has under the same name.
const RESPONSES_SAME_NAME: &[&str] =
    &["metadata", "service_tier", "prompt_cache_key", "prompt_cache_retention", "store"];

/// Top-level keys read by [`read_settings`] or by the conversation readers.
const CONVERSATION_KEYS: &[&str] = &["messages", "tools"];

/// `obj` with its `tools` (taken out of it, or a copy) read into a request for `style`.
fn translate(
    style: Style,
    obj: &Map<String, Value>,
    tools: Option<Value>,
) -> Result<TranslatedRequest, TranslateError> {
    let settings = read_settings(style, obj)?;
    let (tools, strict) = read_tools(style, tools)?;
    let (system, messages) = read_messages(style, obj.get("messages"))?;
    let json_schema = obj.get("response_format").and_then(|f| f.get("json_schema")).cloned();
    encode_neutral(style, &Neutral { settings, system, messages, tools, strict, json_schema })
}

/// A neutral request as the request body of `style`: the transcript through
/// the provider's encoder, then the settings the transcript does not carry.
pub(super) fn encode_neutral(style: Style, n: &Neutral) -> Result<TranslatedRequest, TranslateError> {
    let settings = &n.settings;
    gate(style, n)?;
    // The settings the transcript does not carry become keys the body
    // writer merges in, as a caller's params are. The tools array is a tree
    // only when the settings mark a tool strict (they edit it) and is then
    // written raw; otherwise the writer writes it from the declarations.
    // The conversation itself goes from the transcript to bytes with no tree.
    let mut params = Map::new();
    if n.strict.contains(&true) {
        params.insert("tools".into(), style.tools_value(&n.tools));
    }
    settings_into(style, &mut params, n)?;
    let tools = match params.remove("tools") {
        Some(t) => {
            Some(serde_json::value::to_raw_value(&t).map_err(|e| TranslateError::invalid("tools", e.to_string()))?)
        }
        None => None,
    };
    let mut body = Vec::with_capacity(1024);
    style.write_body_with(&model_call(n, &params), tools.as_deref(), &mut body);
    Ok(TranslatedRequest {
        style,
        model: settings.model.clone(),
        stream: settings.stream,
        include_usage: settings.include_usage,
        body,
    })
}

fn gate(style: Style, n: &Neutral) -> Result<(), TranslateError> {
    crate::gate::check(style, &n.messages).map_err(|e| TranslateError::invalid("messages", e.0))
}

/// The provider encoders' view of a neutral request, with `params` merged in.
fn model_call<'a>(n: &'a Neutral, params: &'a Map<String, Value>) -> ModelCall<'a> {
    ModelCall {
        model: &n.settings.model,
        system: n.system.as_deref(),
        messages: &n.messages,
        tools: &n.tools,
        max_tokens: n.settings.max_tokens,
        stream: n.settings.stream,
        params,
        output: None,
    }
}

fn settings_into(style: Style, out: &mut Map<String, Value>, n: &Neutral) -> Result<(), TranslateError> {
    let settings = &n.settings;
    match style {
        Style::Anthropic => anthropic_settings(out, settings, &n.tools, &n.strict),
        Style::Gemini => gemini_settings(out, settings, &n.tools, &n.strict),
        Style::OpenAi => openai_settings(out, settings, &n.tools, &n.strict),
        Style::OpenAiResponses => responses_settings(out, settings, n.json_schema.as_ref(), &n.tools, &n.strict),
    }
}

/// The body as the encoder's tree with the settings added to it: what
/// [`encode_neutral`] writes, as JSON (its tests hold the two equal).
#[cfg(test)]
pub(super) fn encode_neutral_tree(style: Style, n: &Neutral) -> Result<Value, TranslateError> {
    gate(style, n)?;
    let mut body = style.encode_body(&model_call(n, &Map::new()));
    let Value::Object(out) = &mut body else {
        return Err(TranslateError::invalid("", "the encoder produced no JSON object"));
    };
    settings_into(style, out, n)?;
    Ok(body)
}

pub(super) fn read_settings(style: Style, obj: &Map<String, Value>) -> Result<Settings, TranslateError> {
    let mut s = Settings { model: model_name(obj)?.to_string(), ..Settings::default() };
    if style == Style::Gemini {
        s.model = gemini_model(&s.model)?;
    }
    for (key, value) in obj {
        let k = key.as_str();
        if value.is_null() || k == "model" || CONVERSATION_KEYS.contains(&k) {
            continue;
        }
        match k {
            "max_tokens" | "max_completion_tokens" => {
                let n = value
                    .as_u64()
                    .filter(|n| *n >= 1)
                    .and_then(|n| u32::try_from(n).ok())
                    .ok_or_else(|| TranslateError::invalid(k, format!("`{k}` must be a positive integer")))?;
                // The newer name wins when both are given, whatever their order.
                let newer_given = obj.get("max_completion_tokens").is_some_and(|v| !v.is_null());
                if k == "max_completion_tokens" || !newer_given {
                    s.max_tokens = Some(n);
                }
            }
            "temperature" => s.temperature = Some(number(value, k)?),
            "top_p" => s.top_p = Some(number(value, k)?),
            "stop" => s.stop = read_stop(value)?,
            "stream" => s.stream = opt_bool(Some(value), k)?.unwrap_or(false),
            "stream_options" => s.include_usage = include_usage(obj)?,
            "response_format" => s.format = Some(read_format(value)?),
            "n" => {
                if value.as_u64() != Some(1) {
                    return Err(TranslateError::unsupported(
                        k,
                        style,
                        "one call returns one choice; only `n: 1` is possible",
                    ));
                }
            }
            "seed" => {
                if !value.is_i64() && !value.is_u64() {
                    return Err(TranslateError::invalid(k, "`seed` must be an integer"));
                }
                s.seed = Some(number(value, k)?);
            }
            "presence_penalty" | "frequency_penalty" => {
                let n = number(value, k)?;
                if n.as_f64() != Some(0.0) {
                    if k == "presence_penalty" {
                        s.presence_penalty = Some(n);
                    } else {
                        s.frequency_penalty = Some(n);
                    }
                }
            }
            "user" | "safety_identifier" => {
                let user =
                    value.as_str().ok_or_else(|| TranslateError::invalid(k, format!("`{k}` must be a string")))?;
                match &s.user {
                    Some((_, prev)) if prev != user => {
                        return Err(TranslateError::invalid(
                            k,
                            "`user` and `safety_identifier` differ; the upstream takes one identifier",
                        ));
                    }
                    _ => {
                        let key = if k == "user" { "user" } else { "safety_identifier" };
                        s.user = Some((key, user.to_string()));
                    }
                }
            }
            "reasoning_effort" => {
                let effort =
                    value.as_str().ok_or_else(|| TranslateError::invalid(k, "`reasoning_effort` must be a string"))?;
                s.effort = Some(effort.to_string());
            }
            "tool_choice" => s.choice = Some(read_choice(value)?),
            "parallel_tool_calls" => s.parallel = opt_bool(Some(value), k)?,
            _ if style == Style::OpenAiResponses && RESPONSES_SAME_NAME.contains(&k) => {
                s.same_name.push((k.to_string(), value.clone()));
            }
            "verbosity" if style == Style::OpenAiResponses => {
                let v = value.as_str().ok_or_else(|| TranslateError::invalid(k, "`verbosity` must be a string"))?;
                s.same_name.push((k.to_string(), Value::String(v.to_string())));
            }
            // Values that mean "not set": accepted, nothing to carry.
            "logprobs" | "store" if value == &Value::Bool(false) => {}
            "logit_bias" | "metadata" if value.as_object().is_some_and(Map::is_empty) => {}
            "service_tier" if matches!(value.as_str(), Some("auto" | "default")) => {}
            "modalities" if value == &json!(["text"]) => {}
            "logprobs"
            | "store"
            | "logit_bias"
            | "metadata"
            | "service_tier"
            | "modalities"
            | "top_logprobs"
            | "verbosity"
            | "audio"
            | "prediction"
            | "web_search_options"
            | "functions"
            | "function_call"
            | "prompt_cache_key"
            | "prompt_cache_retention" => {
                return Err(TranslateError::unsupported(k, style, "the upstream API has no such setting"));
            }
            _ => return Err(unknown(k)),
        }
    }
    Ok(s)
}

/// Gemini puts the model in the URL path, so its name must not be able to
/// change the path: a leading `models/` is dropped and anything but
/// `[A-Za-z0-9._-]` is refused.
pub(super) fn gemini_model(model: &str) -> Result<String, TranslateError> {
    let name = model.strip_prefix("models/").unwrap_or(model);
    let ok = !name.is_empty()
        && !name.starts_with('.')
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(name.to_string())
    } else {
        Err(TranslateError::invalid("model", format!("{model:?} is not a valid Gemini model name")))
    }
}

fn read_stop(value: &Value) -> Result<Vec<String>, TranslateError> {
    match value {
        Value::String(s) => Ok(vec![s.clone()]),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, v)| {
                v.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| TranslateError::invalid(format!("stop[{i}]"), "must be a string"))
            })
            .collect(),
        _ => Err(TranslateError::invalid("stop", "`stop` must be a string or an array of strings")),
    }
}

fn read_format(value: &Value) -> Result<Format, TranslateError> {
    let kind = value.get("type").and_then(Value::as_str);
    match kind {
        Some("text") => Ok(Format::Text),
        Some("json_object") => Ok(Format::JsonObject),
        Some("json_schema") => {
            let schema = value.pointer("/json_schema/schema").filter(|s| s.is_object()).ok_or_else(|| {
                TranslateError::invalid("response_format.json_schema.schema", "a JSON schema object is required")
            })?;
            Ok(Format::JsonSchema(schema.clone()))
        }
        _ => {
            Err(TranslateError::invalid("response_format.type", "must be one of `text`, `json_object`, `json_schema`"))
        }
    }
}

fn read_choice(value: &Value) -> Result<Choice, TranslateError> {
    match value {
        Value::String(s) => match s.as_str() {
            "auto" => Ok(Choice::Auto),
            "required" => Ok(Choice::Required),
            "none" => Ok(Choice::None),
            _ => Err(TranslateError::invalid("tool_choice", format!("unknown tool_choice {s:?}"))),
        },
        Value::Object(o) => match o.get("type").and_then(Value::as_str) {
            Some("function") => o
                .get("function")
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
                .map(|n| Choice::Named(n.to_string()))
                .ok_or_else(|| TranslateError::invalid("tool_choice.function.name", "a function name is required")),
            Some(other) => Err(TranslateError::invalid(
                "tool_choice.type",
                format!("tool_choice type {other:?} cannot be translated (only `function` tools are)"),
            )),
            None => Err(TranslateError::invalid("tool_choice.type", "a tool_choice object needs a `type`")),
        },
        _ => Err(TranslateError::invalid("tool_choice", "must be a string or an object")),
    }
}

// ---------------------------------------------------------------- target settings

fn anthropic_settings(
    out: &mut Map<String, Value>,
    s: &Settings,
    tools: &[ToolDecl],
    strict: &[bool],
) -> Result<(), TranslateError> {
    const T: Style = Style::Anthropic;
    if let Some(t) = &s.temperature {
        // Anthropic's range is 0…1; rescaling OpenAI's 0…2 would change what the caller asked for.
        if !t.as_f64().is_some_and(|t| (0.0..=1.0).contains(&t)) {
            return Err(TranslateError::unsupported("temperature", T, "the range there is 0 to 1"));
        }
        out.insert("temperature".into(), Value::Number(t.clone()));
    }
    if let Some(p) = &s.top_p {
        out.insert("top_p".into(), Value::Number(p.clone()));
    }
    if let Some(k) = &s.top_k {
        out.insert("top_k".into(), Value::Number(k.clone()));
    }
    if !s.stop.is_empty() {
        out.insert("stop_sequences".into(), json!(s.stop));
    }
    if let Some(budget) = s.thinking_budget {
        out.insert("thinking".into(), json!({ "type": "enabled", "budget_tokens": budget }));
    }
    for (param, value) in
        [("seed", &s.seed), ("presence_penalty", &s.presence_penalty), ("frequency_penalty", &s.frequency_penalty)]
    {
        if value.is_some() {
            return Err(TranslateError::unsupported(param, T, "the Messages API has no such setting"));
        }
    }
    if let Some((_, user)) = &s.user {
        out.insert("metadata".into(), json!({ "user_id": user }));
    }
    let mut output_config = Map::new();
    match &s.format {
        None | Some(Format::Text) => {}
        Some(Format::JsonObject) => {
            return Err(TranslateError::unsupported(
                "response_format",
                T,
                "JSON mode needs a schema there; use `json_schema`",
            ))
        }
        Some(Format::JsonSchema(schema)) => {
            // Lowered as a run's native output is (SPEC §16): a schema
            // Anthropic cannot carry is refused here, not sent to come back
            // as unvalidated text.
            let lowered = crate::output::lower::for_style(T, schema).ok_or_else(|| {
                TranslateError::unsupported(
                    "response_format",
                    T,
                    "the schema has an object open to extra properties or refers to its root, \
                     which Anthropic's structured outputs refuse",
                )
            })?;
            output_config.insert("format".into(), json!({ "type": "json_schema", "schema": lowered }));
        }
    }
    if let Some(effort) = &s.effort {
        if !matches!(effort.as_str(), "low" | "medium" | "high" | "xhigh") {
            return Err(TranslateError::unsupported(
                "reasoning_effort",
                T,
                format!("effort {effort:?} has no counterpart"),
            ));
        }
        output_config.insert("effort".into(), Value::String(effort.clone()));
    }
    if !output_config.is_empty() {
        out.insert("output_config".into(), Value::Object(output_config));
    }
    if let Some(Value::Array(wire_tools)) = out.get_mut("tools") {
        for (tool, strict) in wire_tools.iter_mut().zip(strict) {
            if let (Value::Object(tool), true) = (tool, *strict) {
                tool.insert("strict".into(), Value::Bool(true));
            }
        }
    }
    let disable_parallel = s.parallel == Some(false);
    let choice = match check_choice(s.choice.as_ref(), tools)? {
        // No tools: `auto` and `none` mean the same as nothing.
        _ if tools.is_empty() => None,
        None if disable_parallel => Some(json!({ "type": "auto" })),
        None => None,
        Some(Choice::Auto) => Some(json!({ "type": "auto" })),
        Some(Choice::Required) => Some(json!({ "type": "any" })),
        Some(Choice::None) => Some(json!({ "type": "none" })),
        Some(Choice::Named(name)) => Some(json!({ "type": "tool", "name": name })),
    };
    if let Some(mut choice) = choice {
        // `none` makes no calls at all, so it has no parallelism to turn off.
        if disable_parallel && choice["type"] != "none" {
            choice["disable_parallel_tool_use"] = Value::Bool(true);
        }
        out.insert("tool_choice".into(), choice);
    }
    Ok(())
}

fn gemini_settings(
    out: &mut Map<String, Value>,
    s: &Settings,
    tools: &[ToolDecl],
    strict: &[bool],
) -> Result<(), TranslateError> {
    const T: Style = Style::Gemini;
    if let Some((key, _)) = &s.user {
        return Err(TranslateError::unsupported(*key, T, "generateContent has no end-user identifier"));
    }
    let mut config = match out.remove("generationConfig") {
        Some(Value::Object(c)) => c,
        _ => Map::new(),
    };
    let numbers = [
        ("temperature", &s.temperature),
        ("topP", &s.top_p),
        ("topK", &s.top_k),
        ("seed", &s.seed),
        ("presencePenalty", &s.presence_penalty),
        ("frequencyPenalty", &s.frequency_penalty),
    ];
    for (key, value) in numbers {
        if let Some(n) = value {
            config.insert(key.into(), Value::Number(n.clone()));
        }
    }
    if !s.stop.is_empty() {
        config.insert("stopSequences".into(), json!(s.stop));
    }
    match &s.format {
        None | Some(Format::Text) => {}
        Some(Format::JsonObject) => {
            config.insert("responseMimeType".into(), json!("application/json"));
        }
        Some(Format::JsonSchema(schema)) => {
            config.insert("responseMimeType".into(), json!("application/json"));
            // Only the keywords Gemini documents (it would ignore the rest).
            let lowered = crate::output::lower::for_style(Style::Gemini, schema).unwrap_or_else(|| schema.clone());
            config.insert("responseJsonSchema".into(), lowered);
        }
    }
    if let Some(effort) = &s.effort {
        let level = match effort.as_str() {
            "minimal" => "MINIMAL",
            "low" => "LOW",
            "medium" => "MEDIUM",
            "high" => "HIGH",
            "xhigh" => "XHIGH",
            _ => {
                return Err(TranslateError::unsupported(
                    "reasoning_effort",
                    T,
                    format!("effort {effort:?} has no counterpart"),
                ))
            }
        };
        config.insert("thinkingConfig".into(), json!({ "thinkingLevel": level }));
    } else if let Some(budget) = s.thinking_budget {
        config.insert("thinkingConfig".into(), json!({ "thinkingBudget": budget, "includeThoughts": true }));
    }
    if !config.is_empty() {
        out.insert("generationConfig".into(), Value::Object(config));
    }
    if s.parallel == Some(false) && !tools.is_empty() {
        return Err(TranslateError::unsupported(
            "parallel_tool_calls",
            T,
            "Gemini cannot be told to make one call at a time",
        ));
    }
    // Gemini's AUTO does not hold arguments to the schema; VALIDATED does,
    // which is what `strict` asks for.
    let any_strict = strict.iter().any(|s| *s);
    let config = match check_choice(s.choice.as_ref(), tools)? {
        _ if tools.is_empty() => None,
        None | Some(Choice::Auto) if any_strict => Some(json!({ "mode": "VALIDATED" })),
        None => None,
        Some(Choice::Auto) => Some(json!({ "mode": "AUTO" })),
        Some(Choice::Required) => Some(json!({ "mode": "ANY" })),
        Some(Choice::None) => Some(json!({ "mode": "NONE" })),
        Some(Choice::Named(name)) => Some(json!({ "mode": "ANY", "allowedFunctionNames": [name] })),
    };
    if let Some(config) = config {
        out.insert("toolConfig".into(), json!({ "functionCallingConfig": config }));
    }
    Ok(())
}

/// The settings on an OpenAI Chat Completions body (a request that came in
/// another dialect; Chat requests to an OpenAI upstream pass through).
fn openai_settings(
    out: &mut Map<String, Value>,
    s: &Settings,
    tools: &[ToolDecl],
    strict: &[bool],
) -> Result<(), TranslateError> {
    const T: Style = Style::OpenAi;
    let numbers = [
        ("temperature", &s.temperature),
        ("top_p", &s.top_p),
        ("seed", &s.seed),
        ("presence_penalty", &s.presence_penalty),
        ("frequency_penalty", &s.frequency_penalty),
    ];
    for (key, value) in numbers {
        if let Some(n) = value {
            out.insert(key.into(), Value::Number(n.clone()));
        }
    }
    if s.top_k.is_some() {
        return Err(TranslateError::unsupported("top_k", T, "Chat Completions has no top-k sampling"));
    }
    if !s.stop.is_empty() {
        if s.stop.len() > 4 {
            return Err(TranslateError::unsupported("stop_sequences", T, "at most 4 stop sequences are accepted"));
        }
        out.insert("stop".into(), json!(s.stop));
    }
    if let Some((_, user)) = &s.user {
        out.insert("user".into(), Value::String(user.clone()));
    }
    match &s.format {
        None | Some(Format::Text) => {}
        Some(Format::JsonObject) => {
            out.insert("response_format".into(), json!({ "type": "json_object" }));
        }
        Some(Format::JsonSchema(schema)) => {
            let mut json_schema = json!({ "name": "response", "schema": schema });
            if holds_as_strict(schema) {
                json_schema["strict"] = Value::Bool(true);
            }
            out.insert("response_format".into(), json!({ "type": "json_schema", "json_schema": json_schema }));
        }
    }
    if let Some(effort) = &s.effort {
        out.insert("reasoning_effort".into(), Value::String(effort.clone()));
    }
    if let Some(Value::Array(wire_tools)) = out.get_mut("tools") {
        for (tool, strict) in wire_tools.iter_mut().zip(strict) {
            if let (Some(f), true) = (tool.get_mut("function").and_then(Value::as_object_mut), *strict) {
                f.insert("strict".into(), Value::Bool(true));
            }
        }
    }
    let choice = match check_choice(s.choice.as_ref(), tools)? {
        _ if tools.is_empty() => None,
        None => None,
        Some(Choice::Auto) => Some(json!("auto")),
        Some(Choice::Required) => Some(json!("required")),
        Some(Choice::None) => Some(json!("none")),
        Some(Choice::Named(name)) => Some(json!({ "type": "function", "function": { "name": name } })),
    };
    if let Some(choice) = choice {
        out.insert("tool_choice".into(), choice);
    }
    if s.parallel == Some(false) && !tools.is_empty() {
        out.insert("parallel_tool_calls".into(), Value::Bool(false));
    }
    Ok(())
}

fn responses_settings(
    out: &mut Map<String, Value>,
    s: &Settings,
    given: Option<&Value>,
    tools: &[ToolDecl],
    strict: &[bool],
) -> Result<(), TranslateError> {
    const T: Style = Style::OpenAiResponses;
    for (key, value) in [("temperature", &s.temperature), ("top_p", &s.top_p)] {
        if let Some(n) = value {
            out.insert(key.into(), Value::Number(n.clone()));
        }
    }
    if !s.stop.is_empty() {
        return Err(TranslateError::unsupported("stop", T, "the Responses API has no stop sequences"));
    }
    for (param, value) in
        [("seed", &s.seed), ("presence_penalty", &s.presence_penalty), ("frequency_penalty", &s.frequency_penalty)]
    {
        if value.is_some() {
            return Err(TranslateError::unsupported(param, T, "the Responses API has no such setting"));
        }
    }
    if let Some((key, user)) = &s.user {
        out.insert((*key).into(), Value::String(user.clone()));
    }
    let mut text = Map::new();
    match &s.format {
        None => {}
        Some(Format::Text) => {
            text.insert("format".into(), json!({ "type": "text" }));
        }
        Some(Format::JsonObject) => {
            text.insert("format".into(), json!({ "type": "json_object" }));
        }
        Some(Format::JsonSchema(schema)) => {
            // `name` is required on both sides; `strict` and `description` carry over.
            let name = given.and_then(|g| g.get("name")).and_then(Value::as_str).unwrap_or("response");
            let mut format = json!({ "type": "json_schema", "name": name, "schema": schema });
            if given.is_none() && holds_as_strict(schema) {
                format["strict"] = Value::Bool(true);
            }
            for key in ["strict", "description"] {
                if let Some(v) = given.and_then(|g| g.get(key)).filter(|v| !v.is_null()) {
                    format[key] = v.clone();
                }
            }
            text.insert("format".into(), format);
        }
    }
    for (key, value) in &s.same_name {
        if key == "verbosity" {
            text.insert(key.clone(), value.clone());
        } else {
            out.insert(key.clone(), value.clone());
        }
    }
    if !text.is_empty() {
        out.insert("text".into(), Value::Object(text));
    }
    if let Some(effort) = &s.effort {
        out.insert("reasoning".into(), json!({ "effort": effort }));
    }
    if let Some(Value::Array(wire_tools)) = out.get_mut("tools") {
        for (tool, strict) in wire_tools.iter_mut().zip(strict) {
            if let (Value::Object(tool), true) = (tool, *strict) {
                tool.insert("strict".into(), Value::Bool(true));
            }
        }
    }
    if let Some(parallel) = s.parallel {
        out.insert("parallel_tool_calls".into(), Value::Bool(parallel));
    }
    let choice = match check_choice(s.choice.as_ref(), tools)? {
        None => None,
        Some(Choice::Auto) => Some(json!("auto")),
        Some(Choice::Required) => Some(json!("required")),
        Some(Choice::None) => Some(json!("none")),
        Some(Choice::Named(name)) => Some(json!({ "type": "function", "name": name })),
    };
    if let Some(choice) = choice {
        out.insert("tool_choice".into(), choice);
    }
    Ok(())
}

/// A choice that needs tools must have them, and a named one must name a declared tool.
fn check_choice<'a>(choice: Option<&'a Choice>, tools: &[ToolDecl]) -> Result<Option<&'a Choice>, TranslateError> {
    match choice {
        Some(Choice::Required) if tools.is_empty() => {
            Err(TranslateError::invalid("tool_choice", "`required` needs at least one tool in `tools`"))
        }
        Some(Choice::Named(name)) if !tools.iter().any(|t| &t.name == name) => Err(TranslateError::invalid(
            "tool_choice.function.name",
            format!("tool_choice names {name:?}, which is not in `tools`"),
        )),
        other => Ok(other),
    }
}

// ---------------------------------------------------------------- small readers

pub(super) fn unknown(param: &str) -> TranslateError {
    TranslateError {
        message: format!("Unrecognized request argument supplied: {param}"),
        code: Some("unknown_parameter".to_string()),
        ..TranslateError::invalid(param, String::new())
    }
}

pub(super) fn opt_bool(value: Option<&Value>, param: impl fmt::Display) -> Result<Option<bool>, TranslateError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(TranslateError::invalid(param.to_string(), format!("`{param}` must be a boolean"))),
    }
}

pub(super) fn opt_str(value: Option<&Value>, param: impl fmt::Display) -> Result<Option<&str>, TranslateError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(TranslateError::invalid(param.to_string(), format!("`{param}` must be a string"))),
    }
}

pub(super) fn number(value: &Value, param: &str) -> Result<Number, TranslateError> {
    match value {
        Value::Number(n) => Ok(n.clone()),
        _ => Err(TranslateError::invalid(param, format!("`{param}` must be a number"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes written from the transcript, with the settings merged in as
    /// params, say what the encoder's tree with the settings added says.
    #[test]
    fn the_written_body_is_the_trees_json_in_every_style() {
        let strict_schema = json!({"type":"object","properties":{"city":{"type":"string"}},"required":["city"],"additionalProperties":false});
        let requests = [
            json!({"model":"m","max_tokens":64,"temperature":0.5,"top_p":0.9,"stop":["END"],
                   "messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"hi"}]}),
            json!({"model":"m","max_completion_tokens":32,"parallel_tool_calls":false,
                   "tool_choice":{"type":"function","function":{"name":"get_weather"}},
                   "tools":[{"type":"function","function":{"name":"get_weather","description":"Weather.","parameters":strict_schema,"strict":true}},
                            {"type":"function","function":{"name":"add","parameters":{"type":"object","properties":{"b":{"type":"number"},"a":{"type":"number"}}}}}],
                   "messages":[{"role":"user","content":"weather?"},
                               {"role":"assistant","content":null,"tool_calls":[
                                   {"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Paris\", \"at\":1}"}},
                                   {"id":"call_2","type":"function","function":{"name":"add","arguments":"{\"b\":2,\"a\":1}"}}]},
                               {"role":"tool","tool_call_id":"call_1","content":"sunny"},
                               {"role":"tool","tool_call_id":"call_2","content":"3"}]}),
            json!({"model":"m","stream":true,"stream_options":{"include_usage":true},"user":"u-1","reasoning_effort":"high",
                   "response_format":{"type":"json_schema","json_schema":{"name":"city","schema":strict_schema,"strict":true}},
                   "messages":[{"role":"user","content":[{"type":"text","text":"where?"}]}]}),
            json!({"model":"m","tool_choice":"required","response_format":{"type":"json_object"},
                   "tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],
                   "messages":[{"role":"user","content":"go"}]}),
        ];
        let mut compared = 0;
        for request in &requests {
            let obj = request.as_object().unwrap();
            for style in [Style::Anthropic, Style::Gemini, Style::OpenAi, Style::OpenAiResponses] {
                let neutral = || -> Result<Neutral, TranslateError> {
                    let settings = read_settings(style, obj)?;
                    let (tools, strict) = read_tools(style, obj.get("tools").cloned())?;
                    let (system, messages) = read_messages(style, obj.get("messages"))?;
                    let json_schema = obj.get("response_format").and_then(|f| f.get("json_schema")).cloned();
                    Ok(Neutral { settings, system, messages, tools, strict, json_schema })
                };
                let Ok(n) = neutral() else { continue };
                match (encode_neutral(style, &n), encode_neutral_tree(style, &n)) {
                    (Ok(written), Ok(tree)) => {
                        let written: Value = serde_json::from_slice(&written.body).unwrap();
                        assert_eq!(written, tree, "{style:?} {request}");
                        compared += 1;
                    }
                    (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "{style:?}"),
                    (a, b) => panic!("{style:?} {request}: written {:?}, tree {:?}", a.err(), b.err()),
                }
            }
        }
        assert!(compared >= 12, "only {compared} bodies compared");
    }

    #[test]
    fn gemini_model_names_cannot_change_the_path() {
        assert_eq!(gemini_model("models/gemini-2.5-flash").unwrap(), "gemini-2.5-flash");
        for bad in ["../files", "a/b", "x:generateContent?key=1", "", "models/", "a b", ".hidden"] {
            assert!(gemini_model(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn a_schema_already_strict_goes_strict_to_openai_and_any_other_as_written() {
        let closed = json!({"type":"object","properties":{"n":{"type":"integer"}},"required":["n"],"additionalProperties":false});
        let open = json!({"type":"object","properties":{"n":{"type":"integer"}}});
        for (schema, strict) in [(closed, Some(true)), (open, None)] {
            let body = json!({"model":"m","max_tokens":8,"messages":[{"role":"user","content":"hi"}],
                "output_config":{"format":{"type":"json_schema","schema":schema}}});
            let chat = crate::translate::anthropic_request_to(Style::OpenAi, body.to_string().as_bytes(), &[]).unwrap();
            let sent: Value = serde_json::from_slice(&chat.upstream.body).unwrap();
            assert_eq!(sent["response_format"]["json_schema"]["schema"], schema, "the schema as written");
            assert_eq!(sent["response_format"]["json_schema"].get("strict").and_then(Value::as_bool), strict);
            let responses =
                crate::translate::anthropic_request_to(Style::OpenAiResponses, body.to_string().as_bytes(), &[])
                    .unwrap();
            let sent: Value = serde_json::from_slice(&responses.upstream.body).unwrap();
            assert_eq!(sent["text"]["format"].get("strict").and_then(Value::as_bool), strict);
        }
    }

    /// The pass-through as it read every body before [`passthrough_head`]:
    /// the whole body parsed into a tree.
    fn read_whole(body: &[u8]) -> Result<(String, bool, bool), TranslateError> {
        let value: Value = serde_json::from_slice(body).map_err(|e| {
            TranslateError::invalid_json(format!("We could not parse the JSON body of your request: {e}"))
        })?;
        passthrough_fields(value.as_object().ok_or_else(not_an_object)?)
    }

    #[test]
    fn the_passthrough_reads_what_the_whole_parse_reads_and_fails_as_it_fails() {
        let bodies: &[&str] = &[
            r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#,
            r#" {"messages":[],"stream":true,"stream_options":{"include_usage":true},"model":"m"}"#,
            r#"{"model":"a","model":"b"}"#,
            r#"{"model":"m","stream":false,"stream":true}"#,
            r#"{"model":null}"#,
            r#"{"model":""}"#,
            r#"{"model":7}"#,
            r#"{"model":"m","stream":"yes"}"#,
            r#"{"model":"m","stream":null,"stream_options":null}"#,
            r#"{"model":"m","stream_options":{"include_usage":1}}"#,
            r#"{"model":"m","stream_options":{"other":true}}"#,
            r#"{"model":"m","stream_options":[true]}"#,
            r#"{"model":"m","tools":[{"x":{"y":[1,2,{"z":null}]}}],"n":1e3}"#,
            r#"["m", true, null]"#,
            r#"["m"]"#,
            r#""m""#,
            "\u{c}{\"model\":\"m\"}",
            r#"{"model":"m","#,
            r#"{"model":"m"} x"#,
            r#"{"model":"m","messages":[}"#,
            "",
        ];
        for body in bodies {
            let fast = openai_request_bytes_to(Style::OpenAi, body.as_bytes())
                .map(|t| (t.model, t.stream, t.include_usage, t.body == body.as_bytes()));
            let whole = read_whole(body.as_bytes()).map(|(m, s, u)| (m, s, u, true));
            assert_eq!(fast, whole, "{body}");
        }
    }
}
