//! Provider responses and errors → OpenAI `chat.completion` and error objects.

use serde::Serialize;
use serde_json::Value;

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
    let (turn, meta) = decode_turn(style, body, meta)?;
    Ok(turn_to_openai(&turn, &meta))
}

/// A provider's whole answer decoded, with the meta its completion reports.
fn decode_turn(
    style: Style,
    body: &[u8],
    meta: &CompletionMeta,
) -> Result<(TurnResponse, CompletionMeta), TranslateError> {
    let meta = resolved(meta, body);
    let mut ids = call_ids(&meta);
    let turn = style.decode_response(body, &mut ids).map_err(|e| remote_error_to_openai(&e))?;
    Ok((turn, meta))
}

/// A translated `chat.completion` as bytes, and the usage it reports.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct CompletionBytes {
    /// The `chat.completion` JSON.
    pub body: Vec<u8>,
    /// The answer's token counts, when the provider reported them (`None`
    /// for an OpenAI body, which goes back as it came: read its `usage`).
    pub usage: Option<crate::message::Usage>,
}

/// [`response_to_openai_with`] written straight to bytes, keys in the order
/// OpenAI sends them: what a gateway answers with, without the tree. An
/// OpenAI body (already the right shape) is returned as it came.
pub fn response_to_openai_bytes(
    style: Style,
    body: &[u8],
    meta: &CompletionMeta,
) -> Result<CompletionBytes, TranslateError> {
    if style == Style::OpenAi {
        response_to_openai_with(style, body, meta)?;
        return Ok(CompletionBytes { body: body.to_vec(), usage: None });
    }
    if style == Style::Anthropic {
        if let Some(done) = super::anthropic_answer::completion(body, meta) {
            return Ok(done);
        }
    }
    let (turn, meta) = decode_turn(style, body, meta)?;
    Ok(CompletionBytes { body: turn_to_openai_bytes(&turn, &meta), usage: turn.usage_reported.then_some(turn.usage) })
}

/// [`turn_to_openai`] written straight to bytes: the same JSON, keys in
/// OpenAI's order.
pub fn turn_to_openai_bytes(turn: &TurnResponse, meta: &CompletionMeta) -> Vec<u8> {
    let mut out = Vec::with_capacity(512);
    // Writing plain structs of strings and numbers into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut out, &Completion::of(turn, meta));
    out
}

/// A `chat.completion`, borrowed from the turn and its meta: the one shape
/// both [`turn_to_openai`] and [`turn_to_openai_bytes`] write.
#[derive(Serialize)]
pub(super) struct Completion<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: [Choice<'a>; 1],
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<UsageOut>,
}

#[derive(Serialize)]
struct Choice<'a> {
    index: u32,
    message: MessageOut<'a>,
    logprobs: (),
    finish_reason: &'static str,
}

#[derive(Serialize)]
struct MessageOut<'a> {
    role: &'static str,
    content: Option<String>,
    refusal: (),
    #[serde(skip_serializing_if = "String::is_empty")]
    reasoning_content: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<CallOut<'a>>,
}

#[derive(Serialize)]
pub(super) struct CallOut<'a> {
    pub(super) id: &'a str,
    #[serde(rename = "type")]
    pub(super) kind: &'static str,
    pub(super) function: FunctionOut<'a>,
}

/// A call's `function`: its name and argument text (stream chunks write it too).
#[derive(Serialize)]
pub(super) struct FunctionOut<'a> {
    pub(super) name: &'a str,
    pub(super) arguments: &'a str,
}

/// `usage` as Chat Completions reports it.
#[derive(Serialize)]
pub(super) struct UsageOut {
    prompt_tokens: u64,
    completion_tokens: u64,
    total_tokens: u64,
}

impl UsageOut {
    pub(super) fn of(turn: &TurnResponse) -> UsageOut {
        UsageOut::of_usage(&turn.usage)
    }

