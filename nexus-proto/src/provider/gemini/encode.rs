//! Building the `generateContent` request body from the neutral transcript.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

use serde_json::{json, Map, Value};

use crate::message::{Block, ImageSource, Message, Role, ToolCall, ToolResultBlock};
use crate::provider::ModelCall;
use crate::tool::gemini_tools;

use super::signature;

/// The request body:
/// `{contents, systemInstruction?, tools?, generationConfig?: {maxOutputTokens}}`.
///
/// The model travels in the URL and streaming is chosen by the endpoint, so
/// neither appears here. An empty system prompt is left out (Gemini rejects an
/// empty text part, and it means the same as none).
pub fn encode_body(call: &ModelCall<'_>) -> Value {
    let mut body = Map::new();
    body.insert("contents".into(), Value::Array(encode_contents(call.messages)));
    if let Some(system) = call.system.filter(|s| !s.is_empty()) {
        body.insert("systemInstruction".into(), json!({ "parts": [{ "text": system }] }));
    }
    if !call.tools.is_empty() {
        body.insert("tools".into(), gemini_tools(call.tools));
    }
    if let Some(config) = generation_config(call) {
        body.insert("generationConfig".into(), config);
    }
    Value::Object(body)
}

/// `generationConfig`: the output cap and the native output schema, when
/// either is set.
pub(super) fn generation_config(call: &ModelCall<'_>) -> Option<Value> {
    if call.max_tokens.is_none() && call.output.is_none() {
        return None;
    }
    let mut config = Map::new();
    if let Some(max) = call.max_tokens {
        config.insert("maxOutputTokens".into(), Value::from(max));
    }
    if let Some(o) = call.output {
        crate::output::wire::gemini_generation_config(o, &mut config);
    }
    Some(Value::Object(config))
}

/// What the encoder needs to know about the transcript's tool calls when it
/// writes their results: which ids the core generated (never sent to Gemini)
/// and each call's name (Gemini matches results by name).
pub(super) struct CallIndex<'a> {
    pub(super) generated: HashSet<&'a str>,
    pub(super) names: HashMap<&'a str, &'a str>,
}

impl<'a> CallIndex<'a> {
    pub(super) fn new(messages: &'a [Message]) -> CallIndex<'a> {
        let mut index = CallIndex { generated: HashSet::new(), names: HashMap::new() };
        for call in messages.iter().flat_map(Message::tool_calls) {
            if is_generated(call) {
                index.generated.insert(call.id.as_str());
            }
            index.names.insert(call.id.as_str(), call.name.as_str());
        }
        index
    }

    /// The id to send for a call or result: none when it is empty or the
    /// core generated it (Gemini never saw it).
    pub(super) fn sent_id<'i>(&self, id: &'i str) -> Option<&'i str> {
        (!id.is_empty() && !self.generated.contains(id)).then_some(id)
    }

    /// The name a result is sent under: its own, or when it has none the name
    /// of the call it answers (Gemini matches results by name).
    pub(super) fn result_name<'r>(&self, result: &'r ToolResultBlock) -> &'r str
    where
        'a: 'r,
    {
        match result.name.as_str() {
            "" => self.names.get(result.call_id.as_str()).copied().unwrap_or_default(),
            name => name,
        }
    }
}

/// Whether the core generated this call's id because Gemini sent none.
fn is_generated(call: &ToolCall) -> bool {
    call.provider_data.as_ref().and_then(|d| d.pointer("/nexus/generatedId")).and_then(Value::as_bool).unwrap_or(false)
}

