//! The OpenAI Chat Completions wire format (`POST {base}/chat/completions`),
//! which many OpenAI-compatible servers speak too.
//!
//! A whole body and a stream decode through the same `Parts` builder, so a
//! streamed turn is equal to the same turn delivered as one JSON body: blocks
//! always come out as reasoning, text, refusal, then tool calls (the order in
//! which a Chat Completions message holds them and a stream produces them).
//!
//! Opaque data this format needs echoed back lives under the `openai` key of a
//! block's `provider_data`. The only such datum is the refusal marker: a
//! refusal decodes to a text block flagged `{"openai": {"refusal": true}}`,
//! which the encoder puts back into the assistant message's `refusal` field.

use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

use crate::error::{DecodeError, RemoteError};
use crate::message::{Block, ImageSource, Message, Role, ToolCall, ToolResultBlock, Usage};
use crate::provider::partial_json::parse_partial;
use crate::provider::wire::{LenientStr, WireStr};
use crate::provider::{parse_arguments, CallIds, ModelCall, Stop, StopReason, Style, TurnResponse};

mod stream;
mod write;

pub use stream::Assembler;
pub(crate) use write::{fields as body_fields, tools_part};

/// This style's key in `provider_data`.
const KEY: &str = "openai";

/// The URL of one model call.
pub fn endpoint(base_url: &str) -> String {
    [base_url.trim_end_matches('/'), "/chat/completions"].concat()
}

// ---------------------------------------------------------------- encoding

/// The request body: `{model, messages, tools?, stream?, stream_options?, max_completion_tokens?}`.
///
/// `tool_choice` is never set here: the API's default (`auto`) is what the
/// loop wants, and a caller who needs another choice passes it in the params.
pub fn encode_body(call: &ModelCall<'_>) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), Value::String(call.model.to_string()));
    body.insert("messages".into(), Value::Array(encode_messages(call.system, call.messages)));
    if !call.tools.is_empty() {
        body.insert("tools".into(), Value::Array(call.tools.iter().map(|t| t.to_openai()).collect()));
    }
    if call.stream {
        body.insert("stream".into(), Value::Bool(true));
        // Without this the stream carries no usage at all.
        body.insert("stream_options".into(), json!({ "include_usage": true }));
    }
    if let Some(max) = call.max_tokens {
        // `max_tokens` is deprecated and refused by reasoning models; the
        // successor works for every current model.
        body.insert("max_completion_tokens".into(), Value::from(max));
    }
    if let Some(o) = call.output {
        body.insert("response_format".into(), crate::output::wire::chat_response_format(o));
    }
    Value::Object(body)
}

/// The `messages` array: the system prompt first, then the transcript.
fn encode_messages(system: Option<&str>, messages: &[Message]) -> Vec<Value> {
    let mut out = Vec::with_capacity(messages.len() + 1);
    if let Some(system) = system.filter(|s| !s.is_empty()) {
        out.push(json!({ "role": "system", "content": system }));
    }
    for message in messages {
        match message.role {
            Role::User => encode_user(message, &mut out),
            Role::Assistant => out.push(encode_assistant(message)),
        }
    }
    out
}

/// A user turn. Tool results become one `tool` message each, in order, and
/// come first: the API wants them right after the assistant message whose
/// calls they answer. Whatever else the turn holds follows as a user message.
fn encode_user(message: &Message, out: &mut Vec<Value>) {
    let mut others: Vec<&Block> = Vec::new();
    let mut had_results = false;
    for block in &message.content {
        match block {
            Block::ToolResult(result) => {
                had_results = true;
                out.push(encode_tool_result(result));
            }
            Block::Text { .. } | Block::Image { .. } => others.push(block),
            // Reasoning is the model's; a user turn has no place for it.
            // A tool call in a user turn is a malformed transcript (the
            // pre-send gate reports those); there is nothing to send.
            Block::Reasoning { .. } | Block::ToolCall(_) => {}
        }
    }
    if others.is_empty() && had_results {
        return;
    }
    let content = match others.as_slice() {
        [Block::Text { text, .. }] => Value::String(text.clone()),
        // An empty user turn still takes its place in the conversation.
        [] => Value::String(String::new()),
        blocks => Value::Array(blocks.iter().filter_map(|b| encode_user_part(b)).collect()),
    };
    out.push(json!({ "role": "user", "content": content }));
}

