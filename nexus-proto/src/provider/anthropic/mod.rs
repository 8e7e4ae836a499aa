//! The Anthropic Messages wire format (`POST /v1/messages`).
//!
//! How the neutral transcript maps onto it:
//!
//! * `text` ⇄ [`Block::Text`]; `thinking` (+ `signature`) ⇄ [`Block::Reasoning`]
//!   with `signature`; `redacted_thinking` ⇄ [`Block::Reasoning`] with an empty
//!   text and `redacted` holding the `data`; `tool_use` ⇄ [`Block::ToolCall`].
//! * `tool_use` keys that must be echoed back but have no neutral field
//!   (`caller`, `toolset_name`) live in the call's `provider_data` under
//!   `"anthropic"`.
//! * Blocks the transcript has no variant for — `server_tool_use`,
//!   `web_search_tool_result` and the other server-side tool blocks, and any
//!   block type added later — are kept verbatim as an empty [`Block::Text`]
//!   whose `provider_data` is `{"anthropic": {"block": <the block>}}`. They are
//!   not client tool calls (Anthropic already ran them), so they must not reach
//!   the tool loop; but they are part of the assistant turn, and a `pause_turn`
//!   continuation or a follow-up turn has to send them back as they came. An
//!   empty text block is the one neutral shape that carries data without
//!   adding visible text, reasoning or a call.
//! * Citations on text blocks are dropped (the stream's `citations_delta` is
//!   ignored too, so both forms agree); the text itself is kept.
//!
//! The stream [`Assembler`] produces exactly what
//! [`decode_response`] produces for the same message sent as one body.

mod encode;
mod stream;
mod write;

use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::error::{DecodeError, RemoteError};
use crate::message::{Block, ToolCall, Usage};
use crate::provider::partial_json::parse_partial;
use crate::provider::{parse_arguments, CallIds, Stop, StopReason, Style, TurnResponse};

pub use encode::encode_body;
pub use stream::Assembler;
pub(crate) use write::{fields as body_fields, tools_part};

/// This style's key in `provider_data`.
const KEY: &str = "anthropic";
/// Under [`KEY`]: a wire block the transcript has no variant for, kept verbatim.
const OPAQUE: &str = "block";
/// `tool_use` keys that are echoed back through `provider_data` (the request
/// type accepts exactly these besides `id`, `name`, `input`, `type` and
/// `cache_control`, which is a request-side setting).
const TOOL_USE_EXTRAS: &[&str] = &["caller", "toolset_name"];

/// The URL of one model call.
pub fn endpoint(base_url: &str) -> String {
    let base = base_url.trim_end_matches('/');
    if base.ends_with("/v1") {
        [base, "/messages"].concat()
    } else {
        [base, "/v1/messages"].concat()
    }
}

/// Decodes one whole (non-streaming) success body.
///
/// A body that is an error (`{"type":"error","error":{…}}`, which some servers
/// send with status 200) becomes [`RemoteError::Provider`]; text that is not
/// JSON is [`DecodeError::Json`]; JSON that is not a message is
/// [`DecodeError::Shape`]. Tool-call arguments that are not valid JSON never
/// fail the decode: see [`ToolCall::arguments`].
pub fn decode_response(body: &[u8], ids: &mut CallIds) -> Result<TurnResponse, RemoteError> {
    let msg: WireMessage<'_> = match crate::json::from_bytes(body) {
        Ok(msg) => msg,
        Err(e) => {
            // A message-shaped struct can fail on an error body that is shaped
            // differently (a string `type`, an array); look again before blaming the shape.
            if is_error_body(body) {
                return Err(Style::Anthropic.decode_error(None, None, body).into());
            }
            return Err(super::serde_failure(e, body).into());
        }
    };
    if msg.error.is_some() || msg.kind.as_deref() == Some("error") {
        return Err(Style::Anthropic.decode_error(None, None, body).into());
    }
    if !is_object_text(body) {
        // serde also reads a struct from an array, by position; a message is an object.
        return Err(DecodeError::Shape("the body is not a JSON object".into()).into());
    }
    let raw_blocks = msg.content.ok_or_else(|| DecodeError::Shape("message without a `content` array".into()))?;
    let mut content = Vec::with_capacity(raw_blocks.len());
    for raw in raw_blocks {
        content.push(match read_block(raw)? {
            WireBlock::Text(text) => Block::Text { text, provider_data: None },
            WireBlock::Thinking { text, signature } => reasoning(text, signature),
            WireBlock::Redacted(data) => redacted(data),
            WireBlock::ToolUse { id, name, input, extras } => {
                // The exact bytes of the `input` object are the arguments; a
                // missing `input` is "no arguments", written `{}` as the API
                // itself writes an empty input.
                let arguments = input.map_or_else(|| "{}".to_string(), |raw| raw.get().to_string());
                let (id, generated) = call_id(id, ids);
                Block::ToolCall(tool_call(id, generated, name, arguments, extras))
            }
            WireBlock::Opaque(block) => opaque(block),
        });
    }
    let (usage, usage_reported) = match msg.usage {
        Some(u) => (usage(u.input_tokens, u.output_tokens), true),
        None => (Usage::default(), false),
    };
    Ok(TurnResponse { content, stop: stop(msg.stop_reason), usage, usage_reported, model: msg.model })
}