/// One `Content` per run of same-role messages. Consecutive turns of one role
/// are merged because the API expects user and model turns to alternate, and
/// because tool results the transcript holds in separate user turns must reach
/// Gemini as one turn answering all of the model's calls. Messages that encode
/// to no part at all are skipped: the API rejects a content with empty parts.
fn encode_contents(messages: &[Message]) -> Vec<Value> {
    let index = CallIndex::new(messages);
    let mut contents: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for message in messages {
        let parts: Vec<Value> =
            message.content.iter().filter(|b| keeps_block(b)).map(|b| encode_block(b, &index)).collect();
        if parts.is_empty() {
            continue;
        }
        let role = match message.role {
            Role::User => "user",
            Role::Assistant => "model",
        };
        match contents.last_mut() {
            Some((last_role, last_parts)) if *last_role == role => last_parts.extend(parts),
            _ => contents.push((role, parts)),
        }
    }
    contents.into_iter().map(|(role, parts)| json!({ "role": role, "parts": parts })).collect()
}

/// A part with its one data field, plus the block's thought signature when
/// it has one (Gemini wants it back on the same part it came on).
fn part(data_key: &str, data: Value, sig: Option<&str>) -> Value {
    let mut part = Map::new();
    part.insert(data_key.to_string(), data);
    if let Some(sig) = sig {
        part.insert("thoughtSignature".into(), Value::String(sig.to_string()));
    }
    Value::Object(part)
}

/// Whether `block` gets a part. An empty text part is only worth sending
/// when it carries a signature. For reasoning, `signature` and `redacted` are
/// Anthropic's and mean nothing to Gemini: only Gemini's own thought
/// signature is sent, so redacted reasoning from elsewhere (no text, no
/// Gemini signature) has no Gemini form and is left out.
pub(super) fn keeps_block(block: &Block) -> bool {
    match block {
        Block::Text { text, provider_data } => !text.is_empty() || signature(provider_data.as_ref()).is_some(),
        // Reasoning another provider made opaque (Anthropic's signed or
        // redacted thinking, a Responses reasoning item) is that provider's
        // alone: never sent here.
        Block::Reasoning { text, provider_data, signature: anthropic, redacted } => {
            match signature(provider_data.as_ref()) {
                Some(_) => true,
                None => {
                    !text.is_empty() && anthropic.is_none() && redacted.is_none() && !foreign(provider_data.as_ref())
                }
            }
        }
        Block::Image { .. } | Block::ToolCall(_) | Block::ToolResult(_) => true,
    }
}

/// Whether `provider_data` holds another provider's data (any key but ours
/// and the core's own `nexus`).
fn foreign(provider_data: Option<&Value>) -> bool {
    provider_data.and_then(Value::as_object).is_some_and(|m| m.keys().any(|k| k != super::STYLE_KEY && k != "nexus"))
}

/// The part of a block [`keeps_block`] keeps.
fn encode_block(block: &Block, index: &CallIndex<'_>) -> Value {
    match block {
        Block::Text { text, provider_data } => {
            part("text", Value::String(text.clone()), signature(provider_data.as_ref()))
        }
        Block::Reasoning { text, provider_data, .. } => {
            let mut p = part("text", Value::String(text.clone()), signature(provider_data.as_ref()));
            if let Value::Object(obj) = &mut p {
                obj.insert("thought".into(), Value::Bool(true));
            }
            p
        }
        Block::Image { media_type, source } => encode_image(media_type, source),
        Block::ToolCall(call) => encode_call(call, index),
        Block::ToolResult(result) => encode_result(result, index),
    }
}

/// Base64 images go inline; URLs go as `fileData`, except `data:` URLs, which
/// Gemini cannot fetch and are unpacked into inline data instead.
fn encode_image(media_type: &str, source: &ImageSource) -> Value {
    let (mime, data) = match source {
        ImageSource::Base64 { data } => (media_type.to_string(), data.clone()),
        ImageSource::Url { url } => match parse_data_url(url) {
            Some((mime, data)) => (mime.unwrap_or_else(|| media_type.to_string()), data),
            None => {
                return part("fileData", json!({ "mimeType": media_type, "fileUri": url }), None);
            }
        },
    };
    part("inlineData", json!({ "mimeType": mime, "data": data }), None)
}

