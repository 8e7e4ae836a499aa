//! The four wire formats. Each provider module encodes a [`ModelCall`] into
//! its request body and decodes its responses — whole bodies and SSE streams —
//! into one [`TurnResponse`]. The machine never looks at provider JSON itself.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::error::{DecodeError, ProviderError, RemoteError};
use crate::event::StreamEvent;
use crate::message::{Block, Message, ToolCall, Usage};
use crate::sse::SseEvent;
use crate::tool::ToolDecl;

pub mod anthropic;
mod body;
pub mod count;
pub mod gemini;
pub mod openai;
mod partial_json;
pub(crate) use partial_json::parse_partial as parse_partial_json;
pub mod responses;
pub(crate) mod wire;

/// Which wire format a provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "fuzzing", derive(arbitrary::Arbitrary))]
pub enum Style {
    /// Anthropic Messages (`/v1/messages`).
    Anthropic,
    /// OpenAI Chat Completions (`/chat/completions`).
    #[serde(rename = "openai")]
    OpenAi,
    /// Gemini `generateContent`.
    Gemini,
    /// OpenAI Responses (`/responses`), used statelessly.
    #[serde(rename = "openai-responses")]
    OpenAiResponses,
}

impl Style {
    /// The style's name as used in config files and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Style::Anthropic => "anthropic",
            Style::OpenAi => "openai",
            Style::Gemini => "gemini",
            Style::OpenAiResponses => "openai-responses",
        }
    }

    /// Parses `anthropic` | `openai` | `gemini` | `openai-responses`.
    pub fn parse(s: &str) -> Option<Style> {
        match s {
            "anthropic" => Some(Style::Anthropic),
            "openai" => Some(Style::OpenAi),
            "gemini" => Some(Style::Gemini),
            "openai-responses" => Some(Style::OpenAiResponses),
            _ => None,
        }
    }

    /// The public API base URL.
    pub fn default_base_url(self) -> &'static str {
        match self {
            Style::Anthropic => "https://api.anthropic.com",
            Style::OpenAi | Style::OpenAiResponses => "https://api.openai.com/v1",
            Style::Gemini => "https://generativelanguage.googleapis.com/v1beta",
        }
    }

    /// The environment variable the drivers read the key from by default.
    pub fn api_key_env(self) -> &'static str {
        match self {
            Style::Anthropic => "ANTHROPIC_API_KEY",
            Style::OpenAi | Style::OpenAiResponses => "OPENAI_API_KEY",
            Style::Gemini => "GEMINI_API_KEY",
        }
    }

    /// The URL of one model call.
    pub fn endpoint(self, base_url: &str, model: &str, stream: bool) -> String {
        match self {
            Style::Anthropic => anthropic::endpoint(base_url),
            Style::OpenAi => openai::endpoint(base_url),
            Style::Gemini => gemini::endpoint(base_url, model, stream),
            Style::OpenAiResponses => responses::endpoint(base_url),
        }
    }

    /// Headers every request carries (content type, API version), without auth.
    pub fn base_headers(self) -> Vec<(String, String)> {
        let mut h = vec![("content-type".to_string(), "application/json".to_string())];
        if self == Style::Anthropic {
            h.push(("anthropic-version".to_string(), "2023-06-01".to_string()));
        }
        h
    }

    /// The auth header for `key`.
    pub fn auth_header(self, key: &str) -> (String, String) {
        match self {
            Style::Anthropic => ("x-api-key".to_string(), key.to_string()),
            Style::OpenAi | Style::OpenAiResponses => ("authorization".to_string(), ["Bearer ", key].concat()),
            Style::Gemini => ("x-goog-api-key".to_string(), key.to_string()),
        }
    }

    /// The request body for one model call. Caller params are merged last
    /// (caller keys win) except the keys that carry the conversation itself.
    /// To send the body, [`write_body`](Self::write_body) writes the same
    /// bytes without building this tree.
    pub fn encode_body(self, call: &ModelCall<'_>) -> Value {
        let mut body = match self {
            Style::Anthropic => anthropic::encode_body(call),
            Style::OpenAi => openai::encode_body(call),
            Style::Gemini => gemini::encode_body(call),
            Style::OpenAiResponses => responses::encode_body(call),
        };
        if let Value::Object(obj) = &mut body {
            for (k, v) in call.params {
                if RESERVED_PARAMS.contains(&k.as_str()) {
                    continue;
                }
                // One level deep for objects (Gemini `generationConfig`): the
                // caller's keys win without erasing ours (`maxOutputTokens`).
                match (obj.get_mut(k), v) {
                    (Some(Value::Object(ours)), Value::Object(theirs)) => {
                        for (ik, iv) in theirs {
                            ours.insert(ik.clone(), iv.clone());
                        }
                    }
                    _ => {
                        obj.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        body
    }

    /// The request body of [`encode_body`](Self::encode_body) as JSON bytes,
    /// appended to `out`: exactly the bytes `serde_json::to_vec(&self.encode_body(call))`
    /// gives (caller params included), written from the transcript without
    /// building the `Value` tree. One exception: Anthropic `input` and Gemini
    /// `args` objects are the call's raw arguments, compact, keys in the
    /// model's order, where the tree sorts them (the same JSON).
    ///
    /// Object keys come out in byte order, as serde_json's map orders them
    /// when its `preserve_order` feature is off (it is off in this crate's
    /// dependency graph; a build that turns it on gets insertion order from
    /// `encode_body` and still byte order here: the same JSON, other bytes).
    pub fn write_body(self, call: &ModelCall<'_>, out: &mut Vec<u8>) {
        self.write_body_with(call, None, out)
    }

    /// [`write_body`](Self::write_body) with the `tools` array already
    /// encoded for this style ([`ToolSet`](crate::tool::ToolSet)'s).
    pub(crate) fn write_body_with(self, call: &ModelCall<'_>, tools: Option<&RawValue>, out: &mut Vec<u8>) {
        match self {
            Style::Anthropic => body::write(anthropic::body_fields(call), call.params, tools, out),
            Style::OpenAi => body::write(openai::body_fields(call), call.params, tools, out),
            Style::Gemini => body::write(gemini::body_fields(call), call.params, tools, out),
            Style::OpenAiResponses => body::write(responses::body_fields(call), call.params, tools, out),
        }
    }

    /// This style's JSON for the `tools` key of a request body (`None`
    /// only should serializing ever fail: the body then writes the tools
    /// from the declarations).
    pub(crate) fn tools_json(self, tools: &[ToolDecl]) -> Option<Box<RawValue>> {
        use serde_json::value::to_raw_value;
        match self {
            Style::Anthropic => to_raw_value(&anthropic::tools_part(tools)),
            Style::OpenAi => to_raw_value(&openai::tools_part(tools)),
            Style::Gemini => to_raw_value(&gemini::tools_part(tools)),
            Style::OpenAiResponses => to_raw_value(&responses::tools_part(tools)),
        }
        .ok()
    }

    /// This style's `tools` array as a tree, for a caller that edits it
    /// (translation marks tools strict) before it is written raw.
    pub(crate) fn tools_value(self, tools: &[ToolDecl]) -> Value {
        match self {
            Style::Anthropic => serde_json::to_value(anthropic::tools_part(tools)),
            Style::OpenAi => serde_json::to_value(openai::tools_part(tools)),
            Style::Gemini => serde_json::to_value(gemini::tools_part(tools)),
            Style::OpenAiResponses => serde_json::to_value(responses::tools_part(tools)),
        }
        .unwrap_or(Value::Null)
    }

    /// [`write_body`](Self::write_body) into a new buffer.
    pub fn body_bytes(self, call: &ModelCall<'_>) -> Vec<u8> {
        let mut out = Vec::with_capacity(1024);
        self.write_body(call, &mut out);
        out
    }

    /// Decodes one whole (non-streaming) success body.
    pub fn decode_response(self, body: &[u8], ids: &mut CallIds) -> Result<TurnResponse, RemoteError> {
        match self {
            Style::Anthropic => anthropic::decode_response(body, ids),
            Style::OpenAi => openai::decode_response(body, ids),
            Style::Gemini => gemini::decode_response(body, ids),
            Style::OpenAiResponses => responses::decode_response(body, ids),
        }
    }

    /// Builds the typed error for an error status (or an error body), keeping the body.
    pub fn decode_error(self, status: Option<u16>, retry_after: Option<&str>, body: &[u8]) -> ProviderError {
        let details = match self {
            Style::Anthropic => anthropic::error_details(body),
            Style::OpenAi => openai::error_details(body),
            Style::Gemini => gemini::error_details(body),
            Style::OpenAiResponses => responses::error_details(body),
        };
        let mut error = provider_error(status, details, retry_after, body);
        // OpenAI answers an exhausted quota with a 429 that no retry can
        // get through (the account must be funded first).
        if matches!(self, Style::OpenAi | Style::OpenAiResponses) && error.kind == "insufficient_quota" {
            error.retryable = false;
        }
        error
    }

    /// A fresh stream assembler.
    pub fn assembler(self) -> Assembler {
        match self {
            Style::Anthropic => Assembler::Anthropic(anthropic::Assembler::default()),
            Style::OpenAi => Assembler::OpenAi(openai::Assembler::default()),
            Style::Gemini => Assembler::Gemini(gemini::Assembler::default()),
            Style::OpenAiResponses => Assembler::OpenAiResponses(responses::Assembler::default()),
        }
    }
}

/// Body keys the conversation owns; caller params may not set them.
///
/// `include`, `previous_response_id` and `conversation` are the Responses
/// style's: it always asks for the reasoning's encrypted content and never
/// refers to server-side state (the whole conversation is replayed).
pub const RESERVED_PARAMS: &[&str] = &[
    "messages",
    "tools",
    "stream",
    "contents",
    "system",
    "systemInstruction",
    "input",
    "instructions",
    "include",
    "previous_response_id",
    "conversation",
];

/// Everything one model call needs, in neutral form.
#[derive(Debug, Clone, Copy)]
pub struct ModelCall<'a> {
    /// The model id, sent verbatim.
    pub model: &'a str,
    /// The system prompt.
    pub system: Option<&'a str>,
    /// The transcript.
    pub messages: &'a [Message],
    /// The declared tools (omitted from the body when empty).
    pub tools: &'a [ToolDecl],
    /// Output token cap (Anthropic requires one; its default is 4096).
    pub max_tokens: Option<u32>,
    /// Ask for an SSE stream.
    pub stream: bool,
    /// Extra body keys from the caller.
    pub params: &'a Map<String, Value>,
    /// The output schema in the provider's own field (OpenAI Chat
    /// `response_format`, Responses `text.format`, Anthropic
    /// `output_config.format`, Gemini `generationConfig.responseJsonSchema`);
    /// `None` for no such field.
    pub output: Option<&'a crate::output::OutputFormat>,
}

/// Why the model stopped, mapped from every provider's vocabulary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Stop {
    /// The neutral reason.
    pub reason: StopReason,
    /// The provider's own string (`end_turn`, `tool_calls`, `STOP`, …), when it sent one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw: Option<String>,
}

/// The neutral stop reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum StopReason {
    /// The model finished (`end_turn`, `stop`, `STOP`).
    EndTurn,
    /// The model wants tools run (`tool_use`, `tool_calls`).
    ToolUse,
    /// The output cap was hit (`max_tokens`, `length`, `MAX_TOKENS`).
    MaxTokens,
    /// A stop sequence matched.
    StopSequence,
    /// Filtered by the provider (`content_filter`, `SAFETY`, `RECITATION`, …).
    ContentFilter,
    /// The model refused (`refusal`).
    Refusal,
    /// Anthropic `pause_turn`: a long server-side turn paused.
    PauseTurn,
    /// Anything else (the raw string says what).
    Other,
}

