//! Neutral transcript → Messages API request body.

use std::borrow::Cow;

use serde_json::{json, Map, Value};

use super::{KEY, OPAQUE, TOOL_USE_EXTRAS};
use crate::message::{Block, ImageSource, Message, Role, ToolCall, ToolResultBlock};
use crate::provider::ModelCall;
use crate::tool::ToolDecl;

/// `max_tokens` is required by the API; this is what is sent when the caller set none.
pub const DEFAULT_MAX_TOKENS: u32 = 4096;

/// What a tool result with empty output says instead. The API rejects an
/// error result with empty content (`content cannot be empty if is_error is
/// true`), and gateways in front of it reject empty content outright; a short
/// explicit text keeps the request valid and tells the model plainly that the
/// tool printed nothing.
pub(super) const EMPTY_OUTPUT: &str = "(no output)";
pub(super) const EMPTY_ERROR_OUTPUT: &str = "(the tool failed without output)";

/// The request body: `{model, max_tokens, system?, messages, tools?, stream?}`.
///
/// `tools` is left out when none are declared and `stream` when it is false.
/// Caller params are merged afterwards by [`crate::provider::Style::encode_body`].
pub fn encode_body(call: &ModelCall<'_>) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), Value::from(call.model));
    body.insert("max_tokens".into(), Value::from(call.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS)));
    if let Some(system) = call.system.filter(|s| !s.is_empty()) {
        body.insert("system".into(), Value::from(system));
    }
    body.insert("messages".into(), Value::Array(call.messages.iter().filter_map(encode_message).collect()));
    if !call.tools.is_empty() {
        body.insert("tools".into(), Value::Array(call.tools.iter().map(ToolDecl::to_anthropic).collect()));
    }
    if call.stream {
        body.insert("stream".into(), Value::Bool(true));
    }
    Value::Object(body)
}

/// One message, or nothing when none of its blocks has a place on this wire:
/// the API rejects a message with empty content, and it merges consecutive
/// turns of the same role, so leaving the message out loses nothing.
fn encode_message(message: &Message) -> Option<Value> {
    let mut content = Vec::with_capacity(message.content.len());
    match message.role {
        Role::User => {
            // The API requires a user turn's tool_result blocks to come before
            // anything else in it; the rest keep their order.
            let is_result = |b: &&Block| matches!(b, Block::ToolResult(_));
            content.extend(message.content.iter().filter(is_result).filter_map(encode_block));
            content.extend(message.content.iter().filter(|b| !is_result(b)).filter_map(encode_block));
        }
        Role::Assistant => content.extend(message.content.iter().filter_map(encode_block)),
    }
    if content.is_empty() {
        return None;
    }
    let role = match message.role {
        Role::User => "user",
        Role::Assistant => "assistant",
    };
    Some(json!({ "role": role, "content": content }))
}

/// Whether [`encode_block`] sends `block` (`Some`) or leaves it out.
pub(super) fn keeps_block(block: &Block) -> bool {
    match block {
        Block::Text { text, provider_data } => !text.is_empty() || opaque_block(provider_data.as_ref()).is_some(),
        Block::Reasoning { signature, redacted, .. } => {
            redacted.is_some() || signature.as_deref().is_some_and(|s| !s.is_empty())
        }
        Block::Image { .. } | Block::ToolCall(_) | Block::ToolResult(_) => true,
    }
}

/// The verbatim wire block a text block stands for, if it stands for one.
pub(super) fn opaque_block(provider_data: Option<&Value>) -> Option<&Value> {
    own_data(provider_data).and_then(|d| d.get(OPAQUE)).filter(|b| b.is_object())
}

