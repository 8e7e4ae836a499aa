//! Neutral transcript → Messages API request body.

use std::borrow::Cow;

use serde_json::{json, Map, Value};

use super::{KEY, OPAQUE, TOOL_USE_EXTRAS};
use crate::message::{Block, ImageSource, Message, Role, ToolCall, ToolResultBlock};
use crate::provider::body::{compact, is_encoding_of, CallObject};
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
    if let Some(o) = call.output {
        body.insert("output_config".into(), crate::output::wire::anthropic_output_config(o));
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
            let results = message.content.iter().filter(is_result);
            let others = message.content.iter().filter(|b| !is_result(b));
            content.extend(results.chain(others).filter(|b| keeps_block(b)).map(encode_block));
        }
        Role::Assistant => content.extend(message.content.iter().filter(|b| keeps_block(b)).map(encode_block)),
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

/// Whether `block` has a place on this wire ([`encode_block`] is only given
/// blocks it keeps). The API rejects empty text blocks ("text content blocks
/// must be non-empty"), and it only takes back thinking it signed: reasoning
/// without a signature (from another provider, or a stream cut before the
/// signature came) is left out unless it is redacted thinking.
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

/// One block that [`keeps_block`] keeps.
fn encode_block(block: &Block) -> Value {
    match block {
        Block::Text { text, provider_data } => match opaque_block(provider_data.as_ref()) {
            // A block the transcript has no variant for, sent back as it came.
            Some(raw) => raw.clone(),
            None => json!({ "type": "text", "text": text }),
        },
        Block::Reasoning { text, signature, redacted, .. } => match redacted {
            Some(data) => json!({ "type": "redacted_thinking", "data": data }),
            None => {
                json!({ "type": "thinking", "thinking": text, "signature": signature.as_deref().unwrap_or_default() })
            }
        },
        Block::Image { media_type, source } => encode_image(media_type, source),
        Block::ToolCall(call) => encode_call(call),
        Block::ToolResult(result) => encode_result(result),
    }
}

/// This style's part of a `provider_data` value (other styles' keys are never read).
fn own_data(provider_data: Option<&Value>) -> Option<&Map<String, Value>> {
    provider_data?.get(KEY)?.as_object()
}

fn encode_image(media_type: &str, source: &ImageSource) -> Value {
    match source {
        ImageSource::Base64 { data } => base64_image(media_type, data),
        ImageSource::Url { url } => match inline_image(media_type, url) {
            Some((media_type, data)) => base64_image(media_type, data),
            None => json!({ "type": "image", "source": { "type": "url", "url": url } }),
        },
    }
}

fn base64_image(media_type: &str, data: &str) -> Value {
    json!({ "type": "image", "source": { "type": "base64", "media_type": media_type, "data": data } })
}

/// A `data:` URL image as the `(media_type, data)` of a base64 source: the
/// url source fetches over the network, while a data: URL is inline bytes,
/// which this API takes as a base64 source. The URL's own media type wins;
/// the block's stands in when the URL names none. `None` for any other URL.
pub(super) fn inline_image<'a>(media_type: &'a str, url: &'a str) -> Option<(&'a str, &'a str)> {
    let (url_type, data) = split_data_url(url)?;
    Some((if url_type.is_empty() { media_type } else { url_type }, data))
}

/// `data:<type>;base64,<data>` → `(type, data)`.
fn split_data_url(url: &str) -> Option<(&str, &str)> {
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
///
/// When the arguments are exactly the encoding of an object `input`, parsing
/// them would give `input` back, so `input` is taken without parsing.
fn call_input(call: &ToolCall) -> Cow<'_, Value> {
    if call.input.is_object() && is_encoding_of(&call.arguments, &call.input) {
        return Cow::Borrowed(&call.input);
    }
    match serde_json::from_str::<Value>(&call.arguments) {
        Ok(v @ Value::Object(_)) => Cow::Owned(v),
        _ if call.input.is_object() => Cow::Borrowed(&call.input),
        _ => Cow::Owned(Value::Object(Map::new())),
    }
}

/// [`call_input`] as the body writer puts it: the same object, written as
/// the model's own text (compact, keys in its order) when it came from that
/// text. Parses the arguments at most once, as `call_input` does.
pub(super) fn call_object(call: &ToolCall) -> CallObject<'_> {
    if call.input.is_object() && is_encoding_of(&call.arguments, &call.input) {
        return CallObject::Ordered(Cow::Borrowed(&call.arguments));
    }
    match serde_json::from_str::<Value>(&call.arguments) {
        Ok(Value::Object(_)) => CallObject::Ordered(compact(&call.arguments)),
        _ if call.input.is_object() => CallObject::Value(Cow::Borrowed(&call.input)),
        _ => CallObject::Value(Cow::Owned(Value::Object(Map::new()))),
    }
}

/// A `tool_use` key kept in the call's `provider_data` (one of
/// `TOOL_USE_EXTRAS`), unless absent or null.
pub(super) fn tool_use_extra<'a>(call: &'a ToolCall, key: &str) -> Option<&'a Value> {
    own_data(call.provider_data.as_ref())?.get(key).filter(|v| !v.is_null())
}

fn encode_result(result: &ToolResultBlock) -> Value {
    let content = result_content(result);
    let mut block = json!({ "type": "tool_result", "tool_use_id": result.call_id, "content": content });
    if result.is_error {
        block["is_error"] = Value::Bool(true);
    }
    block
}

/// A tool result's `content`: its output, or for empty output the text that
/// stands in for it ([`EMPTY_OUTPUT`], [`EMPTY_ERROR_OUTPUT`]).
pub(super) fn result_content(result: &ToolResultBlock) -> &str {
    match (result.output.is_empty(), result.is_error) {
        (false, _) => &result.output,
        (true, false) => EMPTY_OUTPUT,
        (true, true) => EMPTY_ERROR_OUTPUT,
    }
}