/// `(type, message)` from an Anthropic error body
/// (`{"type":"error","error":{"type":"overloaded_error","message":"…"}}`).
/// Also reads the `{"error":{"code"|"status",…}}` and `{"error":"text"}`
/// shapes that gateways in front of the API send.
pub fn error_details(body: &[u8]) -> Option<(String, String)> {
    let v: Value = serde_json::from_slice(body).ok()?;
    let v = match v {
        Value::Array(items) => items.into_iter().next()?,
        v => v,
    };
    match v.get("error")? {
        Value::String(message) => Some(("error".to_string(), message.clone())),
        Value::Object(_) => crate::provider::generic_error_details(body, &["type", "code", "status"]),
        _ => None,
    }
}

/// The neutral reason for a `stop_reason` (every value the API documents).
pub(crate) fn stop_reason(raw: &str) -> StopReason {
    match raw {
        "end_turn" => StopReason::EndTurn,
        "tool_use" => StopReason::ToolUse,
        "max_tokens" => StopReason::MaxTokens,
        // The context window filled up while the model was writing: like
        // `max_tokens`, a token limit cut the output short, and the turn is
        // just as incomplete. `raw` keeps which limit it was.
        "model_context_window_exceeded" => StopReason::MaxTokens,
        "stop_sequence" => StopReason::StopSequence,
        "pause_turn" => StopReason::PauseTurn,
        "refusal" => StopReason::Refusal,
        _ => StopReason::Other,
    }
}

fn stop(raw: Option<String>) -> Stop {
    Stop { reason: raw.as_deref().map_or(StopReason::Other, stop_reason), raw }
}

/// Cache tokens are not added: `input_tokens` is what the API counts as input.
pub(crate) fn usage(input: Option<u64>, output: Option<u64>) -> Usage {
    let (prompt_tokens, completion_tokens) = (input.unwrap_or(0), output.unwrap_or(0));
    Usage {
        prompt_tokens,
        completion_tokens,
        total_tokens: prompt_tokens.saturating_add(completion_tokens),
        ..Usage::default()
    }
}

fn reasoning(text: String, signature: String) -> Block {
    let signature = (!signature.is_empty()).then_some(signature);
    Block::Reasoning { text, signature, redacted: None, provider_data: None }
}

fn redacted(data: String) -> Block {
    Block::Reasoning { text: String::new(), signature: None, redacted: Some(data), provider_data: None }
}

fn opaque(block: Value) -> Block {
    let mut own = Map::new();
    own.insert(OPAQUE.to_string(), block);
    let mut data = Map::new();
    data.insert(KEY.to_string(), Value::Object(own));
    Block::Text { text: String::new(), provider_data: Some(Value::Object(data)) }
}

/// The provider's id, or a generated one when it sent none.
fn call_id(id: Option<String>, ids: &mut CallIds) -> (String, bool) {
    match id {
        Some(id) if !id.is_empty() => (id, false),
        _ => (ids.next_id(), true),
    }
}

/// One tool call from its parts, the same way for whole bodies and streams.
/// Arguments that are not valid JSON stay as they came; `input` is then the
/// recoverable prefix (see [`parse_partial`]) or `null`.
fn tool_call(id: String, generated: bool, name: String, arguments: String, extras: Map<String, Value>) -> ToolCall {
    let input = parse_arguments(&arguments).ok().or_else(|| parse_partial(&arguments)).unwrap_or(Value::Null);
    let mut data = Map::new();
    if !extras.is_empty() {
        data.insert(KEY.to_string(), Value::Object(extras));
    }
    if generated {
        data.insert("nexus".to_string(), serde_json::json!({ "generatedId": true }));
    }
    let provider_data = (!data.is_empty()).then_some(Value::Object(data));
    ToolCall { id, name, input, arguments, provider_data }
}

/// A non-streaming response body. Unknown fields are ignored.
#[derive(Deserialize)]
struct WireMessage<'a> {
    #[serde(rename = "type", default)]
    kind: Option<String>,
    #[serde(default)]
    error: Option<IgnoredAny>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default, borrow)]
    content: Option<Vec<&'a RawValue>>,
    #[serde(default)]
    stop_reason: Option<String>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

/// `usage` in bodies, `message_start` and `message_delta`.
#[derive(Deserialize, Default)]
pub(crate) struct WireUsage {
    #[serde(default)]
    pub(crate) input_tokens: Option<u64>,
    #[serde(default)]
    pub(crate) output_tokens: Option<u64>,
}