/// `functionCall: {name, args, id?}`.
fn encode_call(call: &ToolCall, index: &CallIndex<'_>) -> Value {
    let mut fc = Map::new();
    fc.insert("name".into(), Value::String(call.name.clone()));
    fc.insert("args".into(), call_args(call).into_owned());
    if let Some(id) = index.sent_id(&call.id) {
        fc.insert("id".into(), Value::from(id));
    }
    part("functionCall", Value::Object(fc), signature(call.provider_data.as_ref()))
}

/// A call's `args`, which must be an object: the parsed input when it is one,
/// else the raw arguments when they parse to one, else `{}` (a call whose
/// arguments never parsed was not run, and Gemini has no way to carry
/// unparsable text back).
pub(super) fn call_args(call: &ToolCall) -> Cow<'_, Value> {
    match &call.input {
        Value::Object(_) => Cow::Borrowed(&call.input),
        _ => match serde_json::from_str::<Value>(&call.arguments) {
            Ok(v @ Value::Object(_)) => Cow::Owned(v),
            _ => Cow::Owned(Value::Object(Map::new())),
        },
    }
}

/// `functionResponse: {name, response, id?}`, following the documented
/// convention: `{"output": text}` for a result, `{"error": text}` for an error
/// result. The output always goes as a string, even when it is JSON text: a
/// passed-through object with its own `error` key would otherwise read as a
/// failure.
fn encode_result(result: &ToolResultBlock, index: &CallIndex<'_>) -> Value {
    let key = if result.is_error { "error" } else { "output" };
    let mut fr = Map::new();
    fr.insert("name".into(), Value::from(index.result_name(result)));
    fr.insert("response".into(), json!({ key: result.output }));
    if let Some(id) = index.sent_id(&result.call_id) {
        fr.insert("id".into(), Value::from(id));
    }
    part("functionResponse", Value::Object(fr), None)
}

/// `data:[<mime>][;params][;base64],<data>` → (mime if given, base64 data).
/// Percent-encoded (non-base64) payloads are decoded and re-encoded as base64.
pub(super) fn parse_data_url(url: &str) -> Option<(Option<String>, String)> {
    let rest = url.get(..5).filter(|s| s.eq_ignore_ascii_case("data:")).and(url.get(5..))?;
    let (header, payload) = rest.split_once(',')?;
    let mut params = header.split(';');
    let mime = params.next().map(str::trim).filter(|m| !m.is_empty()).map(str::to_string);
    let is_base64 = params.any(|p| p.trim().eq_ignore_ascii_case("base64"));
    let data = if is_base64 {
        payload.chars().filter(|c| !c.is_ascii_whitespace()).collect()
    } else {
        base64_encode(&percent_decode(payload))
    };
    Some((mime, data))
}

fn percent_decode(s: &str) -> Vec<u8> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    out
}

/// Standard base64 with padding (RFC 4648 §4), what `inlineData.data` takes.
fn base64_encode(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], chunk.get(1).copied().unwrap_or(0), chunk.get(2).copied().unwrap_or(0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18u32, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> shift) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc4648_test_vectors() {
        // RFC 4648 §10.
        let vectors = [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ];
        for (input, want) in vectors {
            assert_eq!(base64_encode(input.as_bytes()), want, "{input:?}");
        }
    }

    #[test]
    fn data_urls_become_base64() {
        assert_eq!(parse_data_url("data:image/png;base64,AAAA"), Some((Some("image/png".into()), "AAAA".into())));
        // "hi!" percent-encoded; base64 of "hi!" is "aGkh" (RFC 4648 alphabet by hand).
        assert_eq!(parse_data_url("data:image/svg+xml,hi%21"), Some((Some("image/svg+xml".into()), "aGkh".into())));
        assert_eq!(parse_data_url("DATA:;base64,QQ=="), Some((None, "QQ==".into())));
        assert_eq!(parse_data_url("https://example.com/a.png"), None);
        assert_eq!(parse_data_url("data:image/png;base64"), None);
    }
}