fn encode_block(block: &Block) -> Option<Value> {
    match block {
        Block::Text { text, provider_data } => {
            if let Some(raw) = opaque_block(provider_data.as_ref()) {
                // A block the transcript has no variant for, sent back as it came.
                return Some(raw.clone());
            }
            // The API rejects empty text blocks ("text content blocks must be non-empty").
            (!text.is_empty()).then(|| json!({ "type": "text", "text": text }))
        }
        Block::Reasoning { text, signature, redacted, .. } => {
            if let Some(data) = redacted {
                return Some(json!({ "type": "redacted_thinking", "data": data }));
            }
            // Anthropic only takes back thinking it signed. Reasoning without a
            // signature (from another provider, or a stream cut before the
            // signature came) has no place here and is left out.
            let signature = signature.as_deref().filter(|s| !s.is_empty())?;
            Some(json!({ "type": "thinking", "thinking": text, "signature": signature }))
        }
        Block::Image { media_type, source } => Some(encode_image(media_type, source)),
        Block::ToolCall(call) => Some(encode_call(call)),
        Block::ToolResult(result) => Some(encode_result(result)),
    }
}

/// This style's part of a `provider_data` value (other styles' keys are never read).
fn own_data(provider_data: Option<&Value>) -> Option<&Map<String, Value>> {
    provider_data?.get(KEY)?.as_object()
}

fn encode_image(media_type: &str, source: &ImageSource) -> Value {
    match source {
        ImageSource::Base64 { data } => base64_image(media_type, data),
        ImageSource::Url { url } => match split_data_url(url) {
            // The url source fetches over the network; a data: URL is inline
            // bytes, which this API takes as a base64 source.
            Some((url_type, data)) => base64_image(if url_type.is_empty() { media_type } else { url_type }, data),
            None => json!({ "type": "image", "source": { "type": "url", "url": url } }),
        },
    }
}

fn base64_image(media_type: &str, data: &str) -> Value {
    json!({ "type": "image", "source": { "type": "base64", "media_type": media_type, "data": data } })
}

/// `data:<type>;base64,<data>` → `(type, data)`.
pub(super) fn split_data_url(url: &str) -> Option<(&str, &str)> {
    let rest = url.strip_prefix("data:")?;
    let (head, data) = rest.split_once(',')?;
    let media_type = head.strip_suffix(";base64")?;
    Some((media_type, data))
}

fn encode_call(call: &ToolCall) -> Value {
    let mut block = Map::new();
    block.insert("type".into(), Value::from("tool_use"));
    block.insert("id".into(), Value::from(call.id.as_str()));
    block.insert("name".into(), Value::from(call.name.as_str()));
    block.insert("input".into(), call_input(call).into_owned());
    for key in TOOL_USE_EXTRAS {
        if let Some(v) = tool_use_extra(call, key) {
            block.insert((*key).to_string(), v.clone());
        }
    }
    Value::Object(block)
}

/// `input` must be an object. The raw `arguments` are the provider's own
/// words, so they win when they parse to one; otherwise the parsed `input`
/// (for arguments cut off mid-way, the part that was complete); otherwise `{}`.
pub(super) fn call_input(call: &ToolCall) -> Cow<'_, Value> {
    match serde_json::from_str::<Value>(&call.arguments) {
        Ok(v @ Value::Object(_)) => Cow::Owned(v),
        _ if call.input.is_object() => Cow::Borrowed(&call.input),
        _ => Cow::Owned(Value::Object(Map::new())),
    }
}

/// A `tool_use` key kept in the call's `provider_data` (one of
/// `TOOL_USE_EXTRAS`), unless absent or null.
pub(super) fn tool_use_extra<'a>(call: &'a ToolCall, key: &str) -> Option<&'a Value> {
    own_data(call.provider_data.as_ref())?.get(key).filter(|v| !v.is_null())
}

fn encode_result(result: &ToolResultBlock) -> Value {
    let content = match (result.output.is_empty(), result.is_error) {
        (false, _) => result.output.as_str(),
        (true, false) => EMPTY_OUTPUT,
        (true, true) => EMPTY_ERROR_OUTPUT,
    };
    let mut block = json!({ "type": "tool_result", "tool_use_id": result.call_id, "content": content });
    if result.is_error {
        block["is_error"] = Value::Bool(true);
    }
    block
}