/// One content block, read the same way from bodies and `content_block_start`.
enum WireBlock<'a> {
    Text(String),
    Thinking { text: String, signature: String },
    Redacted(String),
    ToolUse { id: Option<String>, name: String, input: Option<&'a RawValue>, extras: Map<String, Value> },
    Opaque(Value),
}

/// The union of the fields of the block types the transcript models.
#[derive(Deserialize)]
struct FlatBlock<'a> {
    #[serde(rename = "type", default)]
    kind: Option<String>,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    thinking: Option<String>,
    #[serde(default)]
    signature: Option<String>,
    #[serde(default)]
    data: Option<String>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default, borrow)]
    input: Option<&'a RawValue>,
    #[serde(default)]
    caller: Option<Value>,
    #[serde(default)]
    toolset_name: Option<Value>,
}

#[derive(Deserialize)]
struct KindOnly {
    #[serde(rename = "type", default)]
    kind: Option<String>,
}

const MODELED_BLOCKS: &[&str] = &["text", "thinking", "redacted_thinking", "tool_use"];

fn read_block(raw: &RawValue) -> Result<WireBlock<'_>, DecodeError> {
    if !is_object_text(raw.get().as_bytes()) {
        return Err(DecodeError::Shape(format!("a content block must be an object, not {}", excerpt(raw.get()))));
    }
    let flat: FlatBlock<'_> = match serde_json::from_str(raw.get()) {
        Ok(flat) => flat,
        Err(e) => {
            // A block type the transcript does not model may use these field
            // names with other types; that is no reason to fail.
            let kind = serde_json::from_str::<KindOnly>(raw.get()).map_err(classify)?.kind;
            return match kind {
                Some(k) if !MODELED_BLOCKS.contains(&k.as_str()) => Ok(WireBlock::Opaque(opaque_value(raw)?)),
                _ => Err(classify(e)),
            };
        }
    };
    let kind = flat.kind.ok_or_else(|| DecodeError::Shape("content block without a `type`".into()))?;
    Ok(match kind.as_str() {
        "text" => WireBlock::Text(flat.text.unwrap_or_default()),
        "thinking" => WireBlock::Thinking {
            text: flat.thinking.unwrap_or_default(),
            signature: flat.signature.unwrap_or_default(),
        },
        "redacted_thinking" => WireBlock::Redacted(flat.data.unwrap_or_default()),
        "tool_use" => {
            let mut extras = Map::new();
            for (key, value) in [("caller", flat.caller), ("toolset_name", flat.toolset_name)] {
                if let Some(v) = value.filter(|v| !v.is_null()) {
                    extras.insert(key.to_string(), v);
                }
            }
            let input = flat.input.filter(|raw| raw.get() != "null");
            WireBlock::ToolUse { id: flat.id, name: flat.name.unwrap_or_default(), input, extras }
        }
        _ => WireBlock::Opaque(opaque_value(raw)?),
    })
}

fn opaque_value(raw: &RawValue) -> Result<Value, DecodeError> {
    serde_json::from_str(raw.get()).map_err(classify)
}

/// The start of remote text, for an error message (never the whole of a large body).
fn excerpt(text: &str) -> String {
    const KEEP: usize = 120;
    match text.char_indices().nth(KEEP) {
        Some((end, _)) => format!("{}…", text.get(..end).unwrap_or_default()),
        None => text.to_string(),
    }
}

/// Whether JSON text (already known to be valid) is an object. Checked
/// because serde reads structs from arrays too, by position.
pub(crate) fn is_object_text(text: &[u8]) -> bool {
    text.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{')
}

/// Whether a body that did not read as a message is an error body.
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
    v.get("error").is_some_and(|e| !e.is_null()) || v.get("type").and_then(Value::as_str) == Some("error")
}

/// Text that is not JSON is [`DecodeError::Json`]; JSON of the wrong shape
/// (a string where an object belongs, a negative token count) is [`DecodeError::Shape`].
fn classify(e: serde_json::Error) -> DecodeError {
    match e.classify() {
        serde_json::error::Category::Data => DecodeError::Shape(e.to_string()),
        _ => DecodeError::Json(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_accepts_base_with_or_without_v1() {
        assert_eq!(endpoint("https://api.anthropic.com"), "https://api.anthropic.com/v1/messages");
        assert_eq!(endpoint("https://api.anthropic.com/"), "https://api.anthropic.com/v1/messages");
        assert_eq!(endpoint("http://127.0.0.1:8080/v1"), "http://127.0.0.1:8080/v1/messages");
    }

    #[test]
    fn tool_use_extras_are_the_ones_read() {
        let raw: Box<RawValue> = serde_json::from_str(
            r#"{"type":"tool_use","id":"t","name":"n","input":{},"caller":{"type":"direct"},"toolset_name":"s","other":1}"#,
        )
        .unwrap();
        let WireBlock::ToolUse { extras, .. } = read_block(&raw).unwrap() else { panic!("not a tool_use") };
        let keys: Vec<&str> = extras.keys().map(String::as_str).collect();
        assert_eq!(keys, TOOL_USE_EXTRAS);
    }
}