/// One decoded model turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnResponse {
    /// Text, reasoning and tool calls, in the order the provider sent them.
    pub content: Vec<Block>,
    /// Why the turn ended.
    pub stop: Stop,
    /// Token counts of this call (zero when the provider sent none).
    pub usage: Usage,
    /// Whether the provider sent usage at all.
    #[serde(default)]
    pub usage_reported: bool,
    /// The model the provider says answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

impl TurnResponse {
    /// All text blocks joined without separator.
    pub fn text(&self) -> String {
        let mut s = String::new();
        for b in &self.content {
            if let Block::Text { text, .. } = b {
                s.push_str(text);
            }
        }
        s
    }

    /// The tool calls, in order.
    pub fn tool_calls(&self) -> impl Iterator<Item = &ToolCall> {
        self.content.iter().filter_map(|b| match b {
            Block::ToolCall(c) => Some(c),
            _ => None,
        })
    }
}

/// Generates ids for tool calls the provider sent without one (Gemini).
/// Lives in the run state, so generated ids are stable across snapshot and restore.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CallIds {
    /// Prefix, unique per run.
    pub prefix: String,
    /// Next counter value.
    pub next: u64,
}

impl CallIds {
    /// A generator with this prefix.
    pub fn new(prefix: impl Into<String>) -> CallIds {
        CallIds { prefix: prefix.into(), next: 0 }
    }

