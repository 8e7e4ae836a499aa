//! Provider responses and errors → OpenAI `chat.completion` and error objects.

use serde_json::{json, Map, Value};

use super::{fingerprint, finish_reason, id_token, CompletionMeta, TranslateError};
use crate::error::{DecodeError, ProviderError, RemoteError};
use crate::message::Block;
use crate::provider::{CallIds, Style, TurnResponse};

/// A whole (non-streaming) provider success body → an OpenAI `chat.completion`
/// reporting `model`. Error bodies (also those sent with status 200) become
/// the matching OpenAI error.
///
/// The completion id comes from the provider's response id; tool calls the
/// provider sent without an id (Gemini) get `call_<that id>_<n>`, unique per
/// response so they never repeat within a conversation.
pub fn response_to_openai(style: Style, body: &[u8], model: &str) -> Result<Value, TranslateError> {
    response_to_openai_with(style, body, &CompletionMeta::new(model))
}

/// [`response_to_openai`] with the completion's id, model and creation time
/// given (an empty `meta.id` is derived from the response).
pub fn response_to_openai_with(style: Style, body: &[u8], meta: &CompletionMeta) -> Result<Value, TranslateError> {
    if style == Style::OpenAi {
        // Already the right shape: handed back as it came, errors included.
        let value: Value =
            serde_json::from_slice(body).map_err(|e| remote_error_to_openai(&DecodeError::from(e).into()))?;
        if value.get("error").is_some_and(|e| !e.is_null()) {
            return Err(error_to_openai(style, 0, body));
        }
        return Ok(value);
    }
    let meta = resolved(meta, body);
    let mut ids = call_ids(&meta);
    let turn = style.decode_response(body, &mut ids).map_err(|e| remote_error_to_openai(&e))?;
    Ok(turn_to_openai(&turn, &meta))
}

/// The meta with its id filled in: the provider's response id when the body
/// has one, else a fingerprint of the body.
pub(crate) fn resolved(meta: &CompletionMeta, body: &[u8]) -> CompletionMeta {
    if !meta.id.is_empty() {
        return meta.clone();
    }
    let token = provider_id(body).unwrap_or_else(|| format!("{:016x}", fingerprint(body)));
    CompletionMeta { id: format!("chatcmpl-{token}"), ..meta.clone() }
}

/// The generator for ids of calls the provider sent without one.
pub(crate) fn call_ids(meta: &CompletionMeta) -> CallIds {
    CallIds::new(format!("call_{}_", id_token(&meta.id)))
}