/// One `tool` message. The wire has no error flag: an error result is sent
/// as its output text, which says what went wrong.
fn encode_tool_result(result: &ToolResultBlock) -> Value {
    json!({ "role": "tool", "tool_call_id": result.call_id, "content": result.output })
}

/// A user content part: `{type:"text"}` or `{type:"image_url"}`.
fn encode_user_part(block: &Block) -> Option<Value> {
    match block {
        Block::Text { text, .. } => Some(json!({ "type": "text", "text": text })),
        Block::Image { media_type, source } => {
            // Inline images travel as data URLs; the media type of a URL
            // image has no field here (the server reads it from the response).
            let url = match source {
                ImageSource::Base64 { data } => format!("data:{media_type};base64,{data}"),
                ImageSource::Url { url } => url.clone(),
            };
            Some(json!({ "type": "image_url", "image_url": { "url": url } }))
        }
        _ => None,
    }
}

/// An assistant turn: `{role, content: text or null, refusal?, tool_calls?}`.
fn encode_assistant(message: &Message) -> Value {
    let mut text: Option<String> = None;
    let mut refusal: Option<String> = None;
    let mut calls = Vec::new();
    for block in &message.content {
        match block {
            Block::Text { text: t, provider_data } => {
                let slot = if is_refusal(provider_data.as_ref()) { &mut refusal } else { &mut text };
                slot.get_or_insert_with(String::new).push_str(t);
            }
            Block::ToolCall(call) => calls.push(encode_tool_call(call)),
            // Chat Completions requests have no field for reasoning: OpenAI
            // keeps its reasoning server-side, and the compatible servers that
            // return `reasoning_content` document that it must not be sent back.
            Block::Reasoning { .. } => {}
            // Assistant content parts are text and refusal only; an image the
            // model produced elsewhere (Gemini) cannot be expressed here.
            Block::Image { .. } => {}
            // A tool result in an assistant turn is a malformed transcript.
            Block::ToolResult(_) => {}
        }
    }
    let mut m = Map::new();
    m.insert("role".into(), Value::String("assistant".into()));
    // `content` may only be null when tool calls (or a refusal) stand in for it.
    let content = match text {
        Some(t) => Value::String(t),
        None if !calls.is_empty() || refusal.is_some() => Value::Null,
        None => Value::String(String::new()),
    };
    m.insert("content".into(), content);
    if let Some(r) = refusal {
        m.insert("refusal".into(), Value::String(r));
    }
    if !calls.is_empty() {
        m.insert("tool_calls".into(), Value::Array(calls));
    }
    Value::Object(m)
}

/// `{id, type:"function", function:{name, arguments}}` with the raw argument
/// text as the model produced it (never re-encoded).
fn encode_tool_call(call: &ToolCall) -> Value {
    let arguments = if arguments_from_input(call) { call.input.to_string() } else { call.arguments.clone() };
    json!({
        "id": call.id,
        "type": "function",
        "function": { "name": call.name, "arguments": arguments },
    })
}

/// Whether a call's `arguments` go out as the JSON of its `input`: a call
/// built in code may carry only `input` (a non-empty object), and then its
/// JSON is the text.
fn arguments_from_input(call: &ToolCall) -> bool {
    call.arguments.is_empty() && call.input.as_object().is_some_and(|o| !o.is_empty())
}

fn is_refusal(provider_data: Option<&Value>) -> bool {
    provider_data.and_then(|d| d.get(KEY)).and_then(|d| d.get("refusal")).and_then(Value::as_bool).unwrap_or(false)
}

// ---------------------------------------------------------------- decoding