    /// The next id: `{prefix}{n}`.
    pub fn next_id(&mut self) -> String {
        let id = format!("{}{}", self.prefix, self.next);
        self.next += 1;
        id
    }
}

/// A per-provider incremental stream assembler: SSE events in, stream events
/// out, one [`TurnResponse`] at the end.
#[derive(Debug, Clone)]
pub enum Assembler {
    /// Anthropic.
    Anthropic(anthropic::Assembler),
    /// OpenAI.
    OpenAi(openai::Assembler),
    /// Gemini.
    Gemini(gemini::Assembler),
    /// OpenAI Responses.
    OpenAiResponses(responses::Assembler),
}

impl Assembler {
    /// Feeds one SSE event; appends the deltas it yields to `out`.
    pub fn push(&mut self, event: &SseEvent, ids: &mut CallIds, out: &mut Vec<StreamEvent>) -> Result<(), RemoteError> {
        match self {
            Assembler::Anthropic(a) => a.push(event, ids, out),
            Assembler::OpenAi(a) => a.push(event, ids, out),
            Assembler::Gemini(a) => a.push(event, ids, out),
            Assembler::OpenAiResponses(a) => a.push(event, ids, out),
        }
    }

    /// The stream ended: the assembled turn, or [`DecodeError::Truncated`] when
    /// the provider's end marker never came.
    pub fn finish(&mut self) -> Result<TurnResponse, RemoteError> {
        match self {
            Assembler::Anthropic(a) => a.finish(),
            Assembler::OpenAi(a) => a.finish(),
            Assembler::Gemini(a) => a.finish(),
            Assembler::OpenAiResponses(a) => a.finish(),
        }
    }

