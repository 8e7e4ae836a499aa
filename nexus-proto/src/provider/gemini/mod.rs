//! The Gemini wire format (`generateContent` / `streamGenerateContent?alt=sse`,
//! v1beta REST, camelCase JSON).
//!
//! Gemini-specific data that must travel back to the API lives in a block's
//! `provider_data` under the `"gemini"` key: `{"gemini": {"thoughtSignature": …}}`.
//! Gemini 3 rejects a function-call turn sent back without its signature, and a
//! signature may sit on any part (text, thought, function call, or an empty
//! text part of its own), so the decoder records it on the block made from
//! that part and the encoder puts it back on the same part.
//!
//! Calls Gemini sent without an `id` get one from [`CallIds`](crate::provider::CallIds) and are marked
//! `{"nexus": {"generatedId": true}}`; such ids are never sent to the API.

use serde_json::Value;

mod decode;
mod encode;
mod write;

pub use decode::{decode_response, Assembler};
pub use encode::encode_body;
pub(crate) use write::{fields as body_fields, tools_part};

/// The `provider_data` key this style reads and writes.
const STYLE_KEY: &str = "gemini";

/// The URL of one model call. The model is part of the path, never of the body.
pub fn endpoint(base_url: &str, model: &str, stream: bool) -> String {
    let base = base_url.trim_end_matches('/');
    if stream {
        format!("{base}/models/{model}:streamGenerateContent?alt=sse")
    } else {
        format!("{base}/models/{model}:generateContent")
    }
}

/// `(status, message)` from a Gemini error body:
/// `{"error": {"code": 400, "message": "…", "status": "INVALID_ARGUMENT"}}`,
/// possibly wrapped in an array (the array form of a streamed reply). The kind
/// is the `status` string, or the numeric `code` when there is no status.
pub fn error_details(body: &[u8]) -> Option<(String, String)> {
    let v: Value = serde_json::from_slice(body).ok()?;
    let err = match &v {
        // The error may follow successful elements when a stream failed midway.
        Value::Array(items) => items.iter().find_map(|item| item.get("error"))?,
        _ => v.get("error")?,
    };
    if let Value::String(message) = err {
        return Some(("error".to_string(), message.clone()));
    }
    let message = err.get("message").and_then(Value::as_str).unwrap_or_default().to_string();
    let kind = match (err.get("status"), err.get("code")) {
        (Some(Value::String(s)), _) if !s.is_empty() => s.clone(),
        (_, Some(Value::Number(n))) => n.to_string(),
        (_, Some(Value::String(s))) if !s.is_empty() => s.clone(),
        _ => "error".to_string(),
    };
    Some((kind, message))
}

/// The value Google documents for function calls whose thought signature is
/// not available (a transcript from another model or provider): Gemini 3
/// refuses a function-call turn sent back without a signature. It goes on
/// the first call of a model turn, where Gemini puts its own.
pub const PLACEHOLDER_SIGNATURE: &str = "skip_thought_signature_validator";

/// Gives an assistant turn that Gemini did not produce the placeholder
/// signature on its first call, when none of its blocks carries a Gemini
/// signature already (under the `"gemini"` key, so no other encoder sends
/// it). Returns whether it changed the turn.
pub fn stamp_placeholder(message: &mut crate::message::Message) -> bool {
    use crate::message::{Block, Role};
    if message.role != Role::Assistant {
        return false;
    }
    let signed = message.content.iter().any(|b| match b {
        Block::Text { provider_data, .. } | Block::Reasoning { provider_data, .. } => {
            signature(provider_data.as_ref()).is_some()
        }
        Block::ToolCall(call) => signature(call.provider_data.as_ref()).is_some(),
        _ => false,
    });
    if signed {
        return false;
    }
    let Some(call) = message.content.iter_mut().find_map(|b| match b {
        Block::ToolCall(call) => Some(call),
        _ => None,
    }) else {
        return false;
    };
    let data = call.provider_data.get_or_insert_with(|| Value::Object(serde_json::Map::new()));
    match data {
        Value::Object(map) => {
            map.insert(STYLE_KEY.to_string(), serde_json::json!({ "thoughtSignature": PLACEHOLDER_SIGNATURE }));
            true
        }
        _ => false,
    }
}

/// The Gemini thought signature held in `provider_data`, if any.
fn signature(provider_data: Option<&Value>) -> Option<&str> {
    provider_data?.get(STYLE_KEY)?.get("thoughtSignature")?.as_str().filter(|s| !s.is_empty())
}