    pub(super) fn of_usage(usage: &crate::message::Usage) -> UsageOut {
        UsageOut {
            prompt_tokens: usage.prompt_tokens,
            completion_tokens: usage.completion_tokens,
            total_tokens: usage.total_tokens,
        }
    }
}

impl<'a> Completion<'a> {
    /// Text (or `null` beside tool calls), every tool call in provider order
    /// with its raw argument text (`{}`, the text of "no arguments", for a
    /// call that had none), the finish reason and usage when reported.
    fn of(turn: &'a TurnResponse, meta: &'a CompletionMeta) -> Completion<'a> {
        let text = turn.text();
        let tool_calls: Vec<CallOut<'_>> = turn
            .tool_calls()
            .map(|c| CallOut {
                id: &c.id,
                kind: "function",
                function: FunctionOut {
                    name: &c.name,
                    arguments: if c.arguments.is_empty() { "{}" } else { &c.arguments },
                },
            })
            .collect();
        let usage = turn.usage_reported.then(|| UsageOut::of(turn));
        Completion::assemble(&meta.id, meta, text, reasoning_text(turn), tool_calls, turn.stop.reason, usage)
    }

    /// The one `chat.completion` shape: the text is `null` when it is empty
    /// beside tool calls, and tool calls make the finish reason.
    pub(super) fn assemble(
        id: &'a str,
        meta: &'a CompletionMeta,
        text: String,
        reasoning_content: String,
        tool_calls: Vec<CallOut<'a>>,
        stop: crate::provider::StopReason,
        usage: Option<UsageOut>,
    ) -> Completion<'a> {
        let has_calls = !tool_calls.is_empty();
        Completion {
            id,
            object: "chat.completion",
            created: meta.created,
            model: &meta.model,
            choices: [Choice {
                index: 0,
                message: MessageOut {
                    role: "assistant",
                    content: (!(text.is_empty() && has_calls)).then_some(text),
                    refusal: (),
                    reasoning_content,
                    tool_calls,
                },
                logprobs: (),
                finish_reason: finish_reason(stop, has_calls),
            }],
            usage,
        }
    }
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
    let raw = match id_keys(body) {
        Some(found) => found?,
        // A body the key reader cannot take (a repeated key) is read whole,
        // whose last-key-wins reading is the rule.
        None => {
            let v: Value = serde_json::from_slice(body).ok()?;
            ["/id", "/responseId", "/message/id", "/response/id"]
                .iter()
                .find_map(|p| v.pointer(p).and_then(Value::as_str))?
                .to_string()
        }
    };
    clean_id(&raw)
}

/// A provider's response id reduced to characters safe in any id (at most
/// 48 of them); `None` when none is left.
pub(super) fn clean_id(raw: &str) -> Option<String> {
    let clean: String = raw.chars().filter(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-')).take(48).collect();
    (!clean.is_empty()).then_some(clean)
}

/// The id keys of a response body, read without building the rest of it
/// (the answer's content is most of the body): `Some(found)` is what the
/// whole-tree reading finds, `None` asks for that reading.
fn id_keys(body: &[u8]) -> Option<Option<String>> {
    use serde_json::value::RawValue;
    #[derive(serde::Deserialize)]
    struct Keys<'a> {
        #[serde(borrow)]
        id: Option<&'a RawValue>,
        #[serde(borrow, rename = "responseId")]
        response_id: Option<&'a RawValue>,
        #[serde(borrow)]
        message: Option<&'a RawValue>,
        #[serde(borrow)]
        response: Option<&'a RawValue>,
    }
    fn starts_with(raw: &[u8], byte: u8) -> bool {
        raw.iter().find(|b| !b.is_ascii_whitespace()) == Some(&byte)
    }
    fn string(raw: Option<&RawValue>) -> Option<String> {
        raw.filter(|r| starts_with(r.get().as_bytes(), b'"')).and_then(|r| serde_json::from_str(r.get()).ok())
    }
    // Only an object has keys; a derived struct would also read an array
    // as its fields in order.
    if !starts_with(body, b'{') {
        return Some(None);
    }
    let keys: Keys<'_> = match serde_json::from_slice(body) {
        Ok(keys) => keys,
        // Malformed bytes have no id either way; a repeated key is left to the tree.
        Err(e) if e.is_syntax() || e.is_eof() => return Some(None),
        Err(_) => return None,
    };
    if let Some(id) = string(keys.id).or_else(|| string(keys.response_id)) {
        return Some(Some(id));
    }
    for inner in [keys.message, keys.response] {
        let Some(r) = inner.filter(|r| starts_with(r.get().as_bytes(), b'{')) else { continue };
        #[derive(serde::Deserialize)]
        struct Id<'a> {
            #[serde(borrow)]
            id: Option<&'a RawValue>,
        }
        match serde_json::from_str::<Id<'_>>(r.get()) {
            Ok(Id { id }) => {
                if let Some(id) = string(id) {
                    return Some(Some(id));
                }
            }
            Err(_) => return None,
        }
    }
    Some(None)
}