/// The provider's own response id (Anthropic `id` / `message.id`, Gemini
/// `responseId`, Responses `id` / `response.id`), reduced to characters safe in any id.
pub(crate) fn provider_id(body: &[u8]) -> Option<String> {
    let v: Value = serde_json::from_slice(body).ok()?;
    let raw = ["/id", "/responseId", "/message/id", "/response/id"]
        .iter()
        .find_map(|p| v.pointer(p).and_then(Value::as_str))?;
    let clean: String = raw.chars().filter(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-')).take(48).collect();
    (!clean.is_empty()).then_some(clean)
}

/// A decoded turn as a `chat.completion`: text (or `null` beside tool
/// calls), every tool call in provider order with its raw argument text,
/// the finish reason (see [`super::finish_reason`]) and usage when reported.
/// Reasoning text, which Chat Completions has no field for, goes in
/// `reasoning_content`, as compatible servers send it.
pub fn turn_to_openai(turn: &TurnResponse, meta: &CompletionMeta) -> Value {
    let text = turn.text();
    let calls: Vec<Value> = turn.tool_calls().map(|c| tool_call_json(&c.id, &c.name, &c.arguments)).collect();
    let mut message = Map::new();
    message.insert("role".into(), json!("assistant"));
    let content = if text.is_empty() && !calls.is_empty() { Value::Null } else { Value::String(text) };
    message.insert("content".into(), content);
    message.insert("refusal".into(), Value::Null);
    let reasoning = reasoning_text(turn);
    if !reasoning.is_empty() {
        message.insert("reasoning_content".into(), Value::String(reasoning));
    }
    let has_calls = !calls.is_empty();
    if has_calls {
        message.insert("tool_calls".into(), Value::Array(calls));
    }
    let mut out = json!({
        "id": meta.id,
        "object": "chat.completion",
        "created": meta.created,
        "model": meta.model,
        "choices": [{
            "index": 0,
            "message": message,
            "logprobs": null,
            "finish_reason": finish_reason(turn.stop.reason, has_calls),
        }],
    });
    if turn.usage_reported {
        out["usage"] = usage_json(turn);
    }
    out
}

pub(crate) fn usage_json(turn: &TurnResponse) -> Value {
    json!({
        "prompt_tokens": turn.usage.prompt_tokens,
        "completion_tokens": turn.usage.completion_tokens,
        "total_tokens": turn.usage.total_tokens,
    })
}

fn reasoning_text(turn: &TurnResponse) -> String {
    turn.content
        .iter()
        .filter_map(|b| match b {
            Block::Reasoning { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

/// `{id, type:"function", function:{name, arguments}}`. A call with no
/// argument text at all says `{}`, the text of "no arguments".
pub(crate) fn tool_call_json(id: &str, name: &str, arguments: &str) -> Value {
    let arguments = if arguments.is_empty() { "{}" } else { arguments };
    json!({ "id": id, "type": "function", "function": { "name": name, "arguments": arguments } })
}

/// A provider error response (status and body) → the OpenAI error, keeping
/// the provider's message. `status` 0 means "no status" (an error body that
/// came with a success status, or mid-stream).
pub fn error_to_openai(style: Style, status: u16, body: &[u8]) -> TranslateError {
    let status = (status != 0).then_some(status);
    provider_error_to_openai(&style.decode_error(status, None, body))
}

/// Any failure to read a provider response → the OpenAI error to answer with.
/// Bytes that make no sense are the upstream's fault: 502.
pub fn remote_error_to_openai(error: &RemoteError) -> TranslateError {
    match error {
        RemoteError::Provider(p) => provider_error_to_openai(p),
        RemoteError::Decode(d) => TranslateError {
            status: 502,
            message: format!("the upstream response could not be read: {d}"),
            kind: "server_error".to_string(),
            param: None,
            code: Some("upstream_decode_error".to_string()),
        },
    }
}

fn provider_error_to_openai(p: &ProviderError) -> TranslateError {
    let status = match p.status {
        // 529 is Anthropic's own "overloaded"; 503 says the same in standard HTTP.
        Some(529) => 503,
        Some(s) if (400..600).contains(&s) => s,
        _ => status_of_kind(&p.kind),
    };
    let message = if p.message.trim().is_empty() {
        format!("the upstream answered HTTP {status} without a message")
    } else {
        p.message.clone()
    };
    TranslateError { status, message, kind: openai_type(status).to_string(), param: None, code: Some(p.kind.clone()) }
}

/// The status an error type stands for when it came without one (mid-stream,
/// or an error body with a success status).
fn status_of_kind(kind: &str) -> u16 {
    match kind {
        "invalid_request_error" | "INVALID_ARGUMENT" | "FAILED_PRECONDITION" | "OUT_OF_RANGE" => 400,
        "authentication_error" | "UNAUTHENTICATED" => 401,
        "permission_error" | "PERMISSION_DENIED" | "billing_error" => 403,
        "not_found_error" | "NOT_FOUND" => 404,
        "request_too_large" => 413,
        "rate_limit_error" | "RESOURCE_EXHAUSTED" => 429,
        "api_error" | "INTERNAL" | "server_error" => 500,
        "overloaded_error" | "UNAVAILABLE" => 503,
        "timeout_error" | "DEADLINE_EXCEEDED" => 504,
        _ => 502,
    }
}

/// The OpenAI error `type` for a status.
fn openai_type(status: u16) -> &'static str {
    match status {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        429 => "rate_limit_error",
        500..=599 => "server_error",
        _ => "invalid_request_error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_are_kept_except_529() {
        let body = br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
        let e = error_to_openai(Style::Anthropic, 529, body);
        assert_eq!((e.status, e.kind.as_str(), e.message.as_str()), (503, "server_error", "Overloaded"));
        assert_eq!(e.code.as_deref(), Some("overloaded_error"));
        let e = error_to_openai(Style::Anthropic, 429, body);
        assert_eq!((e.status, e.kind.as_str()), (429, "rate_limit_error"));
    }

    #[test]
    fn an_error_without_status_takes_it_from_its_kind() {
        let body = br#"{"error":{"code":400,"message":"bad","status":"INVALID_ARGUMENT"}}"#;
        let e = error_to_openai(Style::Gemini, 0, body);
        assert_eq!((e.status, e.kind.as_str(), e.message.as_str()), (400, "invalid_request_error", "bad"));
    }

    #[test]
    fn provider_ids_are_reduced_to_safe_characters() {
        assert_eq!(provider_id(br#"{"id":"msg_01/x y"}"#).as_deref(), Some("msg_01xy"));
        assert_eq!(provider_id(br#"{"responseId":"wOd8ab"}"#).as_deref(), Some("wOd8ab"));
        assert_eq!(provider_id(br#"{"type":"message_start","message":{"id":"msg_9"}}"#).as_deref(), Some("msg_9"));
        assert_eq!(provider_id(b"not json"), None);
    }
}