/// Decodes one whole success body (`chat.completion`). Only choice 0 is read.
///
/// A body that is an error (`{"error": …}`, which some servers send with a
/// 200) is a [`RemoteError::Provider`].
pub fn decode_response(body: &[u8], ids: &mut CallIds) -> Result<TurnResponse, RemoteError> {
    let completion: Completion<'_> = match crate::json::from_bytes(body) {
        Ok(c) => c,
        Err(e) => return Err(decode_failure(e, body)),
    };
    if completion.error.is_some() || completion.object.0.as_deref() == Some("error") {
        return Err(provider_error(body));
    }
    let Some(choices) = completion.choices else {
        return Err(DecodeError::Shape("no `choices` in the chat completion".into()).into());
    };
    let model = completion.model.0.map(WireStr::into_owned);
    let mut parts = Parts { usage: completion.usage.map(Usage::from), model, ..Parts::default() };
    // Zero choices is an empty turn (a server may legitimately return none).
    if let Some(choice) = choices.into_iter().min_by_key(|c| c.index.unwrap_or(0)) {
        parts.finish = choice.finish_reason;
        if let Some(message) = choice.message {
            parts.reasoning = pick_reasoning(message.reasoning_content, message.reasoning).unwrap_or_default();
            parts.text = message.content.map(|c| c.0).unwrap_or_default();
            parts.refusal = message.refusal.unwrap_or_default();
            for call in message.tool_calls.unwrap_or_default() {
                let id = call.id.filter(|s| !s.is_empty());
                let (name, arguments) = match call.function {
                    Some(f) => (f.name.unwrap_or_default(), raw_arguments(f.arguments)?),
                    None => (String::new(), String::new()),
                };
                if id.is_none() && name.is_empty() && arguments.is_empty() {
                    continue; // carries nothing; the stream drops the same
                }
                let generated = id.is_none();
                let id = id.unwrap_or_else(|| ids.next_id());
                parts.calls.push(RawCall { id, generated, name, arguments });
            }
        }
    }
    Ok(parts.into_turn())
}

/// (type, message) from an error body: `{"error":{"message","type","param","code"}}`,
/// also `[{"error":…}]`, `{"error":"text"}` and `{"object":"error","message","type"}`
/// as compatible servers send them.
pub fn error_details(body: &[u8]) -> Option<(String, String)> {
    let v: Value = serde_json::from_slice(body).ok()?;
    let v = match v {
        Value::Array(items) => items.into_iter().next()?,
        v => v,
    };
    let obj = v.as_object()?;
    match obj.get("error") {
        Some(Value::Object(err)) => Some(details_of(err)),
        Some(Value::String(message)) => Some((kind_of(obj).unwrap_or_else(|| "error".into()), message.clone())),
        _ if obj.get("object").and_then(Value::as_str) == Some("error") => Some(details_of(obj)),
        _ => None,
    }
}

fn details_of(err: &Map<String, Value>) -> (String, String) {
    let kind = kind_of(err).unwrap_or_else(|| "error".into());
    let message = match err.get("message").and_then(Value::as_str) {
        Some(m) => m.to_string(),
        // No message: the error object itself says more than nothing.
        None => Value::Object(err.clone()).to_string().chars().take(500).collect(),
    };
    (kind, message)
}

/// OpenAI names the error class in `type` (`code` refines it and is the only
/// name when `type` is null); Gemini's compatible endpoint uses `status`.
fn kind_of(err: &Map<String, Value>) -> Option<String> {
    ["type", "status", "code"].iter().find_map(|k| match err.get(*k) {
        Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
        Some(Value::Number(n)) => Some(n.to_string()),
        _ => None,
    })
}

/// The typed error for an error body that arrived where a success was expected.
fn provider_error(body: &[u8]) -> RemoteError {
    RemoteError::Provider(Style::OpenAi.decode_error(None, None, body))
}

/// A serde failure: JSON of the wrong shape that is an error body is the
/// provider's error; anything else is what [`super::serde_failure`] makes of
/// it ([`DecodeError::Shape`] for the wrong shape, [`DecodeError::Json`] for
/// bad JSON).
fn decode_failure(e: serde_json::Error, body: &[u8]) -> RemoteError {
    match e.classify() {
        serde_json::error::Category::Data if is_error_body(body) => provider_error(body),
        _ => super::serde_failure(e, body).into(),
    }
}