    /// Whether any visible delta has been produced (a mid-stream retry is
    /// only allowed before that).
    pub fn emitted_anything(&self) -> bool {
        match self {
            Assembler::Anthropic(a) => a.emitted_anything(),
            Assembler::OpenAi(a) => a.emitted_anything(),
            Assembler::Gemini(a) => a.emitted_anything(),
            Assembler::OpenAiResponses(a) => a.emitted_anything(),
        }
    }
}

/// Statuses worth retrying.
pub fn is_retryable_status(status: u16) -> bool {
    matches!(status, 429 | 500 | 502 | 503 | 504 | 529)
}

/// `Retry-After` as delay-seconds only: ASCII digits, 0 ..= 2147483647. Any
/// other form (HTTP dates, fractions, signs, spaces inside) is `None`, and the
/// caller falls back to backoff.
pub fn parse_retry_after(value: &str) -> Option<u64> {
    let v = value.trim_matches(|c| c == ' ' || c == '\t');
    if v.is_empty() || v.len() > 10 || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let secs: u64 = v.parse().ok()?;
    (secs <= 2_147_483_647).then_some(secs * 1000)
}

const BODY_KEEP: usize = 64 * 1024;

/// Error types that mean "try again later" when they arrive without a status (mid-stream).
const TRANSIENT_KINDS: &[&str] = &[
    "overloaded_error",
    "api_error",
    "rate_limit_error",
    "server_error",
    "RESOURCE_EXHAUSTED",
    "UNAVAILABLE",
    "INTERNAL",
];