/// A decoded turn as a `chat.completion`: text (or `null` beside tool
/// calls), every tool call in provider order with its raw argument text,
/// the finish reason (see [`super::finish_reason`]) and usage when reported.
/// Reasoning text, which Chat Completions has no field for, goes in
/// `reasoning_content`, as compatible servers send it.
pub fn turn_to_openai(turn: &TurnResponse, meta: &CompletionMeta) -> Value {
    // A struct of strings and numbers always has a JSON tree.
    serde_json::to_value(Completion::of(turn, meta)).unwrap_or(Value::Null)
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

    /// The id as the whole tree gives it, the rule `id_keys` keeps.
    fn tree_id(body: &[u8]) -> Option<String> {
        let v: Value = serde_json::from_slice(body).ok()?;
        ["/id", "/responseId", "/message/id", "/response/id"]
            .iter()
            .find_map(|p| v.pointer(p).and_then(Value::as_str))
            .map(str::to_string)
    }

    #[test]
    fn the_id_keys_read_as_the_whole_tree_does() {
        let bodies: &[&[u8]] = &[
            br#"{"id":"msg_1","content":[{"type":"text","text":"hi"}]}"#,
            br#"{"content":[],"id":7,"responseId":"r\u00e9-1"}"#,
            br#"{"type":"message_start","message":{"model":"m","id":"msg_9"}}"#,
            br#"{"type":"response.completed","response":{"id":"resp_1","output":[]}}"#,
            br#"{"message":["not","an","object"],"response":{"id":"resp_2"}}"#,
            br#"{"message":"text","response":{"id":null}}"#,
            br#"{"id":"first","id":"second"}"#,
            br#"{"message":{"id":"a","id":"b"}}"#,
            br#"["msg_1"]"#,
            br#"  {"id" : "spaced" }  "#,
            br#"{"id":"x""#,
            br#"{"id":"x"} trailing"#,
            b"\xff",
            b"",
            br#"{}"#,
            br#"{"id":null,"responseId":null,"message":null,"response":{"id":"deep"}}"#,
        ];
        for body in bodies {
            let from_keys = match id_keys(body) {
                Some(found) => found,
                None => tree_id(body),
            };
            assert_eq!(from_keys, tree_id(body), "{}", String::from_utf8_lossy(body));
        }
        // A repeated key is the one case the key reader hands to the tree.
        assert_eq!(id_keys(br#"{"id":"first","id":"second"}"#), None);
        assert_eq!(provider_id(br#"{"id":"first","id":"second"}"#).as_deref(), Some("second"));
    }

    #[test]
    fn provider_ids_are_reduced_to_safe_characters() {
        assert_eq!(provider_id(br#"{"id":"msg_01/x y"}"#).as_deref(), Some("msg_01xy"));
        assert_eq!(provider_id(br#"{"responseId":"wOd8ab"}"#).as_deref(), Some("wOd8ab"));
        assert_eq!(provider_id(br#"{"type":"message_start","message":{"id":"msg_9"}}"#).as_deref(), Some("msg_9"));
        assert_eq!(provider_id(b"not json"), None);
    }
}