fn is_error_body(body: &[u8]) -> bool {
    let Ok(v) = serde_json::from_slice::<Value>(body) else {
        return false;
    };
    let v = match &v {
        Value::Array(items) => match items.first() {
            Some(first) => first,
            None => return false,
        },
        v => v,
    };
    v.get("error").is_some_and(|e| !e.is_null()) || v.get("object").and_then(Value::as_str) == Some("error")
}

/// The argument text exactly as sent: a string's contents, or the raw JSON
/// text of an object (some compatible servers send objects), never re-encoded.
fn raw_arguments(raw: Option<&RawValue>) -> Result<String, RemoteError> {
    let Some(raw) = raw else {
        return Ok(String::new());
    };
    let text = raw.get();
    if text.starts_with('"') {
        return serde_json::from_str::<String>(text).map_err(|e| DecodeError::Json(e.to_string()).into());
    }
    if text == "null" {
        return Ok(String::new());
    }
    Ok(text.to_string())
}

/// `reasoning_content` (DeepSeek, older vLLM) or `reasoning` (OpenRouter,
/// newer vLLM). Servers in transition send both with the same text, so one
/// is taken, never both.
fn pick_reasoning<'a>(reasoning_content: Option<LenientStr<'a>>, reasoning: Option<LenientStr<'a>>) -> Option<String> {
    let non_empty = |l: Option<LenientStr<'a>>| l.and_then(|l| l.0).filter(|s| !s.is_empty());
    non_empty(reasoning_content).or_else(|| non_empty(reasoning)).map(WireStr::into_owned)
}

fn map_finish_reason(raw: Option<&str>, refused: bool) -> StopReason {
    match raw {
        // A refusal ends with `stop`; the refusal text is the better signal.
        Some("stop") if refused => StopReason::Refusal,
        Some("stop") => StopReason::EndTurn,
        Some("length") => StopReason::MaxTokens,
        // `function_call` is the legacy (pre-`tools`) spelling.
        Some("tool_calls") | Some("function_call") => StopReason::ToolUse,
        Some("content_filter") => StopReason::ContentFilter,
        _ => StopReason::Other,
    }
}

/// One turn's pieces, gathered from a body or a stream.
#[derive(Debug, Clone, Default)]
struct Parts {
    reasoning: String,
    text: String,
    refusal: String,
    calls: Vec<RawCall>,
    finish: Option<String>,
    usage: Option<Usage>,
    model: Option<String>,
}

/// A tool call before its arguments are parsed.
#[derive(Debug, Clone)]
struct RawCall {
    id: String,
    /// The id was generated here because the server sent none.
    generated: bool,
    name: String,
    arguments: String,
}

impl Parts {
    fn into_turn(self) -> TurnResponse {
        let mut content = Vec::with_capacity(3 + self.calls.len());
        if !self.reasoning.is_empty() {
            content.push(Block::Reasoning {
                text: self.reasoning,
                signature: None,
                redacted: None,
                provider_data: None,
            });
        }
        if !self.text.is_empty() {
            content.push(Block::Text { text: self.text, provider_data: None });
        }
        let refused = !self.refusal.is_empty();
        if refused {
            content.push(Block::Text { text: self.refusal, provider_data: Some(json!({ KEY: { "refusal": true } })) });
        }
        for call in self.calls {
            // Arguments that are not JSON do not fail the turn: the loop
            // answers such a call with an error result instead of running it.
            // `input` then shows what was recoverable (text cut off by the
            // output cap), or null.
            let input =
                parse_arguments(&call.arguments).ok().or_else(|| parse_partial(&call.arguments)).unwrap_or(Value::Null);
            let provider_data = call.generated.then(|| json!({ "nexus": { "generatedId": true } }));
            content.push(Block::ToolCall(ToolCall {
                id: call.id,
                name: call.name,
                input,
                arguments: call.arguments,
                provider_data,
            }));
        }
        let reason = map_finish_reason(self.finish.as_deref(), refused);
        TurnResponse {
            content,
            stop: Stop { reason, raw: self.finish },
            usage: self.usage.unwrap_or_default(),
            usage_reported: self.usage.is_some(),
            model: self.model.filter(|m| !m.is_empty()),
        }
    }
}