fn provider_error(
    status: Option<u16>,
    details: Option<(String, String)>,
    retry_after: Option<&str>,
    body: &[u8],
) -> ProviderError {
    let keep = &body[..body.len().min(BODY_KEEP)];
    let body_text = String::from_utf8_lossy(keep).into_owned();
    let (kind, message) = details.unwrap_or_else(|| {
        let kind = status.map(|s| format!("http_{s}")).unwrap_or_else(|| "error".to_string());
        let msg: String = body_text.chars().take(500).collect();
        (kind, msg)
    });
    // A status decides on its own; an in-stream error event (no status) is
    // retryable when its type names a transient condition.
    let retryable = match status {
        Some(s) => is_retryable_status(s),
        None => TRANSIENT_KINDS.contains(&kind.as_str()),
    };
    ProviderError {
        status,
        kind,
        message,
        body: body_text,
        retryable,
        retry_after_ms: retry_after.and_then(parse_retry_after),
    }
}

/// Reads `{"error": {"type"|"status"|"code", "message"}}`-style bodies, the
/// shape all three providers share with small differences.
pub(crate) fn generic_error_details(body: &[u8], kind_keys: &[&str]) -> Option<(String, String)> {
    let v: Value = serde_json::from_slice(body).ok()?;
    let v = match &v {
        Value::Array(items) => items.first()?.clone(),
        _ => v,
    };
    let err = v.get("error")?;
    let message = err.get("message").and_then(Value::as_str).unwrap_or_default().to_string();
    let kind = kind_keys
        .iter()
        .find_map(|k| {
            err.get(*k).and_then(|x| match x {
                Value::String(s) if !s.is_empty() => Some(s.clone()),
                Value::Number(n) => Some(n.to_string()),
                _ => None,
            })
        })
        .unwrap_or_else(|| "error".to_string());
    Some((kind, message))
}

/// A serde failure reading remote `text`: valid JSON of the wrong type is a
/// wrong shape; anything else (bad bytes, bad UTF-8, an early end) is
/// malformed JSON, reported with the start of the text, so the error says
/// what arrived and not only where the parser stopped.
pub(crate) fn serde_failure(e: serde_json::Error, text: &[u8]) -> DecodeError {
    match e.classify() {
        serde_json::error::Category::Data => DecodeError::Shape(e.to_string()),
        _ => DecodeError::Json(format!("{e}; the text starts `{}`", text_excerpt(text))),
    }
}