// ---------------------------------------------------------------- wire types
//
// Lenient on purpose: unknown fields are ignored and every field is optional,
// because compatible servers differ in what they send.

/// A `chat.completion` body (or an error body).
#[derive(Deserialize)]
struct Completion<'a> {
    #[serde(default, borrow)]
    choices: Option<Vec<Choice<'a>>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default, borrow)]
    model: LenientStr<'a>,
    #[serde(default, borrow)]
    error: Option<&'a RawValue>,
    #[serde(default, borrow)]
    object: LenientStr<'a>,
}

#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(default)]
    index: Option<i64>,
    #[serde(default, borrow)]
    message: Option<WireMessage<'a>>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct WireMessage<'a> {
    #[serde(default)]
    content: Option<Content>,
    #[serde(default)]
    refusal: Option<String>,
    #[serde(default, borrow)]
    reasoning_content: Option<LenientStr<'a>>,
    #[serde(default, borrow)]
    reasoning: Option<LenientStr<'a>>,
    #[serde(default, borrow)]
    tool_calls: Option<Vec<WireToolCall<'a>>>,
}

#[derive(Deserialize)]
struct WireToolCall<'a> {
    #[serde(default)]
    id: Option<String>,
    #[serde(default, borrow)]
    function: Option<WireFunction<'a>>,
}

/// `function` of a tool call, in a body or a stream delta.
#[derive(Deserialize)]
struct WireFunction<'a> {
    #[serde(default)]
    name: Option<String>,
    #[serde(default, borrow)]
    arguments: Option<&'a RawValue>,
}

#[derive(Deserialize, Clone, Copy)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
    #[serde(default)]
    total_tokens: Option<u64>,
    #[serde(default)]
    prompt_tokens_details: Option<TokenDetails>,
    #[serde(default)]
    completion_tokens_details: Option<TokenDetails>,
}

/// `*_tokens_details` of a usage object (Chat Completions and Responses):
/// the parts of a count, read leniently (anything but a count is none).
#[derive(Deserialize, Clone, Copy, Default)]
pub(crate) struct TokenDetails {
    #[serde(default, deserialize_with = "lenient_count")]
    pub(crate) cached_tokens: Option<u64>,
    #[serde(default, deserialize_with = "lenient_count")]
    pub(crate) reasoning_tokens: Option<u64>,
}

fn lenient_count<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    Ok(Value::deserialize(d)?.as_u64())
}

impl From<WireUsage> for Usage {
    fn from(u: WireUsage) -> Usage {
        let prompt = u.prompt_tokens.unwrap_or(0);
        let completion = u.completion_tokens.unwrap_or(0);
        // Some compatible servers send a zero total; the sum is then the truth.
        let total = u.total_tokens.filter(|t| *t > 0).unwrap_or(prompt.saturating_add(completion));
        Usage {
            prompt_tokens: prompt,
            completion_tokens: completion,
            total_tokens: total,
            cached_tokens: u.prompt_tokens_details.and_then(|d| d.cached_tokens).unwrap_or(0),
            reasoning_tokens: u.completion_tokens_details.and_then(|d| d.reasoning_tokens).unwrap_or(0),
        }
    }
}

/// Message content: a string, or (some compatible servers) an array of parts
/// whose `text` parts are joined.
struct Content(String);

impl<'de> Deserialize<'de> for Content {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Value::deserialize(d)? {
            Value::String(s) => Ok(Content(s)),
            Value::Null => Ok(Content(String::new())),
            Value::Array(parts) => {
                let mut text = String::new();
                for part in &parts {
                    if part.get("type").and_then(Value::as_str) == Some("text") {
                        text.push_str(part.get("text").and_then(Value::as_str).unwrap_or_default());
                    }
                }
                Ok(Content(text))
            }
            other => Err(serde::de::Error::custom(format!(
                "message content is a {}, not a string or parts",
                kind_name(&other)
            ))),
        }
    }
}

fn kind_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}