/// At most 120 characters of `text` (lossy UTF-8), marked when cut, with
/// control characters escaped so the message stays on one line.
pub(crate) fn text_excerpt(text: &[u8]) -> String {
    const KEEP: usize = 120;
    let lossy = String::from_utf8_lossy(text.get(..KEEP * 4).unwrap_or(text));
    let mut out = String::with_capacity(KEEP + 8);
    for (n, c) in lossy.chars().enumerate() {
        if n == KEEP {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// Parses JSON text into a value; empty (or all-whitespace) text is `{}`.
pub fn parse_arguments(raw: &str) -> Result<Value, DecodeError> {
    if raw.trim().is_empty() {
        return Ok(Value::Object(Map::new()));
    }
    serde_json::from_str(raw).map_err(DecodeError::from)
}

/// Decodes one captured response body with the same code the loop uses:
/// a whole JSON body, or (with `stream`) a raw SSE capture fed through the
/// SSE decoder and the style's assembler.
pub fn decode_capture(style: Style, body: &[u8], stream: bool) -> Result<TurnResponse, RemoteError> {
    let mut ids = CallIds::new("call_");
    if !stream {
        return style.decode_response(body, &mut ids);
    }
    decode_stream_chunks(style, std::iter::once(body), &mut ids)
}

/// Decodes an SSE body delivered in the given chunks (used by tests to prove
/// chunking never changes the result).
pub fn decode_stream_chunks<'a>(
    style: Style,
    chunks: impl IntoIterator<Item = &'a [u8]>,
    ids: &mut CallIds,
) -> Result<TurnResponse, RemoteError> {
    let mut decoder = crate::sse::SseDecoder::new();
    let mut assembler = style.assembler();
    let mut events = Vec::new();
    let mut deltas = Vec::new();
    for chunk in chunks {
        decoder.feed(chunk, &mut events);
        for ev in events.drain(..) {
            assembler.push(&ev, ids, &mut deltas)?;
        }
    }
    decoder.finish(&mut events);
    for ev in events.drain(..) {
        assembler.push(&ev, ids, &mut deltas)?;
    }
    assembler.finish()
}

impl TurnResponse {
    /// The normalized summary the `decode` command prints and the wire corpus
    /// expectations use: `{text, tool_calls:[{id,name,input}], stop, usage:{input,output}}`.
    /// Ids the core generated (the provider sent none) are `null`.
    pub fn summary(&self) -> Value {
        let calls: Vec<Value> = self
            .tool_calls()
            .map(|c| {
                let generated = c
                    .provider_data
                    .as_ref()
                    .and_then(|d| d.pointer("/nexus/generatedId"))
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                serde_json::json!({
                    "id": if generated { Value::Null } else { Value::String(c.id.clone()) },
                    "name": c.name,
                    "input": c.input,
                })
            })
            .collect();
        let reasoning: Vec<&str> = self
            .content
            .iter()
            .filter_map(|b| match b {
                Block::Reasoning { text, .. } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        serde_json::json!({
            "text": self.text(),
            "tool_calls": calls,
            "stop": self.stop.raw,
            "usage": if self.usage_reported {
                serde_json::json!({"input": self.usage.prompt_tokens, "output": self.usage.completion_tokens})
            } else {
                serde_json::json!({"input": null, "output": null})
            },
            "thinking": if reasoning.is_empty() { Value::Null } else { Value::String(reasoning.concat()) },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_accepts_delay_seconds_only() {
        let cases: &[(&str, Option<u64>)] = &[
            ("0", Some(0)),
            ("3", Some(3000)),
            ("120", Some(120_000)),
            ("2147483647", Some(2_147_483_647_000)),
            ("2147483648", None),
            ("0.5", None),
            ("-1", None),
            ("+1", None),
            ("", None),
            ("1 2", None),
            ("Wed, 21 Oct 2015 07:28:00 GMT", None),
            ("99999999999", None),
            (" 7 ", Some(7000)),
        ];
        for (input, want) in cases {
            assert_eq!(parse_retry_after(input), *want, "Retry-After {input:?}");
        }
    }

    #[test]
    fn retryable_statuses() {
        for s in [429, 500, 502, 503, 504, 529] {
            assert!(is_retryable_status(s));
        }
        for s in [200, 400, 401, 403, 404, 422] {
            assert!(!is_retryable_status(s));
        }
    }
}
